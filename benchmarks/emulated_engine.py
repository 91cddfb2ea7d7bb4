"""The emulated heavy-tailed engine that the feed benchmarks (``pipeline_depth.py``,
``timeshare_feed.py``) run on: ``--engine-seqs`` decode slots per worker, completion lengths
lognormal with median ``--median`` tokens and p99 20x the median, capped at 32,768, seeded by
the trial, ``--per-token-s`` seconds per token (the simulated backend's ``latency:`` section)."""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine-seqs", type=int, default=64, help="decode slots per worker")
    parser.add_argument("--median", type=float, default=2000, help="median completion tokens")
    parser.add_argument("--per-token-s", type=float, default=2e-5, help="seconds per token")


def engine_latency(args: argparse.Namespace, feed: bool) -> dict[str, Any]:
    """A model entry's ``latency:``; ``feed`` false drains the engine at each batch boundary."""
    return {
        "engine_seqs": args.engine_seqs,
        "per_token_s": args.per_token_s,
        "tokens_median": args.median,
        "tokens_p99_ratio": 20,
        "max_tokens": 32768,
        "feed": feed,
    }
