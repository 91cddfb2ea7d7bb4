"""The campaign a config builds: everything the controller, the run loop and the outputs need,
resolved and validated (:func:`adaptive_eval.campaign.build.build_campaign` makes it).

A value only: it holds the settled config (``settings``), the backend plans and the built
plug-ins, and hands them out as the decision core and the views' settings. No module that reads
a :class:`Campaign` reads the config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.config.settings import BudgetSettings, CampaignSettings
from adaptive_eval.decide.contracts import (
    Allocator,
    PairRule,
    PairSelector,
    StoppingRule,
    adjacent_pairs,
    without_budget,
)
from adaptive_eval.decide.core import DecisionCore, Limits
from adaptive_eval.decide.state import ViewSettings
from adaptive_eval.stats.intervals import IntervalDesign


@dataclass(frozen=True)
class Campaign:
    """Everything the controller needs, resolved and validated. ``settings`` is the config,
    resolved once: nothing below the builder reads the config itself."""

    settings: CampaignSettings
    plans: tuple[BackendPlan, ...]
    offsets: tuple[int, ...]  # global index of each plan's first model
    names: tuple[str, ...]
    question_ids: tuple[str, ...]
    weights: np.ndarray
    capacity: np.ndarray  # (L,) most trials per question per model
    prior: np.ndarray  # (L, M, K) Dirichlet prior counts n0
    prior_note: str
    pair_rules: tuple[PairRule, ...]
    stopping: StoppingRule
    allocator: Allocator
    interval_design: IntervalDesign  # how each model's reported score interval is built
    fixed_n: int
    fingerprint: str  # hash of ``identity``
    identity: dict[str, Any]  # what decides the trials: config (less execution), files, prior
    #: What the config asks for that this campaign will not do (shown by validate and run).
    warnings: tuple[str, ...] = ()
    #: Why the fixed-N baseline is not the N the config asked for (a cap below it), if so.
    fixed_n_note: str | None = None
    #: The pairs the campaign settles (the ranking's adjacent pairs; compare adds the
    #: candidate's pairs).
    pairs: PairSelector = adjacent_pairs

    @property
    def num_models(self) -> int:
        return len(self.names)

    @property
    def num_questions(self) -> int:
        return len(self.question_ids)

    @property
    def num_categories(self) -> int:
        return len(self.weights)

    def without_budget(self) -> Campaign:
        """This campaign with no trial, token or wall-clock budget (a forecast applies the
        budget to its paths afterwards): the ``budget`` stopping rule and the limits gone, all
        else (identity included: a budget never decides a trial) as built."""
        settings = replace(self.settings, budget=BudgetSettings(None, None, None))
        return replace(self, settings=settings, stopping=without_budget(self.stopping))

    def decision_core(self) -> DecisionCore:
        """The campaign's decision rules as one core (:mod:`adaptive_eval.decide.core`)."""
        settings = self.settings
        limits = Limits(
            round_trials=settings.policy.round_trials,
            rounds_in_flight=settings.execution.rounds_in_flight,
            max_trials_per_question=settings.policy.max_trials_per_question,
            trial_budget=settings.budget.trials,
        )
        return DecisionCore(self.pair_rules, self.stopping, self.allocator, limits, self.pairs)

    def view_settings(self) -> ViewSettings:
        """What every view of this campaign carries besides the evidence."""
        policy = self.settings.policy
        return ViewSettings(
            self.names,
            self.capacity,
            policy.confidence,
            policy.min_trials_per_question,
            policy.rope,
            policy.error_control,
            policy.futility,
        )

    def plan_of(self, model: int) -> tuple[int, BackendPlan]:
        index = int(np.searchsorted(self.offsets, model, side="right")) - 1
        return index, self.plans[index]
