"""Turn a validated config into a runnable :class:`Campaign`: the config settled, its inputs
checked, its parts built. No Ray calls happen here.

:func:`build_campaign` reads as the order of it: the settled config (every path checked), the
backend plans (their files read), the plans checked against each other and the config
(:mod:`adaptive_eval.campaign.checks`), the prior counts and the rules
(:mod:`adaptive_eval.campaign.parts`, the only place config names become plug-in objects), the
goals checked against the rules, then the campaign assembled with its identity. A bad config is
refused at the first of these that finds it, always the same one.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.summary_schema import DecisionRules, PluginRecord
from adaptive_eval.campaign.campaign import Campaign, RunSpec, fingerprint_of
from adaptive_eval.campaign.checks import check_goals, check_plans, check_rule_priors
from adaptive_eval.campaign.parts import (
    DEFAULT_PAIR_RULE,
    build_allocator,
    build_plans,
    build_rules,
    fixed_n_baseline,
    prior_counts,
    width_fixed_n,
)
from adaptive_eval.config import registry
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.config.schema import CampaignConfig, PluginSpec, plugin_spec
from adaptive_eval.decide.contracts import PairRule
from adaptive_eval.decide.core import Limits
from adaptive_eval.decide.noninferiority import VARIANCE_INFLATION
from adaptive_eval.decide.spec import DecisionSpec
from adaptive_eval.stats.intervals import LOOKS, IntervalDesign

__all__ = [
    "DECISION_RULES",
    "build_campaign",
    "default_design",
    "describe_design",
    "describe_rules",
    "describe_stopping",
    "plugin_records",
    "with_rule_prior",
]

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


def build_campaign(config: CampaignConfig) -> Campaign:
    """The campaign ``config`` describes, or the first :class:`InputError` it meets."""
    settings = config.settle()  # every path resolved, none naming a device
    plans = build_plans(config, settings)
    warnings = check_plans(config, plans)
    question_ids = plans[0].question_ids
    names = tuple(name for plan in plans for name in plan.models)
    weights = np.asarray(config.rubric.weights, dtype=np.float64)
    offsets = tuple(int(x) for x in np.cumsum([0] + [len(p.models) for p in plans[:-1]]))
    max_trials = settings.policy.max_trials_per_question
    capacity = np.asarray(
        [min(max_trials, plan.capacity or max_trials) for plan in plans for _ in plan.models],
        dtype=np.int64,
    )
    prior, prior_note, prior_hash = prior_counts(config, names, len(question_ids), len(weights))
    rules, stopping = build_rules(config, settings.budget)
    confidence = settings.policy.confidence
    design = stopping.interval_design(confidence) or IntervalDesign(confidence)
    check_goals(config, design, capacity, plans, rules)
    allocator = build_allocator(config)
    fixed_n, fixed_n_note = fixed_n_baseline(
        config, plans, width_fixed_n(config, design, len(question_ids), len(names))
    )
    identity = {
        "config": rule_priors_by_content(
            config.identity([plan.execution_options for plan in plans]), rules
        ),
        "files": [plan.files for plan in plans],
        "prior": prior_hash,
        "decision_rules": DECISION_RULES,
    }
    limits = Limits(
        round_trials=settings.policy.round_trials,
        rounds_in_flight=settings.execution.rounds_in_flight,
        max_trials_per_question=max_trials,
        trial_budget=settings.budget.trials,
    )
    decision = DecisionSpec(
        names,
        question_ids,
        weights,
        capacity,
        prior,
        prior_note,
        settings.policy,
        limits,
        rules,
        stopping,
        allocator,
        design,
        settings.rubric_span,
    )
    run = RunSpec(
        settings,
        tuple(plans),
        offsets,
        fixed_n,
        fingerprint_of(identity),
        identity,
        warnings,
        fixed_n_note,
    )
    return Campaign(decision, run)


def with_rule_prior(campaign: Campaign, indices: Sequence[int], prior: Path) -> Campaign:
    """``campaign`` with each pair rule at ``indices`` (``betting`` rules that name no earlier
    run) betting on the earlier run ``prior`` (an absolute folder), as a config giving them that
    ``prior`` would build it: the rules built anew (the run's scores read, an unreadable or
    unfitting run refused naming ``policy.pair_rules[i]``), the identity naming the scores by
    content (:func:`rule_priors_by_content`) and config.yaml the run (nightly's last night)."""
    source = campaign.run.settings.source

    def give_prior(config: dict[str, Any]) -> None:
        refs = config["policy"]["pair_rules"]
        for index in indices:
            ref = refs[index] if isinstance(refs[index], dict) else {"name": refs[index]}
            refs[index] = {**ref, "prior": str(prior)}

    run = campaign.run.with_config_change(give_prior)
    refs = run.identity["config"]["policy"]["pair_rules"]
    rules = list(campaign.decision.pair_rules)
    for index in indices:
        name, params = plugin_spec(PluginSpec(**refs[index]))
        field = f"policy.pair_rules[{index}]"
        rules[index] = pair_rules.build(name, params, source=source, field=field)
    decision = campaign.decision
    check_rule_priors(rules, decision.names, decision.weights, source, indices)
    by_content = rule_priors_by_content(copy.deepcopy(run.identity["config"]), tuple(rules))
    run = run.with_identity({**run.identity, "config": by_content})
    return Campaign(replace(decision, pair_rules=tuple(rules)), run)


def rule_priors_by_content(
    config_identity: dict[str, Any], rules: tuple[PairRule, ...]
) -> dict[str, Any]:
    """``config_identity`` with each pair rule's earlier run (``betting``'s ``prior``) named by
    the scores the rule read from it (sha256 of their canonical JSON), not by where it lies: a
    prior copied or moved is the same campaign, one rewritten in place is another."""
    refs = config_identity["policy"].get("pair_rules")
    if not refs:
        return config_identity
    for ref, rule in zip(refs, rules, strict=True):
        scores = getattr(rule, "prior_scores", None)
        if isinstance(ref, dict) and isinstance(ref.get("prior"), str) and scores is not None:
            canonical = json.dumps({name: list(pair) for name, pair in sorted(scores.items())})
            ref["prior"] = {"scores_sha256": hashlib.sha256(canonical.encode()).hexdigest()}
    return config_identity


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


def describe_rules(campaign: Campaign) -> DecisionRules:
    """What the pair rules guarantee, for summary.json and report.md."""
    decision = campaign.decision
    policy = decision.policy
    alpha = 1 - policy.confidence
    pair_alpha = (
        alpha / max(1, campaign.num_models - 1) if policy.error_control == "ranking" else alpha
    )
    names = [getattr(rule, "name", type(rule).__name__) for rule in decision.pair_rules]
    uncontrolled = [
        name
        for name, rule in zip(names, decision.pair_rules, strict=True)
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
    parameters it was built with, defaults included
    (:func:`adaptive_eval.config.registry.resolved`);
    rules the campaign builds itself (compare's gate, the composite stop) are not listed."""
    decision = campaign.decision
    stopping = decision.stopping
    parts = [*decision.pair_rules, *getattr(stopping, "rules", (stopping,)), decision.allocator]
    records = []
    for part in parts:
        try:
            found = registry.resolved(part)
        except LookupError:
            continue
        params = {key: list(v) if isinstance(v, tuple) else v for key, v in found.items}
        records.append(PluginRecord(kind=found.kind, name=found.name, params=params))
    return records
