"""Tests for adaptive_eval.stats.posterior against independent oracles.

Oracles: Monte Carlo draws from the Dirichlet posteriors, Laplace's rule of succession, the
avg@N identity of Appendix B, the paper's Algorithm 1 written out literally (with its
``w_j - w_0`` shift) in exact rational arithmetic, and brute-force loops.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from adaptive_eval.stats import (
    avg_at_n,
    avg_sigma_from_bayes,
    bayes,
    counts_from_outcomes,
    credible_interval,
    pairwise_z,
    posterior_moments,
    prior_counts,
    rank_no_ties,
    rank_with_ties,
    ranking_confidence,
    z_threshold,
)

# ------------------------------------------------------------------------------------------
# oracles
# ------------------------------------------------------------------------------------------


def algorithm1_literal(
    R: list[list[int]], w: list[Fraction], R0: list[list[int]] | None = None
) -> tuple[Fraction, Fraction]:
    """The paper's Algorithm 1, line by line, in exact rational arithmetic (returns mu, sigma^2)."""
    M = len(R)
    N = len(R[0])
    C = len(w) - 1
    D = 0 if R0 is None else len(R0[0])
    T = 1 + C + D + N
    nu = [[Fraction(0)] * (C + 1) for _ in range(M)]
    for alpha in range(M):
        for k in range(C + 1):
            n = sum(1 for i in range(N) if R[alpha][i] == k)
            n0 = 1 + (0 if R0 is None else sum(1 for i in range(D) if R0[alpha][i] == k))
            nu[alpha][k] = Fraction(n0 + n)
    mu = w[0] + Fraction(1, M * T) * sum(
        nu[alpha][j] * (w[j] - w[0]) for alpha in range(M) for j in range(C + 1)
    )
    acc = Fraction(0)
    for alpha in range(M):
        s2 = sum(nu[alpha][j] / T * (w[j] - w[0]) ** 2 for j in range(C + 1))
        s1 = sum(nu[alpha][j] / T * (w[j] - w[0]) for j in range(C + 1))
        acc += s2 - s1**2
    var = acc / (M**2 * (T + 1))
    return mu, var


def moments_loop(nu: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """METHOD.md section 2 with per-question totals, one question at a time (exact rationals)."""
    M, K = nu.shape
    wf = [Fraction(float(x)) for x in w]
    mu = Fraction(0)
    var = Fraction(0)
    for a in range(M):
        row = [Fraction(float(x)) for x in nu[a]]
        T = sum(row)
        m1 = sum(row[k] / T * wf[k] for k in range(K))
        m2 = sum(row[k] / T * wf[k] ** 2 for k in range(K))
        mu += m1
        var += (m2 - m1**2) / (T + 1)
    return float(mu / M), math.sqrt(float(var / M**2))


def random_nu(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positive Dirichlet parameters with unequal per-question totals (some fractional)."""
    return rng.uniform(0.3, 3.0, size=shape) + rng.integers(0, 25, size=shape)


# ------------------------------------------------------------------------------------------
# Monte Carlo
# ------------------------------------------------------------------------------------------


def monte_carlo_pi_bar(
    nu: np.ndarray, w: np.ndarray, num_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Draws of pi_bar = (1/M) sum_a w . pi_a with pi_a ~ Dirichlet(nu_a), per leading index."""
    lead = nu.shape[:-2]
    M = nu.shape[-2]
    out = np.empty((*lead, num_draws))
    for idx in np.ndindex(*lead):
        total = np.zeros(num_draws)
        for a in range(M):
            pi = rng.dirichlet(nu[(*idx, a)], size=num_draws)
            total += pi @ w
        out[idx] = total / M
    return out


@pytest.mark.parametrize("num_categories", [2, 3, 8])
@pytest.mark.parametrize("shape", [(1,), (4,), (3, 5), (2, 2, 3)])
def test_posterior_moments_match_monte_carlo(shape: tuple[int, ...], num_categories: int) -> None:
    rng = np.random.default_rng(1000 * num_categories + len(shape) + sum(shape))
    nu = random_nu(rng, (*shape, num_categories))
    w = rng.normal(size=num_categories)
    mu, sigma = posterior_moments(nu, w)
    assert mu.shape == shape[:-1]
    assert sigma.shape == shape[:-1]

    S = 20_000
    draws = monte_carlo_pi_bar(nu, w, S, rng)
    mean = draws.mean(axis=-1)
    var = draws.var(axis=-1)
    se_mean = np.sqrt(var / S)
    centred2 = (draws - mean[..., None]) ** 2
    se_var = np.sqrt(((centred2 - var[..., None]) ** 2).mean(axis=-1) / S)
    assert np.all(np.abs(mean - mu) < 4 * se_mean), (mean, mu, se_mean)
    assert np.all(np.abs(var - sigma**2) < 4 * se_var), (var, sigma**2, se_var)


def test_monte_carlo_check_has_power() -> None:
    """The Monte Carlo comparison would catch a missing '+1' in (T_a + 1)."""
    rng = np.random.default_rng(7)
    nu = rng.uniform(0.5, 2.0, size=(3, 3))  # small totals, where T and T+1 differ a lot
    w = np.array([0.0, 0.5, 1.0])
    _, sigma = posterior_moments(nu, w)
    total = nu.sum(axis=-1)
    p = nu / total[:, None]
    wrong_var = (((p * w**2).sum(-1) - (p @ w) ** 2) / total).sum() / 9
    S = 20_000
    draws = monte_carlo_pi_bar(nu, w, S, rng)
    var = draws.var()
    se_var = np.sqrt((((draws - draws.mean()) ** 2 - var) ** 2).mean() / S)
    assert abs(var - sigma**2) < 4 * se_var
    assert abs(var - wrong_var) > 4 * se_var


# ------------------------------------------------------------------------------------------
# closed-form cases
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N", [0, 1, 2, 5, 17, 80])
def test_laplace_rule_of_succession(N: int) -> None:
    w = np.array([0.0, 1.0])
    for c in range(N + 1):
        R = np.array([[1] * c + [0] * (N - c)], dtype=np.int64)
        mu, sigma = bayes(R, w)
        exact_mu = Fraction(c + 1, N + 2)
        exact_var = exact_mu * (1 - exact_mu) / (N + 3)
        assert float(mu) == pytest.approx(float(exact_mu), rel=1e-15, abs=0)
        assert float(sigma) ** 2 == pytest.approx(float(exact_var), rel=1e-13, abs=0)


@pytest.mark.parametrize("num_categories", [2, 3, 8])
def test_avg_at_n_relation(num_categories: int) -> None:
    rng = np.random.default_rng(num_categories)
    L, M, N, K = 9, 7, 6, num_categories
    R = rng.integers(0, K, size=(L, M, N))
    w = rng.normal(size=K)
    mu, sigma = bayes(R, w)
    a = avg_at_n(R, w)
    A = w.sum() / (K + N)
    np.testing.assert_allclose(mu, A + N / (K + N) * a, rtol=0, atol=1e-12)

    # sigma_avg is the posterior sd of the affine image a(pi_bar) = (pi_bar - A)(K+N)/N, i.e. the
    # sd under the rescaled rubric w (K+N)/N -- computed here through posterior_moments.
    nu = counts_from_outcomes(R, K) + prior_counts(None, M, K)
    _, sigma_scaled = posterior_moments(nu, w * (K + N) / N)
    np.testing.assert_allclose(
        avg_sigma_from_bayes(sigma, N, K), sigma_scaled, rtol=1e-12, atol=1e-15
    )

    # The ranking by mu equals the ranking by avg@N (pairs separated by more than rounding).
    diff_a = a[:, None] - a[None, :]
    diff_mu = mu[:, None] - mu[None, :]
    separated = np.abs(diff_a) > 1e-12
    assert np.all(np.sign(diff_a[separated]) == np.sign(diff_mu[separated]))
    if not np.any(np.abs(diff_a[~np.eye(L, dtype=bool)]) <= 1e-12):
        np.testing.assert_array_equal(rank_no_ties(mu), rank_no_ties(a))


def test_avg_at_n_binary_ranking_with_exact_ties() -> None:
    """Binary avg@N has many exact ties; mu must order every separated pair the same way."""
    rng = np.random.default_rng(3)
    R = rng.integers(0, 2, size=(30, 4, 3))
    mu, _ = bayes(R, [0.0, 1.0])
    a = avg_at_n(R, [0.0, 1.0])
    for i, j in itertools.combinations(range(30), 2):
        if a[i] > a[j] + 1e-12:
            assert mu[i] > mu[j]
        elif a[j] > a[i] + 1e-12:
            assert mu[j] > mu[i]
        else:
            assert mu[i] == pytest.approx(mu[j], abs=1e-12)


def test_avg_sigma_scale_hand_value() -> None:
    # C = 1, N = 5: (1 + 1 + 5) / 5 = 1.4
    np.testing.assert_allclose(avg_sigma_from_bayes(np.array([0.1, 0.2]), 5, 2), [0.14, 0.28])


@pytest.mark.parametrize(("num_categories", "D"), [(2, 0), (3, 0), (3, 4), (8, 2), (2, 5)])
def test_equal_counts_match_algorithm1_literal(num_categories: int, D: int) -> None:
    rng = np.random.default_rng(10 * num_categories + D)
    M, N, K = 5, 7, num_categories
    R = rng.integers(0, K, size=(M, N))
    R0 = rng.integers(0, K, size=(M, D)) if D else None
    w = np.round(rng.normal(size=K), 3)  # exactly representable decimals are not needed
    mu_exact, var_exact = algorithm1_literal(
        R.tolist(), [Fraction(float(x)) for x in w], None if R0 is None else R0.tolist()
    )
    mu, sigma = bayes(R, w, R0)
    assert float(mu) == pytest.approx(float(mu_exact), rel=1e-12, abs=1e-14)
    assert float(sigma) == pytest.approx(math.sqrt(float(var_exact)), rel=1e-12, abs=1e-14)


def test_unequal_totals_match_per_question_loop() -> None:
    rng = np.random.default_rng(11)
    for K in (2, 3, 8):
        nu = random_nu(rng, (6, K))
        w = rng.normal(size=K) + 5.0  # an offset rubric exercises the w_0 shift
        mu, sigma = posterior_moments(nu, w)
        mu_ref, sigma_ref = moments_loop(nu, w)
        assert float(mu) == pytest.approx(mu_ref, rel=1e-12)
        assert float(sigma) == pytest.approx(sigma_ref, rel=1e-10)


def test_batched_equals_per_model() -> None:
    rng = np.random.default_rng(12)
    L, M, N, K = 4, 6, 5, 3
    R = rng.integers(0, K, size=(L, M, N))
    R0 = rng.integers(0, K, size=(L, M, 2))
    w = np.array([0.0, 0.25, 1.0])
    mu, sigma = bayes(R, w, R0)
    mu_shared, sigma_shared = bayes(R, w, R0[0])
    for ell in range(L):
        m1, s1 = bayes(R[ell], w, R0[ell])
        assert float(m1) == pytest.approx(mu[ell], rel=1e-14)
        assert float(s1) == pytest.approx(sigma[ell], rel=1e-14)
        m2, s2 = bayes(R[ell], w, R0[0])
        assert float(m2) == pytest.approx(mu_shared[ell], rel=1e-14)
        assert float(s2) == pytest.approx(sigma_shared[ell], rel=1e-14)
    assert mu.shape == (L,)
    assert sigma.shape == (L,)


def test_bayes_single_model_returns_0d_arrays() -> None:
    mu, sigma = bayes(np.array([[0, 1], [1, 1]]), [0.0, 1.0])
    assert isinstance(mu, np.ndarray)
    assert mu.shape == ()
    assert sigma.shape == ()
    assert mu.dtype == np.float64


def test_prior_counts_change_mu_as_hand_computed() -> None:
    w = [0.0, 1.0]
    R = np.array([[1, 0]])
    R0 = np.array([[1, 1, 0]])
    np.testing.assert_array_equal(prior_counts(R0, 1, 2), [[2.0, 3.0]])
    # uniform prior: nu = (2, 2), T = 4 -> mu = 1/2, sigma^2 = (1/4)/5
    mu_u, sigma_u = bayes(R, w)
    assert float(mu_u) == 0.5
    assert float(sigma_u) ** 2 == pytest.approx(1 / 20, rel=1e-14)
    # prior R0: nu = (1 + 1 + 1, 1 + 2 + 1) = (3, 4), T = 7 -> mu = 4/7, sigma^2 = (4/7)(3/7)/8
    mu_p, sigma_p = bayes(R, w, R0)
    assert float(mu_p) == pytest.approx(4 / 7, rel=1e-15)
    assert float(sigma_p) ** 2 == pytest.approx((4 / 7) * (3 / 7) / 8, rel=1e-14)

    # Two questions, 3 categories, w = (0, 0.5, 1):
    # q1: R = [2, 2], R0 = [0]    -> nu = (2, 1, 3), T = 6, E = (0.5 + 3)/6 = 7/12
    # q2: R = [1, 0], R0 = [2]    -> nu = (2, 2, 2), T = 6, E = (1 + 2)/6 = 1/2
    mu2, _ = bayes(np.array([[2, 2], [1, 0]]), [0.0, 0.5, 1.0], np.array([[0], [2]]))
    assert float(mu2) == pytest.approx((7 / 12 + 1 / 2) / 2, rel=1e-15)


def test_counts_from_outcomes_matches_loop() -> None:
    rng = np.random.default_rng(5)
    R = rng.integers(0, 4, size=(3, 5, 9))
    counts = counts_from_outcomes(R, 4)
    assert counts.dtype == np.int64
    assert counts.shape == (3, 5, 4)
    for ell, a, k in itertools.product(range(3), range(5), range(4)):
        assert counts[ell, a, k] == sum(1 for i in range(9) if R[ell, a, i] == k)
    # zero trials, and bool input
    np.testing.assert_array_equal(counts_from_outcomes(np.zeros((2, 0), dtype=int), 3), 0)
    np.testing.assert_array_equal(
        counts_from_outcomes(np.array([[True, False, True]]), 2), [[1, 2]]
    )


def test_prior_counts_uniform_and_from_r0() -> None:
    np.testing.assert_array_equal(prior_counts(None, 2, 3), np.ones((2, 3)))
    R0 = np.array([[0, 2, 2, 1], [1, 1, 1, 1]])
    np.testing.assert_array_equal(prior_counts(R0, 2, 3), [[2, 2, 3], [1, 5, 1]])
    assert prior_counts(R0, 2, 3).dtype == np.float64


def test_avg_at_n_matches_loop() -> None:
    rng = np.random.default_rng(8)
    R = rng.integers(0, 3, size=(2, 4, 5))
    w = np.array([0.0, 0.3, 1.0])
    expected = [np.mean([w[x] for x in R[ell].ravel()]) for ell in range(2)]
    np.testing.assert_allclose(avg_at_n(R, w), expected, rtol=1e-14)


# ------------------------------------------------------------------------------------------
# intervals, z and rankings
# ------------------------------------------------------------------------------------------


def test_z_threshold_and_ranking_confidence() -> None:
    assert z_threshold(0.95) == pytest.approx(1.6448536269514722, abs=1e-15)
    assert z_threshold(0.975) == pytest.approx(1.959963984540054, abs=1e-14)
    assert z_threshold(0.5) == 0.0
    for c in (0.6, 0.9, 0.95, 0.99):
        assert float(ranking_confidence(z_threshold(c))) == pytest.approx(c, abs=1e-14)
    z = np.array([-np.inf, -1.0, 0.0, 1.645, np.inf])
    np.testing.assert_allclose(ranking_confidence(z), sps.norm.cdf(z), atol=1e-15)
    # rho = (1 + erf(z / sqrt 2)) / 2 at z = 1.645 is 0.95 to 4 digits (Section 2.5)
    assert float(ranking_confidence(1.645)) == pytest.approx(0.95, abs=1e-4)


def test_credible_interval() -> None:
    mu = np.array([0.2, 0.5, 0.9])
    sigma = np.array([0.01, 0.1, 0.0])
    lo, hi = credible_interval(mu, sigma, 0.95)
    z = sps.norm.ppf(0.975)
    np.testing.assert_allclose(lo, mu - z * sigma, rtol=1e-15)
    np.testing.assert_allclose(hi, mu + z * sigma, rtol=1e-15)
    lo90, hi90 = credible_interval(mu, sigma, 0.90)
    assert np.all(lo90 >= lo)
    assert np.all(hi90 <= hi)
    # scalar broadcasting
    lo_s, hi_s = credible_interval(0.5, [0.1, 0.2], 0.68)
    assert lo_s.shape == (2,)
    assert hi_s.shape == (2,)


def test_pairwise_z_values_and_degenerate_cases() -> None:
    rng = np.random.default_rng(4)
    mu = rng.random(6)
    sigma = rng.uniform(0.01, 0.1, size=6)
    z = pairwise_z(mu, sigma)
    for i, j in itertools.product(range(6), range(6)):
        expected = 0.0 if i == j else (mu[i] - mu[j]) / math.sqrt(sigma[i] ** 2 + sigma[j] ** 2)
        assert z[i, j] == pytest.approx(expected, rel=1e-13, abs=1e-15)
    np.testing.assert_allclose(z, -z.T, atol=0)

    z0 = pairwise_z([0.5, 0.5, 0.7, 0.3], [0.0, 0.0, 0.0, 0.0])
    assert z0[0, 1] == 0.0
    assert z0[2, 0] == np.inf
    assert z0[0, 2] == -np.inf
    assert z0[3, 2] == -np.inf
    assert np.all(np.diag(z0) == 0.0)
    # one zero sigma is not degenerate
    assert pairwise_z([0.5, 0.4], [0.0, 0.05])[0, 1] == pytest.approx(2.0)


def rank_with_ties_oracle(mu: list[float], sigma: list[float], thresh: float) -> list[int]:
    """Table 2 rule written with plain loops: sort descending, walk neighbours."""
    order = sorted(range(len(mu)), key=lambda i: (-mu[i], i))
    ranks = [0] * len(mu)
    current = 1
    for pos, idx in enumerate(order):
        if pos > 0:
            prev = order[pos - 1]
            scale = math.hypot(sigma[prev], sigma[idx])
            d = mu[prev] - mu[idx]
            z = (d / scale) if scale > 0 else (0.0 if d == 0 else math.inf)
            if z >= thresh:
                current += 1
        ranks[idx] = current
    return ranks


def test_rank_with_ties_paper_dense_example() -> None:
    # Sorted: 0.9 | 0.7, 0.68 (z = 0.02 / 0.0141 = 1.41 < 1.645) | 0.3
    mu = np.array([0.3, 0.7, 0.9, 0.68])
    sigma = np.full(4, 0.01)
    ranks = rank_with_ties(mu, sigma, z_threshold(0.95))
    np.testing.assert_array_equal(ranks, [3, 2, 1, 2])
    assert ranks.dtype == np.int64
    # At a looser threshold (z < 1) the pair separates.
    np.testing.assert_array_equal(rank_with_ties(mu, sigma, 1.0), [4, 2, 1, 3])


def test_rank_with_ties_chains_between_consecutive_models() -> None:
    # Each neighbouring pair has z = 0.02/0.01414 = 1.41 < 1.645, so all three share rank 1 even
    # though the first and third alone have z = 2.83 (ties are between consecutive models only,
    # as in the paper's Table 2 where LLM5, LLM4 and LLM3 share rank 5).
    mu = np.array([0.56, 0.60, 0.58, 0.40])
    sigma = np.full(4, 0.01)
    np.testing.assert_array_equal(rank_with_ties(mu, sigma, 1.645), [1, 1, 1, 2])
    assert pairwise_z(mu, sigma)[1, 0] > 1.645


def test_rank_with_ties_table2_shape() -> None:
    """11 models whose neighbour z-scores reproduce the tie pattern of Table 2 (w/ CI row)."""
    # Sorted best-first: LLM11, LLM10, LLM9, LLM7, LLM8, LLM6, LLM5, LLM4, LLM3, LLM2, LLM1.
    # Expected ranks in that order: 1, 2, 2, 3, 3, 4, 5, 5, 5, 6, 7.
    sorted_mu = np.array([0.73, 0.62, 0.61, 0.54, 0.53, 0.45, 0.37, 0.365, 0.36, 0.26, 0.23])
    sigma = np.full(11, 0.009)
    ranks_sorted = rank_with_ties(sorted_mu, sigma, 1.645)
    np.testing.assert_array_equal(ranks_sorted, [1, 2, 2, 3, 3, 4, 5, 5, 5, 6, 7])
    assert ranks_sorted.tolist() == rank_with_ties_oracle(sorted_mu.tolist(), sigma.tolist(), 1.645)


def test_rank_with_ties_random_against_oracle() -> None:
    rng = np.random.default_rng(21)
    for _ in range(200):
        L = int(rng.integers(1, 12))
        mu = np.round(rng.random(L), 2)  # rounding creates exact ties in mu
        sigma = rng.choice([0.0, 0.005, 0.02, 0.05], size=L)
        thresh = float(rng.choice([0.0, 1.0, 1.645, 3.0]))
        expected = rank_with_ties_oracle(mu.tolist(), sigma.tolist(), thresh)
        assert rank_with_ties(mu, sigma, thresh).tolist() == expected


def test_rank_with_ties_zero_threshold_and_exact_ties() -> None:
    mu = np.array([0.5, 0.7, 0.5, 0.1])
    sigma = np.array([0.1, 0.1, 0.1, 0.1])
    # z >= 0 always: nothing ties, so this is the stable no-ties ranking
    np.testing.assert_array_equal(rank_with_ties(mu, sigma, 0.0), [2, 1, 3, 4])
    np.testing.assert_array_equal(rank_no_ties(mu), [2, 1, 3, 4])
    # exactly equal mu with zero sigma tie at any positive threshold
    np.testing.assert_array_equal(rank_with_ties([0.5, 0.5], [0.0, 0.0], 1e-9), [1, 1])
    np.testing.assert_array_equal(rank_with_ties([0.5, 0.4], [0.0, 0.0], 1e9), [1, 2])
    np.testing.assert_array_equal(rank_with_ties([0.5], [0.1], 1.645), [1])


def test_rank_no_ties_is_stable_permutation() -> None:
    rng = np.random.default_rng(2)
    mu = rng.integers(0, 4, size=20).astype(float)
    ranks = rank_no_ties(mu)
    assert sorted(ranks.tolist()) == list(range(1, 21))
    expected_order = sorted(range(20), key=lambda i: (-mu[i], i))
    assert [int(np.where(ranks == r)[0][0]) for r in range(1, 21)] == expected_order


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------

W2 = np.array([0.0, 1.0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: posterior_moments(np.ones(3), W2), "nu"),
        (lambda: posterior_moments(np.ones((2, 3)), W2), "weights"),
        (lambda: posterior_moments(np.array([[1.0, -1.0]]), W2), "nu must be positive"),
        (lambda: posterior_moments(np.array([[1.0, 0.0]]), W2), "nu must be positive"),
        (lambda: posterior_moments(np.array([[1.0, np.nan]]), W2), "nu must be positive"),
        (lambda: posterior_moments(np.array([[1.0, np.inf]]), W2), "nu must be positive"),
        (lambda: posterior_moments(np.ones((0, 2)), W2), "nu"),
        (lambda: posterior_moments(np.ones((2, 2)), np.ones((2, 2))), "weights"),
        (lambda: posterior_moments(np.ones((2, 1)), [1.0]), "weights"),
        (lambda: posterior_moments(np.ones((2, 2)), [0.0, np.nan]), "weights"),
        (lambda: posterior_moments(np.array([["a", "b"]]), W2), "nu"),
        (lambda: bayes(np.array([[0, 2]]), W2), "R has category 2"),
        (lambda: bayes(np.array([[0, -1]]), W2), "R has category -1"),
        (lambda: bayes(np.array([[0.0, 1.0]]), W2), "R must have an integer"),
        (lambda: bayes(np.array([0, 1]), W2), "R must have at least 2"),
        (lambda: bayes(np.zeros((2, 2, 2, 2), dtype=int), W2), r"R must have shape \(M, N\)"),
        (lambda: bayes(np.zeros((2, 3), dtype=int), W2, np.zeros((3, 1), dtype=int)), "R0"),
        (lambda: bayes(np.zeros((2, 3), dtype=int), W2, np.array([[0], [5]])), "R0 has category"),
        (
            lambda: bayes(np.zeros((2, 2, 3), dtype=int), W2, np.zeros((3, 2, 1), dtype=int)),
            "R0",
        ),
        (lambda: prior_counts(np.zeros((3, 2), dtype=int), 2, 2), "R0"),
        (lambda: prior_counts(np.array([[0, 3]]), 1, 3), "R0 has category 3"),
        (lambda: prior_counts(np.array([[0.5]]), 1, 3), "R0 must have an integer"),
        (lambda: prior_counts(None, 0, 2), "num_questions"),
        (lambda: prior_counts(None, 2, 1), "num_categories"),
        (lambda: prior_counts(None, 2.0, 2), "num_questions"),  # type: ignore[arg-type]
        (lambda: counts_from_outcomes(np.array([[0, 4]]), 4), "R has category 4"),
        (lambda: counts_from_outcomes(np.array([0, 1]), 2), "R must have at least 2"),
        (lambda: avg_at_n(np.zeros((2, 0), dtype=int), W2), "R must have M >= 1"),
        (lambda: avg_sigma_from_bayes(0.1, 0, 2), "num_trials"),
        (lambda: avg_sigma_from_bayes(-0.1, 3, 2), "sigma"),
        (lambda: credible_interval(0.5, 0.1, 1.0), "confidence"),
        (lambda: credible_interval(0.5, 0.1, 0.0), "confidence"),
        (lambda: credible_interval(0.5, -0.1, 0.9), "sigma"),
        (lambda: credible_interval([0.5, 0.4], [0.1, 0.1, 0.1], 0.9), "broadcast"),
        (lambda: z_threshold(1.5), "confidence"),
        (lambda: z_threshold(float("nan")), "confidence"),
        (lambda: pairwise_z([0.5, 0.4], [0.1]), "sigma must have the same shape"),
        (lambda: pairwise_z([[0.5]], [[0.1]]), "mu must be 1-D"),
        (lambda: pairwise_z([0.5, 0.4], [0.1, -0.1]), "sigma must be >= 0"),
        (lambda: pairwise_z([0.5, np.nan], [0.1, 0.1]), "mu must be finite"),
        (lambda: rank_with_ties([0.5, 0.4], [0.1, 0.1], -1.0), "z_thresh"),
        (lambda: rank_with_ties([0.5, 0.4], [0.1, 0.1], float("nan")), "z_thresh"),
        (lambda: rank_no_ties(np.ones((2, 2))), "mu must be 1-D"),
        (lambda: ranking_confidence([np.nan]), "z"),
    ],
)
def test_bad_input_raises_value_error(call: object, match: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=match):
        call()
