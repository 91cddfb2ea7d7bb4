"""The bridge's rounds: Inspect's (model, sample, epoch) runs as the decision core's trials.

Inspect runs every sample ``epochs`` times per model and asks, before each run, whether to run
it. Here trial ``t`` of cell (model, sample) is epoch ``t + 1`` of that sample for that model,
and a round is the core's round: the plan the core made (the same
:class:`~adaptive_eval.decide.core.DecisionCore` that ``adaptive-eval run`` drives, built from
the same campaign), applied whole once every trial in it has its score. The loop is
:func:`adaptive_eval.forecast.simulate.run_core`'s: decide after each applied round, then plan up
to ``rounds_in_flight`` rounds ahead. So an epoch is run iff its trial is in a plan, skipped
iff the campaign has ended without planning it, and otherwise waits for the round boundary
that settles it: nothing is decided on a partial round, and scores that arrive out of order
only count once their round is whole.

Pure and synchronous: :class:`~adaptive_eval.inspect.bridge.AdaptiveStopping` wraps it for
Inspect's event loop.
"""

from __future__ import annotations

import enum

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
    """The evidence and plans of one campaign fed by trial results in any order.

    ``record`` takes a scored trial (model, question, trial index, category) at any time;
    :meth:`fate` says whether a trial is planned, will never be, or is not known yet.
    Results for trials no plan covers yet are held until one does (an eval retried with
    ``eval_retry`` hands back the runs it kept before asking about the others).
    :attr:`decisions` and :attr:`stop` are the core's (:class:`DecidedByCore`).
    """

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
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

    # -- queries --------------------------------------------------------------------------------
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

    # -- updates --------------------------------------------------------------------------------
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
        applied = 0
        while self._round_whole():
            self._apply_next()
            applied += 1
        return applied

    def _round_whole(self) -> bool:
        index = self.state.applied_rounds
        return index < len(self.state.plans) and self._missing[index] == 0

    def _apply_next(self) -> None:
        index = self.state.applied_rounds
        plan, starts = self.state.plans[index], self._starts[index]
        delta = np.zeros(self.state.shape, dtype=np.int64)
        for m, q in zip(*np.nonzero(plan), strict=True):
            first = int(starts[m, q])
            for t in range(first, first + int(plan[m, q])):
                delta[m, q, self.results[(int(m), int(q), t)]] += 1
        self.state.apply_counts(delta)
        self.core.decide(self.view())
        self._plan_ahead()

    def _plan_ahead(self) -> None:
        """As :func:`adaptive_eval.forecast.simulate.run_core` plans: up to
        ``rounds_in_flight`` rounds ahead of the applied evidence."""
        while len(self.state.plans) - self.state.applied_rounds < self.core.limits.rounds_in_flight:
            in_flight = len(self.state.plans) - self.state.applied_rounds
            plan = self.core.next_plan(self.view(), in_flight)
            if plan is None:
                return
            self._add_plan(plan)

    def _add_plan(self, plan: np.ndarray) -> None:
        index = len(self.state.plans)
        starts = self.state.add_plan(plan)
        self._starts.append(starts)
        missing = 0
        for m, q in zip(*np.nonzero(plan), strict=True):
            first = int(starts[m, q])
            for t in range(first, first + int(plan[m, q])):
                key = (int(m), int(q), t)
                if key not in self.results:
                    self._round_of[key] = index
                    missing += 1
        self._missing.append(missing)

    # -- accounting -----------------------------------------------------------------------------
    def used_trials(self) -> np.ndarray:
        """(L, M) trials applied per cell."""
        return self.state.trials.copy()

    def unused_results(self) -> int:
        """Scored trials that no applied round holds (run after the bridge disengaged, or kept
        by Inspect from an attempt whose plan went further)."""
        applied = self.state.trials
        return sum(1 for (m, q, t) in self.results if t >= int(applied[m, q]))


__all__ = ["Fate", "RoundBook"]
