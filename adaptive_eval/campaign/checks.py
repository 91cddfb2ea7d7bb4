"""The checks a campaign's inputs pass before anything runs: contents and names, scales and
goals a campaign could never meet, budgets and sections a backend would ignore.

Each raises an :class:`~adaptive_eval.base.errors.InputError` naming the file, the field and the
value. :func:`adaptive_eval.campaign.build.build_campaign` calls the two passes: the backend
plans against each other and the config (:func:`check_plans`), then the goals against the
built rules (:func:`check_goals`; with them each built pair rule's prior against the campaign's
models and rubric, :func:`check_rule_priors`). (The paths are checked where the config is settled,
:meth:`~adaptive_eval.config.schema.CampaignConfig.settle`; a backend's files, the prior's file
and a plug-in's parameters where they are built, :mod:`adaptive_eval.campaign.parts`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.parts import COMPOSITES
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.config.schema import CampaignConfig, plugin_spec
from adaptive_eval.decide.contracts import PairRule
from adaptive_eval.stats.intervals import IntervalDesign, trials_for_width

__all__ = ["check_goals", "check_plans", "check_rule_priors", "plugin_spec"]


def check_plans(config: CampaignConfig, plans: list[BackendPlan]) -> tuple[str, ...]:
    """Every entry serves models and questions under names that can be shown, the same
    questions as the others and models no other entry names; the rope, the pair rules' epsilon
    and the compare margin are below the weights' range; the weights fit each entry's
    categories; a token budget can be counted. Returns the warnings: what the config asks
    that no entry will do (:func:`_ignored_sections`)."""
    source = config.source
    _check_contents(config, plans)
    question_ids = plans[0].question_ids
    for index, plan in enumerate(plans[1:], start=1):
        if plan.question_ids != question_ids:
            raise InputError(
                f"has {len(plan.question_ids)} questions that differ from "
                f"models[0]'s {len(question_ids)}; every entry must cover the "
                "same questions",
                source=source,
                field=f"models[{index}]",
            )
    names = tuple(name for plan in plans for name in plan.models)
    _check_scale(config)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(
                f"model name {name!r} appears twice; give entries distinct names",
                source=source,
                field="models",
            )
        seen.add(name)
    weights = np.asarray(config.rubric.weights, dtype=np.float64)
    for index, plan in enumerate(plans):
        if plan.num_categories is not None and plan.num_categories != len(weights):
            raise InputError(
                f"has {len(weights)} weights but models[{index}] ({plan.describe}) has "
                f"{plan.num_categories} categories (C+1); give one weight per category",
                source=source,
                field="rubric.weights",
            )
        if plan.validate_categories is not None:
            plan.validate_categories(len(weights))
    _check_token_budget(config, plans)
    return _ignored_sections(config, plans)


def check_goals(
    config: CampaignConfig,
    design: IntervalDesign,
    capacity: np.ndarray,
    plans: list[BackendPlan],
    rules: Sequence[PairRule],
) -> None:
    """What the campaign is asked to reach, against what its rules and files allow: a width
    goal (:func:`_check_width_goal`), a fixed-N baseline no larger than a replay's recorded
    trials per question, the prior of each of the campaign's pair rules ``rules`` (as built
    from ``policy.pair_rules``) fitting the campaign (:func:`check_rule_priors`)."""
    names = [name for plan in plans for name in plan.models]
    check_rule_priors(rules, names, config.rubric.weights, config.source)
    _check_width_goal(config, design, capacity, len(plans[0].question_ids))
    recorded = [plan.capacity for plan in plans if plan.capacity is not None]
    fixed_n = config.baseline.fixed_n
    if fixed_n is not None and recorded and fixed_n > min(recorded):
        raise InputError(
            f"fixed_n={fixed_n} exceeds the {min(recorded)} "
            "trials per question recorded in a replay; the fixed-N baseline could "
            "not have been run on it",
            source=config.source,
            field="baseline.fixed_n",
        )


@runtime_checkable
class ChecksItsPrior(Protocol):
    """A pair rule that bets on an earlier run's scores (``betting``) checks them against the
    campaign: its models ``names`` and the rubric's range ``[low, high]`` (``ValueError``)."""

    def check_campaign(self, names: Sequence[str], low: float, high: float) -> None: ...


def check_rule_priors(
    rules: Sequence[PairRule],
    names: Sequence[str],
    weights: Sequence[float] | np.ndarray,
    source: str | None,
    indices: Sequence[int] | None = None,
) -> None:
    """Each built pair rule's prior fits the campaign of models ``names`` and rubric ``weights``:
    its scores within the rubric's range, at least one of its models in the campaign,
    ``prior_models`` naming models of it (:meth:`policies.betting.Betting.check_campaign`).
    ``rules`` are in ``policy.pair_rules`` order, whose index the error names; ``indices``:
    check only those (nightly checks the rules it gave last night's run)."""
    low, high = float(min(weights)), float(max(weights))
    for index, rule in enumerate(rules):
        if indices is not None and index not in indices:
            continue
        if not isinstance(rule, ChecksItsPrior):
            continue
        try:
            rule.check_campaign(names, low, high)
        except ValueError as error:
            label = pair_rules.label(pair_rules.resolved(rule).name)
            raise InputError(
                f"{label}: {error}", source=source, field=f"policy.pair_rules[{index}]"
            ) from None


def _check_contents(config: CampaignConfig, plans: list[BackendPlan]) -> None:
    """Every entry serves at least one model and one question, under names a table and a
    terminal can show (a file's names are as much input as the config's)."""
    for index, plan in enumerate(plans):
        field = f"models[{index}]"
        what = plan.describe or plan.backend
        if not plan.models:
            raise InputError(f"{what}: serves no model", source=config.source, field=field)
        if not plan.question_ids:
            raise InputError(f"{what}: has no questions", source=config.source, field=field)
        for kind, names in (("model name", plan.models), ("question id", plan.question_ids)):
            for name in names:
                if not name.strip() or not name.isprintable():
                    raise InputError(
                        f"{what}: {kind} {name!r} is empty or holds control characters",
                        source=config.source,
                        field=field,
                    )


def _check_scale(config: CampaignConfig) -> None:
    """A rope (or a pair rule's epsilon) as wide as the weights' range makes every pair
    "equivalent" without a single trial's say; a compare margin that wide passes any
    candidate."""
    span = config.rubric.span
    equivalent = "every pair would be declared equivalent"
    margin = config.compare.margin if config.compare is not None else None
    bounds = [
        ("policy.rope", config.policy.rope, equivalent),
        ("compare.margin", margin, "any candidate would pass"),
    ]
    for index, ref in enumerate(config.policy.pair_rules or []):
        _, params = plugin_spec(ref)
        bounds.append((f"policy.pair_rules[{index}].epsilon", params.get("epsilon"), equivalent))
    for field, value, meaning in bounds:
        if isinstance(value, int | float) and value >= span:
            raise InputError(
                f"{value:g} is not below the range of the rubric weights ({span:g}): {meaning}; "
                "give a difference that matters on the weights' scale",
                source=config.source,
                field=field,
            )


def _check_token_budget(config: CampaignConfig, plans: list[BackendPlan]) -> None:
    """``budget.tokens`` counts the tokens trials report: a backend that reports none would
    never reach it (the budget was accepted and silently ignored)."""
    if config.budget.tokens is None:
        return
    for index, plan in enumerate(plans):
        if not plan.reports_tokens:
            raise InputError(
                f"{config.budget.tokens} tokens cannot be counted: models[{index}] "
                f"({plan.describe or plan.backend}) reports no token counts (a scenario without "
                "tokens_mean, a replay without tokens), so this budget would never be reached; "
                "use budget.trials, or give the file its token counts",
                source=config.source,
                field="budget.tokens",
            )


def _check_width_goal(
    config: CampaignConfig, design: IntervalDesign, capacity: np.ndarray, num_questions: int
) -> None:
    """A width goal must be narrower than the weights' range, and reachable by the cap for any
    model: one whose every trial is a coin between the extreme weights (the largest per-trial
    variance, ``(span / 2)^2``) needs the most trials."""
    if design.half_width is None:
        return
    span = config.rubric.span
    field = _width_field(config)
    if 2 * design.half_width >= span:
        raise InputError(
            f"+-{design.half_width:g} (width {2 * design.half_width:g}) is not below the range "
            f"of the rubric weights ({span:g}): every interval is that wide before any trial; "
            "give a narrower width",
            source=config.source,
            field=field,
        )
    num_models = len(capacity)
    need = int(trials_for_width(np.array((span / 2) ** 2), num_questions, design, num_models))
    cap = int(capacity.min())
    if cap < need:
        where = (
            "the replay's recorded trials per question"
            if cap < config.policy.max_trials_per_question
            else f"policy.max_trials_per_question={config.policy.max_trials_per_question}"
        )
        raise InputError(
            f"+-{design.half_width:g} at {100 * design.confidence:g}% cannot be reached by the "
            f"cap for every model: one scoring halfway between the extreme weights on every "
            f"question needs {need} trials per question (M = {num_questions}), {where} allows "
            f"{cap}; raise the cap (models that need fewer trials still stop early) or widen "
            "the goal",
            source=config.source,
            field=field,
        )


def _width_field(config: CampaignConfig) -> str:
    """The config path of the (first) ci_width rule, for error messages."""

    def find(refs: list[Any], path: str) -> str | None:
        for i, ref in enumerate(refs):
            name, params = plugin_spec(ref) if not isinstance(ref, dict) else (ref.get("name"), ref)
            here = f"{path}[{i}]"
            if name == "ci_width":
                return here
            if name in COMPOSITES and isinstance(params.get("rules"), list):
                found = find(params["rules"], f"{here}.rules")
                if found:
                    return found
        return None

    return find(list(config.policy.stopping or []), "policy.stopping") or "policy.stopping"


#: Config sections only generating backends (vllm, openai) read.
GENERATION_SECTIONS = ("dataset", "sampling", "grader")


def _ignored_sections(config: CampaignConfig, plans: list[BackendPlan]) -> tuple[str, ...]:
    """Warnings for sections given that no entry of this config reads, and for a ``library:``
    given without a value (it silently meant no library)."""
    warnings: tuple[str, ...] = ()
    if "library" in config.model_fields_set and config.library is None:
        warnings += (
            "library has no value, so no trial library is used (nothing is reused or kept); "
            "give a library file or a folder to hold one, or leave the key out",
        )
    given = [name for name in GENERATION_SECTIONS if name in config.model_fields_set]
    if not given or any(plan.generating for plan in plans):
        return warnings
    backends = sorted({plan.backend for plan in plans})
    return (
        *warnings,
        f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} ignored: no model of this "
        f"config generates ({', '.join(backends)} entries draw simulated or recorded outcomes; "
        "only vllm and openai entries read a dataset, sampling and a grader)",
    )
