"""Betting e-processes on a pair's difference whose bets a prior chooses, valid whatever the prior.

The decision statistic of a pair is the difference ``D`` of two unbiased scores with standard
error ``s``; its information is ``I = 1 / s^2`` and its score process ``x = (D - delta0) I``. Each
cell's running mean has ``Cov(mean_s, mean_t) = v / n_t`` for ``n_s <= n_t``, so
``Cov(D_s, D_t) = Var(D_t)`` however unevenly the questions are sampled (as long as each cell
only grows, on an allocation fixed before its outcomes): in information time ``x`` is a
Brownian motion with drift ``Delta - delta0`` (the canonical joint distribution, Jennison &
Turnbull 2000, ch. 11), Gaussian in the limit of many trials.

For a bet ``theta >= 0`` on ``Delta > delta0``, ``exp(theta x - theta^2 I / 2)`` is then a
nonnegative (super)martingale under ``Delta <= delta0``; so is any mixture of them over
``theta``, and Ville's inequality bounds the chance that it ever reaches ``1 / alpha`` by
``alpha`` at every look, whatever the mixture. The mixture is where a prior enters: one whose
mass sits near the true difference grows the wealth fastest (it is the Bayes predictive's
sequence of bets), one that is wrong only grows it slowly; it never makes the test invalid
(Waudby-Smith & Ramdas 2024 on betting confidence sequences; Bayes-assisted ones, 2026).

With the mixing density ``N(m, tau^2)`` restricted to ``theta > 0`` the wealth is closed form:

    K = (1 + tau^2 I)^(-1/2) exp((x + m / tau^2)^2 / (2 (I + 1 / tau^2)) - m^2 / (2 tau^2))
        * Phi(mu_p / sigma_p) / Phi(m / tau),

``mu_p = (x + m / tau^2) / (I + 1 / tau^2)`` and ``sigma_p^2 = 1 / (I + 1 / tau^2)`` the
posterior of ``theta``. :func:`log_wealth` computes it in logs; :func:`scale_mixture` is the
default mixture (half-normals at 0 over a grid of scales) when no prior is known.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import log_ndtr, logsumexp

#: The default mixture's scales: half-normal bets on differences from 0.005 to 0.64 (a factor
#: 2 apart), equal weights. Where no prior is known the rule must stay good for the gaps LLM
#: leaderboards show, from near-ties to a whole score band.
DEFAULT_SCALES = tuple(0.005 * 2.0**j for j in range(8))


@dataclass(frozen=True)
class Mixture:
    """Mixing weights over half-normal bets ``N(mean, scale^2)`` restricted to ``theta > 0``
    (each component renormalised on that side)."""

    means: tuple[float, ...]
    scales: tuple[float, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not (len(self.means) == len(self.scales) == len(self.weights) > 0):
            raise ValueError("a mixture needs as many means, scales and weights, at least one")
        if min(self.scales) <= 0 or min(self.weights) <= 0:
            raise ValueError("scales and weights must be positive")
        if not all(math.isfinite(x) for x in (*self.means, *self.scales, *self.weights)):
            # A prior's NaN or overflowed score once reached the bets and failed mid-run
            # (issue 48): the betting rule refuses it before sampling; this is the backstop.
            raise ValueError(
                f"a mixture's means, scales and weights must be finite, got means "
                f"{self.means}, scales {self.scales}"
            )
        if not math.isclose(sum(self.weights), 1.0, rel_tol=1e-9):
            raise ValueError(f"weights must sum to 1, got {sum(self.weights)}")


def scale_mixture(scales: Sequence[float] = DEFAULT_SCALES) -> Mixture:
    """Half-normal bets at 0 over ``scales``, equal weights: the prior-free default."""
    count = len(scales)
    return Mixture((0.0,) * count, tuple(scales), (1.0 / count,) * count)


def prior_mixture(mean: float, scale: float, robust: float, fallback: Mixture) -> Mixture:
    """The prior's bet ``N(mean, scale^2)`` on ``theta > 0`` with weight ``1 - robust``, the
    ``fallback`` mixture with the rest: when the prior is wrong the wealth still grows at the
    fallback's rate, less ``log(1 / robust)``; when it is right, it costs ``log(1 / (1 -
    robust))``."""
    if not 0 < robust < 1:
        raise ValueError(f"robust must be in (0, 1), got {robust}")
    return Mixture(
        (mean, *fallback.means),
        (scale, *fallback.scales),
        (1 - robust, *(robust * w for w in fallback.weights)),
    )


def log_wealth(x: ArrayLike, information: ArrayLike, mixture: Mixture) -> Any:
    """``log K`` of the mixture at score ``x = (D - delta0) I`` and information ``I``
    (module docstring; a look before any information has ``K = 1``). Scalars give a float,
    arrays (broadcast together) an array."""
    x_arr, info = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(information, float))
    means = np.asarray(mixture.means)
    precision = 1.0 / np.asarray(mixture.scales) ** 2
    safe = np.maximum(info, 0.0)[..., None]
    post_precision = safe + precision
    shifted = x_arr[..., None] + means * precision
    terms = (
        -0.5 * np.log1p(safe / precision)
        + shifted**2 / (2 * post_precision)
        - means**2 * precision / 2
        + log_ndtr(shifted / np.sqrt(post_precision))
        - log_ndtr(means * np.sqrt(precision))
    )
    found = np.where(info > 0, logsumexp(terms, axis=-1, b=np.asarray(mixture.weights)), 0.0)
    return float(found) if found.ndim == 0 else found


def rejects(x: float, information: float, mixture: Mixture, alpha: float) -> bool:
    """Whether the e-process has reached ``1 / alpha`` (Ville: at most ``alpha`` under the
    null at any look)."""
    return bool(log_wealth(x, information, mixture) >= -math.log(alpha))


def z_boundary(information: float, mixture: Mixture, alpha: float) -> float:
    """The ``z = x / sqrt(I)`` at which the wealth reaches ``1 / alpha`` at information ``I``
    (the wealth grows with ``x``): the boundary a report shows, and futility projects to.
    Found at ``I`` rounded to 0.5% (cached: the boundary moves far less over that step, and it
    decides nothing itself: :func:`rejects` does)."""
    if information <= 0:
        return math.inf
    return _z_boundary(round(math.log(information) * 200) / 200, mixture, alpha)


@lru_cache(maxsize=4096)
def _z_boundary(log_information: float, mixture: Mixture, alpha: float) -> float:
    information = math.exp(log_information)
    root = math.sqrt(information)
    target = -math.log(alpha)

    def gap(z: float) -> float:
        return float(log_wealth(z * root, information, mixture)) - target

    high = 8.0
    while gap(high) < 0:
        high *= 2
        if high > 1e6:
            return math.inf
    return float(brentq(gap, 0.0 if gap(0.0) < 0 else -high, high, xtol=1e-6))
