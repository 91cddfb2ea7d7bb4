"""Realised ordering error of the sequential z rule (optional stopping), in simulation.

    python benchmarks/error_rate.py --campaigns 200 --gap 0.0 --max-trials 60

Two simulated models whose true scores differ by ``gap`` (0 = a true tie) are ranked by the real
controller (in-process dispatch) with the posterior checked after every round. A campaign errs
when it resolves the pair in the wrong direction (for a tie: in any direction). Each rule's
realised error rate is printed next to its nominal rate, with a 95% Wilson interval, for

* ``z_rank``: the paper's rule checked after every round (nominal 1 - confidence per direction),
* ``z_rank(looks=K)``: Bonferroni over the K rounds the campaign can have at most.

The fixed-N rule (one look at N = max trials) is the reference.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers import run_inline  # noqa: E402

from adaptive_eval.config.schema import parse_config  # noqa: E402
from adaptive_eval.stats.sequential import wilson_interval  # noqa: E402


def scenario(path: Path, gap: float, questions: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = np.clip(rng.beta(3, 3, size=questions), 0.05, 0.95)
    success = np.stack([np.clip(base + gap / 2, 0, 1), np.clip(base - gap / 2, 0, 1)])
    np.savez(
        path, probs=np.stack([1 - success, success], axis=2), models=np.array(["better", "worse"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--campaigns", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.0)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--max-trials", type=int, default=60)
    parser.add_argument("--trials-per-round", type=int, default=2)
    parser.add_argument("--confidence", type=float, default=0.95)
    args = parser.parse_args()
    looks = math.ceil(args.max_trials / args.trials_per_round)
    rules = {
        "z_rank (every round)": [{"name": "z_rank"}],
        f"z_rank(looks={looks})": [{"name": "z_rank", "looks": looks}],
        "fixed N (one look)": None,
    }
    nominal = (1 - args.confidence) * (2 if args.gap == 0 else 1)
    print(
        f"gap {args.gap}, M = {args.questions}, up to {args.max_trials} trials per question "
        f"in rounds of {args.trials_per_round}; {args.campaigns} campaigns per rule; nominal "
        f"error {nominal:.3f}"
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for rule_index, (label, pair_rules) in enumerate(rules.items()):
            errors = resolved = 0
            trials = []
            for seed in range(args.campaigns):
                scenario(tmp / "s.npz", args.gap, args.questions, seed)
                fixed = pair_rules is None
                policy = {
                    "confidence": args.confidence,
                    "rope": None,
                    "min_trials_per_question": 1,
                    "max_trials_per_question": args.max_trials,
                    "allocation": {
                        "name": "uniform",
                        "trials_per_round": args.max_trials if fixed else args.trials_per_round,
                    },
                    "pair_rules": [{"name": "z_rank"}] if fixed else pair_rules,
                }
                config = parse_config(
                    {
                        "name": "err",
                        "seed": seed,
                        "models": [{"backend": "simulated", "path": "s.npz"}],
                        "rubric": {"weights": [0, 1]},
                        "policy": policy,
                        "output": {"fsync": "normal"},
                    },
                    source=str(tmp / "c.yaml"),
                )
                done = run_inline(config, tmp / f"run-{rule_index}-{seed}")
                decision = done.decisions[0]
                if decision.settled:
                    resolved += 1
                    winner = done.campaign.names[decision.a]
                    errors += args.gap == 0 or winner != "better"
                trials.append(done.state.trials_used)
            low, high = wilson_interval(errors, args.campaigns)
            print(
                f"  {label:<24} error {errors / args.campaigns:.3f} "
                f"[{low:.3f}, {high:.3f}]  resolved {resolved / args.campaigns:.2f}  "
                f"median trials {int(np.median(trials))}"
            )


if __name__ == "__main__":
    main()
