"""The run's applied state: count tensor, per-cell ledgers and the round plans.

Only :class:`RunState` mutates; policies see the frozen :class:`~adaptive_eval.policy.CampaignView`
it produces. A round is applied whole, in round order, which makes every decision a function of
the recorded trials alone.
"""

from __future__ import annotations

import numpy as np

from adaptive_eval import stats
from adaptive_eval.policy import CampaignView


class RunState:
    def __init__(self, prior: np.ndarray, weights: np.ndarray) -> None:
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

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd per model, computed once per applied round."""
        if self._moments is None or self._moments[0] != self.applied_rounds:
            mu, sigma = stats.posterior_moments(self.prior + self.counts, self.weights)
            self._moments = (self.applied_rounds, np.asarray(mu), np.asarray(sigma))
        return self._moments[1], self._moments[2]

    def view(
        self,
        names: tuple[str, ...],
        capacity: np.ndarray,
        confidence: float,
        min_trials: int,
        elapsed_s: float,
    ) -> CampaignView:
        mu, sigma = self.moments()
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
        )


def _frozen(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
