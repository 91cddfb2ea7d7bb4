"""A running campaign's continuations advanced together: the controller's loop
(:func:`~adaptive_eval.forecast.simulate.run_core`) for ``S`` simulated truths at once.

Where every plug-in of the campaign has a batched form (:mod:`policies.batched`: the default
``group_sequential`` pair rule, ``pairs_settled`` and ``max_trials``, ``track_and_stop`` and
``uniform``; :meth:`BatchCore.of` says), each round of every continuation is applied, decided
and planned by the same numpy calls: the cost of a round is paid once for all of them, and a
continuation that has stopped drops out. The loop is :func:`run_core`'s, step for step: rounds
are planned ``rounds_in_flight`` ahead and applied whole in order, the core decides after each
applied round (a goal's stop asked again, ``max_trials`` latched), a plan is made only while no
stop is set, and an empty plan with no round in flight ends the continuation.
``tests/test_batched_core.py`` runs it against :func:`run_core` on the same outcomes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from adaptive_eval.decide.batch import (
    FUTILE,
    OPEN,
    SETTLED,
    BatchAllocator,
    BatchDecisions,
    BatchMemory,
    BatchPairRule,
    BatchSettings,
    BatchState,
    BatchStopping,
    BatchView,
    cap_to_room,
)
from adaptive_eval.decide.contracts import StoppingRule, adjacent_pairs
from adaptive_eval.decide.core import LATCHED_STOPS, DecisionCore, Limits
from adaptive_eval.decide.state import RunState
from policies.batched import (
    LATCHED,
    STOP,
    LooksMemory,
    batched_allocator,
    batched_pair_rule,
    batched_stopping,
)

#: Draws one round for the continuations: (plans (S, L, M), their simulation ids (S,), the
#: trials each has applied before it (S, L, M)) -> (S, L, M, K) category counts.
RowSampler = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

#: Prices one round: plans (S, L, M) -> (tokens, trials whose tokens are known, GPU-seconds),
#: each (S, L, M) or ``None`` where the run knows no such cost.
RowCosting = Callable[[np.ndarray], tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]]


@dataclass(frozen=True)
class BatchCore:
    """A decision core's batched form: its one pair rule, stopping rules and allocator, on the
    adjacent pairs of the ordering."""

    pair_rule: BatchPairRule
    stopping: BatchStopping
    allocator: BatchAllocator
    horizons: int  # the pair rule's memory: looks per horizon
    limits: Limits

    @classmethod
    def of(
        cls, core: DecisionCore, capacity: np.ndarray, stopping: StoppingRule | None = None
    ) -> BatchCore | None:
        """``core`` batched (``stopping``: instead of the core's rules), or ``None`` where one
        of its plug-ins has no batched form or it settles other pairs than the adjacent ones
        (compare's gate)."""
        if core.pairs is not adjacent_pairs or len(core.pair_rules) != 1:
            return None
        rule = batched_pair_rule(core.pair_rules[0], capacity)
        stops = batched_stopping(stopping if stopping is not None else core.stopping)
        allocator = batched_allocator(core.allocator)
        if rule is None or stops is None or allocator is None:
            return None
        return cls(rule, stops, allocator, rule.rule.horizons, core.limits)


@dataclass(frozen=True)
class Continuations:
    """Per simulation: where it ended (trials), what it spent beyond the start (tokens,
    GPU-seconds) and its pairs settled after every applied round, as (trials, settled)."""

    trials: np.ndarray  # (S,)
    tokens: np.ndarray  # (S,)
    gpu_s: np.ndarray  # (S,)
    paths: tuple[list[tuple[int, int]], ...]


def start_decisions(core: DecisionCore, view: BatchView) -> tuple[BatchDecisions, np.ndarray]:
    """The core's decisions and stop after the snapshot's round, for every simulation."""
    pairs = view.adjacent()
    status = np.zeros(pairs.shape[:2], dtype=np.int8)
    for slot, decision in enumerate(core.decisions):
        status[:, slot] = SETTLED if decision.settled else FUTILE if decision.futile else OPEN
    stop = core.stop
    code = 0 if stop is None else LATCHED if stop.reason in LATCHED_STOPS else STOP
    return BatchDecisions(pairs, status), np.full(view.num_sims, code, dtype=np.int8)


def start_memory(core: DecisionCore, sims: int, num_models: int, horizons: int) -> LooksMemory:
    """The pair rule's memory in the snapshot, for every simulation."""
    looks = np.zeros((num_models, num_models, horizons), dtype=np.int16)
    decided = np.zeros((num_models, num_models), dtype=bool)
    memory = core.state.memory
    if memory is not None:
        for (low, high), known in memory[0].items():
            looks[low, high, : len(known.looks)] = known.looks
            decided[low, high] = known.decision is not None  # kept once settled
    return LooksMemory(np.repeat(looks[None], sims, axis=0), np.repeat(decided[None], sims, axis=0))


def continue_runs(
    core: BatchCore,
    snapshot_core: DecisionCore,
    state: RunState,
    settings: BatchSettings,
    sims: int,
    sampler: RowSampler,
    costing: RowCosting,
) -> Continuations:
    """``sims`` continuations of the run in ``state`` (whose core, ``snapshot_core``, has
    decided on it), each to its stop (see the module)."""
    rows = BatchState.repeat(settings, state, core.limits.rounds_in_flight, sims)
    start_tokens = float(state.tokens_sum.sum())
    start_gpu = float(state.gpu_s_sum.sum())
    view = rows.view()
    decisions, stop = start_decisions(snapshot_core, view)
    memory: BatchMemory = start_memory(snapshot_core, sims, view.num_models, core.horizons)
    ids = np.arange(sims)
    final = np.zeros(sims, dtype=np.int64)
    tokens = np.zeros(sims)
    gpu_s = np.zeros(sims)
    paths: list[list[tuple[int, int]]] = [[] for _ in range(sims)]
    stop = _plan_ahead(core, rows, view, decisions, stop)
    while True:
        done = rows.queued == 0
        if done.any():
            final[ids[done]] = rows.trials_used[done]
            tokens[ids[done]] = rows.tokens_sum[done].sum(axis=(1, 2)) - start_tokens
            gpu_s[ids[done]] = rows.gpu_s_sum[done].sum(axis=(1, 2)) - start_gpu
            keep = ~done
            if not keep.any():
                break
            rows, ids, stop = rows.take(keep), ids[keep], stop[keep]
            decisions = BatchDecisions(decisions.pairs[keep], decisions.status[keep])
            memory = memory.take(keep)
        plan = rows.next_round()
        drawn = sampler(plan, ids, rows.trials)
        rows.apply_next(drawn, *costing(plan))
        view = rows.view()
        young = view.below_min()
        pairs = view.adjacent()
        sim_rows = np.arange(rows.num_sims)[:, None]
        asked = ~young[sim_rows, pairs[..., 0]] & ~young[sim_rows, pairs[..., 1]]
        status, memory = core.pair_rule.settle(view, asked, memory)
        decisions = BatchDecisions(pairs, status)
        checked = core.stopping.should_stop(view, decisions)
        stop = np.where(stop == LATCHED, LATCHED, checked).astype(np.int8)
        used, settled = rows.trials_used.tolist(), decisions.settled_count().tolist()
        for sim, trials, count in zip(ids.tolist(), used, settled, strict=True):
            paths[sim].append((trials, count))
        stop = _plan_ahead(core, rows, view, decisions, stop)
    return Continuations(final, tokens, gpu_s, tuple(paths))


def _plan_ahead(
    core: BatchCore,
    rows: BatchState,
    view: BatchView,
    decisions: BatchDecisions,
    stop: np.ndarray,
) -> np.ndarray:
    """Plan every continuation until ``rounds_in_flight`` rounds are ahead of its evidence,
    or its core plans nothing (:meth:`DecisionCore.plan`); returns the stops after it."""
    depth = core.limits.rounds_in_flight
    blocked = np.zeros(rows.num_sims, dtype=bool)
    while True:
        wanted = (rows.queued < depth) & ~blocked & (stop == 0)
        if not wanted.any():
            return stop
        needs = core.stopping.needs(view, decisions)
        if needs is None:
            needs = np.ones((rows.num_sims, view.num_models), dtype=bool)
        plans = core.allocator(
            view,
            decisions,
            needs | view.below_min(),
            core.limits.round_trials,
            core.stopping.settles_pairs,
        )
        plans = cap_to_room(plans, view)
        planned = wanted & (plans.sum(axis=(1, 2)) > 0)
        empty = wanted & ~planned
        stop = np.where(empty & (rows.queued == 0), LATCHED, stop).astype(np.int8)
        blocked |= empty
        if planned.any():
            rows.add_plans(plans, planned)
            view = replace(view, planned=rows.planned)
