"""What a forecast knows: the recorded trials of a campaign's cells (a pilot, an earlier run,
the trial library) and what each trial cost, with how precisely they measure each score.

:mod:`adaptive_eval.forecast.campaign` draws its simulated campaigns' truths from this evidence
and prices their new trials with its :class:`CostModel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

#: Pseudo-trials (at the model's mean) that shrink a cell's observed cost ratio toward 1.
COST_SHRINK = 2.0


@dataclass(frozen=True)
class Evidence:
    """Recorded trials of the campaign's cells, per cell in trial order and ``-1``-padded.

    ``replayed``: these are the run's own first trials (a pilot in its folder): every simulated
    campaign is served them before it draws. Otherwise (an earlier run) they only inform the
    predictive. ``elapsed_s``: the wall time that recorded them, where known. ``startup_s`` and
    ``seconds_per_trial`` split it (:func:`wall_model`): what a run pays once before its first
    round is in (Ray, engine loads, weight hashing) and its steady seconds per trial after.
    """

    categories: np.ndarray  # (L, M, N) int64, -1 past a cell's recorded trials
    tokens: np.ndarray  # (L, M, N) int64, -1 where unknown
    gpu_s: np.ndarray  # (L, M, N) float64, 0 where unknown
    replayed: bool
    source: str  # pilot | run | library | prior
    detail: str
    elapsed_s: float | None = None
    startup_s: float | None = None
    seconds_per_trial: float | None = None

    def wall_s(self, fresh_trials: float) -> float | None:
        """The wall time of a run that samples ``fresh_trials`` beyond this evidence: the
        evidence's own time where the run reuses it (a pilot's leg counts in the run's elapsed
        time), start-up once, then the steady rate. None where the evidence was not timed."""
        if self.seconds_per_trial is None:
            return None
        before = (self.elapsed_s or 0.0) if self.replayed else 0.0
        startup = self.startup_s or 0.0
        return before + (startup + fresh_trials * self.seconds_per_trial if fresh_trials else 0.0)

    @classmethod
    def none(cls, shape: tuple[int, int], detail: str) -> Evidence:
        """No recorded trial: the forecast is the config's prior guess."""
        empty = np.full((*shape, 0), -1, dtype=np.int64)
        return cls(empty, empty.copy(), np.zeros(empty.shape), False, "prior", detail)

    @classmethod
    def from_trials(
        cls,
        shape: tuple[int, int],
        model: np.ndarray,
        question: np.ndarray,
        trial: np.ndarray,
        category: np.ndarray,
        tokens: np.ndarray,
        gpu_s: np.ndarray,
        **kwargs: Any,
    ) -> Evidence:
        """From trial columns (campaign indices); trial indices must be 0..n-1 per cell."""
        depth = int(trial.max()) + 1 if len(trial) else 0
        categories = np.full((*shape, depth), -1, dtype=np.int64)
        costs = np.full((*shape, depth), -1, dtype=np.int64)
        seconds = np.zeros((*shape, depth), dtype=np.float64)
        categories[model, question, trial] = category
        costs[model, question, trial] = tokens
        seconds[model, question, trial] = gpu_s
        recorded = (categories >= 0).sum(axis=2)
        if ((categories >= 0) != (np.arange(depth) < recorded[..., None])).any():
            raise ValueError("recorded trials must be the first trials of each cell (0..n-1)")
        return cls(categories, costs, seconds, **kwargs)

    @property
    def recorded(self) -> np.ndarray:
        """(L, M) recorded trials per cell."""
        return np.asarray((self.categories >= 0).sum(axis=2), dtype=np.int64)

    @property
    def reused(self) -> np.ndarray:
        """(L, M) trials per cell the run reuses as its first ones: every recorded trial when
        :attr:`replayed`, none otherwise."""
        recorded = self.recorded
        return recorded if self.replayed else np.zeros_like(recorded)

    @property
    def trials(self) -> int:
        return int(self.recorded.sum())

    def counts(self, num_categories: int) -> np.ndarray:
        """(L, M, K) recorded category counts."""
        hits = self.categories[..., None] == np.arange(num_categories)
        return np.asarray(hits.sum(axis=2), dtype=np.int64)


@dataclass(frozen=True)
class CostModel:
    """Expected cost of one new trial of cell ``(i, a)`` in category ``k``:
    ``mean[i, k] * ratio[i, a]``; ``variance[i]``: one trial's scatter around it."""

    mean: np.ndarray  # (L, K)
    ratio: np.ndarray  # (L, M)
    variance: np.ndarray  # (L,)
    borrowed: tuple[int, ...] = ()  # models with no cost of their own: the others' means

    @cached_property
    def per_trial(self) -> np.ndarray:
        """(L, M, K) expected cost of one new trial of each cell in each category."""
        found: np.ndarray = self.mean[:, None, :] * self.ratio[..., None]
        return found

    def expected(self, counts: np.ndarray) -> float:
        """Expected cost of trials with these (L, M, K) category counts."""
        return float((counts * self.per_trial).sum())

    def scatter(self, trials: np.ndarray) -> float:
        """Variance of the cost of these (L, M) trials around :meth:`expected`."""
        return float((trials * self.variance[:, None]).sum())


def wall_model(
    elapsed_s: float | None,
    trials: int,
    first_round: dict[str, float] | None,
    first_result: dict[str, float] | None = None,
) -> tuple[float | None, float | None]:
    """(start-up seconds, steady seconds per trial) of a recorded run. ``first_result`` is when
    its first batch came back and ``first_round`` when its first round was applied (``elapsed_s``
    and ``trials`` then, recorded by the controller). The rate is the time after the first
    result over the trials after it (a pilot is one round, so only its batches can tell the
    rate from the start-up); the start-up is the time to that result less its trials at that
    rate. Without a later result, the first round serves; without either, everything is rate
    (no start-up known). None, None where the run was not timed."""
    if not elapsed_s or trials <= 0:
        return None, None
    for mark in (first_result, first_round):
        if mark is None:
            continue
        first_s = float(mark.get("elapsed_s", 0.0))
        first_trials = int(mark.get("trials", 0))
        if trials <= first_trials or elapsed_s <= first_s:
            continue
        rate = (elapsed_s - first_s) / (trials - first_trials)
        return max(first_s - first_trials * rate, 0.0), rate
    return None, elapsed_s / trials


def score_resolution(evidence: Evidence, weights: np.ndarray) -> float | None:
    """How precisely the evidence measures a model's score: the median over models of the sd
    of the mean of per-question means, ``sqrt(v_i sum_a 1 / n_ia) / M``, with ``v_i`` the
    model's per-trial variance of the weighted score (the cells' unbiased variances, pooled).
    Gaps between models below about ``2.8`` times it (two sd of a difference) are not resolved
    by the evidence. ``None`` without a cell of two trials."""
    counts = evidence.counts(len(weights)).astype(np.float64)
    trials = counts.sum(axis=2)
    sds = []
    for model in range(counts.shape[0]):
        n = trials[model]
        if (n < 2).any():
            continue
        mean = counts[model] @ weights / n
        second = counts[model] @ (weights**2) / n
        variance = float(((second - mean**2) * n / (n - 1)).mean())
        sds.append(math.sqrt(variance * float((1 / n).sum())) / len(n))
    return float(np.median(sds)) if sds else None


def fit_cost(
    values: np.ndarray, categories: np.ndarray, known: np.ndarray, num_categories: int
) -> CostModel | None:
    """:class:`CostModel` from recorded per-trial costs (``known`` marks the recorded ones).
    A model with no known cost (a checkpoint new to the library) borrows the other models'
    mean per category (:attr:`CostModel.borrowed`); ``None`` when no model has one."""
    num_models, num_questions = categories.shape[:2]
    mean = np.zeros((num_models, num_categories))
    variance = np.zeros(num_models)
    ratio = np.ones((num_models, num_questions))
    borrowed = tuple(m for m in range(num_models) if not known[m].any())
    if len(borrowed) == num_models:
        return None
    for model in range(num_models):
        mask = known[model]
        if not mask.any():
            continue
        cost = values[model][mask].astype(np.float64)
        cats = categories[model][mask]
        overall = float(cost.mean())
        for k in range(num_categories):
            in_k = cats == k
            mean[model, k] = float(cost[in_k].mean()) if in_k.any() else overall
        expected = np.where(known[model], mean[model][np.maximum(categories[model], 0)], 0.0)
        seen = np.where(known[model], values[model].astype(np.float64), 0.0)
        # Per cell: observed over expected, each shrunk by COST_SHRINK trials at the mean.
        ratio[model] = (seen.sum(axis=1) + COST_SHRINK * overall) / (
            expected.sum(axis=1) + COST_SHRINK * overall
        )
        fitted = expected * ratio[model][:, None]
        residual = (seen - fitted)[mask]
        variance[model] = float((residual**2).mean())
    measured = [m for m in range(num_models) if m not in borrowed]
    for model in borrowed:
        mean[model] = mean[measured].mean(axis=0)
        variance[model] = float(variance[measured].mean())
    return CostModel(mean, ratio, variance, borrowed)
