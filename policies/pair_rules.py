"""Rules that settle an adjacent pair of the ranking.

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

Not error-controlled, kept for comparison with the paper: ``naive_z`` (alias ``z_rank``) and
``rope`` test the posterior z after every round; the report warns when they are used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from adaptive_eval.policy import CampaignView, PairRule
from adaptive_eval.registry import pair_rules
from adaptive_eval.stats import sequential as seq
from adaptive_eval.stats import z_threshold
from adaptive_eval.types import PairDecision

ERROR_CONTROL = ("pair", "ranking")


@dataclass(frozen=True)
class ZRank:
    """The paper's rule: a > b once z = |mu_a - mu_b| / sqrt(s_a^2 + s_b^2) >= z_c.

    ``z_c = Phi^-1(confidence)``. Checked after every round, the first crossing is an optional
    stopping test whose error rate exceeds ``1 - confidence`` (38% on a true tie at M = 30,
    ``benchmarks/sequential.py``); ``looks`` > 1 applies a Bonferroni bound over that many looks
    (``z_c = Phi^-1(1 - (1 - confidence) / looks)``), valid for up to ``looks`` checks.
    """

    confidence: float | None = None
    looks: int = 1
    name: str = "naive_z"

    @property
    def error_controlled(self) -> bool:
        return self.looks > 1

    def observe(self, view: CampaignView) -> None:
        return None

    def threshold(self, view: CampaignView) -> float:
        confidence = self.confidence if self.confidence is not None else view.confidence
        return float(z_threshold(1 - (1 - confidence) / self.looks))

    def __call__(self, view: CampaignView, a: int, b: int, z: float) -> PairDecision | None:
        threshold = self.threshold(view)
        if z >= threshold:
            a_wins = bool(view.mu[a] >= view.mu[b])
            return PairDecision.resolved(a, b, z, a_wins, self.name, threshold, None, view.round)
        return None


@dataclass(frozen=True)
class Rope:
    """Practical equivalence from the posterior: |mu_a - mu_b| + z_c s <= epsilon, every round.

    Not error-controlled under repeated looks; the error-controlled rules make the same
    decision from their own boundary.
    """

    epsilon: float
    confidence: float | None = None
    name: str = "rope"

    @property
    def error_controlled(self) -> bool:
        return False

    def observe(self, view: CampaignView) -> None:
        return None

    def __call__(self, view: CampaignView, a: int, b: int, z: float) -> PairDecision | None:
        confidence = self.confidence if self.confidence is not None else view.confidence
        spread = float(view.sigma[a] ** 2 + view.sigma[b] ** 2) ** 0.5
        gap = abs(float(view.mu[a] - view.mu[b]))
        threshold = float(z_threshold(confidence))
        if gap + threshold * spread <= self.epsilon:
            return PairDecision.equivalent(a, b, z, self.name, threshold, None, view.round)
        return None


@dataclass(frozen=True)
class _Look:
    resolve: float  # two-sided alpha boundary on |z|
    equivalent: float  # one-sided alpha boundary (TOST)
    spent: float  # error budget spent by this look


@dataclass
class _PairState:
    looks_done: int = 0  # planned looks already used (group-sequential)
    decision: PairDecision | None = None  # kept once made, stated for (lo, hi)
    asked_round: int = -1
    answer: PairDecision | None = None  # what the pair was told in ``asked_round``


@dataclass
class ConfidenceSequenceRule:
    """Shared machinery: per-pair state, the TOST decision, keeping decisions once made."""

    epsilon: float | None = None  # None: the campaign's policy.rope
    error_control: str | None = None  # None: the campaign's policy.error_control
    name: str = "sequential"
    _pairs: dict[tuple[int, int], _PairState] = field(default_factory=dict, repr=False)

    @property
    def error_controlled(self) -> bool:
        return True

    def observe(self, view: CampaignView) -> None:
        return None

    def rope(self, view: CampaignView) -> float | None:
        return self.epsilon if self.epsilon is not None else view.rope

    def alpha(self, view: CampaignView) -> float:
        return view.pair_alpha(self.error_control)

    def look(self, view: CampaignView, state: _PairState, a: int, b: int) -> _Look | None:
        """The boundaries if the pair is tested this round, else ``None``."""
        raise NotImplementedError

    def __call__(self, view: CampaignView, a: int, b: int, z: float) -> PairDecision | None:
        key = (min(a, b), max(a, b))
        state = self._pairs.setdefault(key, _PairState())
        if state.asked_round != view.round:
            state.asked_round = view.round
            state.answer = state.decision or self._test(view, state, *key)
            if state.decision is None:
                state.decision = state.answer
        answer = state.answer
        if answer is None:
            return None
        return answer if (answer.a, answer.b) == (a, b) else answer.swapped()

    def _test(self, view: CampaignView, state: _PairState, a: int, b: int) -> PairDecision | None:
        tested = self.look(view, state, a, b)
        if tested is None:
            return None
        gap, spread = view.pair_stat(a, b)
        if spread <= 0:
            return None
        z = abs(gap) / spread
        if z >= tested.resolve:
            return PairDecision.resolved(
                a, b, z, gap > 0, self.name, tested.resolve, tested.spent, view.round
            )
        epsilon = self.rope(view)
        if epsilon is not None and abs(gap) + tested.equivalent * spread < epsilon:
            return PairDecision.equivalent(
                a, b, z, self.name, tested.equivalent, tested.spent, view.round
            )
        return None


@dataclass
class Anytime(ConfidenceSequenceRule):
    """Anytime-valid confidence sequence: a mixture of normal mixtures, checked every round.

    Half the weight sits on the mixing precision that is tightest at ``tuned_sd`` (default
    ``epsilon / 6``, where a pair at ``epsilon / 2`` is decided; 0.005 without a rope), the
    rest on ``grid`` precisions 4x apart below it, so pairs with large differences are settled
    early too (:func:`adaptive_eval.stats.sequential.mixture_grid_boundary`).
    """

    tuned_sd: float | None = None
    grid: int = 8
    name: str = "anytime"
    _rho: dict[float, float] = field(default_factory=dict, repr=False)
    _tables: dict[float, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def sd_target(self, view: CampaignView) -> float:
        if self.tuned_sd is not None:
            return self.tuned_sd
        epsilon = self.rope(view)
        return epsilon / 6 if epsilon else 0.005

    def look(self, view: CampaignView, state: _PairState, a: int, b: int) -> _Look | None:
        alpha = self.alpha(view)
        _, spread = view.pair_stat(a, b)
        if spread <= 0:
            return None
        log_info = -2 * math.log(spread)
        resolve = float(np.interp(log_info, *self.table(view, alpha)))
        equivalent = float(np.interp(log_info, *self.table(view, 2 * alpha)))
        return _Look(resolve, equivalent, alpha)

    def table(self, view: CampaignView, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """The boundary on a fine grid of log information (computed once per budget).

        Each grid value is rounded up at the 4th decimal and the grid is fine enough
        (0.02 in log I) that interpolating between two nodes stays on the safe side of the
        exact root to well within that margin.
        """
        if alpha not in self._tables:
            rhos, weights = self.mixture(view, alpha)
            center = math.log(rhos[0])
            grid = np.arange(center - 25.0, center + 25.0, 0.02)
            values = [seq.mixture_grid_boundary(math.exp(g), alpha, rhos, weights) for g in grid]
            self._tables[alpha] = (grid, np.ceil(np.asarray(values) * 1e4) / 1e4 + 1e-4)
        return self._tables[alpha]

    def mixture(
        self, view: CampaignView, alpha: float
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        if alpha not in self._rho:
            self._rho[alpha] = seq.mixture_rho(1 / self.sd_target(view) ** 2, alpha)
        top = self._rho[alpha]
        rhos = tuple(top / 4**j for j in range(self.grid))
        rest = 0.5 / max(1, self.grid - 1)
        weights = (1.0 if self.grid == 1 else 0.5,) + (rest,) * (self.grid - 1)
        return rhos, weights


@dataclass
class GroupSequential(ConfidenceSequenceRule):
    """Lan-DeMets alpha spending over the information fraction, the cap as the horizon.

    The pair's information fraction is ``t = s_cap^2 / s^2``: the variance its difference would
    have with both models at ``max_trials_per_question`` on every question, over the variance
    now (``n / N_cap`` with equal counts). Looks are planned at ``looks`` fractions spaced
    geometrically from ``first_look`` to 1; a pair is tested once per look, on the first round
    its fraction reaches it (looks skipped in one jump spend nothing, which is conservative).
    """

    spending: str = "hsd"
    looks: int = 12
    first_look: float = 1 / 64
    gamma: float = -4.0
    name: str = "group_sequential"

    def fractions(self) -> tuple[float, ...]:
        return _fractions(self.looks, self.first_look)

    def information_fraction(self, view: CampaignView, a: int, b: int) -> float:
        variance = view.cell_variance
        _, spread = view.pair_stat(a, b)
        if variance is None or spread <= 0:
            return 0.0
        m = variance.shape[1]
        capped = (
            variance[a].sum() / view.capacity[a] + variance[b].sum() / view.capacity[b]
        ) / m**2
        return float(capped / spread**2)

    def look(self, view: CampaignView, state: _PairState, a: int, b: int) -> _Look | None:
        fractions = self.fractions()
        reached = int(np.searchsorted(fractions, self.information_fraction(view, a, b) + 1e-9))
        if reached <= state.looks_done:
            return None
        state.looks_done = reached
        alpha = self.alpha(view)
        resolve = seq.spending_boundaries(fractions, alpha, self.spending, self.gamma)
        equivalent = seq.spending_boundaries(fractions, 2 * alpha, self.spending, self.gamma)
        spent = float(seq.spent_alpha(fractions[reached - 1], alpha, self.spending, self.gamma))
        return _Look(resolve[reached - 1], equivalent[reached - 1], spent)


@lru_cache(maxsize=32)
def _fractions(looks: int, first_look: float) -> tuple[float, ...]:
    return seq.look_fractions(looks, first_look)


def _check_common(epsilon: float | None, error_control: str | None) -> None:
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
    if error_control is not None and error_control not in ERROR_CONTROL:
        raise ValueError(f"error_control must be one of {ERROR_CONTROL}, got {error_control!r}")


@pair_rules.register("group_sequential")
def group_sequential(
    spending: str = "hsd",
    looks: int = 12,
    first_look: float = 1 / 64,
    gamma: float = -4.0,
    epsilon: float | None = None,
    error_control: str | None = None,
) -> PairRule:
    _check_common(epsilon, error_control)
    if spending not in seq.SPENDING_FUNCTIONS:
        raise ValueError(f"spending must be one of {seq.SPENDING_FUNCTIONS}, got {spending!r}")
    if not isinstance(looks, int) or not 1 <= looks <= 64:
        raise ValueError(f"looks must be an integer in 1..64, got {looks!r}")
    if not 0 < first_look <= 1:
        raise ValueError(f"first_look must be in (0, 1], got {first_look}")
    if not (math.isfinite(gamma) and gamma != 0):
        raise ValueError(f"gamma must be a finite non-zero number, got {gamma}")
    return GroupSequential(
        epsilon, error_control, spending=spending, looks=looks, first_look=first_look, gamma=gamma
    )


@pair_rules.register("anytime")
def anytime(
    tuned_sd: float | None = None,
    grid: int = 8,
    epsilon: float | None = None,
    error_control: str | None = None,
) -> PairRule:
    _check_common(epsilon, error_control)
    if tuned_sd is not None and not (math.isfinite(tuned_sd) and tuned_sd > 0):
        raise ValueError(f"tuned_sd must be > 0, got {tuned_sd}")
    if not isinstance(grid, int) or not 1 <= grid <= 32:
        raise ValueError(f"grid must be an integer in 1..32, got {grid!r}")
    return Anytime(epsilon, error_control, tuned_sd=tuned_sd, grid=grid)


def _naive(confidence: float | None, looks: int, name: str) -> PairRule:
    if confidence is not None and not 0.5 < confidence < 1:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    return ZRank(confidence, looks, name)


@pair_rules.register("naive_z")
def naive_z(confidence: float | None = None, looks: int = 1) -> PairRule:
    return _naive(confidence, looks, "naive_z")


@pair_rules.register("z_rank")
def z_rank(confidence: float | None = None, looks: int = 1) -> PairRule:
    return _naive(confidence, looks, "z_rank")


@pair_rules.register("rope")
def rope(epsilon: float, confidence: float | None = None) -> PairRule:
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    return Rope(epsilon, confidence)
