"""The round-decision core: the one piece of code that says what happens after a round.

Every loop that decides calls it and nothing else decides: the controller (which keeps only
I/O: poll, record, durability, events, resume), the in-process simulator that measures error
rates (:mod:`adaptive_eval.simulate`), compare's gate (a pair selector) and the forecast. After
round ``r`` is applied, on the frozen :class:`~adaptive_eval.policy.CampaignView` of the evidence:

1. :meth:`DecisionCore.decide`: the pair rules settle the selected pairs (the adjacent pairs of
   the ordering, or the candidate against each incumbent), then the stopping rules say stop or
   go. A stop that more data cannot undo (:data:`LATCHED_STOPS`) is kept; a goal or budget stop
   is asked again every round, so a report never says "settled" over undecided pairs.
2. :meth:`DecisionCore.next_plan`: while the campaign goes on, the stopping rules name the
   models they still need (and every model below ``min_trials`` is needed), the allocator plans
   their trials, and the plan is clipped to each model's capacity and to the trial budget
   (:func:`~adaptive_eval.policy.cap_plan`). An empty plan with no round in flight ends the
   campaign: ``EXHAUSTED`` when replayed cells ran out, else ``MAX_TRIALS``.

The outcome of a round is a function of the sequence of views and nothing else (no clock, no
arrival order): the rules' per-pair state is carried from one round to the next inside the core,
so a resumed run that replays its rounds through the core reaches the same state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive_eval.policy import (
    Allocator,
    CampaignView,
    PairRule,
    PairSelector,
    StoppingRule,
    adjacent_pairs,
    cap_plan,
    decide_pairs,
)
from adaptive_eval.types import PairDecision, Stop, StopReason

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
class RoundDecision:
    """What the core decided after one applied round: the pairs, the stop (latched or asked)
    and the stop before this round (so that a caller can say what changed)."""

    round: int
    decisions: tuple[PairDecision, ...]
    stop: Stop | None
    stop_before: Stop | None
    decisions_before: tuple[PairDecision, ...]


class DecisionCore:
    """The campaign's decision rules and the state they carry between rounds.

    ``pair_rules`` settle pairs, ``stopping`` stops and steers, ``allocator`` plans; ``pairs``
    selects the pairs to settle (default: the adjacent pairs of the ordering). The rules are
    the campaign's own objects: one core per independent sequence of looks.
    """

    def __init__(
        self,
        pair_rules: tuple[PairRule, ...],
        stopping: StoppingRule,
        allocator: Allocator,
        limits: Limits,
        pairs: PairSelector = adjacent_pairs,
    ) -> None:
        self.pair_rules = pair_rules
        self.stopping = stopping
        self.allocator = allocator
        self.limits = limits
        self.pairs = pairs
        self.decisions: tuple[PairDecision, ...] = ()
        self.stop: Stop | None = None

    def decide(self, view: CampaignView) -> RoundDecision:
        """Settle pairs and ask the stopping rules, after the view's round."""
        before, stop_before = self.decisions, self.stop
        decisions = decide_pairs(view, self.pair_rules, self.pairs)
        latched = stop_before is not None and stop_before.reason in LATCHED_STOPS
        # Asked every round, latched or not: rules that test sequentially inside (compare's
        # verdicts) then see the same looks in a run and in its offline re-read.
        checked = self.stopping.should_stop(view, decisions)
        self.decisions = decisions
        self.stop = stop_before if latched else checked
        return RoundDecision(view.round, decisions, self.stop, stop_before, before)

    def next_plan(self, view: CampaignView, in_flight: int) -> np.ndarray | None:
        """The next round's (L, M) plan, or ``None`` when nothing is to be planned.

        ``in_flight``: rounds planned but not yet applied. With none in flight, an empty plan
        ends the campaign (:attr:`stop` is then set).
        """
        if self.stop is not None:
            return None
        plan = self.allocate(view)
        if plan.sum() > 0:
            return plan
        if in_flight == 0:
            self.stop = nothing_left(view, self.limits.max_trials_per_question)
        return None

    def allocate(self, view: CampaignView) -> np.ndarray:
        """The allocator's plan for the models the stopping rules need, capped."""
        needs = self.stopping.needs(view, self.decisions)
        if needs is None:
            needs = np.ones(view.num_models, dtype=bool)
        plan = self.allocator(
            view,
            self.decisions,
            needs | view.below_min(),
            self.limits.round_trials,
            self.stopping.goals(view, self.decisions),
        )
        budget = self.limits.trial_budget
        left = None if budget is None else budget - int(view.planned.sum())
        return cap_plan(plan, view, left)

    def interrupt(self, stop: Stop | None) -> None:
        """Set the stop from outside the rules (a re-read of an unfinished run)."""
        self.stop = stop


def nothing_left(view: CampaignView, max_trials_per_question: int) -> Stop:
    """Why a campaign with nothing left to plan stopped."""
    at_cap = view.planned.min(axis=1) >= view.capacity
    if (view.capacity < max_trials_per_question).any() and at_cap.all():
        return Stop(StopReason.EXHAUSTED, "every replayed cell is exhausted")
    return Stop(
        StopReason.MAX_TRIALS,
        f"models still undecided are at max_trials_per_question={max_trials_per_question}",
    )


__all__ = ["LATCHED_STOPS", "DecisionCore", "Limits", "RoundDecision", "nothing_left"]
