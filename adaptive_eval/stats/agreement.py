"""Agreement between rankings: Kendall's tau_b, convergence@n and bootstrap resampling.

See the paper's Appendix "Experiment Setup" (Kendall's tau, Convergence@n) and Section 3.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from adaptive_eval.stats.arrays import FloatArray, IntArray

__all__ = [
    "bootstrap_columns",
    "bootstrap_rows",
    "convergence_at_n",
    "kendall_tau_b",
    "ranking_from_scores",
]


def _scores_1d(x: ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one score per model), got shape {arr.shape}")
    out = np.asarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be finite, found {out[~np.isfinite(out)][0]!r}")
    return out


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau_b between two score vectors (``scipy.stats.kendalltau``, variant 'b').

    ``tau_b = (n_c - n_d) / sqrt((n_0 - n_1)(n_0 - n_2))`` with concordant/discordant pair
    counts ``n_c``/``n_d``, ``n_0 = n(n-1)/2`` and ``n_1``/``n_2`` pairs tied in ``x``/``y``.
    ``x`` and ``y`` are 1-D, finite, of equal length ``>= 2``. Returns a Python float; ``nan``
    (without a warning) when either vector is constant, where tau_b is undefined.

    >>> kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4])
    0.6666666666666669
    >>> kendall_tau_b([1, 1, 1], [1, 2, 3])
    nan
    """
    xa = _scores_1d(x, "x")
    ya = _scores_1d(y, "y")
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same length, got {xa.shape} and {ya.shape}")
    if xa.shape[0] < 2:
        raise ValueError(f"x and y need at least 2 entries, got length {xa.shape[0]}")
    if np.all(xa == xa[0]) or np.all(ya == ya[0]):
        return float("nan")
    return float(stats.kendalltau(xa, ya).statistic)


def ranking_from_scores(scores: ArrayLike) -> IntArray:
    """Dense ranks from scores: 1 = highest score, exactly equal scores share a rank.

    >>> ranking_from_scores([0.3, 0.9, 0.3, 0.1])
    array([2, 1, 2, 3])
    """
    s = _scores_1d(scores, "scores")
    _, inverse = np.unique(-s, return_inverse=True)
    return np.asarray(inverse.reshape(s.shape) + 1, dtype=np.int64)


def convergence_at_n(
    R: ArrayLike,
    score_fn: Callable[[NDArray[Any]], ArrayLike],
    gold_scores: ArrayLike,
) -> int | None:
    """convergence@n: the smallest ``n`` from which the ranking stays equal to the gold ranking.

    For ``n = 1..N`` (``N = R.shape[-1]``, the trial axis) the scores are
    ``score_fn(R[..., :n])``, one per model, same shape as ``gold_scores`` ``(L,)``. Returns
    the smallest ``n`` such that the ranking at every ``n' >= n`` (up to and including ``N``)
    equals the gold ranking, or ``None`` if the ranking at ``n = N`` does not match.

    Equality criterion: identical order of the models by score, ties included, i.e.
    ``ranking_from_scores(scores) == ranking_from_scores(gold_scores)`` elementwise (exactly
    equal scores tie). For non-constant vectors this holds iff Kendall ``tau_b == 1`` between
    scores and gold scores; it is evaluated exactly on the ranks instead of testing a float
    ``tau_b`` for equality with 1.0, and two all-tied vectors count as equal (tau_b is
    undefined there). An ``n`` whose scores contain nan/inf (e.g. Pass@k with ``n < k``)
    counts as not matching.

    The paper's definition also requires ``n <= N_max - 1`` when the gold ranking comes from
    the same ``N_max`` trials; pass ``R[..., :-1]`` to get exactly that.

    >>> R = np.array([[[0, 1, 1, 1]], [[1, 0, 0, 0]]])  # 2 models, 1 question, 4 trials
    >>> # n=1: wrong order, n=2: tied (0.5 vs 0.5), n=3 and n=4: gold order
    >>> convergence_at_n(R, lambda r: r.mean(axis=(-2, -1)), np.array([0.9, 0.1]))
    3
    """
    arr = np.asarray(R)
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"R must have a trial axis of length >= 1, got shape {arr.shape}")
    gold = _scores_1d(gold_scores, "gold_scores")
    gold_rank = ranking_from_scores(gold)
    num_trials = arr.shape[-1]
    matches = np.zeros(num_trials, dtype=bool)
    for n in range(1, num_trials + 1):
        scores = np.asarray(score_fn(arr[..., :n]))
        if scores.shape != gold.shape:
            raise ValueError(
                f"score_fn returned shape {scores.shape} at n={n}; expected gold_scores shape "
                f"{gold.shape}"
            )
        if scores.dtype.kind not in "biuf":
            raise ValueError(f"score_fn must return real scores, got dtype {scores.dtype}")
        scores_f = np.asarray(scores, dtype=np.float64)
        if np.all(np.isfinite(scores_f)):
            matches[n - 1] = np.array_equal(ranking_from_scores(scores_f), gold_rank)
    result: int | None = None
    for n in range(num_trials, 0, -1):
        if not matches[n - 1]:
            break
        result = n
    return result


def _check_bootstrap_args(
    R: ArrayLike, num_samples: object, rng: object
) -> tuple[NDArray[Any], int, np.random.Generator]:
    arr = np.asarray(R)
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"R must have a trial axis of length >= 1, got shape {arr.shape}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, Integral):
        raise ValueError(f"num_samples must be an integer, got {num_samples!r}")
    if int(num_samples) < 1:
        raise ValueError(f"num_samples must be >= 1, got {int(num_samples)}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return arr, int(num_samples), rng


def bootstrap_columns(
    R: ArrayLike,
    statistic: Callable[[NDArray[Any]], ArrayLike],
    num_samples: int,
    rng: np.random.Generator,
) -> NDArray[Any]:
    """Bootstrap over trial columns: each replicate draws ``N`` column indices with
    replacement and applies them to every model and question alike
    (``R_b = R[..., idx]``), then evaluates ``statistic(R_b)``.

    ``R`` is ``(L, M, N)`` (any leading axes work; the last axis is trials). Returns the
    results stacked along a new first axis: shape ``(num_samples, *statistic_shape)``.

    >>> R = np.array([[[1, 0, 1]], [[0, 0, 1]]])
    >>> out = bootstrap_columns(R, lambda r: r.mean(axis=(1, 2)), 4, np.random.default_rng(0))
    >>> out.shape
    (4, 2)
    """
    arr, num, gen = _check_bootstrap_args(R, num_samples, rng)
    n = arr.shape[-1]
    results = []
    for _ in range(num):
        idx = gen.integers(0, n, size=n)
        results.append(np.asarray(statistic(arr[..., idx])))
    return np.stack(results)


def bootstrap_rows(
    R: ArrayLike,
    statistic: Callable[[NDArray[Any]], ArrayLike],
    num_samples: int,
    rng: np.random.Generator,
) -> NDArray[Any]:
    """Bootstrap over answers: each ``(model, question)`` row is resampled independently, ``N``
    draws with replacement from that row's own ``N`` answers, then ``statistic`` is applied.

    ``R`` is ``(L, M, N)`` (any leading axes work; the last axis is trials). Returns shape
    ``(num_samples, *statistic_shape)``.

    >>> R = np.array([[[1, 1, 1], [0, 0, 0]]])
    >>> out = bootstrap_rows(R, lambda r: r.mean(axis=(1, 2)), 3, np.random.default_rng(0))
    >>> out.tolist()  # every row is constant, so resampling changes nothing
    [[0.5], [0.5], [0.5]]
    """
    arr, num, gen = _check_bootstrap_args(R, num_samples, rng)
    n = arr.shape[-1]
    results = []
    for _ in range(num):
        idx = gen.integers(0, n, size=arr.shape)
        results.append(np.asarray(statistic(np.take_along_axis(arr, idx, axis=-1))))
    return np.stack(results)
