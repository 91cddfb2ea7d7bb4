"""The round-decision core: the one piece of code that says what happens after a round.

Every loop that decides calls it and nothing else decides: the controller (which keeps only
I/O: poll, record, durability, events, resume), the in-process simulator that measures error
rates (:mod:`adaptive_eval.forecast.simulate`), compare's gate (a pair selector) and the forecast.
After
round ``r`` is applied, on the frozen :class:`~adaptive_eval.decide.contracts.CampaignView` of the
evidence:

1. :meth:`DecisionCore.decide`: the pair rules settle the selected pairs (the adjacent pairs of
   the ordering, or the candidate against each incumbent), then the stopping rules say stop or
   go. A stop that more data cannot undo (:data:`LATCHED_STOPS`) is kept; a goal or budget stop
   is asked again every round, so a report never says "settled" over undecided pairs.
2. :meth:`DecisionCore.next_plan`: while the campaign goes on, the stopping rules name the
   models they still need (and every model below ``min_trials`` is needed), the allocator plans
   their trials, and the plan is clipped to each model's capacity and to the trial budget
   (:func:`~adaptive_eval.decide.contracts.cap_plan`). An empty plan with no round in flight ends
   the
   campaign: ``EXHAUSTED`` when replayed cells ran out, else ``MAX_TRIALS``.

The core is pure: :meth:`DecisionCore.decide_round` and :meth:`DecisionCore.plan` map an
immutable view of the evidence and the explicit :class:`CoreState` (the decisions and stop so
far, and each pair rule's memory) to a typed outcome and the new state; the rules themselves are
frozen values. The outcome of a round is therefore a function of the sequence of views and
nothing else (no clock, no arrival order), and a resumed run that replays its rounds through the
core reaches the same state. :class:`DecisionCore` also holds the state of one sequence of looks
for the loops that keep one (:meth:`DecisionCore.decide`, :meth:`DecisionCore.next_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from adaptive_eval.base.types import PairDecision, Stop, StopReason
from adaptive_eval.decide.contracts import (
    Allocator,
    CampaignView,
    PairRule,
    PairSelector,
    RuleMemory,
    StoppingRule,
    adjacent_pairs,
    cap_plan,
    settle_pairs,
)

#: Stops that more data cannot undo.
LATCHED_STOPS = frozenset({StopReason.MAX_TRIALS, StopReason.EXHAUSTED, StopReason.INTERRUPTED})


@dataclass(frozen=True)
class Limits:
    """How much a round plans and how far the campaign may go (``policy`` and ``budget``)."""

    round_trials: int
    rounds_in_flight: int
    max_trials_per_question: int
    trial_budget: int | None = None


@dataclass(frozen=True)
class CoreState:
    """What the core carries from one round to the next: the pair decisions and the stop after
    the last decided round, and each pair rule's memory (``None`` before the first look)."""

    decisions: tuple[PairDecision, ...] = ()
    stop: Stop | None = None
    memory: tuple[RuleMemory, ...] | None = None


@dataclass(frozen=True)
class RoundDecision:
    """What the core decided after one applied round: the pairs, the stop (latched or asked),
    what stood before this round (so that a caller can say what changed), and the core's state
    after it."""

    round: int
    decisions: tuple[PairDecision, ...]
    stop: Stop | None
    stop_before: Stop | None
    decisions_before: tuple[PairDecision, ...]
    state: CoreState


class Decided(Protocol):
    """Where a run's pair decisions and stop are read: a core, or a core's state."""

    @property
    def decisions(self) -> tuple[PairDecision, ...]: ...

    @property
    def stop(self) -> Stop | None: ...


class RoundCore(Decided, Protocol):
    """What the controller needs from its decision core: :class:`DecisionCore`, or a core that
    wraps it (a pilot's, :class:`~adaptive_eval.control.pilot.PilotCore`)."""

    @property
    def state(self) -> CoreState: ...

    def decide(self, view: CampaignView) -> RoundDecision: ...

    def next_plan(self, view: CampaignView, in_flight: int) -> np.ndarray | None: ...

    def interrupt(self, stop: Stop | None) -> None: ...


class DecidedByCore:
    """:attr:`decisions` and :attr:`stop`, those of the ``core`` attribute (a decision core, or
    its state): declared here once for the controller, a pilot's core and a finished run."""

    core: Decided

    @property
    def decisions(self) -> tuple[PairDecision, ...]:
        """The pair decisions after the latest decided round."""
        return self.core.decisions

    @property
    def stop(self) -> Stop | None:
        """Why the campaign stopped (None: it goes on)."""
        return self.core.stop


class DecisionCore:
    """The campaign's decision rules, and the state of one sequence of looks.

    ``pair_rules`` settle pairs, ``stopping`` stops and steers, ``allocator`` plans; ``pairs``
    selects the pairs to settle (default: the adjacent pairs of the ordering). The rules are
    frozen values; :attr:`state` is the only thing that changes, and only through
    :meth:`decide`, :meth:`next_plan` and :meth:`interrupt`.
    """

    def __init__(
        self,
        pair_rules: tuple[PairRule, ...],
        stopping: StoppingRule,
        allocator: Allocator,
        limits: Limits,
        pairs: PairSelector = adjacent_pairs,
        state: CoreState | None = None,
    ) -> None:
        self.pair_rules = pair_rules
        self.stopping = stopping
        self.allocator = allocator
        self.limits = limits
        self.pairs = pairs
        self.state = state or CoreState()

    @property
    def decisions(self) -> tuple[PairDecision, ...]:
        return self.state.decisions

    @property
    def stop(self) -> Stop | None:
        return self.state.stop

    def decide_round(self, view: CampaignView, state: CoreState) -> RoundDecision:
        """Settle pairs and ask the stopping rules after the view's round (pure)."""
        decisions, memory = settle_pairs(view, self.pair_rules, self.pairs, state.memory)
        latched = state.stop is not None and state.stop.reason in LATCHED_STOPS
        # Asked every round, latched or not: a run and its offline re-read then ask the same.
        checked = self.stopping.should_stop(view, decisions)
        stop = state.stop if latched else checked
        after = CoreState(decisions, stop, memory)
        return RoundDecision(view.round, decisions, stop, state.stop, state.decisions, after)

    def plan(
        self, view: CampaignView, state: CoreState, in_flight: int
    ) -> tuple[np.ndarray | None, CoreState]:
        """The next round's (L, M) plan, or ``None`` when nothing is to be planned, and the
        state after it (pure).

        ``in_flight``: rounds planned but not yet applied. With none in flight, an empty plan
        ends the campaign (the state's stop is then set).
        """
        if state.stop is not None:
            return None, state
        plan = self.allocate(view, state.decisions)
        if plan.sum() > 0:
            return plan, state
        if in_flight == 0:
            state = replace(state, stop=nothing_left(view, self.limits.max_trials_per_question))
        return None, state

    def allocate(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray:
        """The allocator's plan for the models the stopping rules need, capped."""
        needs = self.stopping.needs(view, decisions)
        if needs is None:
            needs = np.ones(view.num_models, dtype=bool)
        plan = self.allocator(
            view,
            decisions,
            needs | view.below_min(),
            self.limits.round_trials,
            self.stopping.goals(view, decisions),
        )
        budget = self.limits.trial_budget
        left = None if budget is None else budget - int(view.planned.sum())
        return cap_plan(plan, view, left)

    def decide(self, view: CampaignView) -> RoundDecision:
        """:meth:`decide_round` on the held state, which it then replaces."""
        outcome = self.decide_round(view, self.state)
        self.state = outcome.state
        return outcome

    def next_plan(self, view: CampaignView, in_flight: int) -> np.ndarray | None:
        """:meth:`plan` on the held state, which it then replaces."""
        plan, self.state = self.plan(view, self.state, in_flight)
        return plan

    def interrupt(self, stop: Stop | None) -> None:
        """Set the stop from outside the rules (a re-read of an unfinished run)."""
        self.state = replace(self.state, stop=stop)


def nothing_left(view: CampaignView, max_trials_per_question: int) -> Stop:
    """Why a campaign with nothing left to plan stopped."""
    at_cap = view.planned.min(axis=1) >= view.capacity
    if (view.capacity < max_trials_per_question).any() and at_cap.all():
        return Stop(StopReason.EXHAUSTED, "every replayed cell is exhausted")
    return Stop(
        StopReason.MAX_TRIALS,
        f"models still undecided are at max_trials_per_question={max_trials_per_question}",
    )


__all__ = [
    "LATCHED_STOPS",
    "CoreState",
    "Decided",
    "DecidedByCore",
    "DecisionCore",
    "Limits",
    "RoundCore",
    "RoundDecision",
    "nothing_left",
]
