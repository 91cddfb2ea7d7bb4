"""The checks a campaign's inputs pass before anything runs: contents and names, scales and
goals a campaign could never meet, paths, budgets and sections a backend would ignore.

Each raises an :class:`~adaptive_eval.base.errors.InputError` naming the file, the field and the
value; :func:`adaptive_eval.campaign.build.build_campaign` calls them in order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.errors import InputError
from adaptive_eval.config import CampaignConfig, PluginSpec
from adaptive_eval.decide.contracts import StoppingRule, all_of, any_of
from adaptive_eval.inputfiles import not_a_device
from adaptive_eval.registry import stopping_rules
from adaptive_eval.stats.intervals import IntervalDesign, trials_for_width

#: Stopping rules that combine others: ``{name: all_of, rules: [...]}``.
COMPOSITES = {"all_of": all_of, "any_of": any_of}


def plugin_spec(ref: str | PluginSpec) -> tuple[str, dict[str, Any]]:
    return (ref, {}) if isinstance(ref, str) else (ref.name, ref.params())


def build_stopping(ref: str | PluginSpec, source: str | None, field: str) -> StoppingRule:
    """One stopping rule; ``all_of`` / ``any_of`` build their ``rules`` the same way."""
    name, params = plugin_spec(ref)
    if name not in COMPOSITES:
        rule: StoppingRule = stopping_rules.build(name, params, source=source, field=field)
        return rule
    children = params.pop("rules", None)
    if params or not isinstance(children, list) or not children:
        raise InputError(
            f"{name} takes one parameter, rules: a non-empty list of stopping rules "
            f"(got {sorted(params) or children!r})",
            source=source,
            field=field,
        )
    built = []
    for j, child in enumerate(children):
        if not isinstance(child, str | dict) or (isinstance(child, dict) and "name" not in child):
            raise InputError(
                f"rules[{j}] must be a rule name or {{name: ..., ...}}, got {child!r}",
                source=source,
                field=field,
            )
        spec = child if isinstance(child, str) else PluginSpec(**child)
        built.append(build_stopping(spec, source, f"{field}.rules[{j}]"))
    return COMPOSITES[name](*built)


def check_width_goal(
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


def check_paths(config: CampaignConfig) -> None:
    """No path in the config may name a device, a pipe or a socket (reading one never ends)."""
    named = [(f"models[{i}].path", entry.path) for i, entry in enumerate(config.models)]
    named.append(("dataset.path", config.dataset.path if config.dataset else None))
    named.append(("policy.prior.path", config.policy.prior.path if config.policy.prior else None))
    named.append(("library", config.library))
    for field, path in named:
        if path is not None:
            not_a_device(config.resolve_path(path), source=config.source, field=field)


def check_token_budget(config: CampaignConfig, plans: list[BackendPlan]) -> None:
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


#: Config sections only generating backends (vllm, openai) read.
GENERATION_SECTIONS = ("dataset", "sampling", "grader")


def ignored_sections(config: CampaignConfig, plans: list[BackendPlan]) -> tuple[str, ...]:
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


def check_contents(config: CampaignConfig, plans: list[BackendPlan]) -> None:
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


def check_scale(config: CampaignConfig) -> None:
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
