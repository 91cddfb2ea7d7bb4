"""Peak memory of ``adaptive-eval report`` (and so of a resume) and ``export`` on a large run.

    python benchmarks/memory.py                 # 2,000,000 trials (8 models x 500 questions)
    python benchmarks/memory.py --trials-per-cell-round 50     # 10,000,000 trials
    python benchmarks/memory.py --trials-per-cell-round 5 --rounds 20    # smaller
    python benchmarks/memory.py --only export

Writes a run directory with that many recorded trials straight into its store, then runs
``adaptive-eval report`` and ``adaptive-eval export`` on it, each in a child process, and prints
each child's peak RSS. ``report`` rebuilds the posterior through the same code as a resume
(``Controller.resume``), reading each round's counts aggregated in SQL; ``export`` reads the
store in chunks into memory-mapped arrays. Neither should grow with the number of trials.
Target: under 300 MB (at 10M trials for export).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_MB = 300.0


def peak_rss_mb(command: list[str]) -> tuple[float, float]:
    """Run ``command`` as a child; return its own peak RSS (MB) and wall time (s)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, command)
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--trials-per-cell-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--keep", help="write the run here (default: a temporary folder)")
    parser.add_argument("--only", choices=["report", "export"], help="measure one command")
    args = parser.parse_args(argv)

    from adaptive_eval._testing.bigstore import write_big_run

    trials = args.models * args.questions * args.trials_per_cell_round * args.rounds
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.keep or scratch)
        started = time.perf_counter()
        run_dir = write_big_run(
            folder,
            models=args.models,
            questions=args.questions,
            per_cell_per_round=args.trials_per_cell_round,
            rounds=args.rounds,
        )
        built = time.perf_counter() - started
        size = (run_dir / "trials.sqlite").stat().st_size / 2**20
        print(
            f"{trials:,} trials ({args.rounds} rounds, store {size:.0f} MB, built in {built:.0f} s)"
        )
        commands = {
            "report": ["report", str(run_dir), "--json"],
            "export": ["export", str(run_dir), "--out", str(folder / "export.npz")],
        }
        worst = 0.0
        for name, command in commands.items():
            if args.only not in (None, name):
                continue
            peak, elapsed = peak_rss_mb(
                [sys.executable, "-m", "adaptive_eval.command_line.cli", *command]
            )
            worst = max(worst, peak)
            verdict = "ok" if peak < TARGET_MB else f"OVER the {TARGET_MB:.0f} MB target"
            print(f"  {name}: peak RSS {peak:.0f} MB, {elapsed:.1f} s -> {verdict}")
    return 0 if worst < TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
