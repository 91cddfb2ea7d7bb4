"""Where a forecast's simulated truths come from: the models' scores as spread as the evidence
says, not spread again by drawing around noisy estimates.

A campaign's cost is set by its closest adjacent pairs (a near-tie runs to futility or the cap,
a clear gap settles early), so what a forecast must get right is the *spacing* of the models'
true scores. Drawing every cell's truth from its posterior ``Dirichlet(alpha_i + n_ia)`` puts the
pilot's noise in twice: once in the estimates ``x_i`` and again in the draw around them; twelve
models evenly spread 0.06 apart then hold, in 89% of simulated campaigns, a pair closer than
0.02 that the real campaign does not have (docs/forecast.md).

The predictive here (``spacing``) draws the sorted scores' *spacings* instead:

1. **Estimates.** Per model, ``x_i`` the mean over questions of the cells' posterior means and
   ``s_i^2 = sum_a v_ia / (n_ia + A_i) / M^2`` its noise (``v_ia`` the weighted score's variance
   under the cell's posterior mean, ``A_i`` the empirical-Bayes prior's strength). Models sorted
   by ``x``; adjacent spacings ``d_j = x_(j+1) - x_(j)`` with noise ``tau_j^2 = s_(j)^2 +
   s_(j+1)^2``.
2. **A prior on the true spacings, deconvolved.** A point mass at 0 of share ``t`` (exact ties)
   plus ``(1 - t) Gamma(mean mu / (1 - t), cv h)``. ``mu``: the mean observed spacing scaled by
   the share of the scores' spread that is not noise, ``sqrt(max(0, var(x) - mean(s^2)) /
   var(x))`` (the noise widens the spread; it is taken out once). ``(h, t)`` (how unequal the
   spacings are, how many are ties) is not identified by a small pilot, so each simulation draws
   it from :data:`CANDIDATES`, weighted by :func:`prior_weights` (pseudo-evidence simulated and
   sorted as the evidence is: sorting makes noisy spacings look more even than they are).
3. **Posterior per spacing.** ``p(delta_j | d_j) ~ prior(delta) N(d_j; delta, tau_j^2)`` on
   a grid; one draw per spacing. Where the evidence resolves a spacing (``tau_j << d_j``) the
   draw sits at ``d_j``; where it cannot, the prior speaks.
4. **Truths.** The drawn spacings, cumulated from the lowest model and centred on the mean of
   ``x``, are each model's target score; each cell's posterior draw is tilted to it
   (:func:`tilt_to_scores`: ``p_k exp(lambda_i w_k)``, one ``lambda_i`` per model), so the
   questions keep their drawn difficulty and the model its drawn spacing.

With fewer than :data:`MIN_SPACINGS` spacings (two or three models) the ensemble says nothing
about spacings, and with a model that has no trial the estimates are not comparable: the
forecast then draws each cell from its posterior (``cells``).

Chosen by measurement (docs/forecast.md): the live forecast draws with ``spacing`` (it turns the
12-model forecast a quarter of the way in from 2.1x the final cost to 1.2x); the pilot forecast
keeps ``cells`` (from a pilot of 4, ``spacing`` helped the 12 clear models but hurt the demo, the
sparse campaign, the mimics and the AIME replay: no pilot of 4 tells those gap structures apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive_eval.stats.posterior import empirical_bayes_prior

#: The spread of the true spacings a simulation assumes (coefficient of variation of the gamma
#: prior), drawn uniformly per simulation: evenly spread models to independently placed ones.
SPACING_CV = (0.05, 0.3, 0.55, 0.8, 1.05, 1.3)
#: The share of adjacent pairs that are exact ties (the same model twice, a checkpoint that
#: changed nothing), a point mass at spacing 0 beside the gamma.
TIE_SHARES = (0.0, 0.15, 0.3, 0.5)
#: Pseudo-evidence per candidate prior that weighs the candidates by how well they reproduce
#: the observed spacings (:func:`prior_weights`).
CALIBRATION_DRAWS = 400
#: Below this many adjacent spacings the ensemble does not inform a spacing prior.
MIN_SPACINGS = 3
#: Grid points of each spacing's posterior.
GRID = 256


@dataclass(frozen=True)
class ScoreEvidence:
    """Each model's estimated score ``x`` (L,) and its noise sd ``s`` (L,), from the cells'
    posterior ``Dirichlet(alpha + counts)``."""

    x: np.ndarray
    s: np.ndarray

    @classmethod
    def of(cls, alpha: np.ndarray, counts: np.ndarray, weights: np.ndarray) -> ScoreEvidence:
        nu = alpha + counts
        total = nu.sum(axis=2)
        mean = nu / total[..., None]
        first = mean @ weights
        variance = np.maximum(mean @ weights**2 - first**2, 0.0)
        trials = counts.sum(axis=2)
        strength = alpha.sum(axis=2)
        num_questions = counts.shape[1]
        x = first.mean(axis=1)
        s = np.sqrt((variance / (trials + strength)).sum(axis=1)) / num_questions
        return cls(np.asarray(x, dtype=np.float64), np.asarray(s, dtype=np.float64))


#: The candidate priors: (coefficient of variation of the gamma part, share of exact ties).
CANDIDATES = tuple((cv, tie) for cv in SPACING_CV for tie in TIE_SHARES)


@dataclass(frozen=True)
class SpacingPrior:
    """The deconvolved spacing model of one forecast (what every simulation shares)."""

    order: np.ndarray  # (L,) models from lowest to highest estimate
    observed: np.ndarray  # (L - 1,) observed spacings d_j
    noise: np.ndarray  # (L - 1,) tau_j
    mean_spacing: float  # mu
    weights: np.ndarray  # (len(CANDIDATES),) probability of each candidate prior
    centre: float  # mean of x
    low: float  # the scores' feasible range (the rubric's lowest and highest weight)
    high: float

    @classmethod
    def fit(cls, found: ScoreEvidence, weights: np.ndarray) -> SpacingPrior | None:
        """``None`` where the evidence does not inform a spacing prior (too few models)."""
        x, s = found.x, found.s
        if len(x) - 1 < MIN_SPACINGS:
            return None
        order = np.argsort(x, kind="stable")
        observed = np.diff(x[order])
        noise = np.sqrt(s[order][1:] ** 2 + s[order][:-1] ** 2)
        spread = float(np.var(x, ddof=1))
        signal = max(spread - float(np.mean(s**2)), 0.0)
        share = float(np.sqrt(signal / spread)) if spread > 0 else 0.0
        mu = float(observed.mean()) * share
        return cls(
            order,
            observed,
            noise,
            mu,
            prior_weights(observed, s[order], mu),
            float(x.mean()),
            float(weights.min()),
            float(weights.max()),
        )

    def draw_scores(self, rng: np.random.Generator) -> np.ndarray:
        """(L,) target scores of one simulation (in model order)."""
        cv, tie = CANDIDATES[int(rng.choice(len(CANDIDATES), p=self.weights))]
        spacings = self.draw_spacings(rng, cv, tie)
        sorted_scores = np.concatenate([[0.0], np.cumsum(spacings)])
        sorted_scores += self.centre - sorted_scores.mean()
        # Keep inside the rubric's range (a model at 0 stays at 0, not below).
        span = sorted_scores[-1] - sorted_scores[0]
        room = self.high - self.low
        if span > room:
            sorted_scores = self.low + (sorted_scores - sorted_scores[0]) * room / span
        shift = max(self.low - sorted_scores[0], 0.0) - max(sorted_scores[-1] - self.high, 0.0)
        sorted_scores += shift
        scores = np.empty_like(sorted_scores)
        scores[self.order] = sorted_scores
        return scores

    def draw_spacings(self, rng: np.random.Generator, cv: float, tie: float) -> np.ndarray:
        """One draw of every true spacing from its posterior under the prior ``tie`` at 0 plus
        ``(1 - tie) Gamma(mean mu / (1 - tie), cv)``, on a grid."""
        mu = self.mean_spacing / max(1 - tie, 1e-9)
        top = float(np.max(self.observed + 4 * self.noise)) + 4 * mu + 1e-9
        grid = np.linspace(0.0, top, GRID)
        if mu <= 0:
            prior = np.zeros(GRID)
            prior[0] = 1.0
        else:
            shape, scale = 1 / cv**2, mu * cv**2
            with np.errstate(divide="ignore", over="ignore"):
                log_gamma = (shape - 1) * np.log(grid[1:]) - grid[1:] / scale
            gamma = np.exp(log_gamma - log_gamma.max())
            gamma /= gamma.sum()
            prior = np.concatenate([[tie], (1 - tie) * gamma])
        noise = np.maximum(self.noise, 1e-9)[:, None]
        log_like = -0.5 * ((self.observed[:, None] - grid[None, :]) / noise) ** 2
        with np.errstate(divide="ignore"):
            log_post = np.log(prior)[None, :] + log_like
        log_post -= log_post.max(axis=1, keepdims=True)
        weights = np.exp(log_post)
        weights /= weights.sum(axis=1, keepdims=True)
        cumulative = weights.cumsum(axis=1)
        picks = (cumulative < rng.random((len(self.observed), 1))).sum(axis=1)
        return np.asarray(grid[np.minimum(picks, GRID - 1)], dtype=np.float64)


def _statistics(gaps: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """(..., 2): the spacings' coefficient of variation and the share of them below their
    noise sd (a tie's mark)."""
    spread = gaps.std(axis=-1) / np.maximum(gaps.mean(axis=-1), 1e-12)
    small = (gaps < noise).mean(axis=-1)
    return np.stack([spread, small], axis=-1)


def prior_weights(observed: np.ndarray, noise_sorted: np.ndarray, mu: float) -> np.ndarray:
    """How likely each candidate prior (:data:`CANDIDATES`) makes the observed spacings: the
    density of two statistics of them (:func:`_statistics`) among pseudo-evidence simulated
    under it (true scores spaced by draws from the prior, each measured with the evidence's
    noise, then sorted as the evidence is), by a Gaussian product kernel. Sorting makes noisy
    spacings look more even than they are; simulating it is what makes the weighing fair.
    Deterministic: a fixed seed."""
    flat = np.full(len(CANDIDATES), 1 / len(CANDIDATES))
    if mu <= 0 or observed.mean() <= 0:
        return flat
    rng = np.random.default_rng(len(observed))
    pair_noise = np.sqrt(noise_sorted[1:] ** 2 + noise_sorted[:-1] ** 2)
    target = _statistics(observed, pair_noise)
    size = (CALIBRATION_DRAWS, len(observed))
    error = rng.standard_normal((CALIBRATION_DRAWS, len(observed) + 1)) * noise_sorted
    uniform = rng.random(size)
    density = []
    for cv, tie in CANDIDATES:
        scale = mu / max(1 - tie, 1e-9)
        spacings = rng.gamma(1 / cv**2, scale * cv**2, size) * (uniform >= tie)
        scores = np.concatenate([np.zeros((size[0], 1)), spacings.cumsum(axis=1)], axis=1)
        gaps = np.diff(np.sort(scores + error, axis=1), axis=1)
        found = _statistics(gaps, pair_noise)
        width = 1.06 * np.maximum(found.std(axis=0), 0.02) * CALIBRATION_DRAWS ** (-1 / 6)
        kernel = np.exp(-0.5 * (((found - target) / width) ** 2).sum(axis=1))
        density.append(float(kernel.mean() / width.prod()))
    weights = np.asarray(density) + 1e-12
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def tilt_to_scores(probs: np.ndarray, weights: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(L, M, K) ``probs`` exponentially tilted per model, ``p_k exp(lambda_i w_k)``
    renormalised, so that model ``i``'s score ``(1/M) sum_a w . p_ia`` equals ``targets[i]``
    (clipped inside what the tilt can reach). The score is increasing in ``lambda``, its
    derivative the mean over questions of ``w``'s variance under the tilted probabilities:
    Newton's method, all models at once, kept inside a bracket that halves where a step would
    leave it (a bisection step)."""
    span = float(weights.max() - weights.min())
    if span <= 0:
        return probs
    centred = weights - weights.mean()
    log_p = np.log(np.maximum(probs, 1e-300))

    def tilt(lam: np.ndarray) -> np.ndarray:
        logits = log_p + lam[:, None, None] * centred
        logits -= logits.max(axis=2, keepdims=True)
        tilted = np.exp(logits)
        found: np.ndarray = tilted / tilted.sum(axis=2, keepdims=True)
        return found

    bottom = np.full(len(targets), -60.0 / span)
    top = -bottom
    # A target beyond what the tilt reaches is pinned to the bracket's end (Newton would only
    # creep there, and every model waits for the slowest).
    lowest, highest = (tilt(bottom) @ weights).mean(axis=1), (tilt(top) @ weights).mean(axis=1)
    pinned = (targets <= lowest) | (targets >= highest)
    ends = np.where(targets >= highest, top, bottom)
    low, high = bottom, top
    lam = np.zeros(len(targets))
    for _ in range(100):
        lam = np.where(pinned, ends, lam)
        tilted = tilt(lam)
        mean = tilted @ weights
        error = mean.mean(axis=1) - targets
        above = error > 0
        high = np.where(above, lam, high)
        low = np.where(above, low, lam)
        done = pinned | (np.abs(error) <= 1e-12 * span) | (high - low <= 1e-13 / span)
        if done.all():
            return tilted
        slope = (tilted @ weights**2 - mean**2).mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = lam - error / slope
        inside = np.isfinite(step) & (step > low) & (step < high)
        lam = np.where(inside, step, (low + high) / 2)
    return tilt(np.where(pinned, ends, lam))


#: A gap is told from a tie when it is this many sds of its estimate (about 99% one-sided).
RESOLVED_AT_SD = 2.5


@dataclass(frozen=True)
class Resolution:
    """What the evidence can tell about the models' spacing: their typical adjacent gap
    (``mean_spacing``, deconvolved), the sd of one adjacent gap's estimate (``gap_sd``, the
    median over pairs), the evidence's trials per question, and the trials per question at
    which a typical gap is :data:`RESOLVED_AT_SD` sds of its estimate (sd shrinking as one over
    the root of the trials)."""

    mean_spacing: float
    gap_sd: float
    per_question: float
    needed_per_question: int | None

    @property
    def resolved(self) -> bool:
        return self.gap_sd * RESOLVED_AT_SD <= self.mean_spacing

    @classmethod
    def of(cls, spacing: SpacingPrior, per_question: float) -> Resolution:
        gap_sd = float(np.median(spacing.noise))
        needed = None
        if spacing.mean_spacing > 0 and per_question > 0:
            ratio = RESOLVED_AT_SD * gap_sd / spacing.mean_spacing
            needed = int(np.ceil(per_question * ratio**2))
        return cls(spacing.mean_spacing, gap_sd, per_question, needed)

    def record(self) -> dict[str, float | int | bool | None]:
        return {
            "mean_spacing": self.mean_spacing,
            "gap_sd": self.gap_sd,
            "per_question": self.per_question,
            "needed_per_question": self.needed_per_question,
            "resolved": self.resolved,
        }

    def text(self) -> str:
        told = (
            f"the models' typical adjacent gap is about {self.mean_spacing:.3f} and the "
            f"evidence ({self.per_question:.0f} trials per question) measures each gap to "
            f"+-{1.96 * self.gap_sd:.3f} (95%)"
        )
        if self.resolved:
            return f"{told}: it tells a typical gap from a tie, and the forecast is sharpest"
        more = (
            ""
            if self.needed_per_question is None
            else f"; a pilot of about {self.needed_per_question} trials per question would "
            "(the run reuses them)"
        )
        return (
            f"{told}: it CANNOT tell a typical gap from a tie, so the ranges span evenly "
            f"spread models and clustered ones (near-ties cost far more){more}"
        )


#: The predictives a forecast can draw its truths from: ``resolved`` is ``spacing`` where the
#: evidence tells a typical gap from a tie (:class:`Resolution`), else ``cells``.
PREDICTIVES = ("cells", "spacing", "resolved")


@dataclass(frozen=True)
class Predictive:
    """Where a forecast's simulated truths come from: each cell ``p_ia ~ Dirichlet(alpha_i +
    n_ia)`` (``alpha_i`` the model's empirical-Bayes prior fitted to the counts ``n``), and with
    ``kind = spacing`` each draw tilted onto the deconvolved spacing prior's scores.
    ``fitted``: that prior whatever the kind (the forecast's resolution line reads it); None
    with fewer than four models or a model with no trial."""

    alpha: np.ndarray  # (L, M, K)
    counts: np.ndarray  # (L, M, K)
    weights: np.ndarray  # (K,)
    kind: str
    fitted: SpacingPrior | None

    @classmethod
    def of(cls, counts: np.ndarray, weights: np.ndarray, kind: str) -> Predictive:
        if kind not in PREDICTIVES:
            raise ValueError(f"predictive must be one of {PREDICTIVES}, got {kind!r}")
        alpha = empirical_bayes_prior(counts)
        fitted = None
        if (counts.sum(axis=(1, 2)) > 0).all():
            fitted = SpacingPrior.fit(ScoreEvidence.of(alpha, counts, weights), weights)
        if kind == "resolved":
            trials = counts.sum(axis=2)
            told = (
                fitted is not None
                and Resolution.of(fitted, float(np.median(trials[trials > 0]))).resolved
            )
            kind = "spacing" if told else "cells"
        return cls(alpha, counts, weights, kind, fitted)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """(L, M, K) one simulated truth. A cell whose every gamma draw underflowed (a tiny
        ``alpha`` and no count) gets its mean category probabilities."""
        nu = self.alpha + self.counts
        gamma = rng.gamma(nu)
        total = gamma.sum(axis=2, keepdims=True)
        probs: np.ndarray = gamma / np.maximum(total, 1e-300)
        empty = total[..., 0] <= 0
        if empty.any():
            probs[empty] = (nu / nu.sum(axis=2, keepdims=True))[empty]
        if self.kind == "spacing" and self.fitted is not None:
            probs = tilt_to_scores(probs, self.weights, self.fitted.draw_scores(rng))
        return probs
