"""Policies on synthetic posteriors: decisions and plans without a cluster."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from adaptive_eval.base.types import StopReason, Verdict
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import CampaignView, all_of, any_of, cap_plan, decide_pairs
from adaptive_eval.stats.intervals import IntervalDesign


def view(
    mu: list[float],
    sigma: list[float],
    trials: int = 10,
    questions: int = 4,
    capacity: int = 100,
    **kw: object,
) -> CampaignView:
    num = len(mu)
    moments = (np.array(mu), np.array(sigma))
    fields = dict(
        names=tuple(f"m{i}" for i in range(num)),
        counts=np.zeros((num, questions, 2)),
        bayes=moments,
        trials=np.full((num, questions), trials),
        planned=np.full((num, questions), trials),
        capacity=np.full(num, capacity),
        confidence=0.95,
        min_trials=2,
        round=0,
        trials_used=num * questions * trials,
        tokens_used=None,
        elapsed_s=0.0,
    )
    fields.update(kw)
    return CampaignView(**fields)  # type: ignore[arg-type]


RULES = (pair_rules.build("z_rank"), pair_rules.build("rope", {"epsilon": 0.02}))


def test_z_rank_resolves_exactly_at_the_threshold() -> None:
    z_c = norm.ppf(0.95)
    sd = 0.01
    gap = z_c * np.hypot(sd, sd)
    resolved = decide_pairs(view([0.5 + gap * 1.0001, 0.5], [sd, sd]), RULES)
    assert resolved[0].verdict is Verdict.A_GT_B and resolved[0].rule == "z_rank"
    below = decide_pairs(view([0.5 + gap * 0.999, 0.5], [sd, sd]), RULES)
    assert below[0].verdict is Verdict.UNDECIDED


def test_pairs_are_adjacent_in_mean_order() -> None:
    decisions = decide_pairs(view([0.2, 0.9, 0.5], [0.01, 0.01, 0.01]), RULES)
    assert [(d.a, d.b) for d in decisions] == [(1, 2), (2, 0)]
    assert all(d.verdict is Verdict.A_GT_B for d in decisions)


def test_rope_equivalence_needs_the_whole_interval_inside() -> None:
    z_c = norm.ppf(0.95)
    sd = 0.005  # z = gap / spread = 1.18 stays below 1.645: only rope can settle it
    spread = np.hypot(sd, sd)
    gap = 0.02 - z_c * spread  # |d| + z_c s == epsilon exactly at this gap
    inside = decide_pairs(view([0.5 + gap * 0.99, 0.5], [sd, sd]), RULES)
    assert inside[0].verdict is Verdict.EQUIVALENT and inside[0].rule == "rope"
    outside = decide_pairs(view([0.5 + gap * 1.01, 0.5], [sd, sd]), RULES)
    assert outside[0].verdict is Verdict.UNDECIDED


def test_no_decision_before_min_trials() -> None:
    trials = np.full((2, 4), 10)
    trials[1, 3] = 1
    decisions = decide_pairs(view([0.9, 0.1], [0.01, 0.01], trials=trials), RULES)
    assert decisions[0].verdict is Verdict.UNDECIDED


def test_bonferroni_looks_raise_the_threshold() -> None:
    rule = pair_rules.build("z_rank", {"looks": 10})
    v = view([0.5 + 2.0 * np.hypot(0.01, 0.01), 0.5], [0.01, 0.01])  # z = 2.0
    assert rule.decide(v, 0, 1) is None  # type: ignore[attr-defined]  # needs Phi^-1(1 - 0.005) = 2.576
    assert pair_rules.build("z_rank").decide(v, 0, 1) is not None  # type: ignore[attr-defined]


def test_pairs_settled_and_needs() -> None:
    rule = stopping_rules.build("pairs_settled")
    v = view([0.9, 0.5, 0.49], [0.01, 0.01, 0.01])
    decisions = decide_pairs(v, RULES)
    assert rule.should_stop(v, decisions) is None
    assert list(rule.needs(v, decisions)) == [False, True, True]
    v2 = view([0.9, 0.5, 0.1], [0.01, 0.01, 0.01])
    stop = rule.should_stop(v2, decide_pairs(v2, RULES))
    assert stop is not None and stop.reason is StopReason.GOAL_MET


def test_ci_width_rule_stops_on_the_repeated_interval() -> None:
    rule = stopping_rules.build("ci_width", {"width": 0.05})  # +-0.025
    c_k = IntervalDesign(0.95, 0.025).final_boundary(2)  # the last look's boundary, > 1.96
    assert norm.ppf(0.975) < c_k < 2.01
    v = view([0.3, 0.6], [0.0249 / c_k, 0.0251 / c_k])
    assert rule.should_stop(v, ()) is None
    assert list(rule.needs(v, ())) == [False, True]
    targets = rule.trial_targets(v, ())
    assert targets[0] == 0 and targets[1] > 0
    v2 = view([0.3, 0.6], [0.0249 / c_k, 0.0249 / c_k])
    stop = rule.should_stop(v2, ())
    assert stop is not None and stop.reason is StopReason.CI_WIDTH
    # The fixed-sample interval (1.96 se) would have stopped earlier: not a valid one.
    v3 = view([0.3, 0.6], [0.0251 / c_k, 0.0251 / c_k])
    assert 1.96 * 0.0251 / c_k < 0.025 and rule.should_stop(v3, ()) is None


def test_ci_width_simultaneous_splits_the_error_over_the_models() -> None:
    each = stopping_rules.build("ci_width", {"half_width": 0.02})
    joint = stopping_rules.build("ci_width", {"half_width": 0.02, "simultaneous": True})
    se = 0.0199 / IntervalDesign(0.95, 0.02).final_boundary(5)
    v = view([0.1, 0.3, 0.5, 0.7, 0.9], [se] * 5)
    assert each.should_stop(v, ()) is not None
    assert joint.should_stop(v, ()) is None  # alpha / 5 per model: a wider boundary


def test_budget_and_composition() -> None:
    budget = stopping_rules.build("budget", {"trials": 100})
    ci = stopping_rules.build("ci_width", {"width": 0.001})
    small = view([0.3, 0.6], [0.1, 0.1], trials=5)  # 40 trials used
    large = view([0.3, 0.6], [0.1, 0.1], trials=20)  # 160 trials used
    assert any_of(ci, budget).should_stop(small, ()) is None
    assert any_of(ci, budget).should_stop(large, ()).reason is StopReason.TRIAL_BUDGET
    assert all_of(ci, budget).should_stop(large, ()) is None
    assert list(any_of(ci, budget).needs(small, ())) == [True, True]


def test_min_trials_guard_blocks_goal_but_not_budget() -> None:
    young = view([0.9, 0.1], [0.01, 0.01], trials=1)
    assert stopping_rules.build("pairs_settled").should_stop(young, ()) is None
    assert stopping_rules.build("budget", {"trials": 1}).should_stop(young, ()) is not None


def test_uniform_is_the_fixed_n_schedule() -> None:
    v = view([0.9, 0.5, 0.1], [0.01, 0.01, 0.01], trials=3)
    plan = allocators.build("uniform", {"trials_per_round": 2})(v, (), np.zeros(3, bool), 1)
    assert plan.tolist() == [[2] * 4] * 3


def test_pairwise_serves_least_resolved_pairs_first() -> None:
    v = view([0.9, 0.5, 0.49, 0.3, 0.29], [0.05] * 5)
    decisions = decide_pairs(v, RULES)
    needs = stopping_rules.build("pairs_settled").needs(v, decisions)
    one_pair = allocators.build("pairwise", {"pairs_per_round": 1, "trials_per_round": 1})
    plan = one_pair(v, decisions, needs, 1)
    # The smallest z among open pairs is 0.5 vs 0.49 or 0.3 vs 0.29 (equal gaps): the first.
    served = set(np.flatnonzero(plan.sum(axis=1)))
    assert served in ({1, 2}, {3, 4})
    everyone = allocators.build("pairwise")(v, decisions, needs, round_trials=60)
    counts = everyone.sum(axis=1)
    assert set(np.flatnonzero(counts)) == set(np.flatnonzero(needs))
    # Each needed model the same trials on every question, the round at least round_trials
    # and no whole question per model more than it takes to reach it.
    served = everyone[needs]
    assert (served == served[0, 0]).all() and everyone.sum() >= 60
    assert everyone.sum() - needs.sum() * everyone.shape[1] < 60


def test_cap_plan_respects_capacity_and_budget() -> None:
    v = view([0.5, 0.4], [0.1, 0.1], trials=8, capacity=10)
    plan = np.full((2, 4), 5)
    capped = cap_plan(plan, v, None)
    assert capped.tolist() == [[2] * 4] * 2
    assert cap_plan(plan, v, 5).tolist() == [[2, 2, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("name", ["uniform", "pairwise", "track_and_stop"])
def test_allocators_plan_nothing_for_a_model_at_its_capacity(name: str) -> None:
    """The allocator's own plan (before the core's :func:`cap_plan`): a (L, M) int64 plan,
    never negative, nothing for a model already at its capacity on every question, and
    something for some model with room that is needed."""
    rng = np.random.default_rng(1)
    for _ in range(100):
        planned = rng.integers(0, 13, size=(4, 3))
        full = int(rng.integers(0, 4))
        planned[full] = 12
        v = view(
            list(rng.random(4)),
            list(rng.random(4) * 0.05),
            questions=3,
            trials=planned,
            capacity=12,
            planned=planned,
        )
        decisions = decide_pairs(v, RULES)
        needs = np.ones(4, dtype=bool)
        plan = allocators.build(name)(v, decisions, needs, 7)
        assert plan.dtype == np.int64 and plan.shape == (4, 3)
        assert np.all(plan >= 0)
        assert not plan[full].any(), f"{name} planned {plan[full]} for a model at its capacity"
        room = planned.min(axis=1) < 12
        assert plan[room].sum() > 0
