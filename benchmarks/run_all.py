"""``make bench``: the benchmarks that need neither a GPU nor a network, one after another.

    python benchmarks/run_all.py            # core speed + report memory at 2M trials
    python benchmarks/run_all.py --quick    # smaller sizes (a minute on a laptop)

The GPU throughput benchmark (benchmarks/gpu_throughput.py) and the error-rate study
(benchmarks/error_rate.py) are run by hand; see their docstrings.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args(argv)
    memory = ["--trials-per-cell-round", "5", "--rounds", "10"] if args.quick else []
    steps = [
        ("core", [str(HERE / "bench_core.py"), "all"]),
        ("memory", [str(HERE / "memory.py"), *memory]),
    ]
    failed = []
    for name, command in steps:
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, *command]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
