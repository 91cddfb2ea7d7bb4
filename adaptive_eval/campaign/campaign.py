"""The campaign a config builds: its decision spec and its run spec, side by side
(:func:`adaptive_eval.campaign.build.build_campaign` makes it; the Python API and the Inspect
bridge build theirs from values the same way).

:class:`~adaptive_eval.decide.spec.DecisionSpec` holds what decides the trials (models,
questions, weights, prior, rules, limits); :class:`RunSpec` holds how they are produced and
recorded (the settled config, the backend plans, the identity and the fixed-N baseline). The
simulator, the forecasts and compare's gate take the decision spec alone; the controller, the
run loop and the outputs take the campaign. A variant of a campaign (a pilot's trials, no
budget, compare's steering) is a typed change of the two values, and where it changes which
trials are drawn it changes the identity with it (:meth:`Campaign.with_min_trials`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.config.settings import BudgetSettings, CampaignSettings
from adaptive_eval.decide.spec import DecisionSpec

__all__ = ["Campaign", "RunSpec", "fingerprint_of"]


def _recorded_with(
    settings: CampaignSettings, edit: Callable[[dict[str, Any]], dict[str, Any]]
) -> CampaignSettings:
    """``settings`` whose run-folder record (config.yaml, as
    :meth:`~adaptive_eval.config.schema.CampaignConfig.settle` writes the config's dump) is
    ``edit`` of the recorded dump: a typed change records what a config making it would."""
    recorded = edit(yaml.safe_load(settings.run_record.config_yaml))
    text = yaml.safe_dump(recorded, sort_keys=False)
    return replace(settings, run_record=replace(settings.run_record, config_yaml=text))


def fingerprint_of(identity: dict[str, Any]) -> str:
    """The run fingerprint: sha256 of the identity's canonical JSON."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class RunSpec:
    """How a campaign's trials are produced and recorded: ``settings`` is the config, resolved
    once (nothing below the builder reads the config itself), ``plans`` its backend entries
    built, ``identity`` what decides the trials (config less execution, the files' and the
    prior's content hashes) and ``fingerprint`` its hash."""

    settings: CampaignSettings
    plans: tuple[BackendPlan, ...]
    offsets: tuple[int, ...]  # global index of each plan's first model
    fixed_n: int
    fingerprint: str
    identity: dict[str, Any]
    #: What the config asks for that this campaign will not do (shown by validate and run).
    warnings: tuple[str, ...] = ()
    #: Why the fixed-N baseline is not the N the config asked for (a cap below it), if so.
    fixed_n_note: str | None = None

    def plan_of(self, model: int) -> tuple[int, BackendPlan]:
        """The entry serving global model ``model``: its index and plan."""
        index = int(np.searchsorted(self.offsets, model, side="right")) - 1
        return index, self.plans[index]

    def with_identity(self, identity: dict[str, Any]) -> RunSpec:
        """This spec under ``identity`` (and its fingerprint)."""
        return replace(self, identity=identity, fingerprint=fingerprint_of(identity))

    def with_config_change(self, change: Callable[[dict[str, Any]], None]) -> RunSpec:
        """This spec as a config changed by ``change`` records it: ``change`` edits a config's
        dump in place, and is applied to the identity's config and to config.yaml's alike
        (both hold the config's sections under their own names); the fingerprint follows."""
        identity = copy.deepcopy(self.identity)
        change(identity["config"])

        def edit(recorded: dict[str, Any]) -> dict[str, Any]:
            change(recorded)
            return recorded

        return replace(self, settings=_recorded_with(self.settings, edit)).with_identity(identity)


@dataclass(frozen=True)
class Campaign:
    """A campaign: what decides its trials and how they are produced (see the module)."""

    decision: DecisionSpec
    run: RunSpec

    @property
    def names(self) -> tuple[str, ...]:
        return self.decision.names

    @property
    def question_ids(self) -> tuple[str, ...]:
        return self.decision.question_ids

    @property
    def num_models(self) -> int:
        return self.decision.num_models

    @property
    def num_questions(self) -> int:
        return self.decision.num_questions

    @property
    def num_categories(self) -> int:
        return self.decision.num_categories

    def without_budget(self) -> Campaign:
        """This campaign with no trial, token or wall-clock budget (a forecast applies the
        budget to its paths afterwards), recorded as a config giving none (config.yaml, the
        store's limits). The identity is kept: a budget never decides a trial."""
        none = BudgetSettings(None, None, None)

        def edit(recorded: dict[str, Any]) -> dict[str, Any]:
            recorded["budget"] = dict.fromkeys(recorded["budget"])
            return recorded

        settings = _recorded_with(self.run.settings, edit)
        record = replace(
            settings.run_record, limits=replace(settings.run_record.limits, budget=none)
        )
        settings = replace(settings, budget=none, run_record=record)
        return Campaign(self.decision.without_budget(), replace(self.run, settings=settings))

    def with_min_trials(self, trials: int) -> Campaign:
        """This campaign with every model sampled to at least ``trials`` per question (a pilot's
        trials, kept by every later leg; never lowered). The minimum decides which trials are
        drawn, so the identity, the fingerprint and the run folder's config.yaml say it, as
        they would of a config that gave it."""
        decision = self.decision.with_min_trials(trials)
        if decision is self.decision:
            return self
        minimum = decision.policy.min_trials_per_question

        def raise_minimum(config: dict[str, Any]) -> None:
            config["policy"]["min_trials_per_question"] = minimum

        run = self.run.with_config_change(raise_minimum)
        return Campaign(
            decision, replace(run, settings=replace(run.settings, policy=decision.policy))
        )

    def with_library(self, path: Path) -> Campaign:
        """This campaign keeping and reusing trials in the library ``path`` (absolute), as a
        config naming it would; the identity is kept (a library never decides a trial, it only
        holds them)."""

        def edit(recorded: dict[str, Any]) -> dict[str, Any]:
            # Where the config's dump holds it: after the grader, before compare.
            ordered = {}
            for key, value in recorded.items():
                if key != "library":
                    ordered[key] = value
                if key == "grader":
                    ordered["library"] = str(path)
            return ordered

        settings = replace(_recorded_with(self.run.settings, edit), library=path)
        return Campaign(self.decision, replace(self.run, settings=settings))

    def with_plans(self, plans: tuple[BackendPlan, ...]) -> Campaign:
        """This campaign with its entries' plans replaced (one to one, the same models)."""
        return Campaign(self.decision, replace(self.run, plans=plans))
