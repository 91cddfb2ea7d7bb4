"""The ``betting`` pair rule: its closed form against quadrature, Ville's bound by Monte Carlo,
a prior that speeds it, wrong priors that cannot break it, and bad priors refused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario
from scipy import integrate
from scipy.stats import norm

from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import any_of
from adaptive_eval.forecast.simulate import SimPolicy, Truth, simulate, wrong_calls
from adaptive_eval.stats import betting


def _quadrature(x: float, information: float, mixture: betting.Mixture) -> float:
    total = 0.0
    for mean, scale, weight in zip(mixture.means, mixture.scales, mixture.weights, strict=True):

        def integrand(theta: float, mean: float = mean, scale: float = scale) -> float:
            return math.exp(theta * x - theta**2 * information / 2) * norm.pdf(theta, mean, scale)

        top = max(mean, 0.0) + 20 * scale + abs(x) / information + 10 / math.sqrt(information)
        peaks = [p for p in (mean, x / information) if 0 < p < top]
        mass = integrate.quad(integrand, 0, top, limit=400, points=peaks or None)[0]
        total += weight * mass / norm.sf(0, mean, scale)
    return math.log(total)


@pytest.mark.parametrize(
    ("x", "information"), [(10.0, 1e3), (-5.0, 3e3), (200.0, 6e3), (0.0, 1e2), (40.0, 2e4)]
)
def test_the_wealth_is_the_mixture_integral(x: float, information: float) -> None:
    mixtures = [
        betting.Mixture((0.03,), (0.02,), (1.0,)),
        betting.Mixture((-0.04,), (0.03,), (1.0,)),  # a prior on the other side
        betting.prior_mixture(0.05, 0.015, 0.2, betting.scale_mixture()),
    ]
    for mixture in mixtures:
        assert betting.log_wealth(x, information, mixture) == pytest.approx(
            _quadrature(x, information, mixture), rel=1e-7, abs=1e-9
        )


def test_the_boundary_is_where_the_wealth_reaches_one_over_alpha() -> None:
    mixture = betting.prior_mixture(0.05, 0.01, 0.2, betting.scale_mixture())
    for information in (1e3, 6e3, 5e4):
        z = betting.z_boundary(information, mixture, 0.025)
        root = math.sqrt(information)
        assert betting.rejects((z + 0.01) * root, information, mixture, 0.025)
        assert not betting.rejects((z - 0.01) * root, information, mixture, 0.025)


@pytest.mark.parametrize("prior_mean", [None, 0.0, 0.03, -0.05])
def test_ville_bounds_the_null_rejections_whatever_the_prior(prior_mean: float | None) -> None:
    """Brownian score paths under the null (drift 0) looked at 40 times: the share that ever
    reaches ``1 / alpha`` stays below ``alpha``, whichever way the prior leans."""
    alpha, paths = 0.05, 20000
    rng = np.random.default_rng(7)
    fallback = betting.scale_mixture()
    mixture = (
        fallback if prior_mean is None else betting.prior_mixture(prior_mean, 0.01, 0.2, fallback)
    )
    steps = np.diff(np.geomspace(50.0, 5e4, 41), prepend=0.0)
    scores = np.cumsum(rng.normal(0.0, np.sqrt(steps), (paths, steps.size)), axis=1)
    informations = np.cumsum(steps)
    wealth = betting.log_wealth(scores, informations, mixture)
    assert wealth[0, 0] == pytest.approx(betting.log_wealth(scores[0, 0], steps[0], mixture))
    crossed = (wealth >= -math.log(alpha)).any(axis=1)
    assert crossed.mean() < alpha
    # ... and the test has power: a drift of 0.03 is found by the end
    drifted = betting.log_wealth(scores[:, -1] + 0.03 * informations[-1], informations[-1], mixture)
    assert (drifted >= -math.log(alpha)).mean() > 0.9


def _two_models(gap: float, seed: int = 9) -> Truth:
    base = 0.5
    success = mimic_success([base + gap / 2, base - gap / 2], questions=30, seed=seed)
    shift = success.mean(axis=1) - np.array([base + gap / 2, base - gap / 2])
    success = np.clip(success - shift[:, None], 0.01, 0.99)
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def _policy(params: dict[str, Any], cap: int = 400, round_trials: int = 60) -> SimPolicy:
    return SimPolicy(
        make_rules=lambda: (pair_rules.build("betting", params),),
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build("track_and_stop"),
        max_trials=cap,
        round_trials=round_trials,
    )


def _scores(truth: Truth, moved: float) -> dict[str, Any]:
    earlier = truth.scores.copy()
    earlier[0] -= moved
    return {"scores": {f"m{i}": [float(s), 0.01] for i, s in enumerate(earlier)}}


def test_a_right_prior_settles_a_gap_with_fewer_trials_and_a_wrong_one_costs_little() -> None:
    truth = _two_models(0.05)
    cost = {}
    for label, params in {
        "cold": {},
        "right": _scores(truth, 0.01),
        "wrong": _scores(truth, 0.1),
    }.items():
        results = [simulate(truth, _policy(params), np.random.default_rng(s)) for s in range(12)]
        assert all(r.decisions[0].settled for r in results)
        assert not any(any(wrong_calls(r.decisions, truth.scores, 0.02)) for r in results)
        cost[label] = np.mean([r.total_trials for r in results])
    assert cost["right"] < 0.85 * cost["cold"]
    assert cost["wrong"] < 1.25 * cost["cold"]


def test_a_prior_that_says_the_wrong_order_does_not_order_a_tie() -> None:
    """A tie with a prior sure that m0 leads by 0.1: over 60 campaigns at most a few wrong
    orders (alpha 0.05 allows 3 in expectation; 0.01-0.02 measured, docs/sequential.md)."""
    truth = _two_models(0.0, seed=1)
    params = _scores(truth, -0.1)
    wrong = sum(
        any(
            wrong_calls(
                simulate(truth, _policy(params, 100, 240), np.random.default_rng(s)).decisions,
                truth.scores,
                0.02,
            )
        )
        for s in range(60)
    )
    assert wrong <= 6


def test_an_earlier_run_is_the_prior_by_model_name(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    earlier = tmp_path / "earlier"
    run_inline(load(write_config(tmp_path / "c.yaml", base_config("s.npz"))), earlier)
    assert main(["report", str(earlier), "--json"]) == 0
    rows = json.loads((earlier / "summary.json").read_text())["models"]
    rule = pair_rules.build("betting", {"prior": str(earlier)})
    assert rule.prior_scores == {r["name"]: (r["score"], r["score_se"]) for r in rows}
    data = base_config("s.npz", pair_rules=[{"name": "betting", "prior": "earlier"}])
    campaign = build_campaign(load(write_config(tmp_path / "b.yaml", data)))
    (built,) = campaign.decision.pair_rules  # the config's relative path is its folder's
    assert built.prior == str(earlier.resolve()) and built.prior_scores == rule.prior_scores
    again = tmp_path / "again"
    run_inline(load(tmp_path / "b.yaml"), again)
    assert main(["report", str(again), "--json"]) == 0
    summary = json.loads((again / "summary.json").read_text())
    assert any(p["name"] == "betting" for p in summary["decision_rules"]["plugins"])


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"prior": "no/such/run"}, "/no/such/run: no such folder or summary.json"),
        ({"prior": "x", "scores": {"a": [0.5, 0.01]}}, "not both"),
        ({"scores": {"a": [0.5]}}, "scores['a'] must be [score, standard error >= 0]"),
        ({"robust": 1.0}, "robust must be"),
    ],
)
def test_a_bad_prior_is_one_error_naming_the_field(
    tmp_path: Path, params: dict[str, Any], words: str
) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5], questions=5))
    data = base_config("s.npz", pair_rules=[{"name": "betting", **params}])
    with pytest.raises(InputError) as caught:
        build_campaign(load(write_config(tmp_path / "c.yaml", data)))
    assert words in str(caught.value) and "policy.pair_rules[0]" in str(caught.value)


def test_a_summary_that_is_not_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text('{"models": 3}')
    with pytest.raises(InputError, match=r"not a readable summary\.json"):
        pair_rules.build("betting", {"prior": str(tmp_path)}, field="policy.pair_rules[0]")


@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e308 * 10])
def test_a_mixture_refuses_a_mean_or_scale_that_is_no_number(bad: float) -> None:
    """Issue 48, item 2 (the backstop): a prior's NaN score reached the bets and failed only
    mid-run, inside the boundary's root finder; a mixture is now refused where it is made."""
    with pytest.raises(ValueError, match="must be finite"):
        betting.Mixture((bad, 0.0), (0.1, 0.1), (0.5, 0.5))
    with pytest.raises(ValueError, match="must be finite"):
        betting.prior_mixture(0.1, bad, 0.2, betting.scale_mixture())
