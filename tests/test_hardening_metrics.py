"""Issue 8, item 10: G-Pass@k keeps a tau just above i/k above it; mG-Pass@k is fast at large k
and exact against rational arithmetic."""

from __future__ import annotations

import time
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from adaptive_eval.stats import g_pass_at_k, mg_pass_at_k


def test_a_tau_just_above_i_over_k_is_not_snapped_down() -> None:
    correct = np.array([[1, 1, 0, 0, 0, 0]])
    # ceil(0.5000000001 * 2) = 2: both draws correct, C(2, 2) / C(6, 2) = 1/15.
    assert float(g_pass_at_k(correct, 2, 0.5000000001)) == pytest.approx(1 / 15, abs=1e-15)
    # i / k itself (with its float error) still means exactly i.
    assert float(g_pass_at_k(correct, 2, 0.5)) == pytest.approx(1 - comb(4, 2) / comb(6, 2))
    ten = np.array([[1] * 4 + [0] * 8])
    assert 0.1 * 3 * 10 != 3  # 3.0000000000000004: float error, not a higher threshold
    assert float(g_pass_at_k(ten, 10, 0.1 * 3)) == float(g_pass_at_k(ten, 10, 0.3))
    assert float(g_pass_at_k(ten, 10, 0.1 * 3)) != float(g_pass_at_k(ten, 10, 0.31))


def exact_mg(n: int, k: int, c: int) -> Fraction:
    """(2/k) sum_{i=ceil(k/2)+1}^{k} P(X >= i), X ~ Hypergeom(n, c, k), in rationals."""
    start = (k + 1) // 2 + 1
    total = Fraction(0)
    for i in range(start, k + 1):
        total += Fraction(
            sum(comb(c, j) * comb(n - c, k - j) for j in range(i, min(c, k) + 1)), comb(n, k)
        )
    return Fraction(2, k) * total


@pytest.mark.parametrize(("n", "k"), [(80, 70), (90, 67), (120, 119)])
def test_mg_pass_at_large_k_matches_rational_arithmetic(n: int, k: int) -> None:
    for c in (0, 20, n // 2, n - 3, n):
        correct = np.zeros((1, n), dtype=bool)
        correct[0, :c] = True
        assert float(mg_pass_at_k(correct, k)) == pytest.approx(
            float(exact_mg(n, k, c)), rel=1e-12, abs=1e-15
        )


def test_mg_pass_at_k_is_fast_at_n_5000() -> None:
    rng = np.random.default_rng(0)
    correct = rng.random((4, 5000)) < rng.random((4, 1))
    started = time.perf_counter()
    value = float(mg_pass_at_k(correct, 2500))
    assert time.perf_counter() - started < 5.0  # was ~54 s
    assert 0.0 <= value <= 1.0
