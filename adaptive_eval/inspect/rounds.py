"""The bridge's rounds: Inspect's (model, sample, epoch) runs as the decision core's trials.

Trial ``t`` of cell (model, sample) is epoch ``t + 1``, and a round is the core's round: the
plan it made, applied whole once every trial in it has its score, in the loop of
:func:`adaptive_eval.forecast.simulate.run_core` (decide after each applied round, then plan up
to ``rounds_in_flight`` rounds ahead). So an epoch is run iff its trial is in a plan, skipped
iff the campaign has ended without planning it, and otherwise waits for the round boundary
that settles it: nothing is decided on a partial round. Pure and synchronous.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import numpy as np

from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import DecidedByCore, DecisionCore


class Fate(enum.Enum):
    """What to do with an epoch Inspect is about to run."""

    RUN = "run"
    SKIP = "skip"
    WAIT = "wait"  # its round boundary has not come yet


class RoundBook(DecidedByCore):
    """The evidence and plans of one campaign fed by scored trials in any order.

    Results for trials no plan covers yet are held until one does (a resumed eval hands back
    the runs it kept before asking about the others).
    """

    def __init__(self, campaign: Campaign) -> None:
        self.core: DecisionCore = campaign.decision.decision_core()
        self.settings = campaign.decision.view_settings()
        self.state = campaign.decision.empty_state()
        self.num_categories = campaign.num_categories
        self.results: dict[tuple[int, int, int], int] = {}
        self._starts: list[np.ndarray] = []  # first trial index of each round's cells
        self._missing: list[int] = []  # per round: planned trials without a result yet
        self._round_of: dict[tuple[int, int, int], int] = {}  # awaited trial -> its round
        self.core.decide(self.view())
        self._plan_ahead()

    def view(self) -> CampaignView:
        return self.settings.view(self.state)

    @property
    def finished(self) -> bool:
        """The loop has ended: every planned round is applied and none will follow."""
        return self.state.applied_rounds == len(self.state.plans)

    def fate(self, model: int, question: int, trial: int) -> Fate:
        if trial < int(self.state.planned[model, question]):
            return Fate.RUN
        return Fate.SKIP if self.finished else Fate.WAIT

    def record(self, model: int, question: int, trial: int, category: int) -> int:
        """Hold one scored trial, then apply every round that is now whole; returns how many
        rounds were applied."""
        if not 0 <= category < self.num_categories:
            raise ValueError(
                f"category {category} is outside the rubric's {self.num_categories} categories"
            )
        key = (model, question, trial)
        if key not in self.results:
            self.results[key] = category
            awaited = self._round_of.pop(key, None)
            if awaited is not None:
                self._missing[awaited] -= 1
        applied, state = 0, self.state
        while state.applied_rounds < len(state.plans) and not self._missing[state.applied_rounds]:
            delta = np.zeros(state.shape, dtype=np.int64)
            for key in self._trials(state.applied_rounds):
                delta[key[0], key[1], self.results[key]] += 1
            state.apply_counts(delta)
            self.core.decide(self.view())
            self._plan_ahead()
            applied += 1
        return applied

    def _trials(self, index: int) -> Iterator[tuple[int, int, int]]:
        """The (model, question, trial) of every trial round ``index`` plans."""
        plan, starts = self.state.plans[index], self._starts[index]
        for m, q in zip(*np.nonzero(plan), strict=True):
            first = int(starts[m, q])
            for t in range(first, first + int(plan[m, q])):
                yield int(m), int(q), t

    def _plan_ahead(self) -> None:
        """As ``run_core`` plans: up to ``rounds_in_flight`` rounds ahead of the evidence."""
        state = self.state
        while (in_flight := len(state.plans) - state.applied_rounds) < (
            self.core.limits.rounds_in_flight
        ):
            plan = self.core.next_plan(self.view(), in_flight)
            if plan is None:
                return
            index = len(state.plans)
            self._starts.append(state.add_plan(plan))
            awaited = [key for key in self._trials(index) if key not in self.results]
            self._round_of.update(dict.fromkeys(awaited, index))
            self._missing.append(len(awaited))

    def unused_results(self) -> int:
        """Scored trials that no applied round holds (run after the bridge disengaged, or kept
        by Inspect from an attempt whose plan went further)."""
        applied = self.state.trials
        return sum(1 for (m, q, t) in self.results if t >= int(applied[m, q]))
