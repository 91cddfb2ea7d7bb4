"""Campaign stopping rules. Compose with ``adaptive_eval.policy.any_of`` / ``all_of``."""

from __future__ import annotations

import math

import numpy as np

from adaptive_eval.policy import CampaignView, StoppingRule
from adaptive_eval.registry import stopping_rules
from adaptive_eval.types import PairDecision, Stop, StopReason


class PairsSettled(StoppingRule):
    """The ranking goal: every adjacent pair is resolved or equivalent, or futile (cannot be
    settled by the cap with reasonable probability; such a stop is reported as ``futility``)."""

    name = "pairs_settled"

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        if any(d.open for d in decisions):
            return None
        resolved = sum(d.verdict.value in ("a>b", "b>a") for d in decisions)
        equivalent = sum(d.verdict.value == "equivalent" for d in decisions)
        futile = len(decisions) - resolved - equivalent
        if futile == 0:
            return Stop(
                StopReason.GOAL_MET,
                f"all {len(decisions)} adjacent pairs settled "
                f"({resolved} resolved, {equivalent} equivalent)",
            )
        return Stop(
            StopReason.FUTILITY,
            f"{resolved + equivalent} of {len(decisions)} adjacent pairs settled ({resolved} "
            f"resolved, {equivalent} equivalent); {futile} cannot be settled by the cap "
            "(futility)",
        )

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        mask = np.zeros(view.num_models, dtype=bool)
        for d in decisions:
            if d.open:
                mask[[d.a, d.b]] = True
        return mask


class CiWidth(StoppingRule):
    """Stop once every model's credible interval is at most ``width`` wide."""

    name = "ci_width"

    def __init__(self, width: float) -> None:
        self.width = width

    def widths(self, view: CampaignView) -> np.ndarray:
        low, high = view.ci()
        width: np.ndarray = high - low
        return width

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        widest = float(self.widths(view).max())
        if widest <= self.width:
            return Stop(
                StopReason.CI_WIDTH, f"widest credible interval {widest:.4f} <= {self.width}"
            )
        return None

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        return self.widths(view) > self.width


class MaxTrials(StoppingRule):
    """Stop once every (model, question) cell has ``n`` trials."""

    name = "max_trials"
    respects_min_trials = False

    def __init__(self, n: int) -> None:
        self.n = n

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        if int(view.trials.min()) >= self.n:
            return Stop(StopReason.MAX_TRIALS, f"every cell has {self.n} trials")
        return None


class Budget(StoppingRule):
    """Stop when the trial, token or wall-clock budget is spent."""

    name = "budget"
    respects_min_trials = False

    def __init__(
        self,
        trials: int | None = None,
        tokens: int | None = None,
        wall_clock_s: float | None = None,
    ) -> None:
        self.trials = trials
        self.tokens = tokens
        self.wall_clock_s = wall_clock_s

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        if self.trials is not None and view.trials_used >= self.trials:
            return Stop(StopReason.TRIAL_BUDGET, f"{view.trials_used} trials used of {self.trials}")
        if (
            self.tokens is not None
            and view.tokens_used is not None
            and view.tokens_used >= self.tokens
        ):
            return Stop(StopReason.TOKEN_BUDGET, f"{view.tokens_used} tokens used of {self.tokens}")
        if self.wall_clock_s is not None and view.elapsed_s >= self.wall_clock_s:
            return Stop(
                StopReason.WALL_CLOCK, f"{view.elapsed_s:.1f} s elapsed of {self.wall_clock_s}"
            )
        return None


@stopping_rules.register("pairs_settled")
def pairs_settled() -> StoppingRule:
    return PairsSettled()


@stopping_rules.register("ci_width")
def ci_width(width: float) -> StoppingRule:
    if not (math.isfinite(width) and width > 0):  # `width <= 0` let .nan through
        raise ValueError(f"width must be > 0, got {width}")
    return CiWidth(width)


@stopping_rules.register("max_trials")
def max_trials(n: int) -> StoppingRule:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return MaxTrials(n)


@stopping_rules.register("budget")
def budget(
    trials: int | None = None, tokens: int | None = None, wall_clock_s: float | None = None
) -> StoppingRule:
    for name, value in (("trials", trials), ("tokens", tokens), ("wall_clock_s", wall_clock_s)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    return Budget(trials, tokens, wall_clock_s)
