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
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import optimize
from scipy.special import ndtr
from scipy.stats import norm

from adaptive_eval.stats.arrays import FloatArray, IntArray

#: The Lan-DeMets spending functions (:func:`spent_alpha`).
Spending = Literal["obf", "pocock", "hsd"]
SPENDING_FUNCTIONS: tuple[Spending, ...] = typing.get_args(Spending)


#: The variance inflation of the default decisions (issue 26, chosen by measurement;
#: docs/sequential.md): the non-inferiority gate's ``s`` and the ``group_sequential`` rule's
#: resolve test use ``s sqrt(1.10)``. Without it the tests spend their budget exactly under the
#: normal model and measured up to 15% above alpha on binomial data at confidence 0.99 (the
#: plug-in variances and the early looks' few trials per question).
VARIANCE_INFLATION = 1.10


#: What each spending function is called in prose.
SPENDING_NAMES = {
    "obf": "O'Brien-Fleming-type",
    "pocock": "Pocock-type",
    "hsd": "Hwang-Shih-DeCani",
}


@dataclass(frozen=True)
class LookDesign:
    """A group-sequential design: ``looks`` planned looks at information fractions spaced
    geometrically from ``first_look`` to 1 (:func:`look_fractions`), the two-sided error
    spent by Lan-DeMets ``spending`` (``gamma`` for ``hsd``; :func:`spent_alpha`).

    One value from which the boundaries (:meth:`boundaries`), a run's fingerprint and the docs'
    description (:meth:`describe`) are derived: the pair rules' default looks and the
    ``ci_width`` intervals' looks are both :data:`DEFAULT_LOOKS`.
    """

    looks: int = 12
    first_look: float = 1 / 64
    spending: Spending = "hsd"
    gamma: float = -4.0

    def fractions(self) -> tuple[float, ...]:
        return _look_fractions(self.looks, self.first_look)

    def boundaries(self, alpha: float) -> tuple[float, ...]:
        """The two-sided boundary on ``|z|`` at every planned look for a budget ``alpha``."""
        return spending_boundaries(self.fractions(), alpha, self.spending, self.gamma)

    def spent(self, fraction: float, alpha: float) -> float:
        return float(spent_alpha(fraction, alpha, self.spending, self.gamma))

    def describe(self) -> str:
        """The design in one phrase, for the docs and the run's fingerprint."""
        spending = SPENDING_NAMES.get(self.spending, self.spending)
        shape = f" (gamma {self.gamma:g})" if self.spending == "hsd" else ""
        return (
            f"{self.looks} looks at information fractions spaced geometrically from "
            f"{self.first_look:g} to 1, {spending} alpha spending{shape}"
        )


def variance_probabilities(
    counts: IntArray | FloatArray,
    nu: IntArray | FloatArray,
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
    counts: IntArray | FloatArray,
    nu: IntArray | FloatArray,
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
    theta, se, _ = estimate_with_variance(counts, nu, weights, pooled)
    return theta, se


def estimate_with_variance(
    counts: IntArray | FloatArray,
    nu: IntArray | FloatArray,
    weights: FloatArray,
    pooled: bool = True,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`empirical_estimate` and the (L, M) per-trial variance ``v_ia`` it is built on
    (:func:`trial_variance` of ``nu``), computed once: a decision round needs all three.

    >>> counts = np.array([[[1, 3], [0, 2]]])
    >>> theta, se, v = estimate_with_variance(counts, counts + 1.0, np.array([0.0, 1.0]))
    >>> [float(x) for x in v[0]]  # p(1 - p) at p = 3/4 and 7/8 (pooled target 3/4)
    [0.1875, 0.109375]
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
    # xbar.mean(axis=-1) exactly (np.mean sums and divides by the count), without its
    # per-call bookkeeping, which costs more than the sum at a campaign's sizes.
    theta = xbar.sum(axis=-1) / num_questions
    se = np.sqrt((var_trial / safe_n).sum(axis=-1)) / num_questions
    return (
        np.asarray(theta, dtype=np.float64),
        np.asarray(se, dtype=np.float64),
        var_trial,
    )


def trial_variance_of(p: FloatArray, weights: FloatArray) -> FloatArray:
    """Variance of one trial's score per cell, given the cells' category probabilities."""
    mean = p @ weights
    return np.asarray(np.maximum(p @ (weights * weights) - mean**2, 0.0), dtype=np.float64)


def trial_variance(
    nu: FloatArray | IntArray, weights: FloatArray, pooled: bool = True
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


@lru_cache(maxsize=128)
def mixture_boundary_table(
    rhos: tuple[float, ...],
    weights: tuple[float, ...],
    alpha: float,
    log_low: float,
    log_high: float,
) -> tuple[FloatArray, FloatArray]:
    """:func:`mixture_grid_boundary` on a grid of log information from ``log_low`` to
    ``log_high``, 0.02 apart, each value rounded up at the 4th decimal (plus 1e-4): fine enough
    that interpolating between two nodes stays on the safe side of the exact root. Read-only
    arrays, computed once per mixture and budget."""
    grid = np.arange(log_low, log_high, 0.02, dtype=np.float64)
    values = [mixture_grid_boundary(math.exp(g), alpha, rhos, weights) for g in grid]
    table = (grid, np.ceil(np.asarray(values) * 1e4) / 1e4 + 1e-4)
    for array in table:
        array.flags.writeable = False
    return table


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
        gap = (new_x[:, None] - x[None, :]) / step
        # The normal density by hand: scipy's norm.pdf costs 5x on this (grid x grid) array.
        kernel = np.exp(-0.5 * gap * gap) / (step * math.sqrt(2 * math.pi))
        density = kernel @ mass
        x, weight = new_x, _trapezoid_weights(new_x)
    return tuple(bounds)


def boundary_tables_built() -> int:
    """How many boundary tables :func:`spending_boundaries` has computed in this process (its
    cache misses): lets a caller tell a step that built tables from a slow one."""
    return spending_boundaries.cache_info().misses


def _crossing_mass(
    x: FloatArray, mass: FloatArray, t: float, sd: float
) -> Callable[[float, float], float]:
    """Probability of continuing to ``x`` (with ``mass``) and then crossing ``+-c sqrt(t)``,
    minus ``target`` (a root-finding form)."""

    def crossing(c_k: float, target: float) -> float:
        edge = c_k * math.sqrt(t)
        tails = ndtr((x - edge) / sd) + ndtr((-edge - x) / sd)
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


def wilson_interval(successes: int, total: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (scipy's ``binomtest``)."""
    from scipy.stats import binomtest

    if total == 0:
        return 0.0, 1.0
    ci = binomtest(successes, total).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


@lru_cache(maxsize=32)
def _look_fractions(looks: int, first_look: float) -> tuple[float, ...]:
    return look_fractions(looks, first_look)


#: The default design: the ``group_sequential`` pair rule's looks and the ``ci_width``
#: intervals' looks.
DEFAULT_LOOKS = LookDesign()


def settle_probability_rows(
    difference: FloatArray,
    se: FloatArray,
    se_cap: FloatArray,
    resolve: FloatArray,
    equivalent: FloatArray,
    epsilon: float | None,
) -> FloatArray:
    """:func:`settle_probability` elementwise over arrays (the forecast's continuations)."""
    from scipy.special import erfc

    spread = np.sqrt(np.maximum(se * se - se_cap * se_cap, 0.0))
    edge = resolve * se_cap
    inner = (epsilon or 0.0) - equivalent * se_cap
    flat = spread == 0.0
    scale = np.where(flat, 1.0, spread) * math.sqrt(2.0)

    def below(x: FloatArray) -> FloatArray:
        found: FloatArray = np.where(
            flat, (difference < x).astype(np.float64), 0.5 * erfc((difference - x) / scale)
        )
        return found

    settle = below(-edge) + (1.0 - below(edge))
    settle = settle + np.where(inner > 0, below(inner) - below(-inner), 0.0)
    return np.asarray(np.minimum(1.0, settle), dtype=np.float64)
