"""Is the futility check's predictive probability calibrated? Every time a pair rule asks
:func:`adaptive_eval.stats.sequential.settle_probability` for an open pair's chance of being
settled by the cap, the chance and the pair's information fraction ``t = s_cap^2 / s^2`` are
recorded; at the campaign's end each record is scored by whether that pair was settled. Binned
by chance and ``t``, a calibrated predictive settles about as often as it says.

    python benchmarks/futility_calibration.py --campaign "checkpoint vs 2 incumbents"
    python benchmarks/futility_calibration.py --replay AIME.npz --replicates 10

Records are (round, pair) checks, so one pair contributes many correlated records; a pair made
futile draws no trials for its own sake, so low chances settle less often than they would
have (the check is partly self-fulfilling). Campaigns run with the default design as in
``benchmarks/sequential.py`` (replays at the shipped ``round_trials = 256``; ``AIME.npz`` above is
``../shared/data/real/noises_highk_aime2025.npz``).
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sequential import parse_design, policy_for, replay_truth, shuffled, suite

import policies.pair_rules as pair_rules_module
from adaptive_eval.base.types import PairDecision
from adaptive_eval.forecast.simulate import Truth, replay_sampler, simulate

CHANCE_BINS = (0.0, 0.1, 0.2, 0.3, 0.45, 0.7, 1.01)
T_BINS = (0.0, 0.5, 0.8, 1.01)
DESIGN = "group_sequential+track_and_stop"
FUTILITY = 0.2  # policy.futility's default


def recorded_checks(
    truth: Truth, outcomes: np.ndarray | None, cap: int, round_trials: int, replicates: int
) -> np.ndarray:
    """(n, 5) array over every futility check of the runs: (chance, t, settled by the end,
    the pair's error budget at the check, its budget when it settled (NaN if it did not))."""
    original: Callable[..., float] = pair_rules_module.seq.settle_probability
    checks: list[tuple[float, float]] = []

    def recording(difference: float, se: float, se_cap: float, *boundaries: object) -> float:
        chance = original(difference, se, se_cap, *boundaries)
        checks.append((chance, se_cap**2 / se**2))
        return chance

    # The pair each check is about, and its budget: the rule's own _test(view, known, a, b,
    # alpha, ...) is wrapped too (it runs the futility check when it settles nothing).
    built = type(parse_design(DESIGN).rules()()[0])
    rule_type = next(c for c in built.__mro__ if "_test" in vars(c))
    test = rule_type._test  # type: ignore[attr-defined]
    current: list[tuple[tuple[int, int], float]] = []
    budget_at_settling: dict[tuple[int, int], float] = {}

    def tagged(
        self: object, view: object, known: object, a: int, b: int, alpha: float, *rest: object
    ) -> tuple[PairDecision | None, object]:
        pair = (min(a, b), max(a, b))
        current.append((pair, alpha))
        before = len(checks)
        answer, memory = test(self, view, known, a, b, alpha, *rest)
        if len(checks) == before:
            current.pop()  # no chance asked: settled, or the check stopped before it
        if answer is not None and answer.settled:
            budget_at_settling[pair] = alpha
        return answer, memory

    rows: list[tuple[float, float, float, float, float]] = []
    policy = policy_for(parse_design(DESIGN), cap, round_trials)
    pair_rules_module.seq.settle_probability = recording  # type: ignore[assignment]
    rule_type._test = tagged  # type: ignore[attr-defined]
    try:
        for rep in range(replicates):
            checks.clear()
            current.clear()
            budget_at_settling.clear()
            rng = np.random.default_rng(rep)
            sampler = None if outcomes is None else replay_sampler(shuffled(outcomes, rng), 2)
            result = simulate(truth, policy, rng, sampler)
            settled = {(min(d.a, d.b), max(d.a, d.b)) for d in result.decisions if d.settled}
            nan = float("nan")
            rows += [
                (
                    chance,
                    t,
                    float(pair in settled),
                    alpha,
                    budget_at_settling[pair] if pair in settled else nan,
                )
                for (chance, t), (pair, alpha) in zip(checks, current, strict=True)
            ]
    finally:
        pair_rules_module.seq.settle_probability = original  # type: ignore[assignment]
        rule_type._test = test  # type: ignore[attr-defined]
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


def table(rows: np.ndarray) -> str:
    lines = [
        "| predicted chance | t | checks | mean chance | settled |",
        "|---|---|---:|---:|---:|",
    ]
    for low, high in itertools.pairwise(CHANCE_BINS):
        for t_low, t_high in itertools.pairwise(T_BINS):
            chance, t = rows[:, 0], rows[:, 1]
            mask = (chance >= low) & (chance < high) & (t >= t_low) & (t < t_high)
            if mask.sum() >= 20:
                lines.append(
                    f"| [{low:.2f}, {min(high, 1):.2f}) | [{t_low:.1f}, {min(t_high, 1):.1f}) | "
                    f"{int(mask.sum()):,} | {chance[mask].mean():.3f} | "
                    f"{rows[mask, 2].mean():.3f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--campaign", default=None, help="a campaign of sequential.py's suite")
    parser.add_argument("--replay", type=Path, default=None, help="a recorded (L, M, N) file")
    parser.add_argument("--replicates", type=int, default=30)
    parser.add_argument("--questions", type=int, default=30)
    args = parser.parse_args()
    if (args.campaign is None) == (args.replay is None):
        parser.error("give one of --campaign NAME or --replay FILE")
    outcomes = None
    if args.replay is not None:
        try:
            truth, outcomes = replay_truth(args.replay, "outcomes")
        except (OSError, KeyError, ValueError) as error:
            parser.error(f"--replay {args.replay}: cannot read its outcomes ({error})")
        cap, round_trials = outcomes.shape[2], 256
    else:
        campaigns = suite(args.questions)
        if args.campaign not in campaigns:
            parser.error(f"--campaign {args.campaign!r}: not one of {sorted(campaigns)}")
        truth = campaigns[args.campaign]
        cap = 400
        models = truth.shape[0]
        round_trials = models * args.questions * (1 if models < 5 else 2)
    rows = recorded_checks(truth, outcomes, cap, round_trials, args.replicates)
    print(table(rows))
    late = (rows[:, 0] < FUTILITY) & (rows[:, 2] == 1)
    if late.any():
        ratio = float(np.median(rows[late, 4] / rows[late, 3]))
        print(
            f"\nchecks below the default threshold {FUTILITY} whose pair settled later: "
            f"{int(late.sum()):,}; median error budget at settling / at the check: {ratio:.2f}"
        )


if __name__ == "__main__":
    main()
