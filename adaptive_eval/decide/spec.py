"""The decision spec: everything the decision core needs of a campaign and nothing about how
its trials are produced.

One frozen value holds the models and questions, the rubric's weights, the prior counts, the
``policy`` settings, the pair and stopping rules, the allocator, the limits and the interval
design. The in-process simulator, both forecasts (and the live forecast's process), the
automatic pilot and compare's gate read it alone; none of them reads a config, a backend plan or
a run folder (those are the run spec's, :class:`adaptive_eval.campaign.campaign.RunSpec`, which
the controller reads beside it). As Ray Tune keeps ``TuneConfig`` (what is
searched and how it is decided) apart from ``RunConfig`` (where and how it runs), a campaign is
the two values side by side (:class:`adaptive_eval.campaign.campaign.Campaign`).

Variants of a campaign are typed changes of this value, never patches of a config:
:meth:`DecisionSpec.without_budget` (a forecast's paths, the budget applied afterwards),
:meth:`DecisionSpec.with_min_trials` (a pilot's trials, which every later leg keeps) and
:meth:`DecisionSpec.steered` (compare's gate: its pair rules, pairs, stop and allocator).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from adaptive_eval.config.settings import PolicySettings
from adaptive_eval.decide.contracts import (
    Allocator,
    PairRule,
    PairSelector,
    StoppingRule,
    adjacent_pairs,
    without_budget,
)
from adaptive_eval.decide.core import DecisionCore, Limits
from adaptive_eval.decide.state import RunState, ViewSettings
from adaptive_eval.stats.intervals import IntervalDesign

__all__ = ["DecisionSpec"]


@dataclass(frozen=True)
class DecisionSpec:
    """What decides a campaign's trials and its stop (see the module). Arrays are
    ``weights`` (K,), ``capacity`` (L,) most trials per question per model and ``prior``
    (L, M, K) the Dirichlet prior counts n0."""

    names: tuple[str, ...]
    question_ids: tuple[str, ...]
    weights: np.ndarray
    capacity: np.ndarray
    prior: np.ndarray
    prior_note: str  # the prior in words (report.md)
    policy: PolicySettings
    limits: Limits
    pair_rules: tuple[PairRule, ...]
    stopping: StoppingRule
    allocator: Allocator
    interval_design: IntervalDesign  # how each model's reported score interval is built
    #: max - min of the weights: the range every score and difference lies in.
    rubric_span: float
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

    def decision_core(self) -> DecisionCore:
        """The rules as one core (:mod:`adaptive_eval.decide.core`), with a fresh rule memory."""
        return DecisionCore(self.pair_rules, self.stopping, self.allocator, self.limits, self.pairs)

    def empty_state(self) -> RunState:
        """The state of a campaign before its first trial: the prior counts alone."""
        return RunState(self.prior, self.weights, bayes_prior=self.policy.bayes_prior)

    def view_settings(self) -> ViewSettings:
        """What every view of the campaign carries besides the evidence."""
        policy = self.policy
        return ViewSettings(
            self.names,
            self.capacity,
            policy.confidence,
            policy.min_trials_per_question,
            policy.rope,
            policy.error_control,
            policy.futility,
        )

    def without_budget(self) -> DecisionSpec:
        """This spec with no trial budget: the ``budget`` stopping rule and the limit gone (a
        forecast applies the budget to its paths afterwards)."""
        return replace(
            self,
            stopping=without_budget(self.stopping),
            limits=replace(self.limits, trial_budget=None),
        )

    def with_min_trials(self, trials: int) -> DecisionSpec:
        """This spec with every model sampled to at least ``trials`` per question before any
        decision (a pilot's trials; never lowered)."""
        if self.policy.min_trials_per_question >= trials:
            return self
        return replace(self, policy=replace(self.policy, min_trials_per_question=trials))

    def steered(
        self,
        pair_rules: tuple[PairRule, ...],
        pairs: PairSelector,
        stopping: StoppingRule,
        allocator: Allocator,
    ) -> DecisionSpec:
        """This spec deciding other pairs by other rules (compare's gate), all else kept."""
        return replace(
            self, pair_rules=pair_rules, pairs=pairs, stopping=stopping, allocator=allocator
        )
