"""Time-shared slots with and without the continuous feed, on an emulated engine.

    python benchmarks/timeshare_feed.py                 # ~3 min on 2 cores

More models than slots (``execution.gpu_slots``): ``--models`` of the paper's LLM mimics
(configs/scenarios/llm_mimics.npz), each its own swappable ``simulated`` entry that takes
``--load-s`` seconds to load, time-share ``--slots`` slots. Each slot's model runs on an emulated
engine of ``--engine-seqs`` decode slots with heavy-tailed lengths (lognormal, median
``--median`` tokens, p99 20x, capped at 32,768, seeded by the trial). Two runs of the same
campaign:

* feed: a slot runs every queued batch of its loaded model at once (``in_flight_per_worker``
  batches share its engine), the schedule since this change;
* one batch at a time (``latency.feed: false``): the slot's engine takes one batch and drains at
  every batch boundary, which is what a slot did before (its actor ran one call at a time).

Reports trials (identical in both runs: a trial is its seed), model loads, wall seconds of the
controller loop and the slots' busy share (engine occupancy plus load time over the dispatch
span), and checks that both runs recorded the same trials. Prints a table and writes ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emulated_engine import add_engine_arguments, engine_latency

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIMICS = ["LLM_1", "LLM_4", "LLM_7", "LLM_10", "LLM_2", "LLM_5", "LLM_8", "LLM_11"]


def config(args: argparse.Namespace, feed: bool) -> dict[str, Any]:
    latency = engine_latency(args, feed)
    return {
        "name": "timeshare-feed",
        "seed": args.seed,
        "models": [
            {
                "backend": "simulated",
                "path": str(REPO / "configs" / "scenarios" / "llm_mimics.npz"),
                "select": [name],
                "options": {"swappable": True, "load_s": args.load_s, "devices": 1},
                "latency": latency,
            }
            for name in MIMICS[: args.models]
        ],
        "rubric": {"weights": [0, 1]},
        "policy": {"min_trials_per_question": 2, "max_trials_per_question": 80},
        "execution": {
            "gpu_slots": args.slots,
            "batch_size": args.batch_size,
            "in_flight_per_worker": args.in_flight,
        },
        "output": {"progress": False, "fsync": "normal"},
    }


def ledger_digest(run_dir: Path) -> str:
    with sqlite3.connect(run_dir / "trials.sqlite") as conn:
        rows = conn.execute(
            "SELECT model, question, trial, category, tokens FROM trials ORDER BY 1, 2, 3"
        ).fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def run_one(args: argparse.Namespace, feed: bool) -> dict[str, Any]:
    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import parse_config
    from adaptive_eval.workflows.run import run_campaign

    with tempfile.TemporaryDirectory() as name:
        run_dir = Path(name) / "run"
        started = time.perf_counter()
        summary = record(
            run_campaign(build_campaign(parse_config(config(args, feed))), run_dir, quiet=True)
        )
        seconds = time.perf_counter() - started
        digest = ledger_digest(run_dir)
    dispatch = summary["dispatch"]
    return {
        "feed": feed,
        "trials": int(summary["trials_used"]),
        "loads": int(dispatch["model_loads"]),
        "load_s": float(dispatch["load_s"]),
        "wall_s": seconds,
        "busy": float(dispatch["worker_utilisation"]),
        "failed_batches": int(dispatch["failed_batches"]),
        "ledger": digest,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=4, choices=range(2, len(MIMICS) + 1))
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--load-s", type=float, default=2.0)
    add_engine_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/timeshare_feed.json"))
    args = parser.parse_args(argv)
    rows = [run_one(args, feed) for feed in (True, False)]
    print("| schedule | trials | loads | wall s | busy |")
    print("|---|---|---|---|---|")
    for row in rows:
        label = "feed" if row["feed"] else "one batch at a time"
        print(
            f"| {label} | {row['trials']:,} | {row['loads']} | {row['wall_s']:.1f} | "
            f"{row['busy']:.1%} |"
        )
    same = rows[0]["ledger"] == rows[1]["ledger"]
    print(f"same trials recorded: {same}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}))
    if not same:
        raise SystemExit("the two schedules recorded different trials")


if __name__ == "__main__":
    main()
