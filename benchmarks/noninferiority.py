"""Wrong-verdict rate and cost of compare's non-inferiority gate (``compare --margin``).

    python benchmarks/noninferiority.py --replicates 300 --margin 0.05

A candidate against one incumbent (M questions, binary rubric, per-question success rates drawn
once per campaign) with a known true difference ``D`` = candidate - incumbent, run through
:func:`adaptive_eval.simulate.simulate` with compare's own stopping rule (pass / fail / cap),
its allocation (the two models, equal trials per question) and the campaign's default
``group_sequential`` looks. Cases, each over ``replicates`` seeded campaigns:

* ``D = 0`` (an unchanged checkpoint): "fail" is wrong; cost = trials to pass;
* ``D = -margin`` (exactly at the margin, the hardest case): "pass" is wrong, the gate's
  guarantee is that it happens in at most ``alpha = 1 - confidence`` of campaigns;
* ``D = -2 margin`` (a regression): "pass" is wrong; cost = trials to fail.

Reported per case: the share of campaigns with each verdict, the wrong-verdict rate with its
Wilson 95% interval, and the mean trials per question each model took (the cap is the most).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaptive_eval.comparison import CandidatePlaced, Judge, NeededOnly
from adaptive_eval.noninferiority import FAIL, PASS, NonInferiority, look_schedule
from adaptive_eval.registry import pair_rules
from adaptive_eval.simulate import SimPolicy, Truth, simulate
from adaptive_eval.stats import sequential as seq

CANDIDATE, INCUMBENT = 0, 1


def truth(difference: float, questions: int, incumbent_mean: float, seed: int) -> Truth:
    """Incumbent rates ~ Beta around ``incumbent_mean`` (kept inside [0.15, 0.85] so that the
    candidate's shifted rates stay probabilities); the candidate = incumbent + ``difference``
    on every question, so the true difference is exactly ``difference``."""
    rng = np.random.default_rng(seed)
    kappa = 8.0
    incumbent = np.clip(
        rng.beta(kappa * incumbent_mean, kappa * (1 - incumbent_mean), questions), 0.15, 0.85
    )
    success = np.stack([incumbent + difference, incumbent])
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]), ("cand", "inc"))


@dataclass(frozen=True)
class Case:
    name: str
    difference: float
    wrong: str  # the verdict that is wrong for this truth


def one_campaign(case: Case, args: argparse.Namespace, seed: int) -> tuple[str, float]:
    """(the verdict, the candidate's mean trials per question) of one seeded campaign."""
    made = truth(case.difference, args.questions, args.incumbent, seed)
    rules = (pair_rules.build("group_sequential"),)
    gate = NonInferiority(CANDIDATE, args.margin, look_schedule(rules))
    judge = Judge(rules, CANDIDATE, gate)
    policy = SimPolicy(
        make_rules=lambda: rules,
        stopping=CandidatePlaced(judge),
        allocator=NeededOnly(),
        confidence=args.confidence,
        max_trials=args.cap,
    )
    result = simulate(made, policy, np.random.default_rng(10_000 + seed))
    (verdict,) = gate.latest
    return verdict.decision, float(result.trials[CANDIDATE].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=300)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--incumbent", type=float, default=0.6, help="incumbent's mean score")
    parser.add_argument("--cap", type=int, default=200, help="max_trials_per_question")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    cases = [
        Case("unchanged (D = 0)", 0.0, FAIL),
        Case("at the margin (D = -margin)", -args.margin, PASS),
        Case("regression (D = -2 margin)", -2 * args.margin, PASS),
    ]
    print(
        f"non-inferiority gate: margin {args.margin}, confidence {args.confidence} "
        f"(alpha {1 - args.confidence:.3g} per side), M = {args.questions}, cap "
        f"{args.cap} trials per question, {args.replicates} campaigns per case\n"
    )
    print(
        "| case | pass | fail | undecided | wrong verdict [95% CI] | trials per question "
        "(mean) | x cap |"
    )
    print("|---|---:|---:|---:|---|---:|---:|")
    rows = []
    started = time.perf_counter()
    for case in cases:
        found = [one_campaign(case, args, seed) for seed in range(args.replicates)]
        verdicts = [v for v, _ in found]
        per_question = float(np.mean([n for _, n in found]))
        wrong = sum(v == case.wrong for v in verdicts)
        low, high = seq.wilson_interval(wrong, len(verdicts))
        share = {v: verdicts.count(v) / len(verdicts) for v in (PASS, FAIL, "undecided")}
        row = {
            "case": case.name,
            "difference": case.difference,
            "wrong_verdict": case.wrong,
            "wrong_rate": wrong / len(verdicts),
            "wrong_ci": [low, high],
            "shares": share,
            "trials_per_question": per_question,
        }
        rows.append(row)
        print(
            f"| {case.name} | {share[PASS]:.3f} | {share[FAIL]:.3f} | {share['undecided']:.3f} "
            f"| {case.wrong} {wrong / len(verdicts):.3f} [{low:.3f}, {high:.3f}] | "
            f"{per_question:.1f} | {per_question / args.cap:.2f} |"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}))


if __name__ == "__main__":
    main()
