"""Rules that settle an adjacent pair of the ranking.

One concept, kept whole (~510 lines): the pair rules share one state machine per pair
(:class:`ConfidenceSequenceRule`); each rule is a short subclass of it.

Error-controlled (the default, ``group_sequential``; and ``anytime``): confidence sequences
``D +- c s`` on the difference of the unbiased decision scores (see
:mod:`adaptive_eval.stats.sequential`), valid however many rounds are looked at. With the pair's
error budget ``alpha`` (``1 - confidence``, divided by the L - 1 slots under
``error_control: ranking``):

* ``a > b`` when ``D - c s > 0`` with ``c`` the two-sided ``alpha`` boundary: on a true tie
  either direction is wrong, and each side misses with probability ``alpha / 2``;
* equivalent when ``|D| + c' s < epsilon`` (TOST) with ``c'`` the one-sided ``alpha`` boundary
  (the two-sided ``2 alpha`` one). A wrong "equivalent" (``|Delta| >= epsilon``) and a wrong
  direction both need the same side of the ``c'`` sequence to miss, so every error of the pair
  stays within ``alpha``.

A decision, once made, is kept (the sequential test stopped).

Two refinements make the rules cheaper without touching their error guarantee:

* **Step-down** (``step_down``, default on; only under ``error_control: ranking``): Bonferroni
  over the L - 1 adjacent slots keeps the budget of settled pairs locked away. Holm's step-down
  hands it to the open pairs: with ``k`` adjacent pairs settled, each open pair is tested at
  ``alpha / (L - 1 - k)`` (:func:`adaptive_eval.stats.sequential.holm_alpha`). The boundaries
  grow monotonically smaller in ``alpha``, so a pair first crosses a true null's boundary only
  while every true null is still open (Bartroff & Song 2014's sequential Holm argument).
* **Futility** (``policy.futility``, default 0.2): a pair whose predictive probability of being
  settled by the cap is below the threshold is reported undecided with the trials per question it
  would need, and draws no more trials for its own sake. Non-binding: it is still tested at
  every look on whatever data other pairs bring, and it keeps its error budget (it is not a
  rejection), so the guarantee is unchanged.

Not error-controlled, kept for comparison with the paper: ``naive_z`` (alias ``z_rank``) and
``rope`` test the posterior z after every round; the report warns when they are used.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from adaptive_eval.base.types import PairDecision
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.decide.contracts import (
    NO_MEMORY,
    CampaignView,
    MemorylessRule,
    PairMemory,
    RuleMemory,
    oriented,
    pair_key,
)
from adaptive_eval.stats import sequential as seq
from adaptive_eval.stats import z_threshold

#: A pair rule's own confidence (None: the campaign's ``policy.confidence``).
Confidence = Annotated[float | None, Field(gt=0.5, lt=1)]
#: A futility threshold is a probability in [0, 0.5) (0 turns futility stops off; None: the
#: campaign's ``policy.futility``).
Futility = Annotated[float | None, Field(ge=0, lt=0.5)]


@pair_rules.register("z_rank")
@pair_rules.register("naive_z")
@dataclass(frozen=True)
class ZRank(MemorylessRule):
    """The paper's rule: a > b once z = |mu_a - mu_b| / sqrt(s_a^2 + s_b^2) >= z_c.

    ``z_c = Phi^-1(confidence)``. Checked after every round, the first crossing is an optional
    stopping test whose error rate exceeds ``1 - confidence`` (0.44-0.49 on a true tie at
    M = 30, ``benchmarks/sequential.py``, docs/benchmarks.md); ``looks`` > 1 applies a
    Bonferroni bound over that many looks (``z_c = Phi^-1(1 - (1 - confidence) / looks)``),
    valid for up to ``looks`` checks.
    """

    confidence: Confidence = None
    looks: Annotated[int, Field(ge=1)] = 1
    name: str = "naive_z"

    @property
    def error_controlled(self) -> bool:
        return self.looks > 1

    def threshold(self, view: CampaignView) -> float:
        confidence = self.confidence if self.confidence is not None else view.confidence
        return float(z_threshold(1 - (1 - confidence) / self.looks))

    def decide(self, view: CampaignView, a: int, b: int) -> PairDecision | None:
        threshold = self.threshold(view)
        z = view.pair_z(a, b)  # the paper's rule tests the posterior z, not the estimate's
        if z >= threshold:
            a_wins = bool(view.mu[a] >= view.mu[b])
            return PairDecision.resolved(a, b, z, a_wins, self.name, threshold, None, view.round)
        return None


@pair_rules.register("rope")
@dataclass(frozen=True)
class Rope(MemorylessRule):
    """Practical equivalence from the posterior: |mu_a - mu_b| + z_c s <= epsilon, every round.

    Not error-controlled under repeated looks; the error-controlled rules make the same
    decision from their own boundary.
    """

    epsilon: Annotated[float, Field(ge=0)]
    confidence: Confidence = None
    name: str = "rope"

    @property
    def error_controlled(self) -> bool:
        return False

    def decide(self, view: CampaignView, a: int, b: int) -> PairDecision | None:
        confidence = self.confidence if self.confidence is not None else view.confidence
        spread = float(view.sigma[a] ** 2 + view.sigma[b] ** 2) ** 0.5
        gap = abs(float(view.mu[a] - view.mu[b]))
        threshold = float(z_threshold(confidence))
        if gap + threshold * spread <= self.epsilon:
            estimate_gap, estimate_spread = view.pair_stat(a, b)
            z = abs(estimate_gap) / estimate_spread if estimate_spread > 0 else 0.0
            return PairDecision.equivalent(a, b, z, self.name, threshold, None, view.round)
        return None


@dataclass(frozen=True)
class _Look:
    resolve: float  # two-sided alpha boundary on |z|
    equivalent: float  # one-sided alpha boundary (TOST)
    spent: float  # error budget spent by this look


@dataclass(frozen=True)
class ConfidenceSequenceRule:
    """Shared machinery: the per-pair memory, the TOST decision, keeping decisions once made,
    Holm's step-down budget and the futility check."""

    epsilon: Annotated[float | None, Field(ge=0)] = None  # None: the campaign's policy.rope
    #: None: the campaign's policy.error_control
    error_control: Literal["pair", "ranking"] | None = None
    step_down: bool = True
    futility: Futility = None
    #: No futility stop before both models average this many trials per question: the
    #: Gaussian projection to the cap is not to be trusted on a handful of trials.
    futility_trials: Annotated[int, Field(ge=0)] = 8
    #: The resolve test's variance inflation: a pair is ordered when ``|D| >= c s sqrt(v)``
    #: (``stats.sequential.VARIANCE_INFLATION`` for ``group_sequential``, chosen by
    #: measurement; 1 for ``anytime``, not measured with it). The equivalence test keeps ``s``.
    inflation: Annotated[float, Field(ge=1, le=4)] = 1.0
    #: The futility threshold grows with the pair's information fraction ``t = s_cap^2 / s^2``:
    #: a pair is futile below ``futility (1 + futility_growth t)`` (0: the threshold stays
    #: ``futility``). Non-binding like the threshold itself: it only drops pairs.
    futility_growth: Annotated[float, Field(ge=0, le=4)] = 0.0
    name: str = "sequential"

    @property
    def error_controlled(self) -> bool:
        return True

    @property
    def widen(self) -> float:
        return math.sqrt(self.inflation)

    def level(self, view: CampaignView, memory: RuleMemory) -> float:
        """An open pair's error budget this round: ``view.pair_alpha``, or Holm's level where
        the adjacent pairs already settled (in ``memory``) free their budget."""
        control = self.error_control or view.error_control
        if not (self.step_down and control == "ranking" and view.num_models > 2):
            return view.pair_alpha(self.error_control)
        order = view.order.tolist()
        settled = sum(
            1
            for a, b in itertools.pairwise(order)
            if (known := memory.get(pair_key(a, b))) is not None and known.decision is not None
        )
        return seq.holm_alpha(1.0 - view.confidence, view.num_models - 1, settled)

    def rope(self, view: CampaignView) -> float | None:
        return self.epsilon if self.epsilon is not None else view.rope

    def look(
        self, view: CampaignView, known: PairMemory, a: int, b: int, alpha: float, spread: float
    ) -> tuple[_Look | None, PairMemory]:
        """The boundaries if the pair is tested this round (else ``None``), and its memory
        after the look. ``spread``: the pair's standard error ``s`` this round (> 0; the
        caller has it from :meth:`CampaignView.pair_stat`)."""
        raise NotImplementedError

    def final(
        self, view: CampaignView, a: int, b: int, memory: RuleMemory = NO_MEMORY
    ) -> tuple[float, float]:
        """The (resolve, equivalent) boundaries on ``|z|`` with both models at the cap (the
        resolve one widened by the inflation)."""
        resolve, equivalent = self.final_at(view, a, b, self.level(view, memory))
        return resolve * self.widen, equivalent

    def final_at(self, view: CampaignView, a: int, b: int, alpha: float) -> tuple[float, float]:
        raise NotImplementedError

    def settle(
        self, view: CampaignView, pairs: Sequence[tuple[int, int]], memory: RuleMemory
    ) -> tuple[tuple[PairDecision | None, ...], RuleMemory]:
        """Test each pair not yet decided at this round's level; a decision, once made, is
        kept in the memory (the sequential test stopped)."""
        alpha = self.level(view, memory)
        remembered = dict(memory)
        answers = []
        keys = [pair_key(a, b) for a, b in pairs]
        gaps, spreads = pair_statistics(view, keys)
        for (a, b), key, gap, spread in zip(pairs, keys, gaps, spreads, strict=True):
            known = remembered.get(key, PairMemory())
            answer = known.decision
            if answer is None:
                answer, known = self._test(view, known, *key, alpha, gap, spread)
                if answer is not None and answer.settled:
                    known = replace(known, decision=answer)
                remembered[key] = known
            answers.append(oriented(answer, a, b))
        return tuple(answers), MappingProxyType(remembered)

    def _test(
        self,
        view: CampaignView,
        known: PairMemory,
        a: int,
        b: int,
        alpha: float,
        gap: float,
        spread: float,
    ) -> tuple[PairDecision | None, PairMemory]:
        """Test the pair (a, b) at level ``alpha`` on its ``(D, s) = (gap, spread)``."""
        if spread <= 0:
            return None, known
        tested, known = self.look(view, known, a, b, alpha, spread)
        z = abs(gap) / spread
        epsilon = self.rope(view)
        if tested is not None and z >= tested.resolve * self.widen:
            boundary = tested.resolve * self.widen
            return PairDecision.resolved(
                a, b, z, gap > 0, self.name, boundary, tested.spent, view.round
            ), known
        if (
            tested is not None
            and epsilon is not None
            and abs(gap) + tested.equivalent * spread < epsilon
        ):
            return PairDecision.equivalent(
                a, b, z, self.name, tested.equivalent, tested.spent, view.round
            ), known
        return self._futile(view, a, b, gap, spread, alpha), known

    def _futile(
        self, view: CampaignView, a: int, b: int, gap: float, spread: float, alpha: float
    ) -> PairDecision | None:
        """A hopeless pair as an undecided decision with the trials it would need, else None."""
        threshold = self.futility if self.futility is not None else view.futility
        spread_cap = capped_se(view, a, b)
        if threshold <= 0 or spread_cap is None or spread_cap >= spread:
            return None
        threshold *= 1.0 + self.futility_growth * spread_cap**2 / spread**2
        per_model = view.trials_per_question()
        if min(per_model[a], per_model[b]) < self.futility_trials:
            return None
        resolve, equivalent = self.final_at(view, a, b, alpha)
        resolve *= self.widen
        epsilon = self.rope(view)
        chance = seq.settle_probability(gap, spread, spread_cap, resolve, equivalent, epsilon)
        if chance >= threshold:
            return None
        per_question = float(per_model[a] + per_model[b]) / 2
        need = seq.trials_to_settle(gap, spread, per_question, resolve, equivalent, epsilon)
        return PairDecision.hopeless(
            a,
            b,
            abs(gap) / spread,
            self.name,
            need if math.isfinite(need) else None,
        )


def pair_statistics(
    view: CampaignView, pairs: Sequence[tuple[int, int]]
) -> tuple[list[float], list[float]]:
    """:meth:`CampaignView.pair_stat` of each pair, ``(D, s)``, for all the pairs at once:
    the same differences of the decision scores and ``np.hypot`` of the same standard errors,
    elementwise (one array operation each instead of a few scalar ones per pair)."""
    index = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    theta, se = view.theta, view.theta_se
    gaps = theta[index[:, 0]] - theta[index[:, 1]]
    spreads = np.hypot(se[index[:, 0]], se[index[:, 1]])
    return gaps.tolist(), spreads.tolist()


def capped_se(view: CampaignView, a: int, b: int) -> float | None:
    """Standard error of the pair's difference with both models at their cap on every question
    (``None`` when the per-cell variances are unknown)."""
    capped = view.capped_variance()
    if capped is None:
        return None
    return math.sqrt(float(capped[a]) + float(capped[b]))


@pair_rules.register("anytime", internal=("futility_trials", "inflation", "futility_growth"))
@dataclass(frozen=True)
class Anytime(ConfidenceSequenceRule):
    """Anytime-valid confidence sequence: a mixture of normal mixtures, checked every round.

    Half the weight sits on the mixing precision that is tightest at ``tuned_sd`` (default
    ``epsilon / 6``, where a pair at ``epsilon / 2`` is decided; 0.005 without a rope), the
    rest on ``grid`` precisions 4x apart below it, so pairs with large differences are settled
    early too (:func:`adaptive_eval.stats.sequential.mixture_grid_boundary`).
    """

    tuned_sd: Annotated[float | None, Field(gt=0)] = None
    grid: Annotated[int, Field(ge=1, le=32)] = 8
    name: str = "anytime"

    def sd_target(self, view: CampaignView) -> float:
        if self.tuned_sd is not None:
            return self.tuned_sd
        epsilon = self.rope(view)
        return epsilon / 6 if epsilon else 0.005

    def look(
        self, view: CampaignView, known: PairMemory, a: int, b: int, alpha: float, spread: float
    ) -> tuple[_Look | None, PairMemory]:
        if spread <= 0:
            return None, known
        log_info = -2 * math.log(spread)
        resolve = float(np.interp(log_info, *self.table(view, alpha)))
        equivalent = float(np.interp(log_info, *self.table(view, 2 * alpha)))
        return _Look(resolve, equivalent, alpha), known

    def final_at(self, view: CampaignView, a: int, b: int, alpha: float) -> tuple[float, float]:
        spread_cap = capped_se(view, a, b)
        if spread_cap is None or spread_cap <= 0:
            return math.inf, math.inf
        log_info = -2 * math.log(spread_cap)
        resolve = float(np.interp(log_info, *self.table(view, alpha)))
        return resolve, float(np.interp(log_info, *self.table(view, 2 * alpha)))

    def table(self, view: CampaignView, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """The boundary on a fine grid of log information (:func:`anytime_table`)."""
        return anytime_table(self.sd_target(view), alpha, self.grid)


@lru_cache(maxsize=64)
def anytime_table(sd_target: float, alpha: float, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """The anytime boundary on log information, 25 either side of its tightest precision.

    Half the mixture's weight sits on the precision tightest at ``sd_target``, the rest on
    ``grid - 1`` precisions 4x apart below it
    (:func:`adaptive_eval.stats.sequential.mixture_boundary_table`).
    """
    top = seq.mixture_rho(1 / sd_target**2, alpha)
    rhos = tuple(top / 4**j for j in range(grid))
    rest = 0.5 / max(1, grid - 1)
    weights = (1.0 if grid == 1 else 0.5,) + (rest,) * (grid - 1)
    center = math.log(rhos[0])
    return seq.mixture_boundary_table(rhos, weights, alpha, center - 25.0, center + 25.0)


def looks_reached(fractions: tuple[float, ...], fraction: float) -> int:
    """How many of the planned look ``fractions`` (increasing) lie below ``fraction``:
    ``np.searchsorted(fractions, fraction)`` (NaN counts as above every look, as numpy sorts
    it), by bisection on the tuple (a numpy call costs more than the search)."""
    if math.isnan(fraction):
        return len(fractions)
    return bisect.bisect_left(fractions, fraction)


@lru_cache(maxsize=256)
def horizon_shares(
    horizons: int, ratio: float, cap_share: float, shortest: int, cap: float
) -> tuple[float, ...]:
    """Budget share of each of ``horizons`` tests, the cap's first, for a pair capped at
    ``cap`` trials per question: horizon ``j`` (``cap / ratio^j`` trials) is used if it holds
    at least ``shortest``; the cap's test holds ``cap_share`` and the used ones split the rest
    (all of it the cap's where none is used). Asked twice per pair per round, hence cached."""
    used = sum(1 for j in range(1, horizons) if cap / ratio**j >= shortest)
    if used == 0:
        return (1.0,)
    rest = (1.0 - cap_share) / used
    return (cap_share,) + (rest,) * used


@lru_cache(maxsize=1024)
def look_boundaries(
    design: seq.LookDesign, alpha: float
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(resolve, equivalent) boundaries at every look of ``design`` for a budget ``alpha``:
    the two-sided ``alpha`` boundary and the one-sided one (two-sided ``2 alpha``). The
    tables are cached by :func:`adaptive_eval.stats.sequential.spending_boundaries`; this
    cache saves looking them up through the design, twice per pair per round."""
    return design.boundaries(alpha), design.boundaries(2 * alpha)


@pair_rules.register("group_sequential")
@dataclass(frozen=True)
class GroupSequential(ConfidenceSequenceRule):
    """Lan-DeMets alpha spending over the information fraction, the cap as the horizon.

    The pair's information fraction is ``t = s_cap^2 / s^2``: the variance its difference would
    have with both models at ``max_trials_per_question`` on every question, over the variance
    now (``n / N_cap`` with equal counts). Looks are planned at ``looks`` fractions spaced
    geometrically from ``first_look`` to 1; a pair is tested once per look, on the first round
    its fraction reaches it (looks skipped in one jump spend nothing, which is conservative).

    ``horizons > 1`` runs that many such tests side by side on the same data, with horizons
    ``ratio^-j`` of the cap's information (``j = 0 .. horizons - 1``), the cap's test holding
    ``cap_share`` of the budget and the shorter ones splitting the rest; a pair is decided when
    any of them crosses. Each test is valid on its own and the budgets add up to the pair's
    (a union bound), so a pair that settles at a tenth of the cap meets a boundary designed for
    that horizon instead of the cap's O'Brien-Fleming-like early boundary. A shorter horizon is
    used only if it holds at least ``shortest`` trials per question (at the pair's smaller
    cap); with none left the cap's test keeps the whole budget. Which horizons a pair has is
    fixed by the caps before any trial, so the union bound holds.
    """

    spending: seq.Spending = seq.DEFAULT_LOOKS.spending
    looks: Annotated[int, Field(ge=1, le=64)] = seq.DEFAULT_LOOKS.looks
    first_look: Annotated[float, Field(gt=0, le=1)] = seq.DEFAULT_LOOKS.first_look
    gamma: float = seq.DEFAULT_LOOKS.gamma  # finite, non-zero
    horizons: Annotated[int, Field(ge=1, le=8)] = 3
    ratio: Annotated[float, Field(gt=1)] = 4.0
    cap_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    shortest: Annotated[int, Field(ge=1)] = 16
    inflation: Annotated[float, Field(ge=1, le=4)] = seq.VARIANCE_INFLATION
    name: str = "group_sequential"

    def __post_init__(self) -> None:
        if self.gamma == 0:
            raise ValueError("gamma must be a finite non-zero number, got 0")
        if self.horizons > 1 and self.cap_share == 1:
            raise ValueError(
                "cap_share must be below 1 when horizons > 1 (no budget left for them)"
            )

    @cached_property
    def design(self) -> seq.LookDesign:
        """The rule's looks and spending as one value (boundaries, fingerprint, docs)."""
        return seq.LookDesign(self.looks, self.first_look, self.spending, self.gamma)

    @cached_property
    def _fraction_tuple(self) -> tuple[float, ...]:
        return self.design.fractions()

    def fractions(self) -> tuple[float, ...]:
        return self._fraction_tuple

    def shares(self, cap: float = math.inf) -> tuple[float, ...]:
        """Budget share of each horizon, the cap's first, for a pair capped at ``cap`` trials
        per question (shorter horizons below ``shortest`` trials are not used)."""
        return horizon_shares(self.horizons, self.ratio, self.cap_share, self.shortest, cap)

    def pair_shares(self, view: CampaignView, a: int, b: int) -> tuple[float, ...]:
        return self.shares(float(min(view.capacity[a], view.capacity[b])))

    def information_fraction(
        self, view: CampaignView, a: int, b: int, spread: float | None = None
    ) -> float:
        """``s_cap^2 / s^2`` (``spread``: ``s`` where the caller has it)."""
        if spread is None:
            _, spread = view.pair_stat(a, b)
        spread_cap = capped_se(view, a, b)
        if spread_cap is None or spread <= 0:
            return 0.0
        return float(spread_cap**2 / spread**2)

    def boundaries(self, alpha: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(resolve, equivalent) boundaries at every planned look for a budget ``alpha``."""
        return look_boundaries(self.design, alpha)

    def final_at(self, view: CampaignView, a: int, b: int, alpha: float) -> tuple[float, float]:
        resolve, equivalent = self.boundaries(alpha * self.pair_shares(view, a, b)[0])
        return resolve[-1], equivalent[-1]

    def look(
        self, view: CampaignView, known: PairMemory, a: int, b: int, alpha: float, spread: float
    ) -> tuple[_Look | None, PairMemory]:
        """Each horizon's test looks once per planned look its information fraction reached
        (``known.looks``: the looks used so far, per horizon)."""
        fractions = self.fractions()
        fraction = self.information_fraction(view, a, b, spread)
        shares = self.pair_shares(view, a, b)
        looks = list(known.looks) + [0] * (len(shares) - len(known.looks))
        found: list[_Look] = []
        for horizon, share in enumerate(shares):
            reached = looks_reached(fractions, fraction * self.ratio**horizon + 1e-9)
            if reached <= looks[horizon]:
                continue
            looks[horizon] = reached
            resolve, equivalent = self.boundaries(alpha * share)
            spent = self.design.spent(fractions[reached - 1], alpha * share)
            found.append(_Look(resolve[reached - 1], equivalent[reached - 1], spent))
        known = PairMemory(tuple(looks), known.decision)
        if not found:
            return None, known
        return _Look(
            min(f.resolve for f in found),
            min(f.equivalent for f in found),
            sum(f.spent for f in found),
        ), known
