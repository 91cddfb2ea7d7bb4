"""Sequential decision statistics: an unbiased pair statistic and error-controlled boundaries.

Pure functions over arrays; the rules in ``policies/pair_rules.py`` and the allocators in
``policies/allocation.py`` are thin layers over them.

**The decision statistic.** An adaptive run gives models and questions different trial counts.
The Bayes@N mean shrinks each question's score toward the prior mean by ``(1+C)/(T_a)``, so a
model that stopped early is pulled further than one that went on. Decisions therefore use the
per-question empirical means (unbiased for any fixed counts) with the Bayesian per-trial variance
(never zero, also for a question that was always right):

    theta_i   = (1/M) sum_a xbar_ia,      xbar_ia = sum_k w_k n_iak / n_ia
    se_i^2    = (1/M^2) sum_a v_ia / n_ia,
    v_ia      = sum_k p_iak w_k^2 - (sum_k p_iak w_k)^2,

with ``p_iak`` the posterior mean of the category probabilities under a prior of ``K``
pseudo-trials centred on the model's pooled frequencies (:func:`variance_probabilities`).
For a pair, ``D = theta_a - theta_b``, ``s^2 = se_a^2 + se_b^2`` (models are sampled
independently), ``z = D / s`` and the information is ``I = 1 / s^2``.

**Boundaries.** Both rules give a confidence sequence ``D +- c * s`` for the true difference that
covers it at every look with probability at least ``1 - alpha``. From it, with the region of
practical equivalence ``+-eps``: resolved ``a > b`` when ``D - c s > 0``; equivalent when
``|D| + c s < eps`` (TOST on the same boundary). If the sequence covers the truth, neither
decision can be wrong, so one ``alpha`` bounds every error of the pair.

* :func:`mixture_boundary`: Robbins' normal mixture (Howard et al. 2021, two-sided),
  anytime-valid: ``c(I) = sqrt((1 + rho/I) (log(1 + I/rho) + 2 log(1/alpha)))``.
* :func:`spending_boundaries`: group-sequential boundaries at planned information fractions
  with Lan-DeMets alpha spending (O'Brien-Fleming type, alpha/2 per side:
  ``alpha(t) = 4 - 4 Phi(z_{1-alpha/4} / sqrt(t))``, or Pocock type
  ``alpha log(1 + (e - 1) t)``), computed by the
  Armitage-McPherson-Rowe recursion.

**Futility.** :func:`settle_probability` is the predictive probability that a pair is settled
at the cap (Spiegelhalter, Freedman & Blackburn 1986; Jennison & Turnbull 2000, ch. 10); a pair
below a threshold stops drawing trials. Futility only ever turns a possible decision into
"undecided", so it cannot add an error (non-binding: the boundaries stay as designed).

**Step-down.** :func:`holm_alpha` hands the budget of settled pairs to the open ones
(Holm 1979; sequentially, Bartroff & Song 2014): with ``m`` hypotheses of which ``k`` are
rejected, each open one is tested at ``alpha / (m - k)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from scipy import optimize
from scipy.stats import norm

FloatArray = NDArray[np.float64]

SPENDING_FUNCTIONS = ("obf", "pocock", "hsd")


def variance_probabilities(
    counts: NDArray[np.int64] | FloatArray,
    nu: NDArray[np.int64] | FloatArray,
    pooled: bool = True,
) -> FloatArray:
    """Category probabilities per cell for the per-trial variance, (L, M, K).

    The posterior mean under a Dirichlet prior of the same weight as the uniform one (``K``
    pseudo-trials) but centred on the model's pooled category frequencies instead of ``1/K``:

        p_iak = (nu_iak - 1 + K pi_ik) / T_ia,
        pi_ik = (1 + sum_a (nu_iak - 1)) / (K + sum_a (T_ia - K))

    (``nu = 1 + prior trials + counts``, ``T = sum_k nu``; ``pi`` is the model's pooled trials
    under one uniform pseudo-trial per category, not one per question, which would pull it to
    ``1/K`` on a benchmark of many questions). For a model whose pooled score is near 0 or 1
    (most real benchmarks: most questions always or never solved), a question with no success
    yet no longer gets the variance of a coin (``1/(n+2)`` per trial), which kept
    such models sampling long after they were surely within the rope of each other; a question
    with a success gets its own variance back at once. Only the variance uses it: the score
    estimate stays the unbiased mean of per-question means. ``pooled=False`` gives the plain
    posterior mean ``nu / T`` (the uniform target; the rule as it landed before, kept for the
    benchmarks' comparison).

    >>> p = variance_probabilities(np.array([[[10, 0], [9, 1]]]), np.array([[[11, 1], [10, 2]]]))
    >>> [round(float(x), 4) for x in p[0, :, 1]]  # (0 + 2 * 2/22) / 12, (1 + 2 * 2/22) / 12
    [0.0152, 0.0985]
    """
    counts = np.asarray(counts, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    if not pooled:
        return np.asarray(nu / nu.sum(axis=-1, keepdims=True), dtype=np.float64)
    num_categories = nu.shape[-1]
    totals = (nu - 1.0).sum(axis=-2, keepdims=True) + 1.0
    target = totals / totals.sum(axis=-1, keepdims=True)
    pseudo = nu - 1.0 + num_categories * target
    return np.asarray(pseudo / pseudo.sum(axis=-1, keepdims=True), dtype=np.float64)


def empirical_estimate(
    counts: NDArray[np.int64] | FloatArray,
    nu: NDArray[np.int64] | FloatArray,
    weights: FloatArray,
    pooled: bool = True,
) -> tuple[FloatArray, FloatArray]:
    """Per-model unbiased score and its standard error (see the module docstring).

    ``counts`` are the observed (L, M, K) category counts, ``nu`` the posterior Dirichlet
    parameters (1 + prior trials + counts). The per-trial variance of a cell comes from
    :func:`variance_probabilities`. A question with no trial yet contributes its posterior mean
    and the variance of a single trial (it only matters before the first look).

    >>> counts = np.array([[[1, 3], [0, 2]]])
    >>> nu = counts + 1.0
    >>> theta, se = empirical_estimate(counts, nu, np.array([0.0, 1.0]))
    >>> float(theta[0])  # (3/4 + 2/2) / 2
    0.875
    >>> round(float(se[0] ** 2), 5)  # ((3/4)(1/4)/4 + (7/8)(1/8)/2) / 4, pooled target 3/4
    0.02539
    """
    counts = np.asarray(counts, dtype=np.float64)
    nu = np.asarray(nu, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n = counts.sum(axis=-1)
    mean_post = (nu / nu.sum(axis=-1, keepdims=True)) @ w
    var_trial = trial_variance_of(variance_probabilities(counts, nu, pooled), w)
    safe_n = np.maximum(n, 1.0)
    xbar = np.where(n > 0, (counts @ w) / safe_n, mean_post)
    num_questions = counts.shape[-2]
    theta = xbar.mean(axis=-1)
    se = np.sqrt((var_trial / safe_n).sum(axis=-1)) / num_questions
    return np.asarray(theta, dtype=np.float64), np.asarray(se, dtype=np.float64)


def trial_variance_of(p: FloatArray, weights: FloatArray) -> FloatArray:
    """Variance of one trial's score per cell, given the cells' category probabilities."""
    mean = p @ weights
    return np.asarray(np.maximum(p @ (weights * weights) - mean**2, 0.0), dtype=np.float64)


def trial_variance(
    nu: NDArray[np.float64] | NDArray[np.int64], weights: FloatArray, pooled: bool = True
) -> FloatArray:
    """Per-cell variance of one trial's score (L, M), with :func:`variance_probabilities`."""
    nu = np.asarray(nu, dtype=np.float64)
    return trial_variance_of(variance_probabilities(nu - 1.0, nu, pooled), weights)


# -- anytime-valid normal mixture --------------------------------------------------------------


def mixture_boundary(information: float | FloatArray, alpha: float, rho: float) -> FloatArray:
    """Two-sided normal-mixture boundary on ``|z|`` at information ``I`` (anytime-valid).

    ``P(exists I: |Z(I)| >= c(I)) <= alpha`` for a standard Brownian motion observed at any
    (data-dependent) information times; ``rho`` is the mixing precision, in information units.

    >>> round(float(mixture_boundary(1e4, 0.05, 1e4)), 4)
    3.6564
    """
    i = np.asarray(information, dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = np.sqrt((1 + rho / i) * (np.log1p(i / rho) + 2 * math.log(1 / alpha)))
    return np.asarray(np.where(i > 0, out, np.inf), dtype=np.float64)


def mixture_grid_boundary(
    information: float, alpha: float, rhos: tuple[float, ...], weights: tuple[float, ...]
) -> float:
    """Two-sided boundary on ``|z|`` of a weighted mixture of normal mixtures (anytime-valid).

    The martingale ``sum_j w_j sqrt(rho_j/(I+rho_j)) exp(S^2 / (2 (I + rho_j)))`` (weights
    summing to 1) crosses ``1/alpha`` with probability at most ``alpha`` (Ville); the boundary
    is its root in ``|S| = z sqrt(I)``. A grid of ``rho`` keeps the boundary near the best
    single mixture at every information level, at the price of ``log(1/w_j)``.
    """
    if information <= 0:
        return math.inf
    rho = np.asarray(rhos, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    log_w = np.log(w) + 0.5 * np.log(rho / (information + rho))
    target = math.log(1 / alpha)

    def excess(z: float) -> float:
        s2 = z * z * information
        terms = log_w + s2 / (2 * (information + rho))
        top = float(terms.max())
        return top + math.log(float(np.exp(terms - top).sum())) - target

    hi = 2.0
    while excess(hi) < 0:
        hi *= 2
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-10))


def mixture_rho(information: float, alpha: float) -> float:
    """The mixing precision that makes :func:`mixture_boundary` tightest at ``information``."""
    result = optimize.minimize_scalar(
        lambda log_rho: float(mixture_boundary(information, alpha, math.exp(log_rho))),
        bounds=(math.log(information) - 12, math.log(information) + 4),
        method="bounded",
        options={"xatol": 1e-6},
    )
    return float(math.exp(result.x))


# -- futility and step-down -------------------------------------------------------------------


def settle_probability(
    difference: float,
    se: float,
    se_cap: float,
    resolve: float,
    equivalent: float,
    epsilon: float | None,
) -> float:
    """Predictive probability that the pair is settled at the cap.

    ``S(I) = D I`` is a Brownian motion with drift ``Delta`` in the information ``I = 1/s^2``.
    With a flat prior the posterior of ``Delta`` is ``N(D, s^2)``; averaging the future path over
    it, the difference at the cap (information ``1/s_cap^2``) is

        D_cap ~ N(D, s^2 - s_cap^2),

    and the pair is settled there when ``|D_cap| >= c s_cap`` (``c = resolve``, the final
    two-sided boundary) or ``|D_cap| < eps - c' s_cap`` (``c' = equivalent``, TOST). Crossings
    at earlier looks are not counted, so the probability is a slight underestimate (a futility
    stop may come a little early; it can only lose a decision, never make a wrong one).

    >>> round(settle_probability(0.0, 0.02, 0.01, 2.0, 1.7, None), 4)  # 2 P(N(0,3e-4) > 0.02)
    0.2482
    >>> settle_probability(0.0, 0.01, 0.01, 2.0, 1.7, 0.02)  # at the cap, inside the rope
    1.0
    """
    spread = math.sqrt(max(se * se - se_cap * se_cap, 0.0))
    edge = resolve * se_cap
    inner = (epsilon or 0.0) - equivalent * se_cap

    def below(x: float) -> float:  # P(D_cap < x); math.erfc: a scalar scipy call costs 30x
        if spread == 0.0:
            return 1.0 if difference < x else 0.0
        return 0.5 * math.erfc((difference - x) / (spread * math.sqrt(2.0)))

    settle = below(-edge) + (1.0 - below(edge))
    if inner > 0:
        settle += below(inner) - below(-inner)
    return float(min(1.0, settle))


def trials_to_settle(
    difference: float,
    se: float,
    per_question: float,
    resolve: float,
    equivalent: float,
    epsilon: float | None,
) -> float:
    """Projected trials per question at which the pair would be settled if ``D`` stayed put.

    Information grows with the trials, ``I ~ n``, so the pair needs
    ``n (c s / |D|)^2`` to resolve or ``n (c' s / (eps - |D|))^2`` to be shown equivalent
    (whichever is smaller; ``inf`` at an exact tie without a rope).

    >>> trials_to_settle(0.01, 0.01, 10, 3.0, 2.5, None)
    90.0
    """
    gap = abs(difference)
    needs = [per_question * (resolve * se / gap) ** 2] if gap > 0 else []
    if epsilon and gap < epsilon:
        needs.append(per_question * (equivalent * se / (epsilon - gap)) ** 2)
    return float(min(needs, default=math.inf))


def holm_alpha(alpha: float, hypotheses: int, rejected: int) -> float:
    """Holm's step-down level for an open hypothesis: ``alpha / (m - k)``, at least ``alpha/m``.

    >>> holm_alpha(0.05, 10, 0), holm_alpha(0.05, 10, 8), holm_alpha(0.05, 10, 12)
    (0.005, 0.025, 0.05)
    """
    return alpha / max(1, hypotheses - max(0, rejected))


# -- group-sequential alpha spending ------------------------------------------------------------


def spent_alpha(
    t: float | FloatArray, alpha: float, spending: str = "obf", gamma: float = -4.0
) -> FloatArray:
    """Two-sided Lan-DeMets spending: total error spent by information fraction ``t``.

    Each side spends half: O'Brien-Fleming type ``alpha(t) = 2 (2 - 2 Phi(z_{1-alpha/4} /
    sqrt(t)))`` (gsDesign's ``sfLDOF`` at alpha/2 per side), Pocock type
    ``alpha log(1 + (e - 1) t)``, Hwang-Shih-DeCani ``alpha (1 - e^{-gamma t}) /
    (1 - e^{-gamma})`` (``gamma = -4`` is close to O'Brien-Fleming late but spends a little
    early, so a clear difference is settled long before the cap).

    >>> round(float(spent_alpha(1.0, 0.05)), 12)
    0.05
    >>> round(float(spent_alpha(0.25, 0.05)), 7)  # 4 - 4 Phi(2.2414 / 0.5)
    1.47e-05
    """
    frac = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
    if spending == "obf":
        with np.errstate(divide="ignore"):
            z = norm.isf(alpha / 4) / np.sqrt(frac)
        out = 4 * norm.sf(z)
    elif spending == "pocock":
        out = alpha * np.log1p((math.e - 1) * frac)
    elif spending == "hsd":
        out = alpha * np.expm1(-gamma * frac) / math.expm1(-gamma)
    else:
        raise ValueError(f"spending must be one of {SPENDING_FUNCTIONS}, got {spending!r}")
    return np.asarray(np.minimum(out, alpha), dtype=np.float64)


@lru_cache(maxsize=1024)
def spending_boundaries(
    fractions: tuple[float, ...],
    alpha: float,
    spending: str = "obf",
    gamma: float = -4.0,
    grid: int = 801,
) -> tuple[float, ...]:
    """Two-sided boundaries ``c_k`` on ``|z|`` at information fractions ``t_1 < ... < t_K``.

    Chosen so that under no difference, ``P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1},
    |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})`` (Lan & DeMets 1983), with ``Z_k = B(t_k) /
    sqrt(t_k)`` for a standard Brownian motion ``B``. The sub-density of ``B`` on the
    continuation region is carried from look to look on a grid (Armitage, McPherson & Rowe
    1969); each look's crossing mass is an exact normal tail integrated over that density.
    A look that can spend nothing new gets an infinite boundary.

    >>> [round(c, 3) for c in spending_boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05)]
    [4.877, 3.357, 2.68, 2.29, 2.031]
    """
    t = np.asarray(fractions, dtype=np.float64)
    if t.ndim != 1 or len(t) == 0 or (np.diff(t) <= 0).any() or t[0] <= 0:
        raise ValueError(f"fractions must increase and be > 0, got {fractions}")
    budget = spent_alpha(t, alpha, spending, gamma)
    bounds: list[float] = []
    # Look 1: B(t1) ~ N(0, t1); exact.
    spend = float(budget[0])
    c = float(norm.isf(spend / 2)) if spend > 0 else math.inf
    bounds.append(c)
    half = c * math.sqrt(t[0]) if math.isfinite(c) else 10 * math.sqrt(t[0])
    x = np.linspace(-half, half, grid)
    density = norm.pdf(x, scale=math.sqrt(t[0]))
    weight = _trapezoid_weights(x)
    for k in range(1, len(t)):
        step = math.sqrt(t[k] - t[k - 1])
        mass = density * weight
        target = float(budget[k] - budget[k - 1])

        crossing = _crossing_mass(x, mass, float(t[k]), step)
        if target <= 1e-15 or crossing(40.0, 0.0) >= target:
            c = math.inf
        else:
            c = float(optimize.brentq(crossing, 1e-6, 40.0, args=(target,), xtol=1e-9))
        bounds.append(c)
        half = (c if math.isfinite(c) else 10.0) * math.sqrt(t[k])
        new_x = np.linspace(-half, half, grid)
        kernel = norm.pdf((new_x[:, None] - x[None, :]) / step) / step
        density = kernel @ mass
        x, weight = new_x, _trapezoid_weights(new_x)
    return tuple(bounds)


def _crossing_mass(
    x: FloatArray, mass: FloatArray, t: float, sd: float
) -> Callable[[float, float], float]:
    """Probability of continuing to ``x`` (with ``mass``) and then crossing ``+-c sqrt(t)``,
    minus ``target`` (a root-finding form)."""

    def crossing(c_k: float, target: float) -> float:
        edge = c_k * math.sqrt(t)
        tails = norm.sf((edge - x) / sd) + norm.cdf((-edge - x) / sd)
        return float(mass @ tails) - target

    return crossing


def _trapezoid_weights(x: FloatArray) -> FloatArray:
    w = np.full(len(x), x[1] - x[0])
    w[0] = w[-1] = (x[1] - x[0]) / 2
    return w


def look_fractions(looks: int, first: float) -> tuple[float, ...]:
    """``looks`` information fractions spaced geometrically from ``first`` up to 1.

    >>> look_fractions(3, 0.25)
    (0.25, 0.5, 1.0)
    """
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    if not 0 < first <= 1:
        raise ValueError(f"first look fraction must be in (0, 1], got {first}")
    if looks == 1:
        return (1.0,)
    ratio = (1 / first) ** (1 / (looks - 1))
    return (*(float(min(1.0, first * ratio**k)) for k in range(looks - 1)), 1.0)


# -- the optimal-allocation program -------------------------------------------------------------


def kl_log_term(delta: float) -> float:
    """``log(1 / (2.4 delta))``, the lower-bound factor of Kaufmann, Cappe & Garivier (2016)."""
    return math.log(1 / (2.4 * delta))


def pair_gap(difference: FloatArray, epsilon: float | None) -> FloatArray:
    """Distance to the nearest alternative that changes the pair's answer.

    ``max(|D|, eps - |D|)`` with a region of practical equivalence, else ``|D|``.
    """
    d = np.abs(np.asarray(difference, dtype=np.float64))
    if epsilon is None or epsilon <= 0:
        return d
    return np.asarray(np.maximum(d, epsilon - d), dtype=np.float64)


def allocation_program(
    variance: FloatArray,
    pairs: NDArray[np.int64],
    radius: FloatArray,
    cost: FloatArray | None = None,
    tolerance: float = 1e-6,
    max_sweeps: int = 2000,
) -> FloatArray:
    """Solve ``min sum_i c_i T_i  s.t.  A_i/T_i + A_j/T_j <= r_ij`` for every listed pair.

    ``variance`` is A (per-trial variance of each model's score estimate, (L,)), ``pairs`` a
    (P, 2) array of model indices, ``radius`` r = gap^2 / (2 log(1/(2.4 delta))) per pair.
    Models in no pair get 0. Returns T (float, (L,)).

    Convex in ``x = 1/T``. Solved through its dual: with multipliers ``lambda_p >= 0`` and
    ``Lambda_i = sum_{p ni i} lambda_p``, the primal optimum is ``T_i = sqrt(A_i Lambda_i /
    c_i)`` and the dual ``g(lambda) = sum_i 2 sqrt(c_i A_i Lambda_i) - sum_p lambda_p r_p`` is
    concave, with gradient ``sqrt(k_i/Lambda_i) + sqrt(k_j/Lambda_j) - r_p`` (``k = c A``) and
    Hessian ``-B' diag(sqrt(k_i)/(2 Lambda_i^1.5)) B`` (B the model-pair incidence; tridiagonal
    for the adjacent pairs of an ordering). Maximised by projected Newton (Bertsekas 1982: a
    Newton step on the multipliers off their bound, a diagonally scaled step on those held at
    0, Armijo backtracking along the projection arc) from the single-pair solutions; block
    coordinate ascent takes over if Newton stalls. The primal is scaled to be exactly
    feasible; stops when the duality gap is below ``tolerance`` (relative). Each call starts
    from the same closed-form point and solves to a tight gap, so the result is a function of
    the inputs alone (a resumed campaign plans the same rounds).

    Single pair, unit costs: ``T_a = sqrt(A_a)(sqrt(A_a) + sqrt(A_b)) / r`` (Neyman split).

    >>> t = allocation_program(np.array([1.0, 4.0]), np.array([[0, 1]]), np.array([0.5]))
    >>> [round(float(v), 3) for v in t]
    [6.0, 12.0]
    """
    a = np.maximum(np.asarray(variance, dtype=np.float64), 1e-300)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    r = np.asarray(radius, dtype=np.float64)
    c = np.ones_like(a) if cost is None else np.maximum(np.asarray(cost, dtype=np.float64), 1e-12)
    out = np.zeros_like(a)
    if len(pairs) == 0:
        return out
    dual = _PairDual(a, c, pairs, r)
    lam = (np.sqrt(dual.k[dual.i]) + np.sqrt(dual.k[dual.j])) ** 2 / r**2 / 2
    lam, primal, converged = dual.newton(lam, tolerance)
    if not converged:
        lam, primal = dual.coordinate_ascent(lam, primal, tolerance, max_sweeps)
    out[dual.used] = primal[dual.used]
    return out


class _PairDual:
    """The allocation program's dual (see :func:`allocation_program`) and its two solvers."""

    def __init__(
        self, a: FloatArray, c: FloatArray, pairs: NDArray[np.int64], r: FloatArray
    ) -> None:
        self.a, self.c, self.pairs, self.r = a, c, pairs, r
        self.k = c * a
        self.i, self.j = pairs[:, 0], pairs[:, 1]
        self.used = np.unique(pairs)
        self.flat = pairs.ravel()
        self.blocks = _blocks(pairs)
        self.incidence = np.zeros((len(a), len(pairs)))
        self.incidence[self.i, np.arange(len(pairs))] = 1.0
        self.incidence[self.j, np.arange(len(pairs))] = 1.0

    def totals(self, lam: FloatArray) -> FloatArray:
        """Lambda_i: the multipliers of the pairs model i is in, summed."""
        return np.asarray(
            np.bincount(self.flat, np.repeat(lam, 2), minlength=len(self.a)), dtype=np.float64
        )

    def value(self, lam: FloatArray) -> float:
        """The dual at ``lam``; -inf where a model of a pair would get no trials."""
        total = self.totals(lam)
        if (total[self.used] <= 0).any():
            return -np.inf
        return float(2 * np.sqrt(self.k[self.used] * total[self.used]).sum() - lam @ self.r)

    def primal(self, lam: FloatArray) -> tuple[FloatArray, float]:
        """The feasible T built from ``lam`` (scaled onto the constraints) and its cost."""
        total = self.totals(lam)
        t = np.zeros_like(self.a)
        used = self.used
        t[used] = np.sqrt(self.a[used] * np.maximum(total[used], 1e-300) / self.c[used])
        load = (self.a[self.i] / t[self.i] + self.a[self.j] / t[self.j]) / self.r
        t *= max(1.0, float(load.max()))
        return t, float((self.c * t).sum())

    def newton(self, lam: FloatArray, tolerance: float) -> tuple[FloatArray, FloatArray, bool]:
        """Projected Newton ascent; returns (lambda, best primal, converged)."""
        lam = lam.copy()
        count = len(lam)
        best, primal = np.inf, np.zeros_like(self.a)
        value = self.value(lam)
        for _ in range(100):
            # Models in no pair have Lambda = 0 and no term in the dual: they get no curvature.
            total = self.totals(lam)
            inside = total > 0
            root = np.zeros_like(total)
            root[inside] = np.sqrt(self.k[inside] / total[inside])
            grad = root[self.i] + root[self.j] - self.r
            curve = np.zeros_like(total)
            curve[inside] = root[inside] / (2 * total[inside])  # -d2/dLambda2 of 2 sqrt(k Lambda)
            t, cost = self.primal(lam)
            if cost < best:
                best, primal = cost, t
            if best - value <= tolerance * best:
                return lam, primal, True
            hessian = (self.incidence.T * curve) @ self.incidence  # minus the dual's Hessian
            # Multipliers held at their bound: those at 0 whose gradient pushes below it, and
            # those the Newton step on the others would carry past 0 (an active-set pass).
            held = (lam <= 0) & (grad < 0)
            step = np.zeros(count)
            for _ in range(count):
                free = ~held
                step[:] = 0.0
                if free.any():
                    block = hessian[np.ix_(free, free)]
                    block[np.diag_indices_from(block)] *= 1 + 1e-12
                    try:
                        step[free] = np.linalg.solve(block, grad[free])
                    except np.linalg.LinAlgError:
                        return lam, primal, False
                crossing = free & (grad < 0) & (lam + step < 0)
                if not crossing.any():
                    break
                held |= crossing
            # A held multiplier goes to 0 at a full step (or further, projected back to 0).
            diagonal = np.diag(hessian)[held]
            step[held] = np.minimum(grad[held] / np.maximum(diagonal, 1e-300), -lam[held])
            size = 1.0
            while size > 1e-6:
                trial = np.maximum(lam + size * step, 0.0)
                trial_value = self.value(trial)
                if trial_value >= value + 1e-4 * float(grad @ (trial - lam)):
                    break
                size *= 0.5
            else:
                # The quadratic model is poor here (a multiplier near 0 where sqrt(Lambda)
                # bends hard): one exact sweep over the pairs' own coordinates instead.
                trial = self.sweep(lam)
                trial_value = self.value(trial)
            lam, value = trial, trial_value
        return lam, primal, False

    def sweep(self, lam: FloatArray) -> FloatArray:
        """One pass of exact coordinate maximisation, block by block."""
        lam = lam.copy()
        for block in self.blocks:
            total = self.totals(lam)
            bi, bj = self.i[block], self.j[block]
            li = total[bi] - lam[block]
            lj = total[bj] - lam[block]
            lam[block] = _solve_pair_multiplier(
                self.k[bi], self.k[bj], li, lj, self.r[block], lam[block]
            )
        return lam

    def coordinate_ascent(
        self, lam: FloatArray, primal: FloatArray, tolerance: float, max_sweeps: int
    ) -> tuple[FloatArray, FloatArray]:
        """Block coordinate ascent over pairs that share no model (each block solved by a
        monotone Newton iteration in its own coordinate)."""
        lam = lam.copy()
        start, best = self.primal(lam)
        if not primal.any() or best < float((self.c * primal).sum()):
            primal = start
        else:
            best = float((self.c * primal).sum())
        for _ in range(max_sweeps):
            lam = self.sweep(lam)
            t, cost = self.primal(lam)
            if cost < best:
                best, primal = cost, t
            if best - self.value(lam) <= tolerance * best:
                break
        return lam, primal


def _blocks(pairs: NDArray[np.int64]) -> list[NDArray[np.int64]]:
    """Greedy colouring of the pairs so that no two pairs of one block share a model."""
    blocks: list[list[int]] = []
    members: list[set[int]] = []
    for p, (i, j) in enumerate(pairs.tolist()):
        for block, seen in zip(blocks, members, strict=True):
            if i not in seen and j not in seen:
                block.append(p)
                seen.update((i, j))
                break
        else:
            blocks.append([p])
            members.append({i, j})
    return [np.asarray(b, dtype=np.int64) for b in blocks]


def _solve_pair_multiplier(
    ki: FloatArray,
    kj: FloatArray,
    li: FloatArray,
    lj: FloatArray,
    r: FloatArray,
    previous: FloatArray | None = None,
) -> FloatArray:
    """The ``lambda >= 0`` maximising the dual in one pair's coordinate (vectorised).

    The root of ``h(l) = sqrt(ki/(li+l)) + sqrt(kj/(lj+l)) - r`` (decreasing, convex), or 0
    when ``h(0) <= 0``. Newton from a point left of the root increases monotonically to it;
    the previous sweep's value is used as that point where it is left of the root.
    """
    li = np.maximum(li, 0.0)
    lj = np.maximum(lj, 0.0)

    def h(lam: FloatArray) -> tuple[FloatArray, FloatArray]:
        di = np.maximum(li + lam, 1e-300)
        dj = np.maximum(lj + lam, 1e-300)
        si = np.sqrt(ki / di)
        sj = np.sqrt(kj / dj)
        return si + sj - r, -(si / (2 * di) + sj / (2 * dj))

    lam = np.maximum(0.0, np.maximum(ki / r**2 - li, kj / r**2 - lj))
    if previous is not None:
        value, _ = h(previous)
        lam = np.where((value > 0) & (previous > lam), previous, lam)
    for _ in range(60):
        value, slope = h(lam)
        step = np.where(value > 0, -value / slope, 0.0)
        lam = lam + step
        if (step <= 1e-9 * np.maximum(lam, 1e-300)).all():
            break
    return np.asarray(lam, dtype=np.float64)


def lower_bound_trials(
    scores: FloatArray,
    variance: FloatArray,
    delta: float,
    epsilon: float | None,
    adjacent_only: bool = True,
) -> FloatArray:
    """The delta-correct lower bound on trials per model for ranking ``scores``.

    Gaussian form of Kaufmann, Cappe & Garivier (2016): every adjacent pair (in the true order)
    must reach ``A_i/T_i + A_j/T_j <= gap_ij^2 / (2 log(1/(2.4 delta)))`` with ``gap =
    max(|D|, eps - |D|)``. ``variance`` is A_i, the per-trial variance of model i's score
    estimate (``((1/M) sum_q sd_q)^2`` under Neyman allocation across questions).
    """
    s = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    pairs = np.stack([order[:-1], order[1:]], axis=1)
    gap = pair_gap(s[pairs[:, 0]] - s[pairs[:, 1]], epsilon)
    if (gap <= 0).any():
        return np.full(len(s), np.inf)
    radius = gap**2 / (2 * kl_log_term(delta))
    return allocation_program(np.asarray(variance, dtype=np.float64), pairs, radius)


def wilson_interval(successes: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (scipy's ``binomtest``)."""
    from scipy.stats import binomtest

    if total == 0:
        return 0.0, 1.0
    ci = binomtest(successes, total).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)
