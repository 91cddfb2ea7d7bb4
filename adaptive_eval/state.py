"""The run's applied state: count tensor, per-cell ledgers and the round plans.

Only :class:`RunState` mutates; policies see the frozen :class:`~adaptive_eval.policy.CampaignView`
it produces. A round is applied whole, in round order, which makes every decision a function of
the recorded trials alone.
"""

from __future__ import annotations

import numpy as np

from adaptive_eval import stats
from adaptive_eval.policy import CampaignView
from adaptive_eval.stats import sequential


class RunState:
    """``pooled_variance=False`` is the per-trial variance as it landed before (uniform target,
    :func:`adaptive_eval.stats.sequential.variance_probabilities`), for the benchmarks only."""

    def __init__(
        self, prior: np.ndarray, weights: np.ndarray, pooled_variance: bool = True
    ) -> None:
        self.pooled_variance = pooled_variance
        num_models, num_questions, num_categories = (int(n) for n in prior.shape)
        self._shape = (num_models, num_questions, num_categories)
        self.prior = prior
        self.weights = weights
        self.counts = np.zeros(prior.shape, dtype=np.int64)
        self.trials = np.zeros((num_models, num_questions), dtype=np.int64)
        self.tokens_sum = np.zeros((num_models, num_questions), dtype=np.int64)
        self.tokens_count = np.zeros((num_models, num_questions), dtype=np.int64)
        self.gpu_s_sum = np.zeros((num_models, num_questions), dtype=np.float64)
        self.planned = np.zeros((num_models, num_questions), dtype=np.int64)
        self.plans: list[np.ndarray] = []
        self.applied_rounds = 0
        self._moments: tuple[int, np.ndarray, np.ndarray] | None = None
        self._estimate: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._shape

    @property
    def trials_used(self) -> int:
        return int(self.trials.sum())

    @property
    def tokens_used(self) -> int | None:
        return int(self.tokens_sum.sum()) if self.tokens_count.any() else None

    def add_plan(self, plan: np.ndarray) -> np.ndarray:
        """Register the next round's plan; returns the first trial index of each cell."""
        starts = self.planned.copy()
        self.plans.append(plan)
        self.planned += plan
        return starts

    def apply(
        self,
        model: np.ndarray,
        question: np.ndarray,
        category: np.ndarray,
        tokens: np.ndarray,
        gpu_s: np.ndarray,
    ) -> None:
        """Add one round of outcomes (tokens < 0 means unknown). O(1) per trial, vectorised."""
        num_models, num_questions, num_categories = self.shape
        cell = model * num_questions + question
        self.counts += np.bincount(
            cell * num_categories + category, minlength=self.counts.size
        ).reshape(self.counts.shape)
        size = num_models * num_questions
        self.trials += np.bincount(cell, minlength=size).reshape(self.trials.shape)
        known = tokens >= 0
        self.tokens_sum += (
            np.bincount(cell[known], weights=tokens[known], minlength=size)
            .astype(np.int64)
            .reshape(self.trials.shape)
        )
        self.tokens_count += np.bincount(cell[known], minlength=size).reshape(self.trials.shape)
        self.gpu_s_sum += np.bincount(cell, weights=gpu_s, minlength=size).reshape(
            self.trials.shape
        )
        self.applied_rounds += 1

    def apply_counts(self, delta: np.ndarray) -> None:
        """Add one round given as (L, M, K) category counts (simulation; no cost ledgers)."""
        self.counts += delta
        self.trials += delta.sum(axis=2)
        self.applied_rounds += 1

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd per model, computed once per applied round."""
        if self._moments is None or self._moments[0] != self.applied_rounds:
            mu, sigma = stats.posterior_moments(self.prior + self.counts, self.weights)
            self._moments = (self.applied_rounds, np.asarray(mu), np.asarray(sigma))
        return self._moments[1], self._moments[2]

    def estimate(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unbiased decision score, its standard error and the per-cell trial variance
        (:func:`adaptive_eval.stats.sequential.empirical_estimate`), once per applied round."""
        if self._estimate is None or self._estimate[0] != self.applied_rounds:
            nu = self.prior + self.counts
            pooled = self.pooled_variance
            theta, se = sequential.empirical_estimate(self.counts, nu, self.weights, pooled)
            variance = sequential.trial_variance(nu, self.weights, pooled)
            self._estimate = (self.applied_rounds, theta, se, variance)
        return self._estimate[1], self._estimate[2], self._estimate[3]

    def view(
        self,
        names: tuple[str, ...],
        capacity: np.ndarray,
        confidence: float,
        min_trials: int,
        elapsed_s: float,
        rope: float | None = None,
        error_control: str = "ranking",
        futility: float = 0.0,
    ) -> CampaignView:
        mu, sigma = self.moments()
        theta, se, variance = self.estimate()
        with np.errstate(invalid="ignore", divide="ignore"):
            tokens = np.where(
                self.tokens_count > 0, self.tokens_sum / np.maximum(self.tokens_count, 1), np.nan
            )
            gpu_s = np.where(self.trials > 0, self.gpu_s_sum / np.maximum(self.trials, 1), np.nan)
        return CampaignView(
            names=names,
            counts=_frozen(self.counts),
            mu=_frozen(mu),
            sigma=_frozen(sigma),
            trials=_frozen(self.trials),
            planned=_frozen(self.planned),
            capacity=capacity,
            confidence=confidence,
            min_trials=min_trials,
            round=self.applied_rounds,
            trials_used=self.trials_used,
            tokens_used=self.tokens_used,
            elapsed_s=elapsed_s,
            estimate=_frozen(theta),
            estimate_se=_frozen(se),
            cell_variance=_frozen(variance),
            cell_tokens=_frozen(tokens),
            cell_gpu_s=_frozen(gpu_s),
            rope=rope,
            error_control=error_control,
            futility=futility,
        )


def _frozen(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
