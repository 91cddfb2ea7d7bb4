"""Confidence intervals on each model's score that hold under the campaign's own stopping.

A campaign decides from its data when to stop sampling each model, so the fixed-sample interval
``theta +- z se`` of the unbiased score (:func:`adaptive_eval.stats.sequential.empirical_estimate`)
can miss the truth more often than it says (on the AIME 2025 replay a default ranking campaign
left 7% of the 95% intervals off their model's own mean). Two constructions are valid however
the campaign stops:

* **Width goal** (``ci_width``): a *repeated confidence interval* (Jennison & Turnbull 1989;
  2000, ch. 9). Its horizon is the information a fixed-sample interval of half-width ``h``
  would need, inflated so that the last look's boundary gives exactly ``h``:
  ``I_max = (c_K / h)^2``. Looks are planned by :data:`LOOKS` (the default design,
  ``stats.sequential.DEFAULT_LOOKS``: 12 looks from 1/64 to 1, Hwang-Shih-DeCani spending,
  ``gamma = -4``). A model's fraction is ``t = I / I_max`` with
  ``I = 1 / se^2``; its interval is ``theta +- c_k se`` with ``c_k`` the boundary of the last
  planned look it reached. Every look's interval covers the truth at once with probability at
  least ``1 - alpha`` (Brownian approximation), so the interval the campaign stops on, which is
  the interval of a look, is valid whenever it stops. The goal is met at ``t = 1``:
  ``c_K se = h``. ``c_K`` is 2.005 at ``alpha = 0.05`` against 1.960 for one look: planning
  looks costs 4.6% more trials than a fixed sample of known variance.
* **No width goal** (a ranking campaign): an *anytime-valid confidence sequence*, the
  equal-weight mixture of normal mixtures over :data:`ANYTIME_PRECISIONS` (Robbins; Howard
  et al. 2021): valid at every round and at any stopping time, with no horizon; about 1.7x the
  fixed-sample half-width.

``simultaneous`` splits ``alpha`` over the ``L`` models (Bonferroni): all intervals cover at
once with probability at least ``confidence``; otherwise each model's does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import norm

from adaptive_eval.stats.arrays import FloatArray
from adaptive_eval.stats.sequential import (
    DEFAULT_LOOKS,
    mixture_boundary_table,
)

#: The intervals' looks: the pair rules' default design (one value, see ``LookDesign``).
LOOKS = DEFAULT_LOOKS
#: The smallest design effect (the estimate's variance over a binomial proportion's on the same
#: trials) an interval trusts: questions of different difficulty can make a mean over them
#: far less variable than one proportion (0.05 on LiveCodeBench), never 20 times less here.
MIN_DESIGN_EFFECT = 0.05
#: Mixing precisions of the anytime sequence: 4x apart, from se = 0.05 down to se = 0.0003.
ANYTIME_PRECISIONS = tuple(float(400 * 4**j) for j in range(9))


@dataclass(frozen=True)
class IntervalDesign:
    """How each model's score interval is built (one design per campaign).

    ``half_width`` is the width goal ``h`` (``None``: no width goal, the anytime sequence);
    ``confidence`` the coverage, per model or, with ``simultaneous``, for all models at once.
    """

    confidence: float
    half_width: float | None = None
    simultaneous: bool = False

    @property
    def kind(self) -> str:
        return "group_sequential" if self.half_width is not None else "anytime"

    def alpha(self, num_models: int) -> float:
        """Two-sided error of one model's interval."""
        alpha = 1.0 - self.confidence
        return alpha / max(1, num_models) if self.simultaneous else alpha

    def final_boundary(self, num_models: int) -> float:
        """``c_K``: the boundary on ``|z|`` at the horizon (the fixed-sample ``z`` for anytime)."""
        if self.half_width is None:
            return float(norm.isf(self.alpha(num_models) / 2))
        return _look_boundaries(self.alpha(num_models))[-1]

    def horizon_information(self, num_models: int) -> float:
        """``I_max = (c_K / h)^2``: the information at which the width goal is met."""
        if self.half_width is None:
            return math.inf
        return (self.final_boundary(num_models) / self.half_width) ** 2

    def boundary(self, se: FloatArray, num_models: int) -> FloatArray:
        """Per-model boundary ``c`` on ``|theta - truth| / se`` (``inf`` before a first look)."""
        se = np.asarray(se, dtype=np.float64)
        alpha = self.alpha(num_models)
        with np.errstate(divide="ignore"):
            information = np.where(se > 0, 1.0 / se**2, np.inf)
        if self.half_width is None:
            return np.asarray(
                [_anytime_boundary(float(i), alpha) for i in information.ravel()],
                dtype=np.float64,
            ).reshape(se.shape)
        fraction = information / self.horizon_information(num_models)
        bounds = np.asarray(_look_boundaries(alpha), dtype=np.float64)
        reached = np.searchsorted(np.asarray(_fractions()), fraction + 1e-12, side="right")
        return np.where(reached > 0, bounds[np.maximum(reached, 1) - 1], np.inf)

    def guarantee(self, num_models: int) -> str:
        """One sentence: what the interval promises."""
        level = f"{100 * self.confidence:g}%"
        who = "all models' intervals at once" if self.simultaneous else "each model's interval"
        if self.half_width is None:
            how = (
                "an anytime-valid confidence sequence on the unbiased score: it holds at every "
                "round, so also where the campaign stopped"
            )
        else:
            how = (
                f"a repeated confidence interval (group-sequential, {LOOKS.looks} looks, "
                f"horizon at +-{self.half_width:g}): it holds at every look, so also at the "
                "look the campaign stopped on"
            )
        return f"{who} covers the true score with probability >= {level}; {how}"


@dataclass(frozen=True)
class ScoreIntervals:
    """Per-model intervals around ``estimate`` (clipped to the weights' range): ``boundary``
    is the design's ``c`` for each model, ``low``/``high`` the interval's ends."""

    estimate: FloatArray
    low: FloatArray
    high: FloatArray
    boundary: FloatArray

    @property
    def half_width(self) -> FloatArray:
        """Half the interval's width (the goal's ``+-h``: the interval is at most ``2 h`` wide;
        near 0 or 1 it is not centred on the estimate)."""
        return np.asarray((self.high - self.low) / 2, dtype=np.float64)


def wald_intervals(
    estimate: FloatArray,
    se: FloatArray,
    design: IntervalDesign,
    weight_range: tuple[float, float] = (0.0, 1.0),
) -> ScoreIntervals:
    """``estimate +- c se`` for every model (a model before its first look: the whole range).

    >>> design = IntervalDesign(0.95, half_width=0.02)
    >>> design.final_boundary(1)  # c_K of 12 looks, against 1.960 for one
    2.005479915399878
    >>> out = wald_intervals(np.array([0.5]), np.array([0.02 / 2.0055]), design)
    >>> [round(float(x), 3) for x in (out.low[0], out.high[0])]
    [0.48, 0.52]
    """
    estimate = np.asarray(estimate, dtype=np.float64)
    boundary = design.boundary(se, len(estimate))
    with np.errstate(invalid="ignore"):
        spread = np.where(np.isfinite(boundary), boundary * np.asarray(se), np.inf)
    low, high = weight_range
    return ScoreIntervals(
        estimate,
        np.clip(estimate - spread, low, high),
        np.clip(estimate + spread, low, high),
        boundary,
    )


def score_intervals(
    counts: FloatArray,
    nu: FloatArray,
    weights: FloatArray,
    design: IntervalDesign,
) -> ScoreIntervals:
    """The design's interval for every model: a Wilson score interval on the effective number
    of trials (Korn & Graubard 1998), with the design's boundary ``c`` as its critical value.

    On the weights' scale ``t = (theta - w_min) / span``, with the unbiased estimate ``t_hat``
    and its standard error ``s`` (:func:`adaptive_eval.stats.sequential.empirical_estimate`,
    the decisions' own), the effective trials are ``n_eff = t_hat (1 - t_hat) / s^2`` (the
    model's trials ``n`` where ``t_hat`` is 0 or 1; at most ``n / MIN_DESIGN_EFFECT``). The
    interval is then Wilson's::

        centre = (t_hat + c^2 / (2 n_eff)) / (1 + c^2 / n_eff)
        half   = c / (1 + c^2 / n_eff) * sqrt(t_hat (1 - t_hat) / n_eff + c^2 / (4 n_eff^2))

    Away from 0 and 1 this is ``t_hat +- c s``: questions that are always or never solved
    narrow it as they narrow ``s``. Near 0 or 1 a Wald interval collapses with ``s`` (a model
    that has solved nothing yet has ``s`` ~ 0) and misses far more often than it says; Wilson's
    takes the variance at the interval's ends instead, and a model with no success yet gets
    the interval of a proportion of 0 on all its trials.

    >>> counts = np.array([[[50.0, 0.0]]])  # 0 of 50: Wilson's upper end, not 0
    >>> design = IntervalDesign(0.95, half_width=0.1)
    >>> out = score_intervals(counts, counts + 1.0, np.array([0.0, 1.0]), design)
    >>> float(out.low[0]), round(float(out.high[0]), 4)  # c^2 / (n + c^2), c = c_K = 2.0055
    (0.0, 0.0745)
    """
    from adaptive_eval.stats.sequential import empirical_estimate

    counts = np.asarray(counts, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    estimate, se = empirical_estimate(counts, nu, w)
    boundary = design.boundary(se, counts.shape[0])
    lo_w, span = float(w.min()), float(w.max() - w.min())
    t_hat = np.clip((estimate - lo_w) / span, 0.0, 1.0)
    s = se / span
    trials = np.maximum(counts.sum(axis=(-1, -2)), 1.0)
    spread = t_hat * (1 - t_hat)
    with np.errstate(divide="ignore", invalid="ignore"):
        effective = np.where((s > 0) & (spread > 0), spread / s**2, trials)
    effective = np.clip(effective, 1.0, trials / MIN_DESIGN_EFFECT)
    finite = np.isfinite(boundary)
    c2 = np.where(finite, boundary, 0.0) ** 2
    centre = (t_hat + c2 / (2 * effective)) / (1 + c2 / effective)
    half = (
        np.sqrt(c2)
        / (1 + c2 / effective)
        * np.sqrt(t_hat * (1 - t_hat) / effective + c2 / (4 * effective**2))
    )
    # At t_hat = 0 (or 1) the near end is exactly 0 (or 1), not centre - half's rounding.
    low = np.where(finite & (t_hat > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
    high = np.where(finite & (t_hat < 1), np.clip(centre + half, 0.0, 1.0), 1.0)
    return ScoreIntervals(estimate, lo_w + span * low, lo_w + span * high, boundary)


def trials_for_width(
    per_trial_variance: FloatArray, num_questions: int, design: IntervalDesign, num_models: int
) -> FloatArray:
    """Trials per question the width goal needs at a per-trial variance, every question alike:
    ``n = I_max v / M`` (``se^2 = v / (M n)``)."""
    information = design.horizon_information(num_models)
    need = information * np.asarray(per_trial_variance, dtype=np.float64) / num_questions
    return np.asarray(np.ceil(need - 1e-9), dtype=np.float64)


def trials_to_reach(
    variance: FloatArray,
    planned: FloatArray,
    se_target: FloatArray | float,
    scheme: str = "neyman",
) -> FloatArray:
    """Fewest further trials per model that bring its standard error to ``se_target``.

    ``variance`` and ``planned`` are (L, M): per-trial variance and trials per question so far.
    With ``se^2 = (1/M^2) sum_q v_q / n_q``, trials are added by water-filling on top of what
    was sampled: ``n_q = max(planned_q, lam a_q)`` with ``a_q = sd_q`` (``neyman``, the
    cheapest) or ``a_q = 1`` (``uniform``: the questions are levelled up), with the smallest
    ``lam`` that reaches the target (bisection). Returns (L,) further trials (0 where the
    planned trials already reach it).

    >>> trials_to_reach(np.array([[0.25, 0.0]]), np.array([[1.0, 1.0]]), 0.25)  # se = 0.25
    array([0.])
    >>> trials_to_reach(np.array([[0.25, 0.25]]), np.array([[1.0, 1.0]]), 0.25)
    array([2.])
    """
    v = np.maximum(np.asarray(variance, dtype=np.float64), 0.0)
    n = np.maximum(np.asarray(planned, dtype=np.float64), 1e-9)
    num_questions = v.shape[-1]
    budget = (np.broadcast_to(np.asarray(se_target, dtype=np.float64), v.shape[:-1])) ** 2
    budget = budget * num_questions**2
    sd = np.sqrt(v) if scheme == "neyman" else np.ones_like(v)

    def excess(lam: FloatArray) -> FloatArray:
        return np.asarray((v / np.maximum(n, lam[:, None] * sd)).sum(axis=-1) - budget)

    low = np.zeros(v.shape[0])
    high = np.ones(v.shape[0])
    while True:
        over = excess(high) > 0
        if not over.any() or high.max() > 1e12:
            break
        high = np.where(over, high * 2, high)
    for _ in range(60):
        mid = (low + high) / 2
        over = excess(mid) > 0
        low, high = np.where(over, mid, low), np.where(over, high, mid)
    reached = excess(np.zeros(v.shape[0])) <= 0
    extra = np.maximum(n, high[:, None] * sd).sum(axis=-1) - n.sum(axis=-1)
    return np.asarray(np.where(reached, 0.0, np.ceil(extra - 1e-9)), dtype=np.float64)


def _fractions() -> tuple[float, ...]:
    return LOOKS.fractions()


@lru_cache(maxsize=64)
def _look_boundaries(alpha: float) -> tuple[float, ...]:
    return LOOKS.boundaries(alpha)


def _anytime_table(alpha: float) -> tuple[FloatArray, FloatArray]:
    """The anytime boundary on a grid of log information from 0 to log(1e9)."""
    weights = (1.0 / len(ANYTIME_PRECISIONS),) * len(ANYTIME_PRECISIONS)
    return mixture_boundary_table(ANYTIME_PRECISIONS, weights, alpha, 0.0, math.log(1e9))


def _anytime_boundary(information: float, alpha: float) -> float:
    if not information > 0:
        return math.inf
    grid, values = _anytime_table(alpha)
    return float(np.interp(math.log(min(information, 1e9)), grid, values))
