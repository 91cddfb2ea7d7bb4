"""Scores and intervals that hold under adaptive sampling (issue 20): the empirical-Bayes prior
of Bayes@N, the score interval, width goals and what the outputs lead with."""

from __future__ import annotations

import json
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
from scipy import optimize
from scipy.stats import dirichlet_multinomial, multinomial, norm

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import read_summary
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import StopReason
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import fingerprint_of
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import any_of
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.simulate import SimPolicy, Truth, simulate
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.outputs.report import render_console, render_markdown
from adaptive_eval.stats import posterior_moments
from adaptive_eval.stats.intervals import (
    IntervalDesign,
    score_intervals,
    trials_to_reach,
    wald_intervals,
)
from adaptive_eval.stats.posterior import (
    EB_STRENGTH_RANGE,
    dirichlet_multinomial_loglik,
    empirical_bayes_prior,
)
from adaptive_eval.stats.sequential import empirical_estimate
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.report import report_run

# -- the empirical-Bayes prior ----------------------------------------------------------------


def test_dirichlet_multinomial_loglik_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 7, size=(5, 3))
    alpha = np.array([0.4, 1.3, 2.2])
    ours = float(dirichlet_multinomial_loglik(counts, alpha))
    # scipy's pmf includes the multinomial coefficient, which does not depend on alpha.
    theirs = sum(
        dirichlet_multinomial.logpmf(row, alpha, row.sum())
        - multinomial.logpmf(row, row.sum(), np.full(3, 1 / 3))
        - row.sum() * np.log(3)
        for row in counts
    )
    assert ours == pytest.approx(theirs, rel=1e-10)


@pytest.mark.parametrize("shape", ["polarized", "homogeneous", "three categories"])
def test_empirical_bayes_strength_is_the_marginal_likelihood_maximum(shape: str) -> None:
    """The grid-and-parabola search against scipy's bounded optimiser on the same likelihood."""
    rng = np.random.default_rng({"polarized": 1, "homogeneous": 2, "three categories": 3}[shape])
    trials = rng.integers(2, 30, size=40)
    if shape == "three categories":
        p = rng.dirichlet([0.5, 0.5, 0.5], size=40)
        counts = np.stack([rng.multinomial(n, q) for n, q in zip(trials, p, strict=True)])
    else:
        a, b = (0.3, 0.4) if shape == "polarized" else (20.0, 30.0)
        k = rng.binomial(trials, rng.beta(a, b, size=40))
        counts = np.stack([trials - k, k], axis=1)
    prior = empirical_bayes_prior(counts[None])[0]
    strength = prior[0].sum()
    centre = prior[0] / strength
    pooled = counts.sum(axis=0)
    assert centre == pytest.approx((pooled + 1 / len(pooled)) / (pooled.sum() + 1))
    best = optimize.minimize_scalar(
        lambda u: -float(dirichlet_multinomial_loglik(counts, np.exp(u) * centre)),
        bounds=tuple(np.log(EB_STRENGTH_RANGE)),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert strength == pytest.approx(np.exp(best.x), rel=0.03)
    # Polarized questions give a weak prior, near-identical ones a strong one.
    assert (strength < 2.0) if shape == "polarized" else True
    assert (strength > 10.0) if shape == "homogeneous" else True


def test_uniform_bayes_prior_is_the_papers_bayes_at_n() -> None:
    rng = np.random.default_rng(4)
    counts = rng.multinomial(8, [0.3, 0.7], size=(3, 5))  # equal N, as in the paper
    state = RunState(np.ones(counts.shape), np.array([0.0, 1.0]), bayes_prior="uniform")
    state.add_plan(counts.sum(axis=2))
    state.apply_counts(counts)
    mu, sigma = state.moments()
    expected = posterior_moments(1.0 + counts, np.array([0.0, 1.0]))
    np.testing.assert_array_equal(mu, expected[0])
    np.testing.assert_array_equal(sigma, expected[1])
    with pytest.raises(ValueError, match="bayes_prior must be one of"):
        RunState(np.ones(counts.shape), np.array([0.0, 1.0]), bayes_prior="flat")


def _sparse_truth() -> Truth:
    """Models near 0 whose successes sit on a few questions of their own (the hard case for
    a uniform prior under unequal trial counts)."""
    success = np.zeros((4, 30))
    for model, (start, level) in enumerate(((0, 0.6), (5, 0.4), (10, 0.3), (20, 0.15))):
        success[model, start : start + 3] = level
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def _default_policy(cap: int = 200) -> SimPolicy:
    return SimPolicy(
        make_rules=lambda: (pair_rules.build("group_sequential"),),
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build("track_and_stop"),
        max_trials=cap,
        round_trials=120,
    )


def test_empirical_bayes_score_stays_right_where_the_uniform_prior_misorders() -> None:
    """Adaptive sampling leaves cells with different trial counts: the uniform prior pulls a
    question toward 1/2 by 2 / (n + 2), so models that stopped early look better than they
    are. The empirical-Bayes prior does not: it stays within 0.02 where the uniform one is off
    by more (by over 0.05 before issue 26's question spread gave unsolved questions more
    trials; about 0.03 since)."""
    truth = _sparse_truth()
    for seed in range(3):
        result = simulate(truth, _default_policy(), np.random.default_rng(seed))
        uniform, _ = posterior_moments(1.0 + result.counts, truth.weights)
        assert np.abs(uniform - truth.scores).max() > 0.02
        assert np.abs(result.mu - truth.scores).max() < 0.02
        assert np.abs(result.estimate - truth.scores).max() < 0.02
        order = np.argsort(-truth.scores)
        assert list(np.argsort(-result.mu)) == list(order)


# -- intervals ----------------------------------------------------------------------------------


def test_the_anytime_boundary_holds_at_every_look_in_brownian_monte_carlo() -> None:
    """P(exists a look with |Z| >= c(I)) <= alpha for the anytime sequence, looks 1.1x apart
    over four decades of information (20,000 Brownian paths)."""
    design = IntervalDesign(0.95)
    information = np.geomspace(100, 1e6, 100)
    se = 1 / np.sqrt(information)
    boundary = design.boundary(se, 1)
    rng = np.random.default_rng(5)
    steps = rng.normal(size=(20000, len(information))) * np.sqrt(np.diff(information, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(information)
    crossed = (np.abs(z) >= boundary).any(axis=1).mean()
    assert crossed <= 0.05
    assert boundary.min() > norm.isf(0.025)  # the price of holding at every look


def test_the_repeated_interval_is_the_spending_design_at_planned_looks() -> None:
    """12 looks, HSD(-4): every look's boundary covers at once (Monte Carlo), the last look's
    boundary gives the goal's width exactly at the horizon."""
    design = IntervalDesign(0.95, half_width=0.02)
    c_k = design.final_boundary(1)
    assert norm.isf(0.025) < c_k < 2.01
    horizon = design.horizon_information(1)
    assert c_k / np.sqrt(horizon) == pytest.approx(0.02)
    from adaptive_eval.stats.intervals import _fractions

    fractions = np.asarray(_fractions())
    rng = np.random.default_rng(6)
    steps = rng.normal(size=(40000, len(fractions))) * np.sqrt(np.diff(fractions, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    boundary = design.boundary(1 / np.sqrt(fractions * horizon), 1)
    assert (np.abs(z) >= boundary).any(axis=1).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 40000)
    before_first = design.boundary(np.array([1.0]), 1)
    assert np.isinf(before_first[0])


def test_the_score_interval_is_wilsons_on_the_effective_trials() -> None:
    design = IntervalDesign(0.95, half_width=0.05)
    c = design.final_boundary(1)
    none = np.array([[[60.0, 0.0], [60.0, 0.0]]])  # no success in 120 trials
    found = score_intervals(none, none + 1.0, np.array([0.0, 1.0]), design)
    assert found.low[0] == 0.0
    assert found.high[0] == pytest.approx(c**2 / (120 + c**2))  # Wilson's end at 0 of n
    # Away from 0 and 1 with many trials it is the Wald interval of the decision statistic.
    rng = np.random.default_rng(7)
    counts = rng.multinomial(400, [0.5, 0.5], size=(1, 30)).astype(float)
    wilson = score_intervals(counts, counts + 1.0, np.array([0.0, 1.0]), design)
    theta, se = empirical_estimate(counts, counts + 1.0, np.array([0.0, 1.0]))
    wald = wald_intervals(theta, se, design)
    assert wilson.low[0] == pytest.approx(wald.low[0], abs=2e-4)
    assert wilson.high[0] == pytest.approx(wald.high[0], abs=2e-4)
    # A three-category rubric on weights 0, 0.5, 1 is interval on the weights' scale.
    three = rng.multinomial(50, [0.2, 0.3, 0.5], size=(1, 10)).astype(float)
    out = score_intervals(three, three + 1.0, np.array([0.0, 0.5, 1.0]), design)
    assert 0.0 <= out.low[0] < out.estimate[0] < out.high[0] <= 1.0


def test_trials_to_reach_is_the_cheapest_top_up() -> None:
    rng = np.random.default_rng(8)
    variance = rng.uniform(0.0, 0.25, size=(3, 12))
    planned = rng.integers(2, 6, size=(3, 12)).astype(float)
    target = 0.03
    further = trials_to_reach(variance, planned, target)
    for model in range(3):
        sd = np.sqrt(variance[model])
        total = planned[model].sum() + further[model]

        def se_after(extra: float, model: int = model, sd: np.ndarray = sd) -> float:
            # Water-filling with ``extra`` more trials: n_q = max(planned, lam sd).
            lam = optimize.brentq(
                lambda x: np.maximum(planned[model], x * sd).sum() - planned[model].sum() - extra,
                0.0,
                1e9,
            )
            n = np.maximum(planned[model], lam * sd)
            return float(np.sqrt((variance[model] / n).sum()) / 12)

        assert se_after(further[model]) <= target * (1 + 1e-6)
        assert further[model] == 0 or se_after(further[model] - 2) > target
        assert total >= planned[model].sum()


# -- width goals --------------------------------------------------------------------------------


def _width_policy(simultaneous: bool = False, cap: int = 300) -> SimPolicy:
    goal = stopping_rules.build("ci_width", {"half_width": 0.04, "simultaneous": simultaneous})
    return SimPolicy(
        make_rules=lambda: (pair_rules.build("group_sequential"),),
        stopping=any_of(goal),
        allocator=allocators.build("track_and_stop"),
        max_trials=cap,
        round_trials=240,
    )


def _width_truth() -> Truth:
    success = mimic_success([0.04, 0.3, 0.5, 0.5, 0.93], questions=12, seed=3)
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def test_a_width_goal_stops_each_model_at_its_own_width_and_covers() -> None:
    """40 seeded campaigns (a true tie and models near 0 and 1 included): every model ends
    within +-h, models of small variance take fewer trials, and the intervals cover."""
    truth = _width_truth()
    design = IntervalDesign(0.95, half_width=0.04)
    covered = total = 0
    trials = []
    for seed in range(40):
        result = simulate(truth, _width_policy(), np.random.default_rng(seed))
        assert result.stop is not None and result.stop.reason is StopReason.CI_WIDTH
        found = score_intervals(result.counts, 1.0 + result.counts, truth.weights, design)
        assert (found.half_width <= 0.04 + 1e-12).all()
        covered += int(((found.low <= truth.scores) & (truth.scores <= found.high)).sum())
        total += len(truth.scores)
        trials.append(result.trials.sum(axis=1))
    assert covered / total >= 0.92  # nominal 0.95 (200 here); the benchmark runs 200+ per case
    per_model = np.mean(trials, axis=0)
    assert per_model[0] < 0.6 * per_model[2]  # near 0 needs far fewer than a coin


def test_a_width_goal_alone_spends_nothing_on_pairs_and_spreads_evenly() -> None:
    """With only a width goal, an undecided pair draws no trials of its own, a model's trials
    go evenly over its questions, and no model takes more than it lacks of its target."""
    counts = np.stack(
        [np.stack([np.full(6, 4), np.full(6, 4)], axis=1)] * 2
    )  # two tied models, 8 trials on each of 6 questions
    view = count_view(counts, capacity=400)
    goal = stopping_rules.build("ci_width", {"half_width": 0.05})
    decisions = ()
    goals = goal.goals(view, decisions)
    assert goals.settle_pairs is False and goals.questions == "uniform"
    plan = allocators.build("track_and_stop")(view, decisions, goal.needs(view, ()), 500, goals)
    lacking = goals.trial_targets - view.planned.sum(axis=1)
    assert (plan.sum(axis=1) <= np.ceil(lacking)).all()
    assert (
        plan.min(axis=1).tolist() == plan.max(axis=1).tolist()
        or (plan.max(axis=1) - plan.min(axis=1) <= 1).all()
    )


def test_simultaneous_intervals_cover_together_at_more_cost() -> None:
    truth = _width_truth()
    each = simulate(truth, _width_policy(), np.random.default_rng(1))
    joint = simulate(truth, _width_policy(simultaneous=True), np.random.default_rng(1))
    assert joint.total_trials > 1.3 * each.total_trials  # alpha / 5 per model


# -- campaigns, outputs and bad input -----------------------------------------------------------


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "s.npz", mimic_success([0.05, 0.45, 0.5, 0.9], questions=8))


def test_a_width_campaign_reports_each_interval_its_guarantee_and_trials(
    tmp_path: Path, scenario: Path
) -> None:
    data = base_config(
        "s.npz", stopping=[{"name": "ci_width", "half_width": 0.06}], max_trials_per_question=400
    )
    config = load(write_config(tmp_path / "c.yaml", data))
    done = run_inline(config, tmp_path / "run")
    assert done.stop is not None and done.stop.reason is StopReason.CI_WIDTH
    summary = summary_dict(report_run(build_campaign(config), tmp_path / "run"))
    info = summary["score"]
    assert info["interval"] == "group_sequential" and info["half_width"] == 0.06
    assert "repeated confidence interval" in info["guarantee"] and info["width_goal_met"]
    for model in summary["models"]:
        assert model["score_low"] <= model["score"] <= model["score_high"]
        assert (model["score_high"] - model["score_low"]) / 2 <= 0.06 + 1e-9
        assert model["width_goal_met"] and model["trials"] > 0
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "Width goal +-0.06 at 95% (each model): met by 4 of 4 models." in markdown
    html = (tmp_path / "run" / "report.html").read_text()
    assert "95% interval (repeated)" in html and "ranking-notes" in html


def test_ranking_and_width_together(tmp_path: Path, scenario: Path) -> None:
    both = {"name": "all_of", "rules": ["pairs_settled", {"name": "ci_width", "width": 0.2}]}
    data = base_config("s.npz", stopping=[both], max_trials_per_question=400)
    config = load(write_config(tmp_path / "c.yaml", data))
    done = run_inline(config, tmp_path / "run")
    summary = summary_dict(report_run(build_campaign(config), tmp_path / "run"))
    assert summary["score"]["width_goal_met"]
    assert all(d.settled or d.futile for d in done.decisions)


def test_the_outputs_lead_with_one_score_in_the_ranking_order(
    tmp_path: Path, scenario: Path
) -> None:
    config = load(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    run_inline(config, tmp_path / "run")
    report_run(build_campaign(config), tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    models = summary["models"]
    scores = [m["score"] for m in models]
    assert scores == sorted(scores, reverse=True)
    ranks = [m["rank"] for m in models]
    assert ranks == sorted(ranks)  # a better rank never shows a lower score
    assert list(models[0])[:7] == [
        "name",
        "rank",
        "rank_no_ties",
        "score",
        "score_se",
        "score_low",
        "score_high",
    ]
    assert {"bayes_mu", "bayes_sigma", "bayes_low", "bayes_high"} <= set(models[0])
    assert "mu" not in models[0] and "estimate" not in models[0]
    assert summary["score"]["interval"] == "anytime"
    assert summary["bayes"]["prior"] == "empirical"
    console = render_console(read_summary(summary))
    table = [line.split() for line in console.splitlines()[3 : 3 + len(models)]]
    assert [row[1] for row in table] == [m["name"] for m in models]
    assert "Bayes@N: the paper's posterior mean, for reference" in console
    markdown = render_markdown(read_summary(summary))
    assert "| rank | order | model | score | 95% interval (anytime) |" in markdown
    assert "it does not order the ranking" in markdown


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ("policy.stopping=[{name: ci_width, width: 1.0}]", "policy.stopping[0]", "not below"),
        (
            "policy.stopping=[{name: ci_width, half_width: 0.01}]",
            "policy.stopping[0]",
            "needs 1257 trials per question",
        ),
        (
            "policy.stopping=[{name: all_of, rules: [pairs_settled, {name: ci_width, "
            "half_width: 0.6}]}]",
            "policy.stopping[0].rules[1]",
            "not below",
        ),
        (
            "policy.stopping=[{name: ci_width, width: 0.1, confidence: 1.5}]",
            "policy.stopping[0]",
            "confidence must be a number in (0, 1), got 1.5",
        ),
        ("policy.stopping=[{name: all_of}]", "policy.stopping[0]", "non-empty list"),
        ("policy.bayes_prior=flat", "policy.bayes_prior", "flat"),
    ],
)
def test_a_bad_width_goal_is_refused_before_any_trial(
    tmp_path: Path, scenario: Path, override: str, field: str, message: str
) -> None:
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    with pytest.raises(InputError) as caught:
        build_campaign(load(path, [override]))
    text = str(caught.value)
    assert field in text and message in text
    assert not (tmp_path / "run").exists()


def test_a_run_recorded_under_the_earlier_score_rules_refuses_to_resume(
    tmp_path: Path, scenario: Path
) -> None:
    config = load(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    run_inline(config, tmp_path / "run")
    store = TrialStore(tmp_path / "run")
    identity = store.get_meta("identity")
    version = identity["decision_rules"].split(":", 1)[0]
    identity["decision_rules"] = identity["decision_rules"].replace(f"{version}:", "2:", 1)
    del identity["config"]["policy"]["bayes_prior"]
    store.set_meta(identity=identity, fingerprint=fingerprint_of(identity))
    store.close()
    with pytest.raises(InputError) as caught:
        open_run_dir(build_campaign(config), tmp_path / "run")
    text = str(caught.value)
    assert "decision_rules" in text and 'policy.bayes_prior: null -> "empirical"' in text


def test_a_width_campaigns_default_baseline_is_the_fixed_n_of_its_width(
    tmp_path: Path, scenario: Path
) -> None:
    """Issue 29 (3.1): a width campaign reported "saved -227.1%" against the default N = 80
    where the goal needed 336 per question; without baseline.fixed_n its baseline is the fixed
    N of the width (as validate states it), and a campaign that stops early saves against it."""
    from adaptive_eval.campaign.parts import width_fixed_n

    data = base_config(
        "s.npz", stopping=[{"name": "ci_width", "half_width": 0.03}], max_trials_per_question=400
    )
    del data["baseline"]
    config = load(write_config(tmp_path / "c.yaml", data))
    campaign = build_campaign(config)
    need = width_fixed_n(config, campaign.decision.interval_design, campaign.num_questions, 4)
    assert need is not None and 80 < need <= 400
    assert campaign.run.fixed_n == need and campaign.run.fixed_n_note is None
    done = run_inline(config, tmp_path / "run")
    saved = done.savings()
    assert saved.baseline_trials == need * 4 * campaign.num_questions
    assert saved.trials_fraction > 0
    # A campaign without a width goal keeps the default N.
    plain = base_config("s.npz", max_trials_per_question=400)
    del plain["baseline"]
    assert build_campaign(load(write_config(tmp_path / "p.yaml", plain))).run.fixed_n == 80
