"""Turn a validated config into a runnable :class:`Campaign`. No Ray calls happen here.

This is the only place that maps names from the config to plug-in objects; the controller sees
protocols only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaptive_eval import stats
from adaptive_eval.backends.base import BackendContext, BackendPlan
from adaptive_eval.config import CampaignConfig, PluginSpec, file_sha256
from adaptive_eval.errors import InputError
from adaptive_eval.inputfiles import not_a_device
from adaptive_eval.npzio import NpzFile, check_categories
from adaptive_eval.policy import Allocator, PairRule, StoppingRule, all_of, any_of
from adaptive_eval.registry import allocators, backends, pair_rules, stopping_rules
from adaptive_eval.stats.intervals import IntervalDesign, trials_for_width

DEFAULT_FIXED_N = 80
DEFAULT_PAIR_RULE = "group_sequential"
#: Which decision rules a run was recorded under, beyond what its config names: part of the
#: identity, so a run recorded under earlier rules refuses to resume under these (and says so)
#: instead of mixing two rules in one campaign.
DECISION_RULES = (
    "3: Holm step-down over the adjacent pairs under error_control ranking; futility stops "
    "(policy.futility, from 8 trials per question); group_sequential with shorter horizons "
    "(horizons=3, ratio=4, cap_share=0.5, shortest=16); per-trial variance centred on the "
    "model's pooled score; ci_width stops on a repeated confidence interval of the unbiased "
    "score (12 looks, HSD -4) and its models get trial targets"
)
#: Stopping rules that combine others: ``{name: all_of, rules: [...]}``.
COMPOSITES = {"all_of": all_of, "any_of": any_of}


@dataclass(frozen=True)
class Campaign:
    """Everything the controller needs, resolved and validated."""

    config: CampaignConfig
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

    @property
    def num_models(self) -> int:
        return len(self.names)

    @property
    def num_questions(self) -> int:
        return len(self.question_ids)

    @property
    def num_categories(self) -> int:
        return len(self.weights)

    def plan_of(self, model: int) -> tuple[int, BackendPlan]:
        index = int(np.searchsorted(self.offsets, model, side="right")) - 1
        return index, self.plans[index]


def _spec(ref: str | PluginSpec) -> tuple[str, dict[str, Any]]:
    return (ref, {}) if isinstance(ref, str) else (ref.name, ref.params())


def build_pair_rules(config: CampaignConfig) -> tuple[PairRule, ...]:
    """Fresh pair rules of the config. Sequential rules keep per-pair state, so every
    independent sequence of looks (a campaign, one nightly comparison) needs its own."""
    policy = config.policy
    if policy.pair_rules is None:
        # One error-controlled boundary both resolves pairs and declares equivalence within
        # policy.rope (read from the view), at the budget set by policy.error_control.
        refs: list[str | PluginSpec] = [DEFAULT_PAIR_RULE]
    elif not policy.pair_rules:
        raise InputError(
            "is empty: no pair could ever be decided, so the campaign would sample every model "
            f"to the cap and report every pair undecided; leave it out for the default "
            f"({DEFAULT_PAIR_RULE}) or name a rule",
            source=config.source,
            field="policy.pair_rules",
        )
    else:
        refs = list(policy.pair_rules)
    return tuple(
        pair_rules.build(*_spec(ref), source=config.source, field=f"policy.pair_rules[{i}]")
        for i, ref in enumerate(refs)
    )


def _build_rules(config: CampaignConfig) -> tuple[tuple[PairRule, ...], StoppingRule]:
    source = config.source
    policy = config.policy
    rules = build_pair_rules(config)
    stop_refs = policy.stopping if policy.stopping is not None else ["pairs_settled"]
    stopping = [
        _build_stopping(ref, source, f"policy.stopping[{i}]") for i, ref in enumerate(stop_refs)
    ]
    budget = budget_rule(config)
    if budget is not None:
        stopping.append(budget)
    return rules, any_of(*stopping)


def _build_stopping(ref: str | PluginSpec, source: str | None, field: str) -> StoppingRule:
    """One stopping rule; ``all_of`` / ``any_of`` build their ``rules`` the same way."""
    name, params = _spec(ref)
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
        built.append(_build_stopping(spec, source, f"{field}.rules[{j}]"))
    return COMPOSITES[name](*built)


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
            name, params = _spec(ref) if not isinstance(ref, dict) else (ref.get("name"), ref)
            here = f"{path}[{i}]"
            if name == "ci_width":
                return here
            if name in COMPOSITES and isinstance(params.get("rules"), list):
                found = find(params["rules"], f"{here}.rules")
                if found:
                    return found
        return None

    return find(list(config.policy.stopping or []), "policy.stopping") or "policy.stopping"


def budget_rule(config: CampaignConfig) -> StoppingRule | None:
    """The ``budget`` stopping rule for the config's limits, or None when it sets none."""
    budget = config.budget
    if not (budget.trials or budget.tokens or budget.wall_clock_s):
        return None
    rule: StoppingRule = stopping_rules.build(
        "budget",
        {"trials": budget.trials, "tokens": budget.tokens, "wall_clock_s": budget.wall_clock_s},
        source=config.source,
        field="budget",
    )
    return rule


def describe_stopping(config: CampaignConfig) -> str:
    """What stops the campaign, in words (``validate`` prints it): an empty
    ``policy.stopping`` is the fixed-N run, and says so."""
    policy = config.policy
    if policy.stopping is None:
        rules = "pairs_settled (the default: once every adjacent pair is settled or futile)"
    elif not policy.stopping:
        rules = (
            "none (policy.stopping is empty): every model is sampled to max_trials_per_question"
            f" = {policy.max_trials_per_question} on every question whatever the decisions, "
            "as a fixed-N run"
        )
    else:
        rules = ", ".join(_spec(ref)[0] for ref in policy.stopping)
    budget = config.budget
    limits = [
        f"{name} {value}"
        for name, value in (
            ("trials", budget.trials),
            ("tokens", budget.tokens),
            ("wall clock s", budget.wall_clock_s),
        )
        if value is not None
    ]
    return rules + (f"; and the budget ({', '.join(limits)})" if limits else "")


def fingerprint_of(identity: dict[str, Any]) -> str:
    """The run fingerprint: sha256 of the identity's canonical JSON."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def describe_rules(campaign: Campaign) -> dict[str, Any]:
    """What the pair rules guarantee, for summary.json and report.md."""
    policy = campaign.config.policy
    alpha = 1 - policy.confidence
    pair_alpha = (
        alpha / max(1, campaign.num_models - 1) if policy.error_control == "ranking" else alpha
    )
    names = [getattr(rule, "name", type(rule).__name__) for rule in campaign.pair_rules]
    uncontrolled = [
        name
        for name, rule in zip(names, campaign.pair_rules, strict=True)
        if not rule.error_controlled
    ]
    warning = None
    if uncontrolled:
        warning = (
            f"rule(s) {', '.join(uncontrolled)} test the posterior after every round without a "
            "correction for repeated looks: their error rate is NOT controlled at "
            f"1 - confidence = {alpha:.3g} (a true tie is resolved in 38% of campaigns at "
            "M = 30; benchmarks/sequential.py). Use group_sequential or anytime."
        )
    prior_in_test = (
        "none: the decision statistic is the unbiased estimate; policy.bayes_prior shapes "
        "only the reported Bayes@N"
        if policy.prior is None
        else "the prior trials enter the reported Bayes@N score and the per-question variance "
        "of the test only; the decision statistic uses this campaign's own trials"
    )
    return {
        "rules": names,
        "error_control": policy.error_control,
        "confidence": policy.confidence,
        "pair_alpha": pair_alpha,
        "rope": policy.rope,
        "error_controlled": not uncontrolled,
        "statistic": "Decisions use the mean of per-question empirical means with the "
        "Bayesian per-trial variance (unbiased under unequal trial counts).",
        "prior_in_test": prior_in_test,
        "warning": warning,
    }


def _build_prior(
    config: CampaignConfig, names: tuple[str, ...], num_questions: int, num_categories: int
) -> tuple[np.ndarray, str, str | None]:
    uniform = np.ones((len(names), num_questions, num_categories))
    prior_config = config.policy.prior
    base = (
        "empirical-Bayes Dirichlet per model (fitted to its own questions)"
        if config.policy.bayes_prior == "empirical"
        else "uniform Dirichlet(1, ..., 1) per question"
    )
    if prior_config is None:
        return uniform, base, None
    path = config.resolve_path(prior_config.path)
    file = NpzFile(path, field="policy.prior")
    outcomes = file.get(prior_config.key, ndim=(2, 3), kind="i").astype(np.int64)
    if outcomes.ndim == 2:
        outcomes = np.broadcast_to(outcomes, (len(names), *outcomes.shape))
    if outcomes.shape[:2] != (len(names), num_questions):
        raise file.error(
            prior_config.key,
            f"shape {outcomes.shape} does not match (L, M) = {(len(names), num_questions)}",
        )
    check_categories(outcomes, num_categories, file=file, name=prior_config.key)
    kept = outcomes[:, :, : prior_config.max_trials]
    prior = uniform + stats.counts_from_outcomes(kept, num_categories)
    note = (
        f"{base} + {kept.shape[2]} prior trials per question from {path.name}"
        f"[{prior_config.key}] (capped at policy.prior.max_trials={prior_config.max_trials}"
        f" of {outcomes.shape[2]} recorded)"
    )
    return prior, note, file_sha256(path)


def _check_paths(config: CampaignConfig) -> None:
    """No path in the config may name a device, a pipe or a socket (reading one never ends)."""
    named = [(f"models[{i}].path", entry.path) for i, entry in enumerate(config.models)]
    named.append(("dataset.path", config.dataset.path if config.dataset else None))
    named.append(("policy.prior.path", config.policy.prior.path if config.policy.prior else None))
    named.append(("library", config.library))
    for field, path in named:
        if path is not None:
            not_a_device(config.resolve_path(path), source=config.source, field=field)


def build_campaign(config: CampaignConfig) -> Campaign:
    source = config.source
    _check_paths(config)
    plans: list[BackendPlan] = []
    for index, entry in enumerate(config.models):
        field = f"models[{index}]"
        context = BackendContext(
            campaign_seed=config.seed,
            question_ids=None,
            source=source,
            field=field,
            default_workers=config.execution.workers,
            resolve_path=config.resolve_path,
            extras={"config": config},
        )
        plan = backends.build(
            entry.backend,
            {"entry": entry, "context": context},
            source=source,
            field=f"{field}.backend",
        )
        plans.append(plan)
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
    offsets = tuple(int(x) for x in np.cumsum([0] + [len(p.models) for p in plans[:-1]]))
    max_trials = config.policy.max_trials_per_question
    capacity = np.asarray(
        [min(max_trials, plan.capacity or max_trials) for plan in plans for _ in plan.models],
        dtype=np.int64,
    )
    fixed_n, fixed_n_note = _fixed_n(config, plans)
    prior, prior_note, prior_hash = _build_prior(config, names, len(question_ids), len(weights))
    rules, stopping = _build_rules(config)
    design = stopping.interval_design(config.policy.confidence) or IntervalDesign(
        config.policy.confidence
    )
    _check_width_goal(config, design, capacity, len(question_ids))
    allocator = allocators.build(
        *_spec(config.policy.allocation), source=source, field="policy.allocation"
    )
    identity = {
        "config": config.identity([plan.execution_options for plan in plans]),
        "files": [plan.files for plan in plans],
        "prior": prior_hash,
        "decision_rules": DECISION_RULES,
    }
    fingerprint = fingerprint_of(identity)
    return Campaign(
        config,
        tuple(plans),
        offsets,
        names,
        question_ids,
        weights,
        capacity,
        prior,
        prior_note,
        rules,
        stopping,
        allocator,
        design,
        fixed_n,
        fingerprint,
        identity,
        _ignored_sections(config, plans),
        fixed_n_note,
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


#: Config sections only generating backends (vllm, openai) read.
GENERATION_SECTIONS = ("dataset", "sampling", "grader")


def _ignored_sections(config: CampaignConfig, plans: list[BackendPlan]) -> tuple[str, ...]:
    """Warnings for sections given that no entry of this config reads."""
    given = [name for name in GENERATION_SECTIONS if name in config.model_fields_set]
    if not given or any(plan.generating for plan in plans):
        return ()
    backends = sorted({plan.backend for plan in plans})
    return (
        f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} ignored: no model of this "
        f"config generates ({', '.join(backends)} entries draw simulated or recorded outcomes; "
        "only vllm and openai entries read a dataset, sampling and a grader)",
    )


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
        _, params = _spec(ref)
        bounds.append((f"policy.pair_rules[{index}].epsilon", params.get("epsilon"), equivalent))
    for field, value, meaning in bounds:
        if isinstance(value, int | float) and value >= span:
            raise InputError(
                f"{value:g} is not below the range of the rubric weights ({span:g}): {meaning}; "
                "give a difference that matters on the weights' scale",
                source=config.source,
                field=field,
            )


def _fixed_n(config: CampaignConfig, plans: list[BackendPlan]) -> tuple[int, str | None]:
    """N of the fixed-N baseline, and a note where it is not what the config asked for.

    A cap below N makes the cap the like-for-like baseline: a campaign capped at 3 trials per
    question cannot be said to save 96% against a fixed-N run of 80 it could never have been
    (``configs/vllm-tiny.yaml`` reported "saved 96.2%" while deciding nothing).
    """
    recorded = [plan.capacity for plan in plans if plan.capacity is not None]
    if config.baseline.fixed_n is None:
        wanted = min([DEFAULT_FIXED_N, *recorded])
        asked = f"the default N = {DEFAULT_FIXED_N}"
    else:
        if recorded and config.baseline.fixed_n > min(recorded):
            raise InputError(
                f"fixed_n={config.baseline.fixed_n} exceeds the {min(recorded)} "
                "trials per question recorded in a replay; the fixed-N baseline could "
                "not have been run on it",
                source=config.source,
                field="baseline.fixed_n",
            )
        wanted = config.baseline.fixed_n
        asked = f"baseline.fixed_n = {wanted}"
    cap = config.policy.max_trials_per_question
    if wanted <= cap:
        return wanted, None
    return cap, (
        f"the cap: max_trials_per_question = {cap} is below {asked}, so a fixed-N run of "
        f"{cap} is the like-for-like baseline"
    )
