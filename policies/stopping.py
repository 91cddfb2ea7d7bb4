"""Campaign stopping rules. Compose with ``adaptive_eval.decide.contracts.any_of`` / ``all_of``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from adaptive_eval.base.types import PairDecision, Stop, StopReason
from adaptive_eval.config.registry import stopping_rules
from adaptive_eval.decide.contracts import CampaignView, StoppingRule
from adaptive_eval.stats.intervals import IntervalDesign, trials_to_reach


@stopping_rules.register("pairs_settled")
@dataclass(frozen=True)
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
    """The width goal: every model's score within ``+-half_width`` at ``confidence``.

    The interval is the design's (:class:`adaptive_eval.stats.intervals.IntervalDesign`): a
    repeated confidence interval on the unbiased score, valid at whatever look the campaign
    stops on, per model or, with ``simultaneous``, for all models at once. A model is needed
    until its interval is that narrow; its trial target (for the allocator) is the horizon's
    fewest trials that bring its standard error to the horizon's, so the models whose
    intervals are widest relative to the target get the most trials.

    ``questions`` says how such a model spreads its trials: ``uniform`` (default) or ``neyman``.
    Measured (docs/method.md): with the conservative per-trial variance that keeps the interval
    valid, Neyman allocation across questions saves no trials on a width goal (14,991 against
    15,143 on the AIME 2025 replay) but, because a question that looks settled early is then
    sampled less, it biases the mean of per-question means away from 0.5 by up to 0.7 of its
    standard error and the intervals cover 91% instead of 95% (homogeneous questions).
    """

    name = "ci_width"
    settles_pairs = False

    def __init__(
        self,
        half_width: float,
        confidence: float | None = None,
        simultaneous: bool = False,
        questions: str = "uniform",
    ) -> None:
        self.half_width = half_width
        self.confidence = confidence
        self.simultaneous = simultaneous
        self.questions = questions

    def interval_design(self, confidence: float) -> IntervalDesign | None:
        return IntervalDesign(
            self.confidence if self.confidence is not None else confidence,
            self.half_width,
            self.simultaneous,
        )

    def design(self, view: CampaignView) -> IntervalDesign:
        design = self.interval_design(view.confidence)
        assert design is not None
        return design

    def half_widths(self, view: CampaignView) -> np.ndarray:
        """Half of each model's interval width now (``inf`` before its first look)."""
        found = view.score_intervals(self.design(view))
        return np.where(np.isfinite(found.boundary), found.half_width, np.inf)

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        widest = float(self.half_widths(view).max())
        if widest <= self.half_width:
            design = self.design(view)
            who = "all models at once" if design.simultaneous else "each model"
            return Stop(
                StopReason.CI_WIDTH,
                f"every score within +-{self.half_width:g} at {100 * design.confidence:g}% "
                f"({who}); widest +-{widest:.4f}",
            )
        return None

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        return np.asarray(self.half_widths(view) > self.half_width)

    def trial_targets(
        self, view: CampaignView, decisions: tuple[PairDecision, ...]
    ) -> np.ndarray | None:
        """Trials each needed model should reach: what it has planned plus the fewest further
        trials that bring its standard error to the horizon's, ``h / c_K``, spread by the
        goal's question scheme on top of what it has
        (:func:`adaptive_eval.stats.intervals.trials_to_reach`)."""
        design = self.design(view)
        se_target = self.half_width / design.final_boundary(view.num_models)
        planned = np.asarray(view.planned, dtype=np.float64)
        if view.cell_variance is None:
            variance = np.broadcast_to(
                (view.theta_se**2 * np.maximum(view.trials.sum(axis=1), 1))[:, None],
                planned.shape,
            )
        else:
            variance = np.asarray(view.cell_variance, dtype=np.float64)
        further = trials_to_reach(variance, planned, se_target, self.questions or "uniform")
        # Still needed after what is planned arrives: at least one more trial per question.
        further = np.maximum(further, 1.0)
        targets = planned.sum(axis=1) + further
        return np.where(self.half_widths(view) > self.half_width, targets, 0.0)


@stopping_rules.register("max_trials")
@dataclass(frozen=True)
class MaxTrials(StoppingRule):
    """Stop once every (model, question) cell has ``n`` trials."""

    n: Annotated[int, Field(ge=1)]

    name = "max_trials"
    respects_min_trials = False
    settles_pairs = False

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        if int(view.trials.min()) >= self.n:
            return Stop(StopReason.MAX_TRIALS, f"every cell has {self.n} trials")
        return None


@stopping_rules.register("budget")
@dataclass(frozen=True)
class Budget(StoppingRule):
    """Stop when the trial, token or wall-clock budget is spent (None: no such limit)."""

    trials: Annotated[int | None, Field(ge=1)] = None
    tokens: Annotated[int | None, Field(ge=1)] = None
    wall_clock_s: Annotated[float | None, Field(gt=0)] = None

    name = "budget"
    respects_min_trials = False
    settles_pairs = False

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


@stopping_rules.register("ci_width")
def ci_width(
    width: Annotated[float | None, Field(gt=0)] = None,
    half_width: Annotated[float | None, Field(gt=0)] = None,
    confidence: Annotated[float | None, Field(gt=0, lt=1)] = None,
    simultaneous: bool = False,
    questions: Literal["uniform", "neyman"] = "uniform",
) -> StoppingRule:
    """``width`` is the whole interval's width (``2 h``), ``half_width`` its half; give one.
    ``confidence`` defaults to ``policy.confidence``."""
    if width is not None and half_width is None:
        return CiWidth(width / 2, confidence, simultaneous, questions)
    if half_width is not None and width is None:
        return CiWidth(half_width, confidence, simultaneous, questions)
    raise ValueError("give one of width (the whole interval) or half_width (+-h)")
