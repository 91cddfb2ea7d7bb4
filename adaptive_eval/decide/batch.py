"""Many simulated continuations of one campaign at once: the evidence of ``S`` runs as arrays
with a leading simulation axis, and the batched forms of the plan helpers.

The forecast runs the campaign's decision core forward on tens to hundreds of simulated truths
(:mod:`adaptive_eval.forecast.batched`). One continuation at a time, a round of a 12-model
campaign costs about a millisecond of Python and numpy call overhead on arrays of a few hundred
numbers; advanced together, the same numpy calls serve every continuation. What changes is only
the shape: every statistic here is the one :class:`~adaptive_eval.decide.state.RunState` and
:class:`~adaptive_eval.decide.contracts.CampaignView` compute, on (S, L, M, K) arrays instead of
(L, M, K), reduced along the same axes in the same order (``tests/test_batched_core.py`` checks
the two equal, path for path).

Decisions are per *slot*: slot ``p`` of a simulation is its ``p``-th adjacent pair in its own
ordering (best first), ``(order[p], order[p + 1])``, as :func:`~adaptive_eval.decide.contracts.
adjacent_pairs` lists them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from adaptive_eval.decide.state import RunState, ViewSettings
from adaptive_eval.stats import sequential

#: A slot's state after a look: still to be settled, settled (resolved or equivalent), or
#: futile (undecided and not worth trials of its own: :attr:`PairDecision.open` is false).
OPEN, SETTLED, FUTILE = 0, 1, 2


@dataclass(frozen=True)
class BatchSettings:
    """What every view of the campaign carries besides the evidence (as :class:`~adaptive_eval.
    decide.state.ViewSettings`), with the prior and rubric weights."""

    capacity: np.ndarray  # (L,)
    confidence: float
    min_trials: int
    rope: float | None
    error_control: str
    futility: float
    prior: np.ndarray  # (L, M, K) Dirichlet counts of the uniform prior plus prior trials
    weights: np.ndarray  # (K,)
    pooled_variance: bool = True

    @classmethod
    def of(cls, view: ViewSettings, prior: np.ndarray, weights: np.ndarray) -> BatchSettings:
        return cls(
            view.capacity,
            view.confidence,
            view.min_trials,
            view.rope,
            view.error_control,
            view.futility,
            prior,
            weights,
        )

    @property
    def num_models(self) -> int:
        return int(self.capacity.shape[0])

    def pair_alpha(self, error_control: str | None = None) -> float:
        """:meth:`CampaignView.pair_alpha`: ``1 - confidence``, split over the L - 1 slots of the
        ranking under ``ranking`` control."""
        alpha = 1.0 - self.confidence
        if (error_control or self.error_control) == "ranking":
            alpha /= max(1, self.num_models - 1)
        return alpha


@dataclass(frozen=True)
class BatchView:
    """The evidence of ``S`` continuations after their latest applied round: (S, L, M, K)
    counts, (S, L, M) trials and planned trials, the decision scores; what the rules read
    beyond that is computed on first use, as :class:`CampaignView` does."""

    settings: BatchSettings
    counts: np.ndarray  # (S, L, M, K) float64, whole numbers
    trials: np.ndarray  # (S, L, M)
    planned: np.ndarray  # (S, L, M)
    theta: np.ndarray  # (S, L) unbiased decision score
    theta_se: np.ndarray  # (S, L)
    cell_variance: np.ndarray  # (S, L, M) per-trial variance (pooled target)
    tokens_sum: np.ndarray  # (S, L, M)
    tokens_count: np.ndarray  # (S, L, M)
    gpu_s_sum: np.ndarray  # (S, L, M)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def num_sims(self) -> int:
        return int(self.counts.shape[0])

    @property
    def num_models(self) -> int:
        return int(self.counts.shape[1])

    @property
    def num_questions(self) -> int:
        return int(self.counts.shape[2])

    @property
    def capacity(self) -> np.ndarray:
        return self.settings.capacity

    def _cached(self, key: str, make: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    @property
    def order(self) -> np.ndarray:
        """(S, L) model indices by decision score, best first (stable for exact ties)."""
        found: np.ndarray = self._cached(
            "order", lambda: np.argsort(-self.theta, axis=1, kind="stable")
        )
        return found

    def adjacent(self) -> np.ndarray:
        """(S, L - 1, 2) each simulation's adjacent pairs, best first."""
        order = self.order
        found: np.ndarray = np.stack([order[:, :-1], order[:, 1:]], axis=2)
        return found

    def below_min(self) -> np.ndarray:
        """(S, L) models with a question below ``min_trials``."""
        found: np.ndarray = self._cached(
            "below_min", lambda: self.trials.min(axis=2) < self.settings.min_trials
        )
        return found

    def trials_per_question(self) -> np.ndarray:
        """(S, L) each model's mean applied trials per question."""
        found: np.ndarray = self._cached("per_question", lambda: self.trials.mean(axis=2))
        return found

    def capped_variance(self) -> np.ndarray:
        """(S, L) :meth:`CampaignView.capped_variance`: ``sum_q v_q / (cap M^2)``."""

        def make() -> np.ndarray:
            m = self.num_questions
            found: np.ndarray = self.cell_variance.sum(axis=2) / self.capacity / m**2
            return found

        capped: np.ndarray = self._cached("capped", make)
        return capped

    def cell_costs(self, cost: str) -> np.ndarray | None:
        """(S, L, M) mean observed cost of one trial per cell (NaN where unknown), as the
        view's ``cell_tokens`` / ``cell_gpu_s``; ``None`` for ``trials``."""
        if cost == "tokens":
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(
                    self.tokens_count > 0,
                    self.tokens_sum / np.maximum(self.tokens_count, 1),
                    np.nan,
                )
        if cost == "gpu_s":
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(
                    self.trials > 0, self.gpu_s_sum / np.maximum(self.trials, 1), np.nan
                )
        return None


class BatchState:
    """The applied evidence of ``S`` continuations (the batched :class:`RunState`), with each
    one's rounds in flight: ``queue[s, j]`` is simulation ``s``'s ``j``-th planned round not
    yet applied, ``queued[s]`` how many it has."""

    def __init__(
        self,
        settings: BatchSettings,
        counts: np.ndarray,
        trials: np.ndarray,
        planned: np.ndarray,
        tokens_sum: np.ndarray,
        tokens_count: np.ndarray,
        gpu_s_sum: np.ndarray,
        queue: np.ndarray,
        queued: np.ndarray,
        rounds: np.ndarray,
    ) -> None:
        self.settings = settings
        self.counts = counts
        self.trials = trials
        self.planned = planned
        self.tokens_sum = tokens_sum
        self.tokens_count = tokens_count
        self.gpu_s_sum = gpu_s_sum
        self.queue = queue  # (S, R, L, M)
        self.queued = queued  # (S,)
        self.rounds = rounds  # (S,) applied rounds
        #: Each model's decision score, its standard error and per-trial variances, kept from
        #: the last view; ``stale`` marks the (simulation, model) rows a round changed since.
        #: The statistics of a model depend on its own counts alone, so a round recomputes
        #: only the rows it sampled (a third of them, typically, late in a campaign).
        self._estimate: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._stale = np.ones(counts.shape[:2], dtype=bool)

    @classmethod
    def repeat(cls, settings: BatchSettings, state: RunState, depth: int, sims: int) -> BatchState:
        """``sims`` copies of one run's ``state`` (its evidence and its planned rounds not yet
        applied, oldest first), with room for ``depth`` rounds in flight."""

        def copies(array: np.ndarray, dtype: type) -> np.ndarray:
            return np.repeat(array.astype(dtype)[None], sims, axis=0)

        in_flight = state.plans[state.applied_rounds :]
        queue = np.zeros((sims, max(depth, len(in_flight)), *state.planned.shape), dtype=np.int64)
        for slot, plan in enumerate(in_flight):
            queue[:, slot] = plan
        return cls(
            settings,
            # Float counts (whole numbers, exact): every statistic reads them as floats, and a
            # conversion per round was a copy of the largest array.
            copies(state.counts, np.float64),
            copies(state.trials, np.int64),
            copies(state.planned, np.int64),
            copies(state.tokens_sum, np.int64),
            copies(state.tokens_count, np.int64),
            copies(state.gpu_s_sum, np.float64),
            queue,
            np.full(sims, len(in_flight), dtype=np.int64),
            np.full(sims, state.applied_rounds, dtype=np.int64),
        )

    @property
    def num_sims(self) -> int:
        return int(self.counts.shape[0])

    @property
    def trials_used(self) -> np.ndarray:
        """(S,) trials applied per simulation."""
        used: np.ndarray = self.trials.sum(axis=(1, 2))
        return used

    def take(self, keep: np.ndarray) -> BatchState:
        """The simulations ``keep`` (a boolean mask or indices) only: finished ones drop out."""
        kept = BatchState(
            self.settings,
            self.counts[keep],
            self.trials[keep],
            self.planned[keep],
            self.tokens_sum[keep],
            self.tokens_count[keep],
            self.gpu_s_sum[keep],
            self.queue[keep],
            self.queued[keep],
            self.rounds[keep],
        )
        if self._estimate is not None:
            kept._estimate = tuple(part[keep] for part in self._estimate)  # type: ignore[assignment]
            kept._stale = self._stale[keep]
        return kept

    def next_round(self) -> np.ndarray:
        """(S, L, M) each simulation's oldest round in flight (zeros where none)."""
        found: np.ndarray = self.queue[:, 0].copy()
        return found

    def apply_next(
        self,
        drawn: np.ndarray,
        tokens: np.ndarray | None = None,
        token_trials: np.ndarray | None = None,
        gpu_s: np.ndarray | None = None,
    ) -> None:
        """Apply each simulation's oldest round in flight: its (S, L, M, K) outcomes and costs
        (tokens rounded to whole tokens, as a ledger keeps them; ``None``: none known), then
        drop it from the queue."""
        self.counts += drawn
        sampled = drawn.sum(axis=3)
        self.trials += sampled
        self._stale |= sampled.any(axis=2)
        if tokens is not None and token_trials is not None:
            self.tokens_sum += np.rint(tokens).astype(np.int64)
            self.tokens_count += token_trials
        if gpu_s is not None:
            self.gpu_s_sum += gpu_s
        self.queue[:, :-1] = self.queue[:, 1:]
        self.queue[:, -1] = 0
        self.queued -= 1
        self.rounds += 1

    def add_plans(self, plans: np.ndarray, adding: np.ndarray) -> None:
        """Queue ``plans[s]`` (S, L, M) behind simulation ``s``'s rounds in flight, where
        ``adding[s]``."""
        rows = np.nonzero(adding)[0]
        self.queue[rows, self.queued[rows]] = plans[rows]
        self.planned[rows] += plans[rows]
        self.queued[rows] += 1

    def view(self) -> BatchView:
        """The evidence now (:meth:`RunState.view`, for every simulation at once)."""
        settings = self.settings
        if self._estimate is None:
            nu = settings.prior + self.counts
            self._estimate = sequential.estimate_with_variance(
                self.counts, nu, settings.weights, settings.pooled_variance
            )
        elif self._stale.any():
            sims, models = np.nonzero(self._stale)
            counts = self.counts[sims, models]
            found = sequential.estimate_with_variance(
                counts, settings.prior[models] + counts, settings.weights, settings.pooled_variance
            )
            for whole, part in zip(self._estimate, found, strict=True):
                whole[sims, models] = part
        self._stale[:] = False
        theta, se, variance = self._estimate
        return BatchView(
            settings,
            self.counts,
            self.trials,
            self.planned,
            theta,
            se,
            variance,
            self.tokens_sum,
            self.tokens_count,
            self.gpu_s_sum,
        )


@dataclass(frozen=True)
class BatchDecisions:
    """The pair decisions of ``S`` continuations after one look: per simulation and slot, the
    pair ``(a, b)`` (its adjacent pairs, best first) and its state (:data:`OPEN`,
    :data:`SETTLED` or :data:`FUTILE`)."""

    pairs: np.ndarray  # (S, P, 2)
    status: np.ndarray  # (S, P) int8

    @property
    def open(self) -> np.ndarray:
        found: np.ndarray = self.status == OPEN
        return found

    def settled_count(self) -> np.ndarray:
        """(S,) pairs settled per simulation."""
        found: np.ndarray = (self.status == SETTLED).sum(axis=1)
        return found

    def models_in(self, slots: np.ndarray, num_models: int) -> np.ndarray:
        """(S, L) the models of the marked ``slots`` (S, P)."""
        mask = np.zeros((slots.shape[0], num_models), dtype=bool)
        rows, cols = np.nonzero(slots)
        mask[rows, self.pairs[rows, cols, 0]] = True
        mask[rows, self.pairs[rows, cols, 1]] = True
        return mask


class BatchMemory(Protocol):
    """A batched pair rule's memory of every simulation's pairs (its own arrays)."""

    def take(self, keep: np.ndarray) -> BatchMemory: ...


class BatchPairRule(Protocol):
    """The batched form of a pair rule: the slots' states after this look and the new memory
    (``asked``: the slots the rule is asked about; the others stay open and unremembered)."""

    def settle(
        self, view: BatchView, asked: np.ndarray, memory: BatchMemory | None
    ) -> tuple[np.ndarray, BatchMemory]: ...


class BatchStopping(Protocol):
    """The batched form of a stopping rule: which simulations stop after this look (S,), and
    the models each still needs (S, L), ``None`` where the rule does not steer."""

    @property
    def settles_pairs(self) -> bool: ...

    def should_stop(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray: ...

    def needs(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray | None: ...


class BatchAllocator(Protocol):
    """The batched form of an allocator: (S, L, M) plans for the models ``needs`` (S, L)."""

    def __call__(
        self,
        view: BatchView,
        decisions: BatchDecisions,
        needs: np.ndarray,
        round_trials: int,
        settles_pairs: bool,
    ) -> np.ndarray: ...


def split_integer_rows(totals: np.ndarray, weights: np.ndarray, room: np.ndarray) -> np.ndarray:
    """:func:`policies.allocation.split_integer` on every row at once: split ``totals[r]``
    into integers proportional to ``weights[r]``, each at most ``room[r]`` (largest remainder,
    a part that hits its room passes its excess on, ties to the lower index), row by row the
    same numbers in the same order of operations.
    """
    rows, width = weights.shape
    room = np.asarray(room, dtype=np.int64)
    open_ = room > 0
    weights = np.where(open_, np.maximum(np.asarray(weights, dtype=np.float64), 0.0), 0.0)
    out = np.zeros((rows, width), dtype=np.int64)
    left = np.minimum(np.asarray(totals, dtype=np.int64), room.sum(axis=1))
    going = left > 0
    free, w = room, weights
    first = True
    while going.any():
        if not first:
            free = room - out
            open_ = free > 0
            w = np.where(open_, weights, 0.0)
        first = False
        weight = w.sum(axis=1)
        even = going & (weight <= 0)
        if even.any():
            w = np.where(even[:, None], open_.astype(np.float64), w)
            weight = np.where(even, w.sum(axis=1), weight)
            going &= ~(even & (weight == 0))
        safe = np.where(weight > 0, weight, 1.0)
        share = left[:, None] * w / safe[:, None]
        base = np.floor(share).astype(np.int64)
        remainder = np.where(going, left - base.sum(axis=1), 0)
        if (remainder > 0).any():
            base += _largest_remainders(base - share, remainder)
        base = np.minimum(base, free)
        base[~going] = 0
        given = base.sum(axis=1)
        going &= given > 0
        out += base
        left = left - given
        going &= left > 0
    return out


def _largest_remainders(key: np.ndarray, count: np.ndarray) -> np.ndarray:
    """(R, n) 1 at the ``count[r]`` smallest entries of each row of ``key`` (ties to the lower
    index), else 0: the first ``count[r]`` of a stable ascending argsort, found by sorting the
    values only (the ``count``-th smallest is the threshold; entries below it are in, entries at
    it are taken in index order)."""
    rows = np.arange(key.shape[0])
    ordered = np.sort(key, axis=1)
    threshold = ordered[rows, np.maximum(count - 1, 0)]
    below = key < threshold[:, None]
    at = key == threshold[:, None]
    wanted = (count - below.sum(axis=1))[:, None]
    chosen = below | (at & (np.cumsum(at, axis=1) <= wanted))
    found: np.ndarray = (chosen & (count > 0)[:, None]).astype(np.int64)
    return found


def even_plan_rows(
    planned: np.ndarray, chosen: np.ndarray, round_trials: int, trials_per_round: int | None
) -> np.ndarray:
    """:func:`~adaptive_eval.decide.contracts.even_plan` for every simulation: each chosen
    model (S, L) the same trials on every question, questions behind the model's most-sampled
    one catching up first."""
    num_questions = planned.shape[2]
    count = chosen.sum(axis=1)
    if trials_per_round:
        k = np.full(count.shape, trials_per_round, dtype=np.int64)
    else:
        k = np.array(
            [max(1, math.ceil(round_trials / (int(c) * num_questions))) if c else 0 for c in count],
            dtype=np.int64,
        )
    target = planned.max(axis=2, keepdims=True)
    plan: np.ndarray = np.where(chosen[..., None], k[:, None, None] + (target - planned), 0)
    return plan.astype(np.int64)


def cap_to_room(plan: np.ndarray, view: BatchView) -> np.ndarray:
    """:func:`~adaptive_eval.decide.contracts.cap_plan` without a trial budget (the forecast
    applies it to the paths): each cell at most its model's room."""
    room = np.maximum(view.capacity[None, :, None] - view.planned, 0)
    capped: np.ndarray = np.minimum(np.maximum(plan, 0), room).astype(np.int64)
    return capped
