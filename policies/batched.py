"""The batched forms of the default plug-ins: the same rules, on many simulated continuations
at once (:mod:`adaptive_eval.decide.batch`).

The forecast advances its continuations together where every plug-in of the campaign has a
batched form here (:func:`batched_pair_rule`, :func:`batched_stopping`,
:func:`batched_allocator`); any other plug-in (a third party's, ``anytime``, ``betting``, the
width goal, compare's gate) is forecast one continuation at a time by the rule itself. Each
form below restates its rule's arithmetic step for step on arrays with a leading simulation
axis; ``tests/test_batched_core.py`` runs both on the same outcomes and finds the same
decisions, plans and stops (a change to a rule that is not made here too fails it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from adaptive_eval.decide.batch import (
    FUTILE,
    OPEN,
    SETTLED,
    BatchDecisions,
    BatchMemory,
    BatchView,
    even_plan_rows,
    split_integer_rows,
)
from adaptive_eval.decide.contracts import AnyOf, StoppingRule
from adaptive_eval.stats import allocation as lower_bound
from adaptive_eval.stats import sequential as seq
from policies.allocation import TrackAndStop, Uniform
from policies.pair_rules import GroupSequential, look_boundaries
from policies.stopping import MaxTrials, PairsSettled

#: A stop that more data cannot undo (``MAX_TRIALS``; :data:`LATCHED_STOPS`), beside a goal's
#: stop, which is asked again every round.
STOP, LATCHED = 1, 2


@dataclass
class LooksMemory:
    """:class:`GroupSequential`'s memory of every simulation's pairs: the looks used per
    horizon and whether the pair is decided, indexed ``[s, low, high]``."""

    looks: np.ndarray  # (S, L, L, H)
    decided: np.ndarray  # (S, L, L) bool

    def take(self, keep: np.ndarray) -> LooksMemory:
        return LooksMemory(self.looks[keep], self.decided[keep])


class GroupSequentialRows:
    """:meth:`GroupSequential.settle` (with its ``_test``, ``look`` and ``_futile``) on every
    simulation's adjacent pairs."""

    def __init__(self, rule: GroupSequential, capacity: np.ndarray) -> None:
        self.rule = rule
        self.fractions = np.asarray(rule.fractions(), dtype=np.float64)
        self.widen = rule.widen
        self.powers = np.asarray([rule.ratio**h for h in range(rule.horizons)])
        num_models = len(capacity)
        # Each pair's budget shares by horizon (0: horizon not used), fixed by the caps.
        self.shares = np.zeros((num_models, num_models, rule.horizons))
        for a in range(num_models):
            for b in range(num_models):
                found = rule.shares(float(min(capacity[a], capacity[b])))
                self.shares[a, b, : len(found)] = found

    def warm(self, confidence: float, error_control: str) -> Iterator[float]:
        """Build the boundary tables a campaign's continuations will look up, one per step (the
        forecast process's idle work), in the order they are needed: the budget with no pair
        settled first, then with one, two, ... (Holm's step-down)."""
        rule = self.rule
        num_models = self.shares.shape[0]
        control = rule.error_control or error_control
        alpha = 1.0 - confidence
        if rule.step_down and control == "ranking" and num_models > 2:
            budgets = [alpha / max(1, num_models - 1 - k) for k in range(num_models - 1)]
        else:
            budgets = [alpha / max(1, num_models - 1) if control == "ranking" else alpha]
        shares = sorted({float(s) for s in np.unique(self.shares) if s > 0}, reverse=True)
        for budget in budgets:
            for share in shares:
                level = budget * share
                look_boundaries(rule.design, level)
                yield level

    def _tables(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each distinct level's (resolve, equivalent) boundaries at every look, and the index
        of each of ``levels`` among them."""
        unique, inverse = np.unique(levels, return_inverse=True)
        found = [look_boundaries(self.rule.design, float(level)) for level in unique]
        resolve = np.asarray([f[0] for f in found], dtype=np.float64).reshape(len(unique), -1)
        equivalent = np.asarray([f[1] for f in found], dtype=np.float64).reshape(len(unique), -1)
        return resolve, equivalent, inverse.reshape(levels.shape)

    def settle(
        self, view: BatchView, asked: np.ndarray, memory: BatchMemory | None
    ) -> tuple[np.ndarray, BatchMemory]:
        rule = self.rule
        sims, num_models = view.num_sims, view.num_models
        if memory is None:
            horizons = rule.horizons
            memory = LooksMemory(
                np.zeros((sims, num_models, num_models, horizons), dtype=np.int16),
                np.zeros((sims, num_models, num_models), dtype=bool),
            )
        assert isinstance(memory, LooksMemory)
        pairs = view.adjacent()
        low, high = pairs.min(axis=2), pairs.max(axis=2)
        rows = np.arange(sims)[:, None]
        decided = memory.decided[rows, low, high]
        alpha = self._levels(view, decided)
        theta, se = view.theta, view.theta_se
        gap = theta[rows, low] - theta[rows, high]
        spread = np.hypot(se[rows, low], se[rows, high])
        testing = asked & ~decided & (spread > 0)
        capped = view.capped_variance()
        spread_cap = np.sqrt(capped[rows, low] + capped[rows, high])
        safe = np.where(spread > 0, spread, 1.0)
        fraction = np.where(spread > 0, spread_cap**2 / safe**2, 0.0)
        share = self.shares[low, high]  # (S, P, H)
        known = memory.looks[rows, low, high].astype(np.int64)
        reached = np.searchsorted(self.fractions, fraction[..., None] * self.powers + 1e-9)
        tested_h = testing[..., None] & (share > 0) & (reached > known)
        resolve = np.full(tested_h.shape, np.inf)
        equivalent = np.full(tested_h.shape, np.inf)
        if tested_h.any():
            level = (alpha[:, None, None] * share)[tested_h]
            res_table, eq_table, which = self._tables(level)
            look = reached[tested_h] - 1
            resolve[tested_h] = res_table[which, look]
            equivalent[tested_h] = eq_table[which, look]
        tested = tested_h.any(axis=2)
        resolve_at, equivalent_at = resolve.min(axis=2), equivalent.min(axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.abs(gap) / safe
        resolved = tested & (z >= resolve_at * self.widen)
        epsilon = self.rope(view)
        shown = np.zeros_like(resolved)
        if epsilon is not None:
            shown = tested & ~resolved & (np.abs(gap) + equivalent_at * spread < epsilon)
        futile = self._futile(view, testing & ~resolved & ~shown, alpha, low, high, gap, spread)
        memory.looks[rows, low, high] = np.where(
            testing[..., None], np.where(tested_h, reached, known), known
        ).astype(np.int16)
        now = resolved | shown
        memory.decided[rows, low, high] = decided | now
        status = np.full(decided.shape, OPEN, dtype=np.int8)
        status[futile] = FUTILE
        status[decided | now] = SETTLED
        status[~asked] = OPEN  # a pair not asked (a model below its minimum) is undecided
        return status, memory

    def rope(self, view: BatchView) -> float | None:
        return self.rule.epsilon if self.rule.epsilon is not None else view.settings.rope

    def _levels(self, view: BatchView, decided: np.ndarray) -> np.ndarray:
        """(S,) :meth:`ConfidenceSequenceRule.level`: the open pairs' budget this round, Holm's
        step-down where the adjacent pairs already settled free theirs."""
        rule, settings = self.rule, view.settings
        control = rule.error_control or settings.error_control
        sims, num_models = view.num_sims, view.num_models
        if not (rule.step_down and control == "ranking" and num_models > 2):
            return np.full(sims, settings.pair_alpha(rule.error_control))
        settled = decided.sum(axis=1)
        alpha = 1.0 - settings.confidence
        found: np.ndarray = alpha / np.maximum(1, (num_models - 1) - np.maximum(0, settled))
        return found

    def _futile(
        self,
        view: BatchView,
        candidates: np.ndarray,
        alpha: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        gap: np.ndarray,
        spread: np.ndarray,
    ) -> np.ndarray:
        """:meth:`ConfidenceSequenceRule._futile` for the ``candidates`` (S, P)."""
        rule, settings = self.rule, view.settings
        threshold = rule.futility if rule.futility is not None else settings.futility
        futile = np.zeros(candidates.shape, dtype=bool)
        if threshold <= 0 or not candidates.any():
            return futile
        rows = np.arange(view.num_sims)[:, None]
        capped = view.capped_variance()
        spread_cap = np.sqrt(capped[rows, low] + capped[rows, high])
        per_model = view.trials_per_question()
        enough = np.minimum(per_model[rows, low], per_model[rows, high]) >= rule.futility_trials
        asking = candidates & (spread_cap < spread) & enough
        if not asking.any():
            return futile
        level = (alpha[:, None] * self.shares[low, high, 0])[asking]
        res_table, eq_table, which = self._tables(level)
        resolve = res_table[which, -1] * self.widen
        equivalent = eq_table[which, -1]
        s, s_cap = spread[asking], spread_cap[asking]
        scaled = threshold * (1.0 + rule.futility_growth * s_cap**2 / s**2)
        chance = seq.settle_probability_rows(
            gap[asking], s, s_cap, resolve, equivalent, self.rope(view)
        )
        futile[asking] = chance < scaled
        return futile


class PairsSettledRows:
    """:class:`PairsSettled`: stop where no slot is open (once every model has its minimum
    trials); the models of the open slots are needed."""

    settles_pairs = True

    def should_stop(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray:
        stops = ~decisions.open.any(axis=1) & ~view.below_min().any(axis=1)
        found: np.ndarray = np.where(stops, STOP, 0).astype(np.int8)
        return found

    def needs(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray | None:
        return decisions.models_in(decisions.open, view.num_models)


@dataclass(frozen=True)
class MaxTrialsRows:
    """:class:`MaxTrials`: a latched stop once every cell has ``n`` trials."""

    n: int
    settles_pairs = False

    def should_stop(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray:
        stops = view.trials.min(axis=(1, 2)) >= self.n
        found: np.ndarray = np.where(stops, LATCHED, 0).astype(np.int8)
        return found

    def needs(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray | None:
        return None


class AnyOfRows:
    """:class:`AnyOf`: the first rule that stops, in order; a model is needed if any steering
    rule needs it."""

    def __init__(self, rules: list[PairsSettledRows | MaxTrialsRows | AnyOfRows]) -> None:
        self.rules = rules
        self.settles_pairs: bool = any(bool(rule.settles_pairs) for rule in rules)

    def should_stop(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray:
        found = np.zeros(view.num_sims, dtype=np.int8)
        for rule in self.rules:
            stops = rule.should_stop(view, decisions)
            found = np.where(found == 0, stops, found)
        return found

    def needs(self, view: BatchView, decisions: BatchDecisions) -> np.ndarray | None:
        masks = [m for m in (r.needs(view, decisions) for r in self.rules) if m is not None]
        if not masks:
            return None
        union: np.ndarray = np.logical_or.reduce(masks)
        return union


class UniformRows:
    """:class:`Uniform`: every model with room, the same trials on every question."""

    def __init__(self, allocator: Uniform) -> None:
        self.allocator = allocator

    def __call__(
        self,
        view: BatchView,
        decisions: BatchDecisions,
        needs: np.ndarray,
        round_trials: int,
        settles_pairs: bool,
    ) -> np.ndarray:
        chosen = view.planned.min(axis=2) < view.capacity
        return even_plan_rows(view.planned, chosen, round_trials, self.allocator.trials_per_round)


class TrackAndStopRows:
    """:class:`TrackAndStop.__call__` (its lower-bound program solved for every simulation at
    once by :func:`~adaptive_eval.stats.allocation.allocation_program_rows`), for campaigns
    whose goals give no trial targets."""

    def __init__(self, allocator: TrackAndStop) -> None:
        self.allocator = allocator

    def cell_cost(self, view: BatchView) -> np.ndarray:
        """(S, L, M) :func:`policies.allocation.cell_cost`: one trial's observed cost per cell in
        units of the simulation's mean (1 where unknown)."""
        shape = view.planned.shape
        values = view.cell_costs(self.allocator.cost)
        if values is None:
            return np.ones(shape)
        known = np.isfinite(values) & (values > 0)
        out = np.ones(shape)
        for sim in range(view.num_sims):
            if known[sim].any():
                overall = float(values[sim][known[sim]].mean())
                out[sim] = np.where(known[sim], values[sim], overall) / overall
        return out

    def __call__(
        self,
        view: BatchView,
        decisions: BatchDecisions,
        needs: np.ndarray,
        round_trials: int,
        settles_pairs: bool,
    ) -> np.ndarray:
        allocator = self.allocator
        sims, num_models, num_questions = view.planned.shape
        rows = np.arange(sims)[:, None]
        room = np.maximum(view.capacity[None, :, None] - view.planned, 0)
        has_room = room.sum(axis=2) > 0
        pairs = decisions.pairs
        served = (
            decisions.open
            & settles_pairs
            & (has_room[rows, pairs[..., 0]] | has_room[rows, pairs[..., 1]])
        )
        in_pairs = decisions.models_in(served, num_models)
        young = view.below_min()
        plan: np.ndarray = np.minimum(
            np.maximum(view.settings.min_trials - view.planned, 0) * young[..., None], room
        )
        others = needs & ~in_pairs & ~young & has_room
        plan = plan + even_plan_rows(view.planned, others, 0, 1)
        active = in_pairs & has_room & ~young
        busy = active.any(axis=1)
        if not busy.any():
            return plan
        costs = self.cell_cost(view)
        optimal = self._pair_targets(view, decisions, served, costs)
        totals = view.planned.sum(axis=2).astype(np.float64)
        size = allocator.trials_per_round or np.maximum(
            round_trials, num_questions * active.sum(axis=1)
        )
        size = np.broadcast_to(np.asarray(size, dtype=np.int64), (sims,))
        share = np.where(active, np.maximum(optimal, 0.0), 0.0)
        none = share.sum(axis=1) <= 0
        share = np.where(none[:, None], active.astype(np.float64), share)
        room_left = np.where(active, totals, 0.0).sum(axis=1) + size
        with np.errstate(invalid="ignore", divide="ignore"):
            tracked = share / share.sum(axis=1)[:, None] * room_left[:, None]
        deficit = np.where(active, np.maximum(tracked - totals, 0.0), 0.0)
        explore = active & (totals < np.sqrt(room_left)[:, None])
        most = np.maximum(deficit.max(axis=1), 1.0)
        deficit = np.where(
            explore.any(axis=1)[:, None] & explore, np.maximum(deficit, most[:, None]), deficit
        )
        # No goal gives a trial target here, so every active model is in a served pair and
        # the target's room (TARGET_STEP of what a model lacks) never applies.
        model_room = np.where(active, room.sum(axis=2), 0)
        per_model = split_integer_rows(np.where(busy, size, 0), deficit, model_room)
        chosen = per_model > 0
        if not chosen.any():
            return plan
        weights = self._question_weights(view, costs, chosen)
        planned = view.planned.astype(np.float64)[chosen]
        count = per_model[chosen]
        goal = weights / weights.sum(axis=1)[:, None] * (planned.sum(axis=1) + count)[:, None]
        deficit_q = np.maximum(goal - planned, 0.0)
        flat = deficit_q.sum(axis=1) <= 0
        deficit_q = np.where(flat[:, None], weights, deficit_q)
        plan[chosen] += split_integer_rows(count, deficit_q, room[chosen])
        return plan

    def _question_weights(
        self, view: BatchView, costs: np.ndarray, chosen: np.ndarray
    ) -> np.ndarray:
        """(R, M) :func:`policies.allocation.question_weights` under the allocator's scheme,
        for the ``chosen`` (S, L) rows only (the models this round gives trials)."""
        sims, models = np.nonzero(chosen)
        if self.allocator.questions == "uniform":
            return np.ones((len(sims), view.num_questions))
        counts = view.counts[sims, models]
        settings = view.settings
        spread = seq.trial_variance(settings.prior[models] + counts, settings.weights, pooled=False)
        sd = np.sqrt(np.maximum(spread, 1e-12))
        weights: np.ndarray = sd / np.sqrt(costs[sims, models])
        return weights

    def _pair_targets(
        self, view: BatchView, decisions: BatchDecisions, served: np.ndarray, costs: np.ndarray
    ) -> np.ndarray:
        """(S, L) :meth:`TrackAndStop.pair_targets` over each simulation's served slots."""
        allocator, settings = self.allocator, view.settings
        sims = served.shape[0]
        model_costs = costs.sum(axis=2) / costs.shape[2]
        # The served slots first, in slot order (the single program's pair order).
        order = np.argsort(~served, axis=1, kind="stable")
        valid = np.take_along_axis(served, order, axis=1)
        pairs = np.take_along_axis(decisions.pairs, order[..., None], axis=1)
        rows = np.arange(sims)[:, None]
        theta = view.theta
        if allocator.questions == "neyman":
            v = np.maximum(view.cell_variance, 1e-12)
            variance = (np.sqrt(v).sum(axis=2) / v.shape[2]) ** 2
        else:
            v = np.maximum(view.cell_variance, 1e-12)
            variance = v.sum(axis=2) / v.shape[2]
        epsilon = settings.rope
        gap = lower_bound.pair_gap(theta[rows, pairs[..., 0]] - theta[rows, pairs[..., 1]], epsilon)
        floor = epsilon * allocator.gap_floor if epsilon else 1e-3
        gap = np.maximum(gap, floor)
        radius = gap**2 / (2 * lower_bound.kl_log_term(settings.pair_alpha()))
        return lower_bound.allocation_program_rows(variance, pairs, valid, radius, model_costs)


def batched_pair_rule(rule: object, capacity: np.ndarray) -> GroupSequentialRows | None:
    """The batched form of a pair rule, or ``None`` where it has none."""
    if type(rule) is GroupSequential:
        return GroupSequentialRows(rule, capacity)
    return None


def batched_stopping(rule: StoppingRule) -> PairsSettledRows | MaxTrialsRows | AnyOfRows | None:
    """The batched form of a stopping rule, or ``None`` where it (or a rule inside it) has
    none, or it gives the allocator trial targets."""
    if type(rule) is PairsSettled:
        return PairsSettledRows()
    if type(rule) is MaxTrials:
        return MaxTrialsRows(rule.n)
    if type(rule) is AnyOf:
        inner = [batched_stopping(r) for r in rule.rules]
        if any(r is None for r in inner) or rule.questions is not None:
            return None
        return AnyOfRows([r for r in inner if r is not None])
    return None


def batched_allocator(allocator: object) -> TrackAndStopRows | UniformRows | None:
    """The batched form of an allocator, or ``None`` where it has none."""
    if type(allocator) is TrackAndStop:
        return TrackAndStopRows(allocator)
    if type(allocator) is Uniform:
        return UniformRows(allocator)
    return None
