"""Tests for adaptive_eval.stats.metrics against brute-force enumeration of k-subsets."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from adaptive_eval.stats import g_pass_at_k, mg_pass_at_k, pass_at_k, pass_hat_k

# ------------------------------------------------------------------------------------------
# brute-force oracles: enumerate every k-subset of the N trials of each question
# ------------------------------------------------------------------------------------------


def subset_fraction(row: list[int], k: int, need: int) -> Fraction:
    """Fraction of k-subsets of the row's trials with at least `need` correct."""
    subsets = list(itertools.combinations(range(len(row)), k))
    hits = sum(1 for s in subsets if sum(row[i] for i in s) >= need)
    return Fraction(hits, len(subsets))


def brute_metric(correct: np.ndarray, k: int, need: int) -> float:
    rows = correct.reshape(-1, correct.shape[-1]).astype(int).tolist()
    vals = [subset_fraction(r, k, need) for r in rows]
    return float(sum(vals, Fraction(0)) / len(vals))


def brute_mg(correct: np.ndarray, k: int) -> float:
    """(2/k) sum_{i=ceil(k/2)+1}^{k} G-Pass@k_{i/k}, thresholds as exact integers."""
    rows = correct.reshape(-1, correct.shape[-1]).astype(int).tolist()
    start = math.ceil(Fraction(k, 2)) + 1
    total = Fraction(0)
    for i in range(start, k + 1):
        total += sum((subset_fraction(r, k, i) for r in rows), Fraction(0)) / len(rows)
    return float(Fraction(2, k) * total)


def all_counts_matrix(N: int, rng: np.random.Generator) -> np.ndarray:
    """M = N + 1 questions with c = 0..N correct, the correct trials at random positions."""
    rows = []
    for c in range(N + 1):
        row = np.array([1] * c + [0] * (N - c), dtype=bool)
        rng.shuffle(row)
        rows.append(row)
    return np.array(rows)


# ------------------------------------------------------------------------------------------
# agreement with brute force
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("N", [1, 2, 3, 5, 7])
def test_pass_at_k_and_pass_hat_k_brute_force(N: int) -> None:
    rng = np.random.default_rng(N)
    correct = all_counts_matrix(N, rng)
    for k in range(1, N + 1):
        assert float(pass_at_k(correct, k)) == pytest.approx(brute_metric(correct, k, 1), abs=1e-14)
        assert float(pass_hat_k(correct, k)) == pytest.approx(
            brute_metric(correct, k, k), abs=1e-14
        )
        # per question too (M = 1 each)
        for row in correct:
            assert float(pass_at_k(row[None, :], k)) == pytest.approx(
                brute_metric(row[None, :], k, 1), abs=1e-15
            )


@pytest.mark.parametrize("N", [2, 4, 6, 7])
def test_g_pass_at_k_brute_force(N: int) -> None:
    rng = np.random.default_rng(100 + N)
    correct = all_counts_matrix(N, rng)
    for k in range(1, N + 1):
        for tau in (0.01, 0.25, 1 / 3, 0.5, 0.6, 2 / 3, 0.75, 0.9, 1.0):
            need = max(1, math.ceil(Fraction(tau).limit_denominator(1000) * k))
            assert float(g_pass_at_k(correct, k, tau)) == pytest.approx(
                brute_metric(correct, k, need), abs=1e-14
            ), (k, tau)


def test_g_pass_tau_equal_to_i_over_k_uses_threshold_i() -> None:
    """tau = i/k must give ceil(tau k) = i even where float i/k*k is not exactly i."""
    rng = np.random.default_rng(9)
    N = 12
    correct = all_counts_matrix(N, rng)
    for k in range(1, N + 1):
        for i in range(1, k + 1):
            got = float(g_pass_at_k(correct, k, i / k))
            assert got == pytest.approx(brute_metric(correct, k, i), abs=1e-14), (k, i)


@pytest.mark.parametrize("N", [1, 2, 3, 5, 7])
def test_mg_pass_at_k_brute_force(N: int) -> None:
    rng = np.random.default_rng(200 + N)
    correct = all_counts_matrix(N, rng)
    for k in range(1, N + 1):
        assert float(mg_pass_at_k(correct, k)) == pytest.approx(brute_mg(correct, k), abs=1e-14)


def test_mg_pass_hand_values() -> None:
    perfect = np.ones((1, 6), dtype=bool)
    # k = 1: the sum over i = ceil(1/2)+1 = 2 .. 1 is empty
    assert float(mg_pass_at_k(perfect, 1)) == 0.0
    # k = 2: (2/2) G-Pass@2_{2/2} = Pass^2
    c = np.array([[1, 1, 0, 0]])
    assert float(mg_pass_at_k(c, 2)) == pytest.approx(float(pass_hat_k(c, 2)), abs=0)
    # perfect model: (2/k) * (k - ceil(k/2)) = 2 floor(k/2) / k
    for k in range(1, 7):
        assert float(mg_pass_at_k(perfect, k)) == pytest.approx(2 * (k // 2) / k, abs=1e-15)


def test_random_matrices_with_leading_axes_match_brute_force() -> None:
    rng = np.random.default_rng(42)
    correct = rng.random((3, 4, 6)) < 0.4
    for k in (1, 2, 4, 6):
        pa = pass_at_k(correct, k)
        ph = pass_hat_k(correct, k)
        gp = g_pass_at_k(correct, k, 0.5)
        mg = mg_pass_at_k(correct, k)
        assert pa.shape == (3,)
        for ell in range(3):
            assert pa[ell] == pytest.approx(brute_metric(correct[ell], k, 1), abs=1e-14)
            assert ph[ell] == pytest.approx(brute_metric(correct[ell], k, k), abs=1e-14)
            need = math.ceil(0.5 * k)
            assert gp[ell] == pytest.approx(brute_metric(correct[ell], k, need), abs=1e-14)
            assert mg[ell] == pytest.approx(brute_mg(correct[ell], k), abs=1e-14)


# ------------------------------------------------------------------------------------------
# identities and edge cases
# ------------------------------------------------------------------------------------------


def test_pass_at_1_is_mean_accuracy() -> None:
    rng = np.random.default_rng(1)
    correct = rng.random((5, 30, 16)) < 0.3
    np.testing.assert_allclose(pass_at_k(correct, 1), correct.mean(axis=(1, 2)), atol=1e-15)
    np.testing.assert_allclose(pass_hat_k(correct, 1), correct.mean(axis=(1, 2)), atol=1e-15)


def test_edge_cases_all_wrong_and_all_right_are_exact() -> None:
    for N in (1, 4, 9):
        none = np.zeros((2, N), dtype=bool)
        full = np.ones((2, N), dtype=bool)
        for k in range(1, N + 1):
            assert float(pass_at_k(none, k)) == 0.0
            assert float(pass_hat_k(none, k)) == 0.0
            assert float(g_pass_at_k(none, k, 0.5)) == 0.0
            assert float(mg_pass_at_k(none, k)) == 0.0
            assert float(pass_at_k(full, k)) == 1.0
            assert float(pass_hat_k(full, k)) == 1.0
            assert float(g_pass_at_k(full, k, 0.5)) == 1.0
            assert float(g_pass_at_k(full, k, 1.0)) == 1.0


def test_pass_at_k_when_fewer_wrong_than_k_is_one() -> None:
    # n - c < k: every k-subset contains a correct trial
    c = np.array([[1, 1, 1, 0, 0]])
    assert float(pass_at_k(c, 3)) == 1.0
    assert float(pass_at_k(c, 2)) == pytest.approx(1 - 1 / 10)


def test_g_pass_limits() -> None:
    rng = np.random.default_rng(3)
    correct = rng.random((8, 10)) < 0.5
    for k in (1, 3, 5, 10):
        assert float(g_pass_at_k(correct, k, 1.0)) == float(pass_hat_k(correct, k))
        assert float(g_pass_at_k(correct, k, 1e-9)) == float(pass_at_k(correct, k))
        # monotone non-increasing in tau
        vals = [float(g_pass_at_k(correct, k, t)) for t in (0.1, 0.3, 0.5, 0.7, 1.0)]
        assert all(a >= b for a, b in itertools.pairwise(vals))


def test_large_n_is_stable() -> None:
    """No overflow or cancellation where C(n, k) is astronomically large."""
    n, k = 2000, 1000
    correct = np.zeros((3, n), dtype=bool)
    correct[0, :1] = True  # c = 1: pass@k = k/n
    correct[1, : n - 1] = True  # c = n-1: pass^k = (n-k)/n
    correct[2, :] = True
    pa = pass_at_k(correct[:1], k)
    ph = pass_hat_k(correct[1:2], k)
    assert float(pa) == pytest.approx(0.5, rel=1e-13)
    assert float(ph) == pytest.approx(0.5, rel=1e-13)
    assert float(pass_at_k(correct[2:], k)) == 1.0
    # c = 10, k = 5 against the log-gamma closed form 1 - C(n-c,k)/C(n,k)
    row = np.zeros((1, n), dtype=bool)
    row[0, :10] = True

    def lcomb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    expected = 1 - math.exp(lcomb(n - 10, 5) - lcomb(n, 5))
    assert float(pass_at_k(row, 5)) == pytest.approx(expected, rel=1e-12)


def test_accepts_bool_int_and_float_flags_and_categorical_via_mask() -> None:
    rng = np.random.default_rng(5)
    R = rng.integers(0, 3, size=(2, 6, 5))  # categories 0..2, 2 = correct
    mask = R == 2
    for k in (1, 3):
        ref = pass_at_k(mask, k)
        np.testing.assert_array_equal(pass_at_k(mask.astype(np.int8), k), ref)
        np.testing.assert_array_equal(pass_at_k(mask.astype(float), k), ref)
        np.testing.assert_array_equal(
            g_pass_at_k(mask.astype(int), k, 0.5), g_pass_at_k(mask, k, 0.5)
        )


def test_single_model_returns_0d_array() -> None:
    out = pass_at_k(np.array([[True, False]]), 1)
    assert isinstance(out, np.ndarray)
    assert out.shape == ()
    assert float(out) == 0.5


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------

C2 = np.array([[1, 0, 1]])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: pass_at_k(C2, 0), "k must satisfy"),
        (lambda: pass_at_k(C2, 4), r"k must satisfy 1 <= k <= N = 3, got k=4"),
        (lambda: pass_hat_k(C2, 4), "k must satisfy"),
        (lambda: g_pass_at_k(C2, 5, 0.5), "k must satisfy"),
        (lambda: mg_pass_at_k(C2, 4), "k must satisfy"),
        (lambda: pass_at_k(C2, 1.0), "k must be an integer"),  # type: ignore[arg-type]
        (lambda: pass_at_k(C2, True), "k must be an integer"),
        (lambda: g_pass_at_k(C2, 2, 0.0), "tau"),
        (lambda: g_pass_at_k(C2, 2, 1.5), "tau"),
        (lambda: g_pass_at_k(C2, 2, float("nan")), "tau"),
        (lambda: g_pass_at_k(C2, 2, "0.5"), "tau"),  # type: ignore[arg-type]
        (lambda: pass_at_k(np.array([[1, 2, 0]]), 1), "correct must contain only 0/1"),
        (lambda: pass_at_k(np.array([[0.5, 1.0]]), 1), "correct must contain only 0/1"),
        (lambda: pass_at_k(np.array([1, 0, 1]), 1), r"correct must have shape \(\.\.\., M, N\)"),
        (lambda: pass_at_k(np.zeros((0, 3)), 1), "correct must have M >= 1"),
        (lambda: pass_at_k(np.zeros((2, 0)), 1), "correct must have M >= 1"),
        (lambda: pass_at_k(np.array([["1", "0"]]), 1), "correct must be a bool"),
    ],
)
def test_bad_input_raises_value_error(call: object, match: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=match):
        call()
