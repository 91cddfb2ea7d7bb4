"""The parts a campaign is built of, each made from the config: the backend plans, the prior
counts, the pair and stopping rules, the allocator and the fixed-N baseline.

This is the only place that maps names from the config to plug-in objects; the controller sees
protocols only. What can be refused only by building it (a backend's files, the prior's file, a
plug-in's parameters) is refused here, naming the file and the field;
:func:`adaptive_eval.campaign.build.build_campaign` calls these in turn with the checks of
:mod:`adaptive_eval.campaign.checks`.
"""

from __future__ import annotations

import numpy as np

from adaptive_eval import stats
from adaptive_eval.backends.base import BackendContext, BackendPlan
from adaptive_eval.base.errors import InputError
from adaptive_eval.config.registry import allocators, backends, pair_rules, stopping_rules
from adaptive_eval.config.schema import CampaignConfig, PluginSpec, file_sha256, plugin_spec
from adaptive_eval.config.settings import BudgetSettings, CampaignSettings
from adaptive_eval.decide.contracts import Allocator, PairRule, StoppingRule, all_of, any_of
from adaptive_eval.inputs.npz import NpzFile, check_categories
from adaptive_eval.stats.intervals import IntervalDesign, trials_for_width

DEFAULT_FIXED_N = 80
DEFAULT_PAIR_RULE = "group_sequential"
#: Stopping rules that combine others: ``{name: all_of, rules: [...]}``.
COMPOSITES = {"all_of": all_of, "any_of": any_of}


def build_plans(config: CampaignConfig, settings: CampaignSettings) -> list[BackendPlan]:
    """Each entry of ``models:`` built by its backend, in order (its files read and checked)."""
    plans: list[BackendPlan] = []
    for index, entry in enumerate(config.models):
        field = f"models[{index}]"
        context = BackendContext(
            campaign_seed=config.seed,
            question_ids=None,
            source=config.source,
            field=field,
            default_workers=settings.execution.workers,
            resolve_path=config.resolve_path,
            execution=settings.execution,
            generation=settings.generation,
        )
        plan = backends.build(
            entry.backend,
            {"entry": entry, "context": context},
            source=config.source,
            field=f"{field}.backend",
        )
        plans.append(plan)
    return plans


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
        refs = config.pair_rule_refs() or []  # an earlier run's path resolved as the config's
    return tuple(
        pair_rules.build(*plugin_spec(ref), source=config.source, field=f"policy.pair_rules[{i}]")
        for i, ref in enumerate(refs)
    )


def build_rules(
    config: CampaignConfig, budget_limits: BudgetSettings
) -> tuple[tuple[PairRule, ...], StoppingRule]:
    """The pair rules and the campaign's stopping rule: any of ``policy.stopping`` (default
    ``pairs_settled``) and the budget's."""
    source = config.source
    policy = config.policy
    rules = build_pair_rules(config)
    stop_refs = policy.stopping if policy.stopping is not None else ["pairs_settled"]
    stopping = [
        build_stopping(ref, source, f"policy.stopping[{i}]") for i, ref in enumerate(stop_refs)
    ]
    budget = budget_rule(budget_limits, source)
    if budget is not None:
        stopping.append(budget)
    return rules, any_of(*stopping)


def budget_rule(budget: BudgetSettings, source: str) -> StoppingRule | None:
    """The ``budget`` stopping rule for the campaign's limits, or None when it sets none."""
    if not budget.is_set:
        return None
    rule: StoppingRule = stopping_rules.build(
        "budget", budget.record(), source=source, field="budget"
    )
    return rule


def prior_counts(
    config: CampaignConfig, names: tuple[str, ...], num_questions: int, num_categories: int
) -> tuple[np.ndarray, str, str | None]:
    """The Dirichlet prior counts n0 (L, M, K), the prior in words, and the hash of the
    ``policy.prior`` file they hold trials of (None without one)."""
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


def width_fixed_n(
    config: CampaignConfig, design: IntervalDesign, num_questions: int, num_models: int
) -> int | None:
    """The fixed N that meets the width goal for any model (the largest per-trial variance,
    as ``validate`` states it), or ``None`` without a width goal."""
    if design.half_width is None:
        return None
    worst = np.array((config.rubric.span / 2) ** 2)
    return int(trials_for_width(worst, num_questions, design, num_models))


def fixed_n_baseline(
    config: CampaignConfig, plans: list[BackendPlan], width_n: int | None = None
) -> tuple[int, str | None]:
    """N of the fixed-N baseline, and a note where it is not what the config asked for.

    Without ``baseline.fixed_n``, a width campaign's baseline is the fixed N of its width
    (``width_n``: a fixed-N run of 80 says nothing about a goal that needs 336), any other
    campaign's :data:`DEFAULT_FIXED_N`.

    A cap below N makes the cap the like-for-like baseline: a campaign capped at 3 trials per
    question cannot be said to save 96% against a fixed-N run of 80 it could never have been
    (``configs/vllm-tiny.yaml`` reported "saved 96.2%" while deciding nothing). A
    ``baseline.fixed_n`` above a replay's recorded trials is refused before
    (:func:`adaptive_eval.campaign.checks.check_goals`).
    """
    recorded = [plan.capacity for plan in plans if plan.capacity is not None]
    if config.baseline.fixed_n is None and width_n is not None:
        wanted = min([width_n, *recorded])
        asked = f"the fixed N of the width goal ({width_n} per question)"
    elif config.baseline.fixed_n is None:
        wanted = min([DEFAULT_FIXED_N, *recorded])
        asked = f"the default N = {DEFAULT_FIXED_N}"
    else:
        wanted = config.baseline.fixed_n
        asked = f"baseline.fixed_n = {wanted}"
    cap = config.policy.max_trials_per_question
    if wanted <= cap:
        return wanted, None
    return cap, (
        f"the cap: max_trials_per_question = {cap} is below {asked}, so a fixed-N run of "
        f"{cap} is the like-for-like baseline"
    )


def build_allocator(config: CampaignConfig) -> Allocator:
    """The allocation policy ``policy.allocation`` names."""
    allocator: Allocator = allocators.build(
        *plugin_spec(config.policy.allocation), source=config.source, field="policy.allocation"
    )
    return allocator
