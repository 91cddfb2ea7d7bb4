"""Futility stops, Holm's step-down and the shorter horizons of group_sequential: the closed
forms against Monte Carlo, the rules on synthetic posteriors, and their error rates over seeded
campaigns with true ties."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    base_config,
    count_view,
    load,
    mimic_success,
    run_inline,
    write_config,
    write_scenario,
)
from scipy.stats import binomtest

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.types import StopReason, Verdict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import fingerprint_of
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import (
    NO_MEMORY,
    CampaignView,
    any_of,
    decide_pairs,
    settle_pairs,
)
from adaptive_eval.forecast.simulate import SimPolicy, Truth, simulate, wrong_calls
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.stats import sequential as seq
from adaptive_eval.store import TrialStore

# -- closed forms against Monte Carlo -----------------------------------------------------------


@pytest.mark.parametrize(
    ("difference", "se", "se_cap", "epsilon"),
    [
        (0.0, 0.02, 0.01, None),
        (0.01, 0.02, 0.008, 0.02),
        (0.03, 0.015, 0.01, 0.02),
        (-0.005, 0.01, 0.004, 0.02),
    ],
)
def test_settle_probability_matches_brownian_monte_carlo(
    difference: float, se: float, se_cap: float, epsilon: float | None
) -> None:
    """Draw the drift from its posterior N(D, s^2), continue the Brownian motion S(I) = D I from
    I = 1/s^2 to 1/s_cap^2, and count settled endpoints: the closed form must agree."""
    rng = np.random.default_rng(11)
    reps = 400_000
    info, info_cap = 1 / se**2, 1 / se_cap**2
    drift = rng.normal(difference, se, reps)
    path = difference * info + drift * (info_cap - info)
    path += rng.normal(0.0, math.sqrt(info_cap - info), reps)
    at_cap = path / info_cap
    resolve, equivalent = 2.8, 2.4
    settled = np.abs(at_cap) >= resolve * se_cap
    if epsilon is not None:
        settled |= np.abs(at_cap) + equivalent * se_cap < epsilon
    expected = float(settled.mean())
    got = seq.settle_probability(difference, se, se_cap, resolve, equivalent, epsilon)
    assert got == pytest.approx(
        expected, abs=4 * math.sqrt(expected * (1 - expected) / reps) + 1e-4
    )


def test_trials_to_settle_is_the_cheaper_of_resolving_and_equivalence() -> None:
    # |D| = 0.015 in a rope of 0.02: equivalence needs (c' s / 0.005)^2 times n, resolving
    # (c s / 0.015)^2 times n; the latter is smaller here.
    n = seq.trials_to_settle(0.015, 0.01, 20, 3.0, 2.5, 0.02)
    assert n == pytest.approx(20 * (3.0 * 0.01 / 0.015) ** 2)
    assert seq.trials_to_settle(0.0, 0.01, 20, 3.0, 2.5, None) == math.inf


# -- the rules on synthetic posteriors ----------------------------------------------------------


def view_of(counts: np.ndarray, capacity: int, futility: float, **kw: object) -> CampaignView:
    control = str(kw.get("error_control", "ranking"))
    return count_view(counts, capacity, error_control=control, futility=futility)


def near_tie_counts(per_question: int) -> np.ndarray:
    """Two models 0.01 apart (half the rope) with ``per_question`` trials on 30 questions."""
    rng = np.random.default_rng(5)
    p = rng.uniform(0.2, 0.8, 30)
    counts = np.zeros((2, 30, 2), dtype=np.int64)
    for model, shift in enumerate((0.005, -0.005)):
        right = np.round((p + shift) * per_question).astype(np.int64)
        counts[model, :, 1] = right
        counts[model, :, 0] = per_question - right
    return counts


def test_a_near_tie_close_to_the_cap_is_futile_and_says_what_it_would_need() -> None:
    counts = near_tie_counts(60)
    rule = pair_rules.build("group_sequential")
    decision = decide_pairs(view_of(counts, 80, 0.05), (rule,))[0]
    assert decision.verdict is Verdict.UNDECIDED and decision.futile
    assert decision.projected is not None and decision.projected > 80
    assert decision.reason is not None and "futile" in decision.reason
    # Far from the cap the same data leave the pair open, and futility 0 never stops it.
    assert decide_pairs(view_of(counts, 4000, 0.05), (pair_rules.build("group_sequential"),))[
        0
    ].open
    assert decide_pairs(view_of(counts, 80, 0.0), (pair_rules.build("group_sequential"),))[0].open


def test_futile_pairs_draw_no_trials_and_end_the_campaign_as_futility() -> None:
    counts = near_tie_counts(60)
    v = view_of(counts, 80, 0.05)
    decisions = decide_pairs(v, (pair_rules.build("group_sequential"),))
    stopping = stopping_rules.build("pairs_settled")
    needs = stopping.needs(v, decisions)
    assert needs is not None and not needs.any()
    stop = stopping.should_stop(v, decisions)
    assert stop is not None and stop.reason is StopReason.FUTILITY
    assert "cannot be settled by the cap" in stop.detail
    plan = allocators.build("track_and_stop")(v, decisions, np.zeros(2, dtype=bool), 60)
    assert plan.sum() == 0


def test_step_down_hands_settled_budget_to_open_pairs() -> None:
    # Four models: two clear gaps settle at once, the last pair is open; with Holm it is tested
    # at alpha / 1 instead of alpha / 3.
    counts = np.zeros((4, 30, 2), dtype=np.int64)
    for model, right in enumerate((190, 100, 10, 9)):
        counts[model, :, 1] = right
        counts[model, :, 0] = 200 - right
    holm = pair_rules.build("group_sequential")
    bonferroni = pair_rules.build("group_sequential", {"step_down": False})
    first = view_of(counts, 400, 0.0)
    second = dataclasses.replace(first, round=first.round + 1)
    for rule, level in ((holm, 0.05 / 1), (bonferroni, 0.05 / 3)):
        assert rule.level(first, NO_MEMORY) == pytest.approx(0.05 / 3)  # type: ignore[attr-defined]
        _, (memory,) = settle_pairs(first, (rule,))
        assert rule.level(second, memory) == pytest.approx(level)  # type: ignore[attr-defined]
    # The rule itself did not change: its memory is the value it returned.
    assert holm.level(second, NO_MEMORY) == pytest.approx(0.05 / 3)  # type: ignore[attr-defined]
    # Under per-pair control there is nothing to hand on.
    pair = pair_rules.build("group_sequential")
    per_pair = view_of(counts, 400, 0.0, error_control="pair")
    _, (memory,) = settle_pairs(per_pair, (pair,))
    assert pair.level(per_pair, memory) == pytest.approx(0.05)  # type: ignore[attr-defined]


def brownian_union_crossing(
    fractions: tuple[float, ...], horizons: list[tuple[float, tuple[float, ...]]], reps: int
) -> float:
    """P(any horizon's boundary is crossed) for a null Brownian motion looked at each horizon's
    planned fractions (scaled onto the cap's information)."""
    rng = np.random.default_rng(3)
    times = sorted({f * scale for scale, _ in horizons for f in fractions})
    t = np.asarray(times)
    walk = np.cumsum(rng.normal(size=(reps, len(t))) * np.sqrt(np.diff(np.r_[0.0, t])), axis=1)
    z = np.abs(walk) / np.sqrt(t)
    crossed = np.zeros(reps, dtype=bool)
    for scale, bounds in horizons:
        for f, c in zip(fractions, bounds, strict=True):
            crossed |= z[:, times.index(f * scale)] >= c
    return float(crossed.mean())


def test_shorter_horizons_keep_the_pairs_budget() -> None:
    rule = pair_rules.build("group_sequential", {"horizons": 3, "ratio": 4.0})
    alpha = 0.01
    fractions = rule.fractions()  # type: ignore[attr-defined]
    horizons = [
        (rule.ratio**-j, rule.boundaries(alpha * share)[0])  # type: ignore[attr-defined]
        for j, share in enumerate(rule.shares(400))  # type: ignore[attr-defined]
    ]
    crossed = brownian_union_crossing(fractions, horizons, 200_000)
    assert crossed <= alpha + 4 * math.sqrt(alpha / 200_000)
    # ... and it is not vacuous: the shorter horizons' boundaries are far below the cap's early.
    cap_bounds = rule.boundaries(alpha)[0]  # type: ignore[attr-defined]
    assert (
        horizons[2][1][-1]
        < cap_bounds[fractions.index(min(fractions, key=lambda f: abs(f - 1 / 16)))] - 0.5
    )


def test_shorter_horizons_are_used_only_where_the_cap_leaves_room() -> None:
    rule = pair_rules.build("group_sequential")  # horizons 3, ratio 4, shortest 16
    assert rule.shares(400) == (0.5, 0.25, 0.25)  # type: ignore[attr-defined]
    assert rule.shares(80) == (0.5, 0.5)  # type: ignore[attr-defined]
    assert rule.shares(10) == (1.0,)  # type: ignore[attr-defined]
    assert pair_rules.build("group_sequential", {"horizons": 1}).shares(400) == (1.0,)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"futility": 0.7}, "futility must be a number in [0, 0.5), got 0.7"),
        ({"futility": float("nan")}, "futility must be a number in [0, 0.5)"),
        (
            {"horizons": 0},
            "pair rule 'group_sequential': horizons must be an integer in [1, 8], got 0",
        ),
        ({"ratio": 1.0}, "ratio must be a finite number > 1, got 1.0"),
        ({"cap_share": 0.0}, "cap_share must be a number in (0, 1], got 0.0"),
        ({"horizons": 2, "cap_share": 1.0}, "cap_share must be below 1"),
        ({"step_down": "yes"}, "step_down must be true or false"),
        ({"shortest": 0}, "shortest must be an integer >= 1, got 0"),
        ({"futility_trials": -1}, "futility_trials must be an integer >= 0, got -1"),
    ],
)
def test_bad_futility_and_horizon_parameters_name_field_and_value(
    params: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        pair_rules.build("group_sequential", params, source="c.yaml", field="policy.pair_rules[0]")
    assert message in str(caught.value) and "policy.pair_rules[0]" in str(caught.value)


def test_policy_futility_out_of_range_is_refused(tmp_path: object) -> None:
    from adaptive_eval.config.schema import parse_config

    raw = {
        "name": "x",
        "models": [{"backend": "simulated", "path": "s.npz"}],
        "rubric": {"weights": [0, 1]},
        "policy": {"futility": 0.5},
    }
    with pytest.raises(InputError) as caught:
        parse_config(raw, "c.yaml")
    assert "policy.futility" in str(caught.value) and "0.5" in str(caught.value)


# -- error rates over seeded campaigns ----------------------------------------------------------


def ties_and_gaps(seed: int) -> Truth:
    """Six models: a three-way true tie, a pair exactly at the rope, and a clear leader."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.8, 30)
    scores = [0.70, 0.55, 0.53, 0.50, 0.50, 0.50]
    success = np.stack([np.clip(base - base.mean() + s, 0.01, 0.99) for s in scores])
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


@pytest.mark.slow
def test_default_rules_keep_the_ranking_error_on_ties_and_gaps_at_epsilon() -> None:
    """Holm's step-down, futility and the horizons together: over 200 seeded campaigns with a
    three-way tie and a pair at the rope, the share of runs with any wrong call is not above
    5% (one-sided binomial test at the 1% level), and the rules do decide something.
    (benchmarks/sequential.py measures the same on more campaigns and more runs.)"""
    truth = ties_and_gaps(1)
    policy = SimPolicy(
        make_rules=lambda: (pair_rules.build("group_sequential"),),
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build("track_and_stop"),
        rope=0.02,
        futility=0.2,
        max_trials=200,
        round_trials=360,
    )
    runs = 200
    wrong = decided = 0
    for rep in range(runs):
        result = simulate(truth, policy, np.random.default_rng(rep))
        calls = wrong_calls(result.decisions, truth.scores, 0.02)
        wrong += any(calls)
        decided += len(calls)
    assert decided > runs  # more than one decided pair per run on average
    assert binomtest(wrong, runs, 0.05, alternative="greater").pvalue > 0.01, wrong


def test_a_run_recorded_under_the_earlier_rules_refuses_to_resume_naming_them(
    tmp_path: Path,
) -> None:
    """Runs recorded before futility and step-down have neither in their stored identity:
    resuming them under the new rules would mix two rules in one campaign."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=6))
    config = load(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    run_inline(config, tmp_path / "run")
    store = TrialStore(tmp_path / "run")
    identity = store.get_meta("identity")
    del identity["decision_rules"]
    del identity["config"]["policy"]["futility"]
    store.set_meta(identity=identity, fingerprint=fingerprint_of(identity))
    store.close()
    with pytest.raises(InputError) as caught:
        open_run_dir(build_campaign(config), tmp_path / "run")
    message = str(caught.value)
    assert "different campaign" in message
    assert "decision_rules: null -> " in message and "Holm step-down" in message
    assert "policy.futility: null -> 0.2" in message


def test_no_futility_stop_on_a_handful_of_trials() -> None:
    """The Gaussian projection to the cap is not trusted before 8 trials per question."""
    counts = near_tie_counts(6)
    early = decide_pairs(view_of(counts, 8, 0.5), (pair_rules.build("group_sequential"),))[0]
    assert early.open
    eager = pair_rules.build("group_sequential", {"futility_trials": 0})
    assert decide_pairs(view_of(counts, 8, 0.45), (eager,))[0].futile


def test_futility_growth_drops_a_near_tie_late_and_leaves_it_early() -> None:
    """``futility_growth`` raises the threshold with the pair's information fraction: near the
    cap a pair the flat threshold keeps open is futile; far from it nothing changes."""
    counts = near_tie_counts(40)
    flat = pair_rules.build("group_sequential")
    growing = pair_rules.build("group_sequential", {"futility_growth": 4.0})
    late = view_of(counts, 80, 0.03)
    assert decide_pairs(late, (flat,))[0].open
    assert decide_pairs(late, (growing,))[0].futile
    early = view_of(counts, 4000, 0.03)
    assert decide_pairs(early, (pair_rules.build("group_sequential", {"futility_growth": 4.0}),))[
        0
    ].open


def test_gap_floor_lowers_the_target_of_a_gap_between_half_the_rope_and_the_rope() -> None:
    """track-and-stop's program reads a gap below ``gap_floor * rope`` as that floor: at the
    rope a pair whose ``|D|`` is 0.017 (rope 0.02) gets the target of a gap of 0.02, no longer
    more than an equivalence at ``D = 0``; a clear gap and a tie are untouched."""
    rng = np.random.default_rng(5)
    p = rng.uniform(0.2, 0.8, 30)

    def targets(shift: float, floor: float) -> np.ndarray:
        counts = np.zeros((2, 30, 2), dtype=np.int64)
        for model, half in enumerate((shift / 2, -shift / 2)):
            right = np.round((p + half) * 40).astype(np.int64)
            counts[model, :, 1], counts[model, :, 0] = right, 40 - right
        allocator = allocators.build("track_and_stop", {"gap_floor": floor})
        found, _ = allocator.pair_targets(view_of(counts, 400, 0.0), [(0, 1)])
        return np.asarray(found)

    assert (targets(0.014, 1.0) < 0.75 * targets(0.014, 0.5)).all()
    assert (targets(0.014, 1.0) <= targets(0.0, 1.0) * 1.01).all()
    for shift in (0.0, 0.1):
        assert np.array_equal(targets(shift, 1.0), targets(shift, 0.5))
