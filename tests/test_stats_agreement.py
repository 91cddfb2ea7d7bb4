"""Tests for adaptive_eval.stats.agreement: Kendall tau_b, convergence@n, bootstrap."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest

from adaptive_eval.stats import (
    bayes,
    bootstrap_columns,
    bootstrap_rows,
    convergence_at_n,
    kendall_tau_b,
    pass_at_k,
    ranking_from_scores,
)

# ------------------------------------------------------------------------------------------
# Kendall tau_b
# ------------------------------------------------------------------------------------------


def tau_b_brute(x: list[float], y: list[float]) -> float:
    """O(n^2) tau_b = (n_c - n_d) / sqrt((n_0 - n_1)(n_0 - n_2)) (paper Appendix, Kendall)."""
    n = len(x)
    nc = nd = n1 = n2 = 0
    for i, j in itertools.combinations(range(n), 2):
        dx = x[i] - x[j]
        dy = y[i] - y[j]
        if dx == 0:
            n1 += 1
        if dy == 0:
            n2 += 1
        if dx * dy > 0:
            nc += 1
        elif dx * dy < 0:
            nd += 1
    n0 = n * (n - 1) // 2
    return (nc - nd) / math.sqrt((n0 - n1) * (n0 - n2))


def test_kendall_tau_b_against_brute_force_with_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 15))
        x = rng.integers(0, 4, size=n).astype(float)  # heavy ties
        y = rng.integers(0, 5, size=n).astype(float)
        if np.all(x == x[0]) or np.all(y == y[0]):
            assert math.isnan(kendall_tau_b(x, y))
            continue
        assert kendall_tau_b(x, y) == pytest.approx(tau_b_brute(x.tolist(), y.tolist()), abs=1e-12)


def test_kendall_tau_b_simple_values() -> None:
    assert kendall_tau_b([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert isinstance(kendall_tau_b([1, 2], [2, 1]), float)
    assert math.isnan(kendall_tau_b([2, 2, 2], [1, 2, 3]))


# ------------------------------------------------------------------------------------------
# ranking_from_scores and convergence@n
# ------------------------------------------------------------------------------------------


def test_ranking_from_scores_dense_with_ties() -> None:
    np.testing.assert_array_equal(ranking_from_scores([0.1, 0.5, 0.5, 0.9]), [3, 2, 2, 1])
    np.testing.assert_array_equal(ranking_from_scores([4, 3, 2, 1]), [1, 2, 3, 4])
    assert ranking_from_scores([1.0]).dtype == np.int64


def scripted(
    trajectory: list[list[float]],
) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """An R whose trial axis has len(trajectory) columns and a score_fn that returns
    trajectory[n - 1] for R[..., :n]; lets a test spell out the score path by hand."""
    table = np.array(trajectory, dtype=float)
    R = np.zeros((table.shape[1], 1, table.shape[0]), dtype=np.int64)

    def score_fn(r: np.ndarray) -> np.ndarray:
        return table[r.shape[-1] - 1]

    return R, score_fn


GOLD = np.array([0.9, 0.5, 0.1])


def test_convergence_converges() -> None:
    R, fn = scripted(
        [
            [0.1, 0.5, 0.9],  # n=1 wrong
            [0.5, 0.5, 0.1],  # n=2 tie between models 0 and 1: not the gold order
            [0.6, 0.5, 0.1],  # n=3 gold order from here on
            [0.7, 0.4, 0.2],
            [0.8, 0.5, 0.1],
        ]
    )
    assert convergence_at_n(R, fn, GOLD) == 3


def test_convergence_never() -> None:
    R, fn = scripted([[0.9, 0.5, 0.1], [0.9, 0.5, 0.1], [0.5, 0.9, 0.1]])
    assert convergence_at_n(R, fn, GOLD) is None


def test_convergence_breaks_then_reconverges_gives_later_n() -> None:
    R, fn = scripted(
        [
            [0.9, 0.5, 0.1],  # n=1 match
            [0.9, 0.5, 0.2],  # n=2 match
            [0.4, 0.5, 0.1],  # n=3 broken
            [0.9, 0.5, 0.1],  # n=4 match again
            [0.8, 0.6, 0.0],  # n=5 match
        ]
    )
    assert convergence_at_n(R, fn, GOLD) == 4


def test_convergence_from_first_trial_and_gold_ties() -> None:
    R, fn = scripted([[3.0, 1.0, 1.0], [2.0, 0.5, 0.5]])
    assert convergence_at_n(R, fn, np.array([1.0, 0.0, 0.0])) == 1
    # gold has a tie that the scores break: never equal
    R2, fn2 = scripted([[3.0, 1.0, 0.9], [3.0, 1.0, 0.9]])
    assert convergence_at_n(R2, fn2, np.array([1.0, 0.0, 0.0])) is None


def test_convergence_nan_scores_count_as_mismatch() -> None:
    """Pass@4 is undefined for n < 4; a score_fn returning nan there just does not match."""
    rng = np.random.default_rng(1)
    p = np.array([0.9, 0.5, 0.2])[:, None, None]
    R = (rng.random((3, 20, 12)) < p).astype(np.int64)

    def pass4(r: np.ndarray) -> np.ndarray:
        if r.shape[-1] < 4:
            return np.full(3, np.nan)
        return np.asarray(pass_at_k(r.astype(bool), 4))

    n = convergence_at_n(R, pass4, pass4(R))
    assert n is not None
    assert 4 <= n <= 12


def test_convergence_realistic_bayes_and_paper_variant() -> None:
    rng = np.random.default_rng(2)
    p = np.array([0.8, 0.6, 0.4, 0.2])[:, None, None]
    R = (rng.random((4, 30, 40)) < p).astype(np.int64)

    def score(r: np.ndarray) -> np.ndarray:
        return bayes(r, [0.0, 1.0])[0]

    gold = score(R)
    n_full = convergence_at_n(R, score, gold)
    assert n_full is not None
    # Brute force: smallest n with every n' >= n matching the gold dense ranking.
    ok = [
        np.array_equal(ranking_from_scores(score(R[..., :n])), ranking_from_scores(gold))
        for n in range(1, 41)
    ]
    expected = next(n for n in range(1, 41) if all(ok[n - 1 :]))
    assert n_full == expected
    # The paper's s <= N_max - 1 variant: drop the last column, keep the full-data gold.
    assert convergence_at_n(R[..., :-1], score, gold) == (expected if expected < 40 else None)


def test_equality_criterion_is_kendall_tau_b_one() -> None:
    """Identical dense ranks <=> tau_b == 1 (for non-constant vectors), with heavy ties."""
    rng = np.random.default_rng(3)
    seen_equal = seen_unequal = 0
    for _ in range(2000):
        n = int(rng.integers(2, 6))
        x = rng.integers(0, 3, size=n).astype(float)
        y = x if rng.random() < 0.3 else rng.integers(0, 3, size=n).astype(float)
        if np.all(x == x[0]) or np.all(y == y[0]):
            continue
        same = np.array_equal(ranking_from_scores(x), ranking_from_scores(y * 2 + 1))
        assert same == (abs(kendall_tau_b(x, y) - 1.0) < 1e-12)
        seen_equal += same
        seen_unequal += not same
    assert seen_equal > 50
    assert seen_unequal > 50


# ------------------------------------------------------------------------------------------
# bootstrap
# ------------------------------------------------------------------------------------------


def coded(L: int, M: int, N: int) -> np.ndarray:
    """R[l, a, i] = 10000 i + 100 l + a: every entry names its own (model, question, trial)."""
    ell, a, i = np.meshgrid(np.arange(L), np.arange(M), np.arange(N), indexing="ij")
    return 10000 * i + 100 * ell + a


def test_bootstrap_columns_uses_same_columns_everywhere() -> None:
    L, M, N = 3, 4, 6
    R = coded(L, M, N)
    seen: list[np.ndarray] = []

    def stat(r: np.ndarray) -> np.ndarray:
        seen.append(r.copy())
        return r.mean(axis=(1, 2))

    out = bootstrap_columns(R, stat, 25, np.random.default_rng(0))
    assert out.shape == (25, L)
    assert len(seen) == 25
    for rb in seen:
        assert rb.shape == R.shape
        cols = rb // 10000
        # one column index per resampled position, shared by all models and questions
        assert np.all(cols == cols[0, 0][None, None, :])
        # the rest of the code is unchanged: model and question stay in place
        np.testing.assert_array_equal(rb % 10000, R % 10000)
    # sampling with replacement: some replicate repeats a column
    assert any(len(set(rb[0, 0] // 10000)) < N for rb in seen)


def test_bootstrap_rows_resamples_each_row_independently() -> None:
    L, M, N = 3, 4, 6
    R = coded(L, M, N)
    seen: list[np.ndarray] = []

    def stat(r: np.ndarray) -> np.ndarray:
        seen.append(r.copy())
        return r.sum(axis=(1, 2))

    out = bootstrap_rows(R, stat, 25, np.random.default_rng(0))
    assert out.shape == (25, L)
    for rb in seen:
        assert rb.shape == R.shape
        # every answer comes from its own (model, question) row
        np.testing.assert_array_equal(rb % 10000, R % 10000)
    # rows draw different column indices (not the column bootstrap)
    assert any(not np.all(rb // 10000 == (rb // 10000)[0, 0][None, None, :]) for rb in seen)


def test_bootstrap_reproducible_and_centred() -> None:
    rng = np.random.default_rng(4)
    R = (rng.random((2, 30, 20)) < np.array([0.7, 0.3])[:, None, None]).astype(np.int64)

    def stat(r: np.ndarray) -> np.ndarray:
        return r.mean(axis=(1, 2))

    for fn in (bootstrap_columns, bootstrap_rows):
        a = fn(R, stat, 300, np.random.default_rng(9))
        b = fn(R, stat, 300, np.random.default_rng(9))
        np.testing.assert_array_equal(a, b)
        # the bootstrap mean of a mean is unbiased: within 4 bootstrap standard errors
        se = a.std(axis=0) / math.sqrt(300)
        assert np.all(np.abs(a.mean(axis=0) - stat(R)) < 4 * se + 1e-12)


# ------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------


def _mean_stat(r: np.ndarray) -> np.ndarray:
    return r.mean(axis=(1, 2))


R3 = np.zeros((2, 3, 4), dtype=np.int64)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: kendall_tau_b([1, 2, 3], [1, 2]), "x and y must have the same length"),
        (lambda: kendall_tau_b([1], [1]), "at least 2"),
        (lambda: kendall_tau_b([[1, 2]], [[1, 2]]), "x must be 1-D"),
        (lambda: kendall_tau_b([1, np.nan], [1, 2]), "x must be finite"),
        (lambda: kendall_tau_b([1, 2], [1, np.inf]), "y must be finite"),
        (lambda: ranking_from_scores([[1.0]]), "scores must be 1-D"),
        (lambda: convergence_at_n(R3, lambda r: np.zeros(3), np.zeros(2)), "score_fn returned"),
        (lambda: convergence_at_n(R3, lambda r: np.zeros(2), np.array([np.nan, 1])), "gold"),
        (lambda: convergence_at_n(np.zeros((2, 0)), lambda r: np.zeros(2), np.zeros(2)), "R"),
        (lambda: bootstrap_columns(R3, _mean_stat, 0, np.random.default_rng()), "num_samples"),
        (lambda: bootstrap_rows(R3, _mean_stat, 2.5, np.random.default_rng()), "num_samples"),
        (lambda: bootstrap_rows(R3, _mean_stat, 2, 0), "rng must be a numpy.random.Generator"),
        (
            lambda: bootstrap_columns(R3, _mean_stat, 2, np.random.RandomState(0)),
            "rng must be",
        ),
        (lambda: bootstrap_columns(np.zeros((2, 0)), _mean_stat, 2, np.random.default_rng()), "R"),
    ],
)
def test_bad_input_raises_value_error(call: object, match: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=match):
        call()
