"""Baseline sampling metrics of the paper's Appendix E: Pass@k, Pass^k, G-Pass@k_tau, mG-Pass@k.

Every function takes ``correct``, an array of shape ``(..., M, N)`` of correctness flags
(bool, or integers/floats that are all 0 or 1): ``correct[..., a, i]`` says whether trial
``i`` on question ``a`` was right. For categorical outcomes pass e.g. ``R == C`` or
``np.isin(R, good_categories)``. With ``c`` correct of ``n = N`` trials on a question, each
metric is the mean over questions of a hypergeometric tail probability: draw ``k`` of the
``n`` trials without replacement and let ``X`` be the number of correct ones; then

* Pass@k      = E_a[ 1 - C(n-c, k) / C(n, k) ]                         = E_a[ P(X >= 1) ]
* Pass^k      = E_a[ C(c, k) / C(n, k) ]                               = E_a[ P(X >= k) ]
* G-Pass@k_tau = E_a[ sum_{j=ceil(tau k)}^{c} C(c, j) C(n-c, k-j) / C(n, k) ]
                                                                        = E_a[ P(X >= ceil(tau k)) ]

The per-question values depend only on ``(n, k, c)``, so each call builds one table over
``c = 0..n`` with ``scipy.stats.hypergeom.sf`` (Boost; no binomial coefficient is formed, so
nothing overflows for any ``n``, and the relative error is ~1e-15) and caches it; the data are
then reduced by a single table lookup. Table entries that are exactly 0 (fewer than the
required correct trials exist) or exactly 1 (every k-subset qualifies) are set exactly.
Results have shape ``(...)`` (a 0-d float64 array for a 2-D ``correct``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from adaptive_eval.stats.arrays import FloatArray, IntArray

__all__ = ["g_pass_at_k", "mg_pass_at_k", "pass_at_k", "pass_hat_k"]

#: ``tau * k`` within this many ulps of an integer is that integer (float error of ``i / k * k``).
_SNAP_ULPS = 8
#: mG-Pass@k sums its tail tables directly up to this many thresholds, then uses a closed form.
_MG_DIRECT_TERMS = 32


def _correct_counts(correct: ArrayLike) -> tuple[IntArray, int]:
    """Validate ``correct`` and return (per-question correct counts (..., M), n)."""
    arr = np.asarray(correct)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"correct must be a bool or 0/1 numeric array, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"correct must have shape (..., M, N), got shape {arr.shape}")
    if arr.shape[-2] < 1 or arr.shape[-1] < 1:
        raise ValueError(
            f"correct must have M >= 1 questions and N >= 1 trials, got shape {arr.shape}"
        )
    if arr.dtype.kind != "b":
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            raise ValueError(f"correct must contain only 0/1 values, found {arr[bad].flat[0]!r}")
    return arr.sum(axis=-1, dtype=np.int64), int(arr.shape[-1])


def _check_k(k: object, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise ValueError(f"k must be an integer, got {k!r}")
    ik = int(k)
    if not 1 <= ik <= n:
        raise ValueError(f"k must satisfy 1 <= k <= N = {n}, got k={ik}")
    return ik


@lru_cache(maxsize=1024)
def _tail_table(n: int, k: int, lo: int) -> FloatArray:
    """``P(X >= lo)`` for ``X ~ Hypergeometric(population n, c successes, k draws)`` and every
    ``c = 0..n`` (read-only, cached). Entries whose range ``lo..min(c, k)`` is empty are exactly
    0 and entries covering the whole support ``max(0, k-(n-c))..min(c, k)`` are exactly 1."""
    c = np.arange(n + 1)
    table = np.asarray(stats.hypergeom.sf(lo - 1, n, c, k), dtype=np.float64)
    support_lo = np.maximum(0, k - (n - c))
    support_hi = np.minimum(c, k)
    table = np.where(lo > support_hi, 0.0, np.where(lo <= support_lo, 1.0, table))
    table = np.clip(table, 0.0, 1.0)
    table.setflags(write=False)
    return table


def _mean_tail(counts: IntArray, n: int, k: int, lo: int) -> FloatArray:
    return np.asarray(_tail_table(n, k, lo)[counts].mean(axis=-1), dtype=np.float64)


def pass_at_k(correct: ArrayLike, k: int) -> FloatArray:
    """Unbiased Pass@k (Chen et al. 2021; paper eq. pass_at_k).

    ``Pass@k = E_a[ 1 - C(n - c_a, k) / C(n, k) ]``, ``1 <= k <= N``. Pass@1 is the mean
    accuracy.

    >>> correct = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    >>> round(float(pass_at_k(correct, 2)), 12)  # (1/2 + 5/6 + 0) / 3 = 4/9
    0.444444444444
    """
    counts, n = _correct_counts(correct)
    return _mean_tail(counts, n, _check_k(k, n), 1)


def pass_hat_k(correct: ArrayLike, k: int) -> FloatArray:
    """Pass^k (Yao et al. 2024; paper eq. pass_to_k): ``E_a[ C(c_a, k) / C(n, k) ]``.

    >>> correct = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    >>> float(pass_hat_k(correct, 2))  # (3/6 + 1/6) / 2
    0.3333333333333333
    """
    counts, n = _correct_counts(correct)
    kk = _check_k(k, n)
    return _mean_tail(counts, n, kk, kk)


def _threshold(tau: object, k: int) -> int:
    """``ceil(tau k)``, robust to float error in ``tau k`` (``tau = i/k`` gives exactly ``i``)."""
    if isinstance(tau, bool) or not isinstance(tau, Real):
        raise ValueError(f"tau must be a real number in (0, 1], got {tau!r}")
    t = float(tau)
    if not 0.0 < t <= 1.0:
        raise ValueError(f"tau must satisfy 0 < tau <= 1, got tau={t!r}")
    x = t * k
    nearest = round(x)
    # Only rounding error of the product (a few ulps) is forgiven: tau = 0.5000000001 is a
    # threshold above 1/2 and must not snap to it.
    lo = nearest if abs(x - nearest) <= _SNAP_ULPS * math.ulp(max(1.0, x)) else math.ceil(x)
    return max(int(lo), 1)


def g_pass_at_k(correct: ArrayLike, k: int, tau: float) -> FloatArray:
    """G-Pass@k_tau (Liu et al. 2024; paper eq. G_pass_at_k_tau), ``0 < tau <= 1``.

    ``G-Pass@k_tau = E_a[ sum_{j=ceil(tau k)}^{c_a} C(c_a, j) C(n - c_a, k - j) / C(n, k) ]``,
    the probability that at least ``ceil(tau k)`` of ``k`` trials drawn without replacement are
    correct. ``tau k`` within a few ulps of an integer is taken as that integer before the ceiling,
    so ``tau = i / k`` gives exactly ``i``; ``ceil(tau k) >= 1`` for every ``tau > 0``.
    ``tau = 1`` is Pass^k; ``tau <= 1/k`` is Pass@k.

    >>> correct = np.array([[1, 1, 0, 0]])
    >>> float(g_pass_at_k(correct, 3, 0.5))  # need >= 2 of 3 correct: 2/4
    0.5
    """
    counts, n = _correct_counts(correct)
    kk = _check_k(k, n)
    return _mean_tail(counts, n, kk, _threshold(tau, kk))


def mg_pass_at_k(correct: ArrayLike, k: int) -> FloatArray:
    """mG-Pass@k (Liu et al. 2024; paper eq. mG_pass_at_k, Appendix "Extended Related Work").

    ``mG-Pass@k = (2/k) sum_{i=ceil(k/2)+1}^{k} G-Pass@k_{i/k}``, the paper's discretisation of
    ``2 int_{0.5}^{1} G-Pass@k_tau dtau``. The paper writes the lower limit as
    ``ceil(0.5 k) + 1``, the same as METHOD.md's ``ceil(k/2) + 1``: the two agree. Note that
    the sum is empty for ``k = 1`` (``mG-Pass@1 = 0``), and ``mG-Pass@2 = Pass^2``.
    The thresholds ``i`` are used as exact integers (no float ``tau``).

    >>> correct = np.array([[1, 1, 1, 0]])
    >>> float(mg_pass_at_k(correct, 3))  # (2/3) * P(X >= 3) = (2/3) * (1/4)
    0.16666666666666666
    """
    counts, n = _correct_counts(correct)
    kk = _check_k(k, n)
    table = _mg_table(n, kk) * (2.0 / kk)
    return np.asarray(table[counts].mean(axis=-1), dtype=np.float64)


@lru_cache(maxsize=256)
def _mg_table(n: int, k: int) -> FloatArray:
    """``sum_{i=lo}^{k} P(X >= i) = E[(X - lo + 1)^+]``, ``lo = ceil(k/2) + 1``, for ``c = 0..n``.

    Few thresholds: the tail tables are summed. Many (large ``k``): the closed form
    ``E[X 1{X >= lo}] - (lo - 1) P(X >= lo)`` with ``E[X 1{X >= lo}] = (k c / n) P(X' >= lo - 1)``,
    ``X' ~ Hypergeometric(n - 1, c - 1, k - 1)`` (from ``j C(c, j) = c C(c - 1, j - 1)``): two
    survival functions per ``c`` instead of ``k / 2``.
    """
    lo = (k + 1) // 2 + 1  # ceil(k/2) + 1
    table = np.zeros(n + 1, dtype=np.float64)
    if lo > k:
        pass
    elif k - lo + 1 <= _MG_DIRECT_TERMS:
        for i in range(lo, k + 1):
            table += _tail_table(n, k, i)
    else:
        c = np.arange(1, n + 1)
        above = np.asarray(stats.hypergeom.sf(lo - 2, n - 1, c - 1, k - 1), dtype=np.float64)
        table[1:] = k * c / n * above - (lo - 1) * _tail_table(n, k, lo)[1:]
        table[np.minimum(np.arange(n + 1), k) < lo] = 0.0  # fewer than lo correct: exactly 0
        table = np.clip(table, 0.0, float(k - lo + 1))
    table.setflags(write=False)
    return table
