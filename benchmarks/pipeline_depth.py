"""What a deeper pipeline costs in adaptivity and buys in engine occupancy, with heavy tails.

    python benchmarks/pipeline_depth.py                 # ~3 min on 2 cores
    python benchmarks/pipeline_depth.py --seeds 0 1 2 --depths 1 2 4 8

The demo campaign (the paper's 11 LLM mimics, 30 questions, pairwise allocation, at most 80
trials per question) runs on the ``simulated`` backend through Ray with an emulated engine per
worker (``latency.engine_seqs`` decode slots) and heavy-tailed completion lengths: lognormal,
median ``--median`` tokens, p99 20x the median, capped at 32,768, seeded by the trial, so the
same trial takes the same time in every run. Each configuration reports

* trials: the adaptive campaign's trials to its stop (the cost of planning rounds from an older
  posterior: ``rounds_in_flight`` rounds are planned ahead of the posterior);
* wall: seconds of the controller loop;
* busy: the workers' engine occupancy over the dispatch span, sequence-seconds served /
  (slots x workers x span) (a batch's busy time is its share of its worker's engine);
* the same at the default depth without the feed (``feed: false``: a worker's engine takes one
  batch at a time and drains at each batch boundary, as the vLLM worker did before).

Prints a table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from emulated_engine import add_engine_arguments, engine_latency

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def config(
    args: argparse.Namespace, seed: int, depth: int, feed: bool, in_flight: int
) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["seed"] = seed
    data["models"][0]["path"] = str(REPO / "configs" / "scenarios" / "llm_mimics.npz")
    data["models"][0]["latency"] = engine_latency(args, feed)
    data["execution"] = {
        "workers": args.workers,
        "batch_size": args.batch_size,
        "in_flight_per_worker": in_flight,
        "rounds_in_flight": depth,
    }
    data["output"] = {"progress": False, "fsync": "normal"}
    return data


def run_config(data: dict[str, Any], tmp: Path) -> tuple[dict[str, Any], float]:
    """Run a campaign in-process through Ray (failed batches re-run, as in a real run)."""
    from adaptive_eval.base.logs import SilentLog
    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import parse_config
    from adaptive_eval.control.controller import Controller
    from adaptive_eval.control.run_result import RunFacts, finished_run
    from adaptive_eval.dispatch import Dispatcher
    from adaptive_eval.dispatch.cluster import init_ray
    from adaptive_eval.loop.rundir import open_run_dir
    from adaptive_eval.outputs.provenance import collect
    from adaptive_eval.outputs.summary import build_summary

    config = parse_config(data, source=str(tmp / "c.yaml"))
    campaign = build_campaign(config)
    store, campaign_id, _ = open_run_dir(campaign, tmp / "run")
    execution = config.execution
    init_ray(None, None)
    dispatcher = Dispatcher(
        campaign.run.plans,
        campaign.run.offsets,
        in_flight_per_worker=execution.in_flight_per_worker,
        max_batch_retries=execution.max_batch_retries,
    )
    controller = Controller(campaign, store, dispatcher, SilentLog())
    started = time.perf_counter()
    controller.run()
    seconds = time.perf_counter() - started
    run = finished_run(controller, campaign_id, RunFacts())
    result = record(build_summary(campaign, run, collect(tmp / "run", store)))
    result["utilisation"] = dispatcher.stats.utilisation()
    result["failed_batches"] = dispatcher.stats.failures
    dispatcher.shutdown()
    store.close()
    return result, seconds


def run_one(
    args: argparse.Namespace, seed: int, depth: int, feed: bool, in_flight: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as name:
        started = time.perf_counter()
        data = config(args, seed, depth, feed, in_flight)
        result, seconds = run_config(data, Path(name))
        total = time.perf_counter() - started
    return {
        "seed": seed,
        "rounds_in_flight": depth,
        "feed": feed,
        "in_flight_per_worker": in_flight,
        "trials": int(result["trials_used"]),
        "stop_reason": result.get("stop_reason"),
        "wall_s": seconds,
        "total_s": total,
        "busy": float(result["utilisation"]),
        "failed_batches": int(result["failed_batches"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workers", type=int, default=2)
    add_engine_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--in-flight", type=int, nargs="+", default=[8], help="in_flight_per_worker values"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the feed: false runs")
    parser.add_argument("--out", type=Path, default=Path("runs/pipeline_depth.json"))
    args = parser.parse_args(argv)
    rows = []
    plans = [
        (seed, depth, True, in_flight)
        for seed in args.seeds
        for in_flight in args.in_flight
        for depth in args.depths
    ]
    if not args.no_baseline:  # the engine drains at every batch boundary (before the feed)
        plans += [(seed, 2, False, 2) for seed in args.seeds]
    for seed, depth, feed, in_flight in plans:
        row = run_one(args, seed, depth, feed, in_flight)
        rows.append(row)
        print(
            f"seed {seed} rounds_in_flight {depth} in_flight_per_worker {in_flight} "
            f"feed {feed!s:5}: {row['trials']:6d} trials, "
            f"{row['wall_s']:6.1f} s, busy {100 * row['busy']:5.1f}% ({row['stop_reason']})",
            flush=True,
        )
    print("\nmean over seeds:")
    print("| rounds_in_flight | in_flight_per_worker | feed | trials | wall s | busy % |")
    print("|---|---|---|---|---|---|")
    keys = ("rounds_in_flight", "feed", "in_flight_per_worker")
    for depth, feed, in_flight in dict.fromkeys((d, f, i) for _, d, f, i in plans):
        group = [r for r in rows if tuple(r[k] for k in keys) == (depth, feed, in_flight)]
        n = len(group)
        print(
            f"| {depth} | {in_flight} | {feed} | "
            f"{sum(r['trials'] for r in group) / n:.0f} | "
            f"{sum(r['wall_s'] for r in group) / n:6.1f} | "
            f"{100 * sum(r['busy'] for r in group) / n:5.1f} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    args.out.write_text(json.dumps({"settings": settings, "runs": rows}, indent=2, default=str))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
