"""The Inspect bridge against the project's own loop, and its overhead (docs/inspect.md).

    python benchmarks/inspect_bridge.py --real /work/shared/data/real/noises_highk_aime2025.npz \\
        --models 6
    python benchmarks/inspect_bridge.py --synthetic --models 10 --samples 500 --epochs 4
    python benchmarks/inspect_bridge.py --verdicts "ranking tie, 2 models, M=10" \\
        --campaigns 1000 --jobs 2 --minutes 20

``--real``: ``--models`` models spread over the file's ranking are evaluated by Inspect
(``replay/<model>``: the recorded outcome of each (sample, epoch), ``epochs`` = the file's N)
under ``adaptive_stopping``; the same recorded trials then go through ``adaptive-eval run``
(``run_campaign``, inline dispatch) on the campaign config the bridge built. Printed: the pairs
each decided, the trials per model, whether they agree, and a wrong call against the file's
whole-pool gold (``correct_total / count_total``).
``--synthetic``: Bernoulli models on ``--samples`` samples; the bridge's own time per sample
(its two calls, waits for a round boundary excluded; the decision core's rounds included).
``--verdicts CASES``: wrong-verdict rates through Inspect on ``benchmarks/verdicts.py``'s cases
(``;``-separated substrings of their names): campaign ``k`` draws its outcomes from the case's
truth (rate profile ``k % 20``, as verdicts.py cycles them; seed ``k``), serves them with the
replay provider (the fake ModelAPI: one recorded outcome per (model, sample, epoch), no model)
and decides through ``adaptive_stopping`` with verdicts.py's policy (confidence, rope 0.02,
cap 200 = the task's epochs; margin 0.05 for a gate). The verdict is the one the bridge logs
(``comparison.verdicts`` of the incumbent; a ranking's pair). Up to ``--campaigns`` per case, in
``--jobs`` processes, stopping at ``--minutes`` per case; printed with the Wilson 95% interval.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from inspect_ai import eval as inspect_eval

from adaptive_eval.config.schema import load_config
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.simulate import Truth, replay_sampler
from adaptive_eval.inspect import adaptive_stopping
from adaptive_eval.inspect.campaign import CampaignSpec, Goal, build
from adaptive_eval.inspect.replay import replay_task
from adaptive_eval.workflows.run import run_campaign


def pick_models(path: Path, count: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    with np.load(path) as data:
        outcomes = np.asarray(data["outcomes"])
        names = [str(m) for m in data["models"]]
        gold = (data["correct_total"] / data["count_total"]).mean(axis=1)
    order = np.argsort(gold)
    live = [int(i) for i in order if gold[i] > 0.05]  # models that solve something
    chosen = [live[round(k * (len(live) - 1) / (count - 1))] for k in range(count)]
    return outcomes[chosen], [names[i] for i in chosen], gold[chosen]


def write(folder: Path, outcomes: np.ndarray, names: list[str]) -> Path:
    path = folder / "replay.npz"
    np.savez(
        path,
        outcomes=outcomes,
        models=np.array(names),
        questions=np.array([f"q{i}" for i in range(outcomes.shape[1])]),
    )
    return path


def through_inspect(path: Path, models: list[str], log_dir: Path, name: str) -> dict[str, Any]:
    bridge = adaptive_stopping(name, models=models)
    started = time.perf_counter()
    logs = inspect_eval(
        replay_task(path, early_stopping=bridge),
        model=models,
        model_args={"path": str(path)},
        display="none",
        log_dir=str(log_dir),
        max_samples=64,
        log_samples=False,
    )
    wall = time.perf_counter() - started
    bad = [log.error for log in logs if log.status != "success"]
    if bad:
        raise SystemExit(f"eval failed: {bad[0]}")
    meta = dict(logs[0].results.early_stopping.metadata)
    runs = sum(meta["trials"].values())
    meta["wall_s"] = wall
    meta["bridge_s"] = bridge.overhead_s
    meta["bridge_ms_per_sample"] = 1e3 * bridge.overhead_s / max(runs, 1)
    return meta


def run_own(path: Path, meta: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``adaptive-eval run`` on the same replay, with the bridge's campaign config."""
    with np.load(path) as data:
        outcomes = np.asarray(data["outcomes"])
    spec = CampaignSpec(
        "own",
        tuple(meta["models"]),
        tuple(f"q{i}" for i in range(outcomes.shape[1])),
        outcomes.shape[2],
        tuple(meta["weights"]),
        meta["policy"],
        Goal(),
    )
    config = load_config(spec.write(folder / "campaign", outcomes))
    campaign, _ = build(config, Goal())
    summary = run_campaign(campaign, folder / "run", quiet=True)
    return {
        "decisions": sorted(
            (p.a, p.b, str(p.decision)) for p in summary.pairs if p.decision != "undecided"
        ),
        "trials": {row.name: row.trials for row in summary.models},
    }


def _verdicts_module() -> Any:
    """benchmarks/verdicts.py (its cases, truths and constants), read, never changed."""
    if "_bench_verdicts" in sys.modules:
        return sys.modules["_bench_verdicts"]
    path = Path(__file__).with_name("verdicts.py")
    spec = importlib.util.spec_from_file_location("_bench_verdicts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_bench_verdicts"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _campaign_outcomes(case_name: str, rep: int, truths: int) -> tuple[Any, np.ndarray]:
    """The case, and campaign ``rep``'s outcomes (2, M, cap): candidate, incumbent."""
    v = _verdicts_module()
    case = next(c for c in v.CASES if c.name == case_name)
    success = v.rates(case, 1_000 + rep % truths)  # (2, M): candidate, incumbent
    rng = np.random.default_rng(rep)
    outcomes = (rng.random((2, success.shape[1], v.CAP)) < success[:, :, None]).astype(np.int8)
    return case, outcomes


def _goal(case: Any, models: list[str]) -> dict[str, Any]:
    if case.kind == "ranking":
        return {}
    goal: dict[str, Any] = {"goal": "compare", "candidate": models[0]}
    if case.kind == "gate":
        goal["margin"] = _verdicts_module().MARGIN
    return goal


def own_verdict(case_name: str, confidence: float, rep: int, truths: int) -> tuple[str, float]:
    """The same campaign (same outcomes, the config the bridge builds: its policy, pairwise
    allocator, one epoch per round) through the project's own loop (``simulate_campaign`` on a
    replay of the outcomes, as tests/test_inspect_bridge.py's own_loop): no Inspect."""
    v = _verdicts_module()
    case, outcomes = _campaign_outcomes(case_name, rep, truths)
    models = ("replay/candidate", "replay/incumbent")
    g = _goal(case, list(models))
    goal = Goal(g.get("goal", "rank"), g.get("candidate"), g.get("margin"))
    spec = CampaignSpec(
        "own",
        models,
        tuple(f"q{i}" for i in range(outcomes.shape[1])),
        v.CAP,
        (0.0, 1.0),
        {"confidence": confidence, "rope": v.ROPE},
        goal,
    )
    with tempfile.TemporaryDirectory() as tmp:
        campaign, judge = spec.build(Path(tmp))
    truth = Truth(np.full((*outcomes.shape[:2], 2), 0.5), np.array([0.0, 1.0]))
    result = simulate_campaign(
        campaign.decision,
        truth,
        np.random.default_rng(0),
        sampler=replay_sampler(outcomes.astype(np.int64), 2),
    )
    per_question = float(result.trials[0].mean())
    if judge is None:
        (decision,) = result.decisions
        verdict = decision.verdict.value
        return ("a>b" if verdict not in ("undecided", "equivalent") else verdict), per_question
    (found,) = judge(result.decisions)
    return str(found.decision), per_question


def verdict_campaign(case_name: str, confidence: float, rep: int, truths: int) -> tuple[str, float]:
    """One campaign of a verdicts.py case through Inspect: (the verdict, the candidate's trials
    per question)."""
    v = _verdicts_module()
    case, outcomes = _campaign_outcomes(case_name, rep, truths)
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), outcomes, ["candidate", "incumbent"])
        models = ["replay/candidate", "replay/incumbent"]
        bridge = adaptive_stopping(
            f"verdict-{rep}-{time.monotonic_ns()}",
            models=models,
            policy={"confidence": confidence, "rope": v.ROPE},
            **_goal(case, models),
        )
        logs = inspect_eval(
            replay_task(path, early_stopping=bridge),
            model=models,
            model_args={"path": str(path)},
            display="none",
            log_dir=str(Path(tmp) / "logs"),
            max_samples=2 * outcomes.shape[1],
            log_samples=False,
            score_display=False,
        )
    bad = [log.error for log in logs if log.status != "success"]
    if bad:
        raise RuntimeError(f"campaign {rep}: eval failed: {bad[0]}")
    meta = logs[0].results.early_stopping.metadata
    per_question = meta["trials"][models[0]] / outcomes.shape[1]
    if case.kind == "ranking":
        (decision,) = meta["decisions"]
        verdict = str(decision["verdict"])
        settled = verdict not in ("undecided", "equivalent")
        return ("a>b" if settled else verdict), per_question
    return str(meta["comparison"]["verdicts"][models[1]]), per_question


def _verdict_worker(
    args: tuple[str, float, int, int, int, float, int, bool],
) -> list[tuple[str, float, str]]:
    """Campaigns ``first``, ``first + step``, ... until the deadline or ``count`` of them:
    (Inspect's verdict, trials per question, the own loop's verdict on the same outcomes);
    ``own_only``: the own loop alone (its verdict twice)."""
    case_name, confidence, first, step, truths, deadline, count, own_only = args
    found = []
    rep = first
    while time.time() < deadline and rep < count:
        own, per_question = own_verdict(case_name, confidence, rep, truths)
        if own_only:
            found.append((own, per_question, own))
        else:
            verdict, per_question = verdict_campaign(case_name, confidence, rep, truths)
            found.append((verdict, per_question, own))
        rep += step
    return found


def verdicts(
    cases: str, campaigns: int, jobs: int, minutes: float, confidence: float, own_only: bool
) -> None:
    v = _verdicts_module()
    wanted = [c for c in v.CASES if any(w in c.name for w in cases.split(";"))]
    if not wanted:
        raise SystemExit(f"no case of benchmarks/verdicts.py matches {cases!r}")
    alpha = 1 - confidence
    how = (
        "the own loop only, with the bridge's config (no Inspect)"
        if own_only
        else "through Inspect (replay ModelAPI, adaptive_stopping)"
    )
    print(
        f"{how}: confidence {confidence} "
        f"(alpha {alpha:.3g}), up to {campaigns} campaigns or {minutes:g} min per case, "
        f"20 rate profiles, cap {v.CAP}, margin {v.MARGIN}, rope {v.ROPE}, {jobs} processes\n"
    )
    print(
        "| case | campaigns | wrong | rate [Wilson 95%] | <= alpha | shares | trials/question "
        "| same verdict as the own loop |"
    )
    print("|---|---:|---:|---|:-:|---|---:|---:|")
    context = multiprocessing.get_context("spawn")
    for case in wanted:
        started = time.time()
        deadline = started + 60 * minutes
        with context.Pool(jobs) as pool:
            work = [
                (case.name, confidence, j, jobs, 20, deadline, campaigns, own_only)
                for j in range(jobs)
            ]
            parts = pool.map(_verdict_worker, work)
        found = sorted(
            (
                (first + k * jobs, row)
                for first, part in enumerate(parts)
                for k, row in enumerate(part)
            ),
        )[:campaigns]
        rows = [row for _, row in found]
        decisions = [d for d, _, _ in rows]
        same = sum(d == own for d, _, own in rows)
        wrong = sum(d in case.wrong for d in decisions)
        low, high = v.seq.wilson_interval(wrong, len(decisions))
        shares = {d: decisions.count(d) / len(decisions) for d in sorted(set(decisions))}
        share_text = ", ".join(f"{k} {x:.3f}" for k, x in shares.items())
        print(
            f"| {case.name} | {len(decisions)} | {wrong} | {wrong / len(decisions):.4f} "
            f"[{low:.4f}, {high:.4f}] | {'yes' if wrong / len(decisions) <= alpha else 'NO'} | "
            f"{share_text} | {np.mean([n for _, n, _ in rows]):.1f} | "
            f"{'-' if own_only else f'{same} of {len(rows)}'} "
            f"| ({time.time() - started:.0f} s)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path)
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verdicts", metavar="CASES", help="verdicts.py cases, ';'-separated")
    parser.add_argument("--campaigns", type=int, default=1000, help="per case (--verdicts)")
    parser.add_argument("--jobs", type=int, default=2, help="processes (--verdicts)")
    parser.add_argument("--minutes", type=float, default=20.0, help="per case (--verdicts)")
    parser.add_argument("--confidence", type=float, default=0.95, help="(--verdicts)")
    parser.add_argument(
        "--own-only",
        action="store_true",
        help="(--verdicts) the same campaigns through the own loop with the bridge's config only",
    )
    args = parser.parse_args()
    if args.verdicts:
        verdicts(
            args.verdicts, args.campaigns, args.jobs, args.minutes, args.confidence, args.own_only
        )
        return
    folder = Path(tempfile.mkdtemp(prefix="inspect-bridge-"))
    if args.real is not None:
        outcomes, names, gold = pick_models(args.real, args.models)
    else:
        rng = np.random.default_rng(args.seed)
        scores = np.linspace(0.3, 0.7, args.models)
        shape = (args.models, args.samples, args.epochs)
        outcomes = (rng.random(shape) < scores[:, None, None]).astype(np.int8)
        names, gold = [f"m{i}" for i in range(args.models)], scores
    path = write(folder, outcomes, names)
    models = [f"replay/{n}" for n in names]
    meta = through_inspect(path, models, folder / "logs", f"bench-{args.seed}")
    fixed = outcomes.shape[1] * outcomes.shape[2] * len(names)
    runs = sum(meta["trials"].values())
    print(f"models {len(names)} x samples {outcomes.shape[1]} x epochs {outcomes.shape[2]}")
    print(
        f"inspect: wall {meta['wall_s']:.1f} s, trials {runs:,} of {fixed:,} "
        f"({1 - runs / fixed:.1%} saved), rounds {meta['rounds']}, stop {meta['stop']}"
    )
    print(
        f"bridge time {meta['bridge_s']:.2f} s = {meta['bridge_ms_per_sample']:.3f} ms per sample"
    )
    settled = sorted(
        (d["a"], d["b"], d["verdict"]) for d in meta["decisions"] if d["verdict"] != "undecided"
    )
    index = {m: i for i, m in enumerate(models)}
    wrong = [
        (a, b)
        for a, b, verdict in settled
        if verdict in ("a>b", "b>a") and (gold[index[a]] > gold[index[b]]) != (verdict == "a>b")
    ]
    print(f"inspect decided {len(settled)} pair(s), wrong against gold: {len(wrong)}")
    if args.real is None:
        return
    own = run_own(path, meta, folder / "own")
    print(f"adaptive-eval run decided {len(own['decisions'])} pair(s)")
    print("same pairs decided:", own["decisions"] == settled)
    print("same trials per model:", own["trials"] == meta["trials"])
    for model in models:
        print(f"  {model}: inspect {meta['trials'][model]:,}  run {own['trials'][model]:,}")


if __name__ == "__main__":
    main()
