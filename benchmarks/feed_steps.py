"""The feed against one ``LLM.generate`` call in one process (no Ray, no controller).

    python benchmarks/feed_steps.py --tiny --questions 64 --trials 16 --pairs 5 --out DIR

Isolates what the continuous feed itself costs from what a campaign's process and host add.
One ``VllmWorker`` (the ``vllm`` backend's own code, engine args of the campaign that
``benchmarks/gpu_throughput.py`` builds with the same arguments) runs the same heavy-tailed
requests alternately

* ``plain``: one ``llm.generate`` call over every request, then each output converted as the
  worker converts it;
* ``feed``: batches of ``--batch-size`` handed to ``generate_and_grade`` from
  ``--in-flight`` threads at once, as the worker's actor threads do: every batch feeds the one
  engine, each output is converted and graded the moment it finishes.

Every ``llm_engine.step()`` is timed, so each run reports its engine steps (equal counts mean
the feed keeps the engine as full as one call does), the seconds inside them, and the seconds
spent converting outputs. ``--pairs N`` runs N plain/feed pairs, alternating which goes first.
Every other argument is ``gpu_throughput.py``'s (its ``--modes`` and ``--repeats`` do not
apply here). Prints one line per run and the medians; writes ``DIR/feed_steps.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from gpu_throughput import (
    CPU_ENV,
    bench_requests,
    build_model,
    campaign_config,
    plan_parts,
    render,
    write_questions,
)
from gpu_throughput import parse_args as throughput_args

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


class Timed:
    """Wraps a callable; adds its calls and seconds to the current run's counters."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        result = self.inner(*args)
        with self._lock:
            self.calls += 1
            self.seconds += time.perf_counter() - started
        return result

    def reset(self) -> None:
        self.calls, self.seconds = 0, 0.0


def main(argv: list[str] | None = None) -> None:
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--pairs", type=int, default=3, help="plain/feed pairs (default 3)")
    known, rest = own.parse_known_args(argv)
    if {"-h", "--help"} & set(rest):
        print(__doc__)
        return
    if known.pairs < 1:
        raise SystemExit(f"--pairs must be at least 1, got {known.pairs}")
    args = throughput_args(rest)
    args.out.mkdir(parents=True, exist_ok=True)
    args.out = args.out.resolve()
    if args.tiny:
        for key, value in {**CPU_ENV, "OMP_NUM_THREADS": "1"}.items():
            os.environ.setdefault(key, value)

    from adaptive_eval.backends.vllm import VllmWorker

    model, _ = build_model(args)
    write_questions(args.out / "questions.jsonl", args.questions)
    config_path = args.out / "config.yaml"
    config_path.write_text(yaml.safe_dump(campaign_config(args, model), sort_keys=False))
    setup, settings = plan_parts(config_path)
    worker = VllmWorker(setup, settings, 0, "feed-steps")
    requests = bench_requests(setup, args.trials)
    step = Timed(worker.llm.llm_engine.step)
    worker.llm.llm_engine.step = step
    convert = Timed(worker._convert)
    worker._convert = convert  # type: ignore[method-assign]

    def plain() -> None:
        prompts, params = render(worker, requests)
        outputs = worker.llm.generate(prompts, params, use_tqdm=False)
        for output, param in zip(outputs, params, strict=True):
            worker._convert(output, param, 0.0)

    def feed() -> None:
        batches = [
            requests[i : i + args.batch_size] for i in range(0, len(requests), args.batch_size)
        ]
        with ThreadPoolExecutor(args.in_flight) as pool:
            for _, graded, _ in pool.map(worker.generate_and_grade, batches):
                for future in graded:
                    future.result()

    plain()  # warm-up: the first call pays one-off costs in either mode
    runs: list[dict[str, Any]] = []
    for pair in range(known.pairs):
        order = [("plain", plain), ("feed", feed)]
        for name, run in order if pair % 2 == 0 else order[::-1]:
            step.reset()
            convert.reset()
            started = time.perf_counter()
            run()
            wall = time.perf_counter() - started
            row = {
                "pair": pair + 1,
                "run": name,
                "wall_s": wall,
                "steps": step.calls,
                "step_s": step.seconds,
                "convert_s": convert.seconds,
            }
            runs.append(row)
            print(
                f"[{pair + 1}/{known.pairs}] {name:5s}: {wall:6.2f} s wall, {step.calls} engine "
                f"steps taking {step.seconds:6.2f} s, converting outputs {convert.seconds:.2f} s",
                flush=True,
            )
    worker.close()
    medians = {
        name: {
            key: statistics.median(r[key] for r in runs if r["run"] == name)
            for key in ("wall_s", "steps", "step_s", "convert_s")
        }
        for name in ("plain", "feed")
    }
    ratios = [
        p["wall_s"] / f["wall_s"]
        for p, f in zip(
            [r for r in runs if r["run"] == "plain"],
            [r for r in runs if r["run"] == "feed"],
            strict=True,
        )
    ]
    print(
        f"medians: plain {medians['plain']['wall_s']:.2f} s, feed {medians['feed']['wall_s']:.2f}"
        f" s; feed throughput x plain per pair: {', '.join(f'{x:.3f}' for x in ratios)} "
        f"(median {statistics.median(ratios):.3f})"
    )
    (args.out / "feed_steps.json").write_text(
        json.dumps({"runs": runs, "medians": medians, "ratios": ratios}, indent=2)
    )


if __name__ == "__main__":
    main()
