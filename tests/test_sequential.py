"""Sequential decisions: boundaries against closed forms and Monte Carlo, the allocation program
against brute force, the decision statistic under unequal counts, and realised error rates of
the rules over seeded campaigns with known truth (a true tie, a gap exactly at epsilon)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import count_view
from scipy.stats import binomtest, norm

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import Verdict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.config.schema import parse_config
from adaptive_eval.decide.contracts import CampaignView, any_of, decide_pairs, settle_pairs
from adaptive_eval.forecast.simulate import SimPolicy, Truth, simulate, wrong_calls
from adaptive_eval.stats import allocation as lower_bound
from adaptive_eval.stats import sequential as seq

# -- boundaries -------------------------------------------------------------------------------


def brownian_crossing(fractions: tuple[float, ...], bounds: np.ndarray, reps: int) -> float:
    rng = np.random.default_rng(7)
    t = np.asarray(fractions)
    steps = rng.normal(size=(reps, len(t))) * np.sqrt(np.diff(np.r_[0.0, t]))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    return float((np.abs(z) >= bounds).any(axis=1).mean())


@pytest.mark.parametrize("spending", ["obf", "pocock", "hsd"])
@pytest.mark.parametrize("alpha", [0.05, 0.005])
def test_spending_boundaries_spend_exactly_alpha(spending: str, alpha: float) -> None:
    fractions = seq.look_fractions(10, 1 / 32)
    bounds = np.asarray(seq.spending_boundaries(fractions, alpha, spending))
    reps = 400_000
    crossed = brownian_crossing(fractions, bounds, reps)
    se = math.sqrt(alpha * (1 - alpha) / reps)
    assert abs(crossed - alpha) < 4 * se + 2e-4


def test_spending_boundaries_match_published_obf_values() -> None:
    # Lan-DeMets O'Brien-Fleming, 5 equally spaced looks, 0.025 per side (gsDesign sfLDOF).
    bounds = seq.spending_boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05)
    assert np.allclose(bounds, [4.8769, 3.3569, 2.6803, 2.2898, 2.0310], atol=2e-3)
    # One look is the fixed-sample two-sided test.
    assert seq.spending_boundaries((1.0,), 0.05)[0] == pytest.approx(norm.isf(0.025), abs=1e-9)


def test_mixture_boundary_is_anytime_valid() -> None:
    alpha, rho = 0.05, 50.0
    rng = np.random.default_rng(3)
    reps, steps = 20_000, 2_000
    info = np.arange(1, steps + 1, dtype=float)  # unit information per step, looked at each
    walk = np.cumsum(rng.normal(size=(reps, steps)), axis=1)
    bound = seq.mixture_boundary(info, alpha, rho) * np.sqrt(info)
    crossed = float((np.abs(walk) >= bound).any(axis=1).mean())
    assert crossed <= alpha  # the boundary is conservative (Ville's inequality)
    assert crossed > alpha / 10  # and not vacuous
    # Closed form at one point.
    assert float(seq.mixture_boundary(4.0, 0.05, 4.0)) == pytest.approx(
        math.sqrt(2 * (math.log(2) + 2 * math.log(20)))
    )


def test_mixture_rho_minimises_the_boundary_at_its_target() -> None:
    rho = seq.mixture_rho(1e4, 0.01)
    best = float(seq.mixture_boundary(1e4, 0.01, rho))
    for other in (rho / 3, rho * 3):
        assert float(seq.mixture_boundary(1e4, 0.01, other)) > best


# -- the allocation program -------------------------------------------------------------------


def brute_force_chain3(a: np.ndarray, r: np.ndarray) -> float:
    """min T1+T2+T3 s.t. A1/T1 + A2/T2 <= r1, A2/T2 + A3/T3 <= r2, by a fine search over T2."""
    lo = a[1] / min(r) * (1 + 1e-9)
    grid = np.geomspace(lo, lo * 1e4, 400_000)
    t1 = a[0] / (r[0] - a[1] / grid)
    t3 = a[2] / (r[1] - a[1] / grid)
    return float((t1 + grid + t3).min())


@pytest.mark.parametrize("seed", range(5))
def test_allocation_program_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.02, 0.3, 3)
    r = rng.uniform(1e-4, 1e-3, 2)
    t = lower_bound.allocation_program(a, np.array([[0, 1], [1, 2]]), r, tolerance=1e-8)
    assert ((a[[0, 1]] / t[[0, 1]]).sum() <= r[0] * (1 + 1e-6)) and (
        (a[[1, 2]] / t[[1, 2]]).sum() <= r[1] * (1 + 1e-6)
    )
    assert t.sum() == pytest.approx(brute_force_chain3(a, r), rel=1e-4)


@pytest.mark.parametrize("shape", ["path", "star", "shuffled path"])
def test_allocation_program_newton_matches_slow_coordinate_ascent(shape: str) -> None:
    """The projected-Newton dual solver lands on the optimum that block coordinate ascent
    reaches when run to a 1e-9 gap, with costs and with pairs whose constraint is slack
    (radius up to 1e6 times the others', multipliers 0 at the optimum)."""
    for seed in range(25):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(2, 30))
        a = rng.uniform(0.001, 0.3, size)
        c = rng.uniform(0.5, 5.0, size) if seed % 2 else np.ones(size)
        order = rng.permutation(size) if shape == "shuffled path" else np.arange(size)
        if shape == "star":
            pairs = np.stack([np.zeros(size - 1, dtype=np.int64), np.arange(1, size)], 1)
        else:
            pairs = np.stack([order[:-1], order[1:]], 1)
        r = rng.uniform(1e-4, 1e-3, len(pairs))
        slack = rng.random(len(pairs)) < 0.3
        r[slack] *= rng.uniform(10, 1e6, int(slack.sum()))
        t = lower_bound.allocation_program(a, pairs, r, c)
        load = (a[pairs[:, 0]] / t[pairs[:, 0]] + a[pairs[:, 1]] / t[pairs[:, 1]]) / r
        assert load.max() <= 1 + 1e-9
        dual = lower_bound._PairDual(a, c, pairs, r)
        start = (np.sqrt(dual.k[dual.i]) + np.sqrt(dual.k[dual.j])) ** 2 / r**2 / 2
        _, slow = dual.coordinate_ascent(start, np.zeros(size), 1e-9, 200_000)
        assert c @ t == pytest.approx(c @ slow, rel=2e-6), seed


def test_allocation_program_models_in_no_pair_get_zero_without_numeric_warnings() -> None:
    """Settled pairs drop out of the program, leaving models in no pair (Lambda = 0)."""
    a = np.array([0.1, 0.2, 0.15, 0.3, 0.05])
    pairs = np.array([[0, 1], [3, 4]])
    r = np.array([1e-3, 5e-4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = lower_bound.allocation_program(a, pairs, r)
    assert t[2] == 0.0
    for (i, j), radius in zip(pairs, r, strict=True):  # each pair alone: its closed form
        assert t[[i, j]] == pytest.approx(
            np.sqrt(a[[i, j]]) * np.sqrt(a[[i, j]]).sum() / radius, rel=1e-5
        )


def test_allocation_program_single_pair_closed_form_and_costs() -> None:
    a = np.array([0.09, 0.16])
    t = lower_bound.allocation_program(a, np.array([[0, 1]]), np.array([1e-3]), tolerance=1e-10)
    assert t == pytest.approx(np.sqrt(a) * (0.3 + 0.4) / 1e-3, rel=1e-6)
    # With costs: T_i = sqrt(A_i / c_i) (sqrt(A_i c_i) + sqrt(A_j c_j)) / r.
    c = np.array([1.0, 4.0])
    t = lower_bound.allocation_program(a, np.array([[0, 1]]), np.array([1e-3]), c, tolerance=1e-10)
    expected = np.sqrt(a / c) * (np.sqrt(a * c).sum()) / 1e-3
    assert t == pytest.approx(expected, rel=1e-6)


def test_lower_bound_single_pair_formula() -> None:
    a = np.array([0.2, 0.2])
    bound = lower_bound.lower_bound_trials(np.array([0.6, 0.55]), a, 0.05, None)
    expected = 2 * (2 * math.sqrt(0.2)) ** 2 * math.log(1 / (2.4 * 0.05)) / 0.05**2
    assert bound.sum() == pytest.approx(expected, rel=1e-4)
    # With a rope, the hardest gap is eps / 2 and a tie costs as much as a gap of eps.
    tie = lower_bound.lower_bound_trials(np.array([0.5, 0.5]), a, 0.05, 0.02).sum()
    at_eps = lower_bound.lower_bound_trials(np.array([0.51, 0.49]), a, 0.05, 0.02).sum()
    half = lower_bound.lower_bound_trials(np.array([0.505, 0.495]), a, 0.05, 0.02).sum()
    assert tie == pytest.approx(at_eps) and half > 3.9 * tie


# -- the decision statistic -------------------------------------------------------------------


def test_estimate_is_unbiased_where_bayes_shrinks_a_model_stopped_early() -> None:
    """A strong model with 3 trials per question vs a weaker one with 60: the posterior mean
    ranks them wrongly on average, the decision statistic does not."""
    rng = np.random.default_rng(11)
    p_strong = np.clip(rng.beta(18, 2, 30), 0.02, 0.99)
    p_weak = np.clip(p_strong - 0.04, 0.01, 0.99)
    weights = np.array([0.0, 1.0])
    reps = 4000
    right_strong = rng.binomial(3, p_strong, size=(reps, 30))
    right_weak = rng.binomial(60, p_weak, size=(reps, 30))
    counts = np.stack(
        [
            np.stack([3 - right_strong, right_strong], axis=-1),
            np.stack([60 - right_weak, right_weak], axis=-1),
        ],
        axis=1,
    )  # (reps, 2, 30, 2)
    theta, se = seq.empirical_estimate(counts, counts + 1.0, weights)
    mu = ((counts + 1.0) / (counts + 1.0).sum(-1, keepdims=True) @ weights).mean(-1)
    assert theta[:, 0].mean() == pytest.approx(p_strong.mean(), abs=2e-3)
    assert theta[:, 1].mean() == pytest.approx(p_weak.mean(), abs=2e-3)
    assert mu[:, 0].mean() < p_strong.mean() - 0.08  # Bayes@N shrinks the early stopper
    assert (mu[:, 0] < mu[:, 1]).mean() > 0.9  # and ranks it below the weaker model
    assert (theta[:, 0] > theta[:, 1]).mean() > 0.8  # the decision statistic does not
    # The standard error is close to the sampling sd: conservative at 3 trials per question
    # near saturation (the Laplace-smoothed variance), never optimistic.
    ratio = se[:, 0].mean() / theta[:, 0].std()
    assert 0.9 < ratio < 1.5


def make_view(counts: np.ndarray, capacity: int = 400, **kw: object) -> CampaignView:
    return count_view(
        counts,
        capacity,
        rope=kw.get("rope", 0.02),  # type: ignore[arg-type]
        error_control=str(kw.get("error_control", "pair")),
    )


def test_strong_model_stopped_early_is_ranked_above_by_the_rules() -> None:
    # Strong: 0.9 on every question at 3 trials; weak: 0.6 at 200 trials.
    strong = np.tile([[0, 3]], (30, 1))
    strong[:3] = [1, 2]  # 27/30 * ... ~ 0.967 observed
    weak = np.tile([[80, 120]], (30, 1))
    v = make_view(np.stack([strong, weak]))
    assert v.order.tolist() == [0, 1]
    decisions = decide_pairs(v, (pair_rules.build("anytime"),))
    assert decisions[0].verdict is Verdict.A_GT_B and (decisions[0].a, decisions[0].b) == (0, 1)


# -- rules on seeded campaigns ------------------------------------------------------------------


def two_models(gap: float, seed: int, questions: int = 30) -> Truth:
    rng = np.random.default_rng(seed)
    base = np.clip(rng.beta(4, 4, questions), 0.1, 0.9)
    success = np.stack([base + gap / 2, base - gap / 2])
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def error_rate(truth: Truth, rules: tuple[str, ...], campaigns: int, cap: int) -> tuple[int, int]:
    def make() -> tuple[object, ...]:
        built = []
        for name in rules:
            params = {"epsilon": 0.02} if name == "rope" else {}
            built.append(pair_rules.build(name, params))
        return tuple(built)

    policy = SimPolicy(
        make_rules=make,  # type: ignore[arg-type]
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build("pairwise"),
        rope=0.02,
        # The boundaries' own error: futility only removes decisions (it is measured with the
        # default in test_futility.py), and here it would leave the tie too few to test.
        futility=0.0,
        max_trials=cap,
        round_trials=60,
    )
    wrong = settled = 0
    for rep in range(campaigns):
        result = simulate(truth, policy, np.random.default_rng(rep))
        calls = wrong_calls(result.decisions, truth.scores, 0.02)
        wrong += any(calls)
        settled += bool(calls)
    return wrong, settled


NOMINAL = 0.05


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["group_sequential", "anytime"])
@pytest.mark.parametrize("gap", [0.0, 0.02])
def test_error_controlled_rules_keep_the_nominal_rate(rule: str, gap: float) -> None:
    """A true tie (any resolution is wrong) and a gap exactly at epsilon ("equivalent" is
    wrong): over 300 seeded campaigns the wrong-call rate is not above nominal (one-sided
    binomial test at the 1% level)."""
    wrong, settled = error_rate(two_models(gap, 5), (rule,), 300, 150)
    if rule == "group_sequential":
        # The rule does decide, it is not vacuous (a tie is settled as equivalent near the cap
        # of 150, where the default's cap test holds half the budget: 20 of 300 here).
        assert settled > 10
    # (anytime rarely settles a tie within 150 trials per question: no horizon to spend toward)
    assert binomtest(wrong, 300, NOMINAL, alternative="greater").pvalue > 0.01, wrong


@pytest.mark.slow
def test_the_naive_rule_fails_the_same_test() -> None:
    """The test above has power: the paper's every-round z rule breaks it on a true tie."""
    wrong, _ = error_rate(two_models(0.0, 5), ("naive_z", "rope"), 200, 150)
    assert binomtest(wrong, 200, NOMINAL, alternative="greater").pvalue < 1e-6


def test_ranking_control_splits_the_budget_over_the_slots() -> None:
    counts = np.zeros((5, 30, 2), dtype=np.int64) + 10
    assert make_view(counts, error_control="ranking").pair_alpha() == pytest.approx(0.05 / 4)
    assert make_view(counts, error_control="pair").pair_alpha() == pytest.approx(0.05)


def test_group_sequential_tests_once_per_look_and_keeps_decisions() -> None:
    rule = pair_rules.build(
        "group_sequential", {"looks": 4, "first_look": 0.125, "spending": "obf"}
    )
    counts = np.zeros((2, 30, 2), dtype=np.int64)
    counts[0, :, 1] = 50  # always right
    counts[1, :, 0] = 50  # always wrong
    v = make_view(counts, capacity=400)
    (first,), memory = settle_pairs(v, (rule,))
    assert first.verdict is Verdict.A_GT_B and first.rule == "group_sequential"
    assert first.boundary is not None and first.alpha is not None and first.alpha < 0.05
    # The decision is kept at a later round even if the data would no longer support it.
    even = make_view(np.full((2, 30, 2), 30, dtype=np.int64), capacity=400)
    later = dataclasses.replace(even, round=5)
    assert settle_pairs(later, (rule,), memory=memory)[0][0].verdict is Verdict.A_GT_B
    # ... kept in the memory it was given, not in the rule: from no memory the data decide.
    assert decide_pairs(later, (rule,))[0].verdict is not Verdict.A_GT_B


def test_equivalence_uses_the_one_sided_boundary() -> None:
    counts = np.full((2, 30, 2), 200, dtype=np.int64)  # identical, 400 trials per question
    rule = pair_rules.build("group_sequential", {"horizons": 1})
    decision = decide_pairs(make_view(counts, capacity=400), (rule,))[0]
    assert decision.verdict is Verdict.EQUIVALENT
    # At the last look (t = 1) the one-sided 5% OBF boundary is about the fixed-sample 1.645.
    assert decision.boundary == pytest.approx(1.65, abs=0.1)
    # With the default shorter horizons the cap's test holds half the budget: about z_0.025.
    split = pair_rules.build("group_sequential")
    decision = decide_pairs(make_view(counts, capacity=400), (split,))[0]
    assert decision.verdict is Verdict.EQUIVALENT
    assert decision.boundary == pytest.approx(1.96, abs=0.1)


# -- configuration errors ---------------------------------------------------------------------


def base(**policy: object) -> dict[str, object]:
    return {
        "name": "x",
        "models": [{"backend": "simulated", "path": "s.npz"}],
        "rubric": {"weights": [0, 1]},
        "policy": policy,
    }


def test_bad_error_control_names_field_and_value() -> None:
    with pytest.raises(InputError) as err:
        parse_config(base(error_control="family"), "c.yaml")
    text = str(err.value)
    assert "policy.error_control" in text and "family" in text and "c.yaml" in text


@pytest.mark.parametrize(
    ("registry", "name", "params", "needle"),
    [
        (pair_rules, "group_sequential", {"spending": "linear"}, "linear"),
        (pair_rules, "group_sequential", {"looks": 0}, "looks"),
        (pair_rules, "group_sequential", {"error_control": "all"}, "all"),
        (pair_rules, "anytime", {"tuned_sd": -1.0}, "tuned_sd"),
        (pair_rules, "anytime", {"epsilon": float("nan")}, "epsilon"),
        (allocators, "track_and_stop", {"questions": "random"}, "random"),
        (allocators, "track_and_stop", {"cost": "dollars"}, "dollars"),
        (allocators, "track_and_stop", {"gap_floor": 0.0}, "gap_floor"),
        (pair_rules, "group_sequential", {"futility_growth": -0.5}, "futility_growth"),
    ],
)
def test_bad_rule_and_allocator_parameters(
    registry: object, name: str, params: dict[str, object], needle: str
) -> None:
    with pytest.raises(InputError) as err:
        registry.build(name, params, source="c.yaml", field="policy.x")  # type: ignore[attr-defined]
    assert needle in str(err.value) and "policy.x" in str(err.value)


# -- allocation behaviour ---------------------------------------------------------------------


def test_track_and_stop_serves_the_hard_pair_and_neyman_skips_saturated_questions() -> None:
    counts = np.zeros((3, 30, 2), dtype=np.int64)
    counts[0, :, 1] = 10  # model 0: always right (far ahead)
    counts[1, :, 1] = 6
    counts[1, :, 0] = 4
    counts[2, :, 1] = 6
    counts[2, :, 0] = 4
    counts[1, :10] = [0, 10]  # model 1: saturated on its first 10 questions
    v = make_view(counts)
    # The cap's horizon alone leaves (1, 2) open at 10 trials (the shorter ones settle it).
    decisions = decide_pairs(v, (pair_rules.build("group_sequential", {"horizons": 1}),))
    plan = allocators.build("track_and_stop")(v, decisions, np.ones(3, dtype=bool), 256)
    assert plan[0].sum() < plan[1].sum() and plan[0].sum() < plan[2].sum()
    assert plan[1, :10].mean() < plan[1, 10:].mean()  # saturated questions get less
    assert (plan >= 0).all()


# -- determinism with the stateful rules and the program-driven allocator ---------------------


@pytest.mark.parametrize(
    ("rule", "allocation"),
    [("group_sequential", "track_and_stop"), ("anytime", "track_and_stop")],
)
def test_resume_after_crash_is_exact_with_sequential_rules(
    tmp_path: Path, rule: str, allocation: str
) -> None:
    from helpers import base_config, mimic_success, run_inline, write_config, write_scenario

    from adaptive_eval.config.schema import load_config

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.45, 0.5, 0.52, 0.8], questions=12))
    data = base_config("s.npz", pair_rules=[rule], allocation=allocation)
    data["policy"]["max_trials_per_question"] = 60
    config = load_config(write_config(tmp_path / "c.yaml", data))
    reference = run_inline(config, tmp_path / "ref", shuffle_seed=0)
    assert any(d.settled for d in reference.decisions)
    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_inline(config, crashed, shuffle_seed=1, crash_after=9, batches_per_poll=1)
    resumed = run_inline(config, crashed, shuffle_seed=2)
    assert resumed.decisions == reference.decisions
    assert resumed.state.counts.tolist() == reference.state.counts.tolist()
    assert resumed.stop == reference.stop


# -- what the report says ---------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["group_sequential", "naive_z"])
def test_summary_states_rule_boundary_budget_and_warns_on_naive(tmp_path: Path, rule: str) -> None:
    from helpers import base_config, mimic_success, run_inline, write_config, write_scenario

    from adaptive_eval.base.summary_schema import read_summary
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.outputs.report import render_markdown
    from adaptive_eval.workflows.report import report_run

    write_scenario(tmp_path / "s.npz", mimic_success([0.2, 0.5, 0.8], questions=10))
    data = base_config("s.npz", pair_rules=[rule])
    config = load_config(write_config(tmp_path / "c.yaml", data))
    run_inline(config, tmp_path / "run")
    summary = summary_dict(report_run(build_campaign(config), tmp_path / "run"))
    rules = summary["decision_rules"]
    assert rules["error_control"] == "ranking" and rules["pair_alpha"] == pytest.approx(0.025)
    settled = [p for p in summary["pairs"] if p["decision"] != "undecided"]
    assert settled and all(p["rule"] == rule and p["boundary"] > 0 for p in settled)
    markdown = render_markdown(read_summary(summary))
    if rule == "naive_z":
        assert not rules["error_controlled"] and "NOT controlled" in rules["warning"]
        assert "Warning" in markdown
    else:
        assert rules["error_controlled"] and rules["warning"] is None
        assert all(0 < p["alpha_spent"] <= 0.025 for p in settled)
        assert "Warning" not in markdown
    # The score and its interval lead; Bayes@N follows, labelled.
    for model in summary["models"]:
        assert model["score_low"] <= model["score"] <= model["score_high"]
        assert 0.0 <= model["bayes_low"] <= model["bayes_mu"] <= model["bayes_high"] <= 1.0
    # report.html says the same: the score with its interval, each pair's rule, the warning.
    import html

    page = (tmp_path / "run" / "report.html").read_text()
    for model in summary["models"]:
        assert (
            f"<td>{model['score']:.4f}</td><td>[{model['score_low']:.4f}, "
            f"{model['score_high']:.4f}]</td>" in page
        )
    for pair in settled:
        assert f"<td>{html.escape(pair['decision'])}</td><td>{rule}</td>" in page
    assert "id='decisions'" in page
    if rule == "naive_z":
        assert f"Warning: {html.escape(rules['warning'])}" in page
    else:
        assert "decision-warning" not in page
