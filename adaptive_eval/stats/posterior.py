"""Dirichlet-multinomial posterior of a rubric-weighted score (Bayes@N), and rankings from it.

One concept, kept whole (~560 lines): the paper's posterior, its priors and what is read off it.

Notation (paper "Don't Pass@k", Section 2 and Appendix A/B): ``L`` models, ``M`` questions,
``N`` trials, ``K = C + 1`` outcome categories ``0..C`` and a rubric weight vector ``w`` of
length ``K``. A model's true score is ``pi_bar = (1/M) sum_a w . pi_a``. With a Dirichlet prior
``n0`` and category counts ``n``, the posterior on question ``a`` is ``Dirichlet(nu_a)`` with
``nu = n0 + n`` and ``T_a = sum_k nu[a, k]``.

Everything here is a pure function over numpy arrays. Leading axes ``...`` (typically ``(L,)``)
broadcast, so one call handles all models at once; no Python loop runs over models or
questions. Functions that reduce an ``(..., M, K)`` or ``(..., M, N)`` input to shape ``(...)``
always return a numpy array; for a single model (no leading axes) that is a 0-d ``float64``
array (use ``float(x)`` to get a Python float).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from adaptive_eval.stats.arrays import FloatArray, IntArray

__all__ = [
    "avg_at_n",
    "avg_sigma_from_bayes",
    "bayes",
    "bayes_at_n_moments",
    "counts_from_outcomes",
    "credible_interval",
    "dirichlet_multinomial_loglik",
    "empirical_bayes_prior",
    "pairwise_z",
    "posterior_moments",
    "prior_counts",
    "rank_no_ties",
    "rank_with_ties",
    "ranking_confidence",
    "z_threshold",
]


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    ivalue = int(value)
    if ivalue < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {ivalue}")
    return ivalue


def _check_probability(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a real number in (0, 1), got {value!r}")
    fvalue = float(value)
    if not 0.0 < fvalue < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {fvalue!r}")
    return fvalue


def _float_array(x: ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float64)


def _check_finite(arr: FloatArray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)].flat[0]
        raise ValueError(f"{name} must be finite, found {bad!r}")


def _validate_weights(weights: ArrayLike, num_categories: int | None = None) -> FloatArray:
    w = _float_array(weights, "weights")
    if w.ndim != 1:
        raise ValueError(f"weights must be 1-D of length C+1, got shape {w.shape}")
    if w.shape[0] < 2:
        raise ValueError(f"weights must have at least 2 entries (C >= 1), got shape {w.shape}")
    if num_categories is not None and w.shape[0] != num_categories:
        raise ValueError(
            f"weights has length {w.shape[0]} but the last axis of nu has "
            f"{num_categories} categories"
        )
    _check_finite(w, "weights")
    return w


def _validate_outcomes(R: ArrayLike, num_categories: int, name: str, min_ndim: int = 2) -> IntArray:
    arr = np.asarray(R)
    if arr.dtype.kind not in "biu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise ValueError(f"{name} must have an integer (or bool) dtype, got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {arr.shape}")
    if arr.size:
        lo = int(arr.min())
        hi = int(arr.max())
        if lo < 0 or hi >= num_categories:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"{name} has category {bad} outside 0..{num_categories - 1} "
                f"(num_categories={num_categories})"
            )
    return np.asarray(arr, dtype=np.int64)


def _validate_mu_sigma(mu: ArrayLike, sigma: ArrayLike) -> tuple[FloatArray, FloatArray]:
    m = _float_array(mu, "mu")
    s = _float_array(sigma, "sigma")
    if m.ndim != 1:
        raise ValueError(f"mu must be 1-D (one entry per model), got shape {m.shape}")
    if s.shape != m.shape:
        raise ValueError(f"sigma must have the same shape as mu {m.shape}, got shape {s.shape}")
    _check_finite(m, "mu")
    _check_finite(s, "sigma")
    if np.any(s < 0):
        raise ValueError(f"sigma must be >= 0, found {float(s.min())!r}")
    return m, s


# --------------------------------------------------------------------------------------------
# counts and prior
# --------------------------------------------------------------------------------------------


def counts_from_outcomes(R: ArrayLike, num_categories: int) -> IntArray:
    """Tally categories per row: ``n[..., a, k] = #{i : R[..., a, i] == k}``.

    ``R`` is an integer (or bool) array of shape ``(..., M, N)`` with entries in
    ``0..num_categories-1``; ``N`` may be 0. Returns int64 counts of shape ``(..., M, K)``
    (one flattened ``np.bincount``, no Python loop).

    >>> counts_from_outcomes(np.array([[0, 1, 1], [2, 2, 0]]), 3)
    array([[1, 2, 0],
           [1, 0, 2]])
    """
    K = _check_int(num_categories, "num_categories", 2)
    arr = _validate_outcomes(R, K, "R")
    lead = arr.shape[:-1]
    n_trials = arr.shape[-1]
    rows = math.prod(lead)
    flat = arr.reshape(rows, n_trials)
    offsets = (np.arange(rows, dtype=np.int64) * K)[:, None]
    counts = np.bincount((flat + offsets).ravel(), minlength=rows * K)
    return counts.astype(np.int64, copy=False).reshape(*lead, K)


def prior_counts(R0: ArrayLike | None, num_questions: int, num_categories: int) -> FloatArray:
    """Dirichlet prior counts ``n0[a, k] = 1 + #{i : R0[a, i] == k}`` (Appendix A, eq. e4b).

    ``R0`` is an integer ``(M, D)`` matrix of earlier outcomes in ``0..K-1`` (``D`` may be 0);
    ``None`` gives the uniform prior (all ones). Returns float64 of shape ``(M, K)``.

    >>> prior_counts(np.array([[1, 1, 0], [0, 0, 0]]), 2, 2)
    array([[2., 3.],
           [4., 1.]])
    >>> prior_counts(None, 1, 3)
    array([[1., 1., 1.]])
    """
    M = _check_int(num_questions, "num_questions", 1)
    K = _check_int(num_categories, "num_categories", 2)
    if R0 is None:
        return np.ones((M, K), dtype=np.float64)
    arr = _validate_outcomes(R0, K, "R0")
    if arr.ndim != 2 or arr.shape[0] != M:
        raise ValueError(f"R0 must have shape (M, D) = ({M}, D), got shape {arr.shape}")
    return counts_from_outcomes(arr, K).astype(np.float64) + 1.0


#: Range searched for an empirical-Bayes prior's strength ``s`` (pseudo-trials per question).
EB_STRENGTH_RANGE = (1e-2, 1e4)
_EB_GRID = np.geomspace(*EB_STRENGTH_RANGE, 31)
_EB_REFINE_STEPS = 20


def dirichlet_multinomial_loglik(counts: ArrayLike, alpha: ArrayLike) -> FloatArray:
    """Log marginal likelihood of category counts under a Dirichlet prior, summed over questions.

    ``counts`` is ``(..., M, K)``, ``alpha`` broadcasts against it (``(..., 1, K)`` for one prior
    per model). Up to the multinomial coefficient, which does not depend on ``alpha``::

        log p(n | alpha) = sum_a [ lgamma(A) - lgamma(A + n_a)
                                   + sum_k (lgamma(alpha_k + n_ak) - lgamma(alpha_k)) ],
        A = sum_k alpha_k,  n_a = sum_k n_ak.

    A question with no trial contributes 0. Returns shape ``(...)``.

    >>> round(float(dirichlet_multinomial_loglik([[2, 1]], [1.0, 1.0])), 6)  # log(1! 2! 1! / 4!)
    -2.484907
    """
    n = np.asarray(counts, dtype=np.float64)
    a = np.asarray(alpha, dtype=np.float64)
    total = a.sum(axis=-1)
    per_question = (
        special.gammaln(total)
        - special.gammaln(total + n.sum(axis=-1))
        + (special.gammaln(a + n) - special.gammaln(a)).sum(axis=-1)
    )
    return np.asarray(per_question.sum(axis=-1), dtype=np.float64)


def empirical_bayes_prior(counts: ArrayLike) -> FloatArray:
    """A Dirichlet prior per model fitted to its own questions (empirical Bayes), ``(..., M, K)``.

    The paper's uniform prior (one pseudo-trial per category on every question) pulls each
    question toward ``1/K`` by ``(C+1)/(n_a+C+1)``: with unequal trial counts per question and
    per model (adaptive sampling) that pull differs from model to model and reorders them. Here
    every question of model ``i`` gets the prior ``s_i c_i``, centred on the model's pooled
    category frequencies (one uniform pseudo-trial in all, so no category has mass 0)::

        c_ik = (1/K + sum_a n_iak) / (1 + sum_a n_ia)

    with the strength ``s_i`` that maximises the marginal likelihood of the model's counts
    (:func:`dirichlet_multinomial_loglik`; type-II maximum likelihood): searched on a log
    grid over :data:`EB_STRENGTH_RANGE`, then refined by golden-section search in ``log s``
    between the best grid point's neighbours (to 1e-4 of ``log s``). A benchmark whose
    questions are mostly always or never solved gets a weak prior (``s`` below 1), a
    homogeneous one a strong prior. A model with no trial gets the uniform prior. Pure: the
    same counts give the same prior.

    >>> prior = empirical_bayes_prior(np.array([[[8, 0], [0, 8], [8, 0], [0, 8]]]))
    >>> prior.shape, bool(prior[0, 0, 0] < 1.0)  # polarized questions: a weak prior
    ((1, 4, 2), True)
    """
    n = np.asarray(counts, dtype=np.float64)
    if n.ndim < 2:
        raise ValueError(f"counts must have shape (..., M, K), got shape {n.shape}")
    num_categories = n.shape[-1]
    lead = n.shape[:-2]
    flat = n.reshape(-1, *n.shape[-2:])
    pooled = flat.sum(axis=1)  # (R, K)
    centre = (pooled + 1.0 / num_categories) / (pooled.sum(axis=1, keepdims=True) + 1.0)
    grid = _EB_GRID
    # (G, R): the log likelihood of every model at every grid strength, one vectorised call.
    loglik = dirichlet_multinomial_loglik(
        flat[None], grid[:, None, None, None] * centre[None, :, None, :]
    )
    best = np.argmax(loglik, axis=0)
    # Golden-section search in log s between the best grid point's neighbours.
    low = np.log(grid[np.maximum(best - 1, 0)])
    high = np.log(grid[np.minimum(best + 1, len(grid) - 1)])

    def at(log_s: FloatArray) -> FloatArray:
        return dirichlet_multinomial_loglik(flat, np.exp(log_s)[:, None, None] * centre[:, None])

    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    left, right = high - ratio * (high - low), low + ratio * (high - low)
    f_left, f_right = at(left), at(right)
    for _ in range(_EB_REFINE_STEPS):
        keep_left = f_left >= f_right  # the maximum lies in [low, right], else [left, high]
        low, high = np.where(keep_left, low, left), np.where(keep_left, right, high)
        # The surviving inner point is reused; one new point per step.
        kept, f_kept = np.where(keep_left, left, right), np.where(keep_left, f_left, f_right)
        new = np.where(keep_left, high - ratio * (high - low), low + ratio * (high - low))
        f_new = at(new)
        left = np.where(keep_left, new, kept)
        right = np.where(keep_left, kept, new)
        f_left = np.where(keep_left, f_new, f_kept)
        f_right = np.where(keep_left, f_kept, f_new)
    strength = np.exp((low + high) / 2)
    strength = np.where(pooled.sum(axis=1) > 0, strength, float(num_categories))
    centre = np.where(pooled.sum(axis=1, keepdims=True) > 0, centre, 1.0 / num_categories)
    prior = strength[:, None, None] * centre[:, None, :] * np.ones_like(flat)
    return np.asarray(prior.reshape(*lead, *n.shape[-2:]), dtype=np.float64)


# --------------------------------------------------------------------------------------------
# posterior moments
# --------------------------------------------------------------------------------------------


def posterior_moments(nu: ArrayLike, weights: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Posterior mean and sd of ``pi_bar`` under independent ``Dirichlet(nu_a)`` posteriors.

    ``nu`` has shape ``(..., M, K)`` with positive finite entries (prior + counts); the
    per-question totals ``T_a = sum_k nu[..., a, k]`` may differ (adaptive sampling).
    With ``p[a, k] = nu[a, k] / T_a``::

        mu      = (1/M)   sum_a sum_k p[a,k] w_k
        sigma^2 = (1/M^2) sum_a [ sum_k p[a,k] w_k^2 - (sum_k p[a,k] w_k)^2 ] / (T_a + 1)

    With equal ``T_a = 1 + C + D + N`` this is the paper's Algorithm 1 (eq. e11). Internally
    the weights are shifted by ``w_0`` as in the paper (``mu = w_0 + ...``), which leaves both
    moments unchanged mathematically and reduces cancellation in ``sigma``.
    Returns ``(mu, sigma)``, float64 arrays of shape ``(...)`` (0-d for a 2-D ``nu``).

    Laplace's rule of succession (M = 1, C = 1, 3 successes in 5 trials):

    >>> mu, sigma = posterior_moments(np.array([[3.0, 4.0]]), np.array([0.0, 1.0]))
    >>> float(mu), round(float(sigma**2), 15)  # 4/7 and (4/7)(3/7)/8 = 3/98
    (0.5714285714285714, 0.030612244897959)
    """
    arr = _float_array(nu, "nu")
    if arr.ndim < 2:
        raise ValueError(f"nu must have shape (..., M, K), got shape {arr.shape}")
    M = arr.shape[-2]
    if M < 1:
        raise ValueError(f"nu must have at least one question (M >= 1), got shape {arr.shape}")
    w = _validate_weights(weights, arr.shape[-1])
    if arr.size:
        lo = arr.min()  # nan propagates, so one min and one max validate everything
        hi = arr.max()
        if not (lo > 0.0 and hi < np.inf):
            bad = lo if not lo > 0.0 else hi
            raise ValueError(f"nu must be positive and finite, found {float(bad)!r}")

    w0 = w[0]
    ws = w - w0
    # One (..., M, K) @ (K, 3) product gives T_a, sum_k nu (w_k - w0), sum_k nu (w_k - w0)^2;
    # this is much faster than a separate reduction over the short last axis.
    basis = np.stack([np.ones_like(ws), ws, ws * ws], axis=-1)
    moments = arr @ basis  # (..., M, 3)
    total = moments[..., 0]
    first = moments[..., 1] / total  # E[w . pi_a] - w0
    second = moments[..., 2] / total  # sum_k p[a,k] (w_k - w0)^2
    var_a = (second - first * first) / (total + 1.0)
    mu = w0 + first.mean(axis=-1)
    var = np.maximum(var_a.sum(axis=-1), 0.0)
    sigma = np.sqrt(var) / M
    return np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)


def bayes_at_n_moments(
    counts: ArrayLike, prior: ArrayLike, weights: ArrayLike, bayes_prior: str = "empirical"
) -> tuple[FloatArray, FloatArray]:
    """The reported Bayes@N posterior mean and sd per model of an (L, M, K) count tensor.

    ``prior`` holds the Dirichlet counts of the uniform prior plus any prior trials.
    ``uniform``: ``nu = prior + counts`` (the paper). ``empirical``: the uniform pseudo-trials
    are replaced by a Dirichlet fitted to each model's evidence (its prior trials and counts),
    ``nu = eb(evidence) + evidence`` with ``evidence = prior - 1 + counts``.
    """
    prior_counts = _float_array(prior, "prior")
    observed = np.asarray(counts)
    if bayes_prior == "uniform":
        nu = prior_counts + observed
    else:
        evidence = prior_counts - 1.0 + observed
        nu = empirical_bayes_prior(evidence) + evidence
    return posterior_moments(nu, weights)


def bayes(
    R: ArrayLike, weights: ArrayLike, R0: ArrayLike | None = None
) -> tuple[FloatArray, FloatArray]:
    """Bayes@N: posterior ``(mu, sigma)`` from raw outcomes (scorio-style convenience).

    ``R`` is an integer ``(M, N)`` (one model) or ``(L, M, N)`` array of categories
    ``0..C`` with ``C + 1 = len(weights)``. ``R0`` (optional prior outcomes) is ``(M, D)``,
    shared by all models, or ``(L, M, D)`` with a prior per model. Computes
    ``nu = n0 + n`` with ``n0 = prior_counts(R0)`` and returns ``posterior_moments(nu, w)``:
    0-d float64 arrays for a 2-D ``R``, ``(L,)`` arrays for a 3-D ``R``.

    >>> R = np.array([[0, 1, 1, 0, 1], [1, 1, 0, 1, 1]])
    >>> mu, sigma = bayes(R, np.array([0.0, 1.0]))
    >>> round(float(mu), 6), round(float(sigma), 6)  # 9/14 and sqrt(22/1568)
    (0.642857, 0.118451)
    >>> mu, sigma = bayes(R, [0.0, 1.0], R0=np.array([[1, 0, 1], [0, 1, 0]]))
    >>> round(float(mu), 6)  # (6/10 + 6/10) / 2
    0.6
    """
    w = _validate_weights(weights)
    K = w.shape[0]
    arr = _validate_outcomes(R, K, "R")
    if arr.ndim not in (2, 3):
        raise ValueError(f"R must have shape (M, N) or (L, M, N), got shape {arr.shape}")
    M = arr.shape[-2]
    if M < 1:
        raise ValueError(f"R must have at least one question (M >= 1), got shape {arr.shape}")
    counts = counts_from_outcomes(arr, K).astype(np.float64)
    if R0 is None or np.ndim(R0) == 2:
        n0 = prior_counts(R0, M, K)
    else:
        r0 = _validate_outcomes(R0, K, "R0")
        if arr.ndim != 3 or r0.ndim != 3 or r0.shape[:2] != arr.shape[:2]:
            raise ValueError(
                f"R0 must have shape (M, D) or (L, M, D) matching R {arr.shape}, "
                f"got shape {r0.shape}"
            )
        n0 = counts_from_outcomes(r0, K).astype(np.float64) + 1.0
    return posterior_moments(counts + n0, w)


# --------------------------------------------------------------------------------------------
# intervals, z-scores and rankings
# --------------------------------------------------------------------------------------------


def z_threshold(confidence: float) -> float:
    """One-sided z threshold ``Phi^{-1}(confidence)`` for deciding an ordering (Section 2.5).

    >>> z_threshold(0.95)
    1.6448536269514722
    """
    c = _check_probability(confidence, "confidence")
    return float(special.ndtri(c))


def credible_interval(
    mu: ArrayLike, sigma: ArrayLike, confidence: float
) -> tuple[FloatArray, FloatArray]:
    """Normal-approximation credible interval ``mu -+ z_{(1+c)/2} sigma``.

    ``mu`` and ``sigma`` broadcast against each other; ``sigma`` must be ``>= 0``.
    Returns ``(lo, hi)``.

    >>> lo, hi = credible_interval(0.5, 0.1, 0.95)
    >>> round(float(lo), 6), round(float(hi), 6)
    (0.304004, 0.695996)
    """
    c = _check_probability(confidence, "confidence")
    m = _float_array(mu, "mu")
    s = _float_array(sigma, "sigma")
    _check_finite(m, "mu")
    _check_finite(s, "sigma")
    if np.any(s < 0):
        raise ValueError(f"sigma must be >= 0, found {float(s.min())!r}")
    try:
        m, s = np.broadcast_arrays(m, s)
    except ValueError:
        raise ValueError(f"mu shape {m.shape} and sigma shape {s.shape} do not broadcast") from None
    z = float(special.ndtri(0.5 * (1.0 + c)))
    return np.asarray(m - z * s), np.asarray(m + z * s)


def pairwise_z(mu: ArrayLike, sigma: ArrayLike) -> FloatArray:
    """Signed pairwise z-scores ``z[i, j] = (mu_i - mu_j) / sqrt(sigma_i^2 + sigma_j^2)``.

    ``mu`` and ``sigma`` are ``(L,)``. The diagonal is 0. Where ``sigma_i = sigma_j = 0``,
    ``z`` is 0 if the means are equal and ``+-inf`` (the sign of ``mu_i - mu_j``) otherwise.

    >>> pairwise_z([0.6, 0.5, 0.5, 0.4], [0.03, 0.04, 0.0, 0.0])
    array([[ 0.        ,  2.        ,  3.33333333,  6.66666667],
           [-2.        ,  0.        ,  0.        ,  2.5       ],
           [-3.33333333,  0.        ,  0.        ,         inf],
           [-6.66666667, -2.5       ,        -inf,  0.        ]])
    """
    m, s = _validate_mu_sigma(mu, sigma)
    diff = m[:, None] - m[None, :]
    scale = np.hypot(s[:, None], s[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = diff / scale
    degenerate = scale == 0.0
    if degenerate.any():
        z = np.where(degenerate, np.where(diff == 0.0, 0.0, np.copysign(np.inf, diff)), z)
    np.fill_diagonal(z, 0.0)
    return np.asarray(z, dtype=np.float64)


def ranking_confidence(z: ArrayLike) -> FloatArray:
    """Ranking confidence ``rho = Phi(z) = (1 + erf(z / sqrt 2)) / 2`` (Section 2.5).

    >>> round(float(ranking_confidence(1.6448536269514722)), 12)
    0.95
    """
    arr = _float_array(z, "z")
    if np.any(np.isnan(arr)):
        raise ValueError("z must not contain nan")
    return np.asarray(special.ndtr(arr), dtype=np.float64)


def rank_with_ties(mu: ArrayLike, sigma: ArrayLike, z_thresh: float) -> IntArray:
    """Dense ranks with credible-interval ties (Section 2.8.2, Table 2 of the paper).

    Models are sorted by ``mu`` descending (stable: on exactly equal ``mu`` the lower index
    comes first). Two *consecutive* models in that order share a rank when
    ``|mu_i - mu_j| / sqrt(sigma_i^2 + sigma_j^2) < z_thresh``; ranks are dense
    (1, 2, 2, 3, ...) and returned in the original model order (int64, 1 = best).
    Ties chain as in the paper: if A~B and B~C then A, B and C share a rank even when A and
    C alone would be separated. Zero total sigma gives ``z = 0`` for equal means (tied when
    ``z_thresh > 0``) and ``z = inf`` otherwise.

    >>> rank_with_ties([0.9, 0.68, 0.7, 0.3], [0.01, 0.01, 0.01, 0.01], 1.645)
    array([1, 2, 2, 3])
    """
    m, s = _validate_mu_sigma(mu, sigma)
    if isinstance(z_thresh, bool) or not isinstance(z_thresh, Real):
        raise ValueError(f"z_thresh must be a real number >= 0, got {z_thresh!r}")
    thresh = float(z_thresh)
    if not thresh >= 0.0:  # also rejects nan
        raise ValueError(f"z_thresh must be >= 0, got {thresh!r}")
    order = np.argsort(-m, kind="stable")
    ms = m[order]
    ss = s[order]
    diff = ms[:-1] - ms[1:]
    scale = np.hypot(ss[:-1], ss[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(scale > 0.0, diff / scale, np.where(diff == 0.0, 0.0, np.inf))
    dense = np.empty(m.shape[0], dtype=np.int64)
    if m.shape[0]:
        dense[0] = 1
        dense[1:] = 1 + np.cumsum(z >= thresh)
    ranks = np.empty_like(dense)
    ranks[order] = dense
    return ranks


def rank_no_ties(mu: ArrayLike) -> IntArray:
    """Ranks ``1..L`` by ``mu`` descending, with no ties: equal ``mu`` go to the lower index first.

    >>> rank_no_ties([0.2, 0.7, 0.2, 0.9])
    array([3, 2, 4, 1])
    """
    m = _float_array(mu, "mu")
    if m.ndim != 1:
        raise ValueError(f"mu must be 1-D (one entry per model), got shape {m.shape}")
    _check_finite(m, "mu")
    order = np.argsort(-m, kind="stable")
    ranks = np.empty(m.shape[0], dtype=np.int64)
    ranks[order] = np.arange(1, m.shape[0] + 1, dtype=np.int64)
    return ranks


# --------------------------------------------------------------------------------------------
# avg@N (Appendix B)
# --------------------------------------------------------------------------------------------


def avg_at_n(R: ArrayLike, weights: ArrayLike) -> FloatArray:
    """Weighted average ``a = (1/(M N)) sum_a sum_k w_k n[a, k]`` (avg@N, Appendix B).

    ``R`` is an integer ``(..., M, N)`` array of categories with ``N >= 1``; returns shape
    ``(...)`` (0-d for a 2-D ``R``).

    >>> float(avg_at_n(np.array([[0, 1, 1, 0, 1], [1, 1, 0, 1, 1]]), [0.0, 1.0]))
    0.7
    """
    w = _validate_weights(weights)
    K = w.shape[0]
    arr = _validate_outcomes(R, K, "R")
    M, N = arr.shape[-2], arr.shape[-1]
    if M < 1 or N < 1:
        raise ValueError(f"R must have M >= 1 questions and N >= 1 trials, got shape {arr.shape}")
    counts = counts_from_outcomes(arr, K).astype(np.float64)
    return np.asarray((counts @ w).sum(axis=-1) / (M * N), dtype=np.float64)


def avg_sigma_from_bayes(sigma: ArrayLike, num_trials: int, num_categories: int) -> FloatArray:
    """Uncertainty of avg@N: ``sigma_avg = (1 + C + N) / N * sigma`` (Appendix B, eq.
    Bayes_avg_sigma), with ``C = num_categories - 1``; valid for a uniform prior and equal N.

    >>> float(avg_sigma_from_bayes(0.5, 5, 2))  # (1 + 1 + 5) / 5 * 0.5
    0.7
    """
    N = _check_int(num_trials, "num_trials", 1)
    K = _check_int(num_categories, "num_categories", 2)
    s = _float_array(sigma, "sigma")
    _check_finite(s, "sigma")
    if np.any(s < 0):
        raise ValueError(f"sigma must be >= 0, found {float(s.min())!r}")
    return np.asarray((K + N) / N * s, dtype=np.float64)
