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

from adaptive_eval import registry, stats
from adaptive_eval.backends.base import BackendContext, BackendPlan
from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import DecisionRules, PluginRecord
from adaptive_eval.campaign.checks import (
    build_stopping,
    check_contents,
    check_paths,
    check_scale,
    check_token_budget,
    check_width_goal,
    ignored_sections,
    plugin_spec,
)
from adaptive_eval.config import CampaignConfig, PluginSpec, file_sha256
from adaptive_eval.decide.contracts import (
    Allocator,
    PairRule,
    PairSelector,
    StoppingRule,
    adjacent_pairs,
    any_of,
)
from adaptive_eval.decide.core import DecisionCore, Limits
from adaptive_eval.decide.noninferiority import VARIANCE_INFLATION
from adaptive_eval.decide.state import ViewSettings
from adaptive_eval.npzio import NpzFile, check_categories
from adaptive_eval.registry import allocators, backends, pair_rules, stopping_rules
from adaptive_eval.settings import BudgetSettings, CampaignSettings
from adaptive_eval.stats.intervals import LOOKS, IntervalDesign, trials_for_width

DEFAULT_FIXED_N = 80
DEFAULT_PAIR_RULE = "group_sequential"
#: Fields of the default pair rule that belong to its design (the rest come from ``policy``).
_DESIGN_FIELDS = (
    "spending",
    "looks",
    "first_look",
    "gamma",
    "horizons",
    "ratio",
    "cap_share",
    "shortest",
    "step_down",
    "futility_trials",
    "inflation",
)


def default_design() -> str:
    """The default pair rule's design, read off the parameters the registry resolved for it
    (defaults included; its looks and spending are one
    :class:`~adaptive_eval.stats.sequential.LookDesign`, the value its boundaries are built
    from), so that the fingerprint and the docs follow a changed default."""
    params = pair_rules.resolved(pair_rules.build(DEFAULT_PAIR_RULE)).params
    values = ", ".join(
        f"{name}={params[name]:g}" if isinstance(params[name], float) else f"{name}={params[name]}"
        for name in _DESIGN_FIELDS
    )
    return f"{DEFAULT_PAIR_RULE}({values})"


def describe_design() -> str:
    """The decision design in prose, for docs/sequential.md (``tests/test_core_parity.py``
    checks that the page carries this text): derived from the same values as the boundaries
    and the fingerprint."""
    rule = pair_rules.build(DEFAULT_PAIR_RULE)
    shares = rule.shares()
    return (
        f"The default pair rule, `{DEFAULT_PAIR_RULE}`, tests each adjacent pair at "
        f"{rule.design.describe()}, on {rule.horizons} horizons side by side (the cap's "
        f"information and {rule.ratio:g}x, {rule.ratio**2:g}x ... shorter ones, each used only "
        f"where it holds at least {rule.shortest} trials per question; the cap's test holds "
        f"{shares[0]:g} of the pair's budget, the shorter ones split the rest). The `ci_width` "
        f"intervals look at the same design ({LOOKS.describe()}). compare's non-inferiority "
        f"gate uses the pair rule's looks at one-sided alpha per side on a variance inflated by "
        f"{VARIANCE_INFLATION:g}; the pair rule's resolve test uses the same inflation "
        f"({rule.inflation:g}), its equivalence test none."
    )


#: Which decision rules a run was recorded under, beyond what its config names: part of the
#: identity, so a run recorded under earlier rules refuses to resume under these (and says so)
#: instead of mixing two rules in one campaign.
DECISION_RULES = (
    "5: one pure decision core (explicit rule memory) for the controller, the simulator, "
    "nightly and compare, whose core settles the candidate's pairs (with a margin, by the "
    "non-inferiority rule); Holm step-down over the adjacent pairs under error_control "
    f"ranking; futility stops (policy.futility); {default_design()}; per-trial variance "
    "centred on the model's pooled score (track_and_stop spreads a model's trials over its "
    "questions by the sd under the plain posterior mean); ci_width stops on a repeated "
    "confidence interval of "
    f"the unbiased score ({LOOKS.describe()}) and its models get trial targets; compare's "
    f"non-inferiority gate on a variance inflated by {VARIANCE_INFLATION:g}"
)


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


def _build_rules(
    config: CampaignConfig, settings: CampaignSettings
) -> tuple[tuple[PairRule, ...], StoppingRule]:
    source = config.source
    policy = config.policy
    rules = build_pair_rules(config)
    stop_refs = policy.stopping if policy.stopping is not None else ["pairs_settled"]
    stopping = [
        build_stopping(ref, source, f"policy.stopping[{i}]") for i, ref in enumerate(stop_refs)
    ]
    budget = budget_rule(settings.budget, source)
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
        rules = ", ".join(plugin_spec(ref)[0] for ref in policy.stopping)
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


def describe_rules(campaign: Campaign) -> DecisionRules:
    """What the pair rules guarantee, for summary.json and report.md."""
    policy = campaign.settings.policy
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
        if not policy.prior_trials
        else "the prior trials enter the reported Bayes@N score and the per-question variance "
        "of the test only; the decision statistic uses this campaign's own trials"
    )
    return DecisionRules(
        rules=names,
        plugins=plugin_records(campaign),
        error_control=policy.error_control,
        confidence=policy.confidence,
        pair_alpha=pair_alpha,
        rope=policy.rope,
        error_controlled=not uncontrolled,
        statistic="Decisions use the mean of per-question empirical means with the "
        "Bayesian per-trial variance (unbiased under unequal trial counts).",
        prior_in_test=prior_in_test,
        warning=warning,
    )


def plugin_records(campaign: Campaign) -> list[PluginRecord]:
    """Each registered plug-in that decides (pair rules, stopping rules, the allocator) with the
    parameters it was built with, defaults included (:func:`adaptive_eval.registry.resolved`);
    rules the campaign builds itself (compare's gate, the composite stop) are not listed."""
    stopping = campaign.stopping
    parts = [*campaign.pair_rules, *getattr(stopping, "rules", (stopping,)), campaign.allocator]
    records = []
    for part in parts:
        try:
            found = registry.resolved(part)
        except LookupError:
            continue
        params = {key: list(v) if isinstance(v, tuple) else v for key, v in found.items}
        records.append(PluginRecord(kind=found.kind, name=found.name, params=params))
    return records


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


def build_campaign(config: CampaignConfig) -> Campaign:
    source = config.source
    check_paths(config)
    settings = config.settle()  # every path in it is resolved: check_paths refused the bad ones
    plans: list[BackendPlan] = []
    for index, entry in enumerate(config.models):
        field = f"models[{index}]"
        context = BackendContext(
            campaign_seed=config.seed,
            question_ids=None,
            source=source,
            field=field,
            default_workers=settings.execution.workers,
            resolve_path=config.resolve_path,
            execution=settings.execution,
            generation=settings.generation,
        )
        plan = backends.build(
            entry.backend,
            {"entry": entry, "context": context},
            source=source,
            field=f"{field}.backend",
        )
        plans.append(plan)
    check_contents(config, plans)
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
    check_scale(config)
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
    check_token_budget(config, plans)
    offsets = tuple(int(x) for x in np.cumsum([0] + [len(p.models) for p in plans[:-1]]))
    max_trials = config.policy.max_trials_per_question
    capacity = np.asarray(
        [min(max_trials, plan.capacity or max_trials) for plan in plans for _ in plan.models],
        dtype=np.int64,
    )
    prior, prior_note, prior_hash = _build_prior(config, names, len(question_ids), len(weights))
    rules, stopping = _build_rules(config, settings)
    design = stopping.interval_design(config.policy.confidence) or IntervalDesign(
        config.policy.confidence
    )
    check_width_goal(config, design, capacity, len(question_ids))
    fixed_n, fixed_n_note = _fixed_n(
        config, plans, width_fixed_n(config, design, len(question_ids), len(names))
    )
    allocator = allocators.build(
        *plugin_spec(config.policy.allocation), source=source, field="policy.allocation"
    )
    identity = {
        "config": config.identity([plan.execution_options for plan in plans]),
        "files": [plan.files for plan in plans],
        "prior": prior_hash,
        "decision_rules": DECISION_RULES,
    }
    fingerprint = fingerprint_of(identity)
    return Campaign(
        settings,
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
        ignored_sections(config, plans),
        fixed_n_note,
    )


def width_fixed_n(
    config: CampaignConfig, design: IntervalDesign, num_questions: int, num_models: int
) -> int | None:
    """The fixed N that meets the width goal for any model (the largest per-trial variance,
    as ``validate`` states it), or ``None`` without a width goal."""
    if design.half_width is None:
        return None
    worst = np.array((config.rubric.span / 2) ** 2)
    return int(trials_for_width(worst, num_questions, design, num_models))


def _fixed_n(
    config: CampaignConfig, plans: list[BackendPlan], width_n: int | None = None
) -> tuple[int, str | None]:
    """N of the fixed-N baseline, and a note where it is not what the config asked for.

    Without ``baseline.fixed_n``, a width campaign's baseline is the fixed N of its width
    (``width_n``: a fixed-N run of 80 says nothing about a goal that needs 336), any other
    campaign's :data:`DEFAULT_FIXED_N`.

    A cap below N makes the cap the like-for-like baseline: a campaign capped at 3 trials per
    question cannot be said to save 96% against a fixed-N run of 80 it could never have been
    (``configs/vllm-tiny.yaml`` reported "saved 96.2%" while deciding nothing).
    """
    recorded = [plan.capacity for plan in plans if plan.capacity is not None]
    if config.baseline.fixed_n is None and width_n is not None:
        wanted = min([width_n, *recorded])
        asked = f"the fixed N of the width goal ({width_n} per question)"
    elif config.baseline.fixed_n is None:
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
