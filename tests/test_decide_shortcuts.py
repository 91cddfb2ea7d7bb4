"""The decision step's shortcuts compute exactly what the plain forms compute, bit for bit.

The step (issue 26: <= 5 ms at L = 20, M = 30) computes a few things once per round that
the rules used to compute per pair or per model; a campaign's plans and decisions must not
change by a bit, so each shortcut is checked against the plain form on random evidence.
"""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.stats import sequential
from policies.allocation import (
    cell_cost,
    question_weights,
    row_means,
    split_integer,
    spread_trials,
)
from policies.pair_rules import looks_reached, pair_statistics


def _view(seed: int) -> CampaignView:
    rng = np.random.default_rng(seed)
    num_models, num_questions, num_categories = 12, 17, 4
    counts = rng.integers(0, 25, size=(num_models, num_questions, num_categories))
    counts[:, : num_questions // 3, 1:] = 0  # questions never solved: saturated variances
    prior = np.ones(counts.shape)
    weights = np.linspace(0.0, 1.0, num_categories)
    theta, se, variance = sequential.estimate_with_variance(counts, prior + counts, weights)
    trials = counts.sum(axis=2)
    tokens = rng.uniform(100, 3000, size=trials.shape)
    return CampaignView(
        names=tuple(f"m{i}" for i in range(num_models)),
        counts=counts,
        trials=trials,
        planned=trials + rng.integers(0, 3, size=trials.shape),
        capacity=np.full(num_models, 60, dtype=np.int64),
        confidence=0.95,
        min_trials=2,
        round=1,
        trials_used=int(trials.sum()),
        tokens_used=None,
        elapsed_s=0.0,
        estimate=theta,
        estimate_se=se,
        cell_variance=variance,
        cell_tokens=tokens,
        prior=prior,
        weights=weights,
    )


@pytest.mark.parametrize("pooled", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_estimate_with_variance_is_the_estimate_and_the_trial_variance(
    seed: int, pooled: bool
) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 30, size=(9, 23, 5)) * (rng.random((9, 23, 1)) < 0.8)
    nu = 1.0 + counts
    weights = rng.random(5)
    theta, se, variance = sequential.estimate_with_variance(counts, nu, weights, pooled)
    plain_theta, plain_se = sequential.empirical_estimate(counts, nu, weights, pooled)
    counts_f = counts.astype(np.float64)
    n = counts_f.sum(axis=-1)
    mean_post = (nu / nu.sum(axis=-1, keepdims=True)) @ weights
    xbar = np.where(n > 0, (counts_f @ weights) / np.maximum(n, 1.0), mean_post)
    assert theta.tobytes() == xbar.mean(axis=-1).tobytes()  # np.mean: the same sum and divide
    assert (theta.tobytes(), se.tobytes()) == (plain_theta.tobytes(), plain_se.tobytes())
    assert variance.tobytes() == sequential.trial_variance(nu, weights, pooled).tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_pair_statistics_are_the_views_pair_stat(seed: int) -> None:
    view = _view(seed)
    pairs = [(int(a), int(b)) for a in range(view.num_models) for b in range(view.num_models)]
    gaps, spreads = pair_statistics(view, pairs)
    assert list(zip(gaps, spreads, strict=True)) == [view.pair_stat(a, b) for a, b in pairs]


def test_looks_reached_is_numpys_search() -> None:
    fractions = sequential.DEFAULT_LOOKS.fractions()
    values = [0.0, 1e-9, *fractions, *(f * (1 + 1e-12) for f in fractions), 0.5, 2.0, np.inf]
    for value in [*values, float("nan")]:
        assert looks_reached(fractions, value) == int(np.searchsorted(fractions, value))


@pytest.mark.parametrize("seed", range(4))
def test_question_weights_and_spread_match_one_model_at_a_time(seed: int) -> None:
    """Each model's row of the (L, M) weights is what its own weights were (``sd / sqrt(cost)``
    of its row), and the spread of its trials is the plain one."""
    view = _view(seed)
    spread = view.spread_variance()
    assert spread is not None
    for cost in ("trials", "tokens"):
        weights = question_weights(view, "neyman", cost)
        planned = view.planned.astype(np.float64)
        room = np.maximum(view.capacity[:, None] - view.planned, 0)
        for model in range(view.num_models):
            sd = np.sqrt(np.maximum(spread[model], 1e-12))
            own = sd / np.sqrt(cell_cost(view, cost)[model])
            assert weights[model].tobytes() == own.tobytes()
            count = 7 * (model + 1)
            goal = own / own.sum() * (planned[model].sum() + count)
            deficit = np.maximum(goal - planned[model], 0.0)
            plain = split_integer(count, deficit, room[model])
            given = spread_trials(count, weights[model], planned[model], room[model])
            assert given.tobytes() == plain.tobytes()
    values = np.sqrt(np.maximum(np.asarray(view.cell_variance), 1e-12))
    assert row_means(values).tobytes() == values.mean(axis=1).tobytes()
