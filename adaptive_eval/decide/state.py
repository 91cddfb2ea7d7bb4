"""The run's applied state: count tensor, per-cell ledgers and the round plans.

Only :class:`RunState` mutates; policies see the frozen
:class:`~adaptive_eval.decide.contracts.CampaignView`
it produces. A round is applied whole, in round order, which makes every decision a function of
the recorded trials alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from adaptive_eval import stats
from adaptive_eval.base.types import WorkItem
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.stats import sequential
from adaptive_eval.stats.intervals import IntervalDesign, ScoreIntervals, score_intervals
from adaptive_eval.store import RoundCounts

#: The reported Bayes@N score's prior (``policy.bayes_prior``): ``empirical`` fits a Dirichlet
#: per model to its own counts (:func:`adaptive_eval.stats.posterior.empirical_bayes_prior`);
#: ``uniform`` is the paper's (exactly its Bayes@N with equal trial counts).
BAYES_PRIORS = ("empirical", "uniform")


@dataclass(frozen=True)
class RoundCosts:
    """What one round's trials cost, per cell (L, M): tokens summed over the ``token_trials``
    trials whose count is known, GPU-seconds summed over all. Applied with the round's counts,
    they give the view the per-cell costs a cost-aware allocator reads, as a run's ledgers do."""

    tokens: np.ndarray
    token_trials: np.ndarray
    gpu_s: np.ndarray


class RunState:
    """``prior`` holds the Dirichlet counts of the uniform prior plus any prior trials
    (``policy.prior``); ``bayes_prior`` says what replaces the uniform part in the reported
    Bayes@N score. The decision statistic and its variance never depend on ``bayes_prior``.
    ``pooled_variance=False`` is the per-trial variance as it landed before (uniform target,
    :func:`adaptive_eval.stats.sequential.variance_probabilities`), for the benchmarks only."""

    def __init__(
        self,
        prior: np.ndarray,
        weights: np.ndarray,
        pooled_variance: bool = True,
        bayes_prior: str = "empirical",
    ) -> None:
        if bayes_prior not in BAYES_PRIORS:
            raise ValueError(f"bayes_prior must be one of {BAYES_PRIORS}, got {bayes_prior!r}")
        self.bayes_prior = bayes_prior
        self.pooled_variance = pooled_variance
        num_models, num_questions, num_categories = (int(n) for n in prior.shape)
        self._shape = (num_models, num_questions, num_categories)
        self.prior = frozen_copy(prior)
        self.weights = frozen_copy(weights)
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
        self._intervals: tuple[tuple[int, IntervalDesign], ScoreIntervals] | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._shape

    @property
    def trials_used(self) -> int:
        return int(self.trials.sum())

    @property
    def tokens_used(self) -> int | None:
        return int(self.tokens_sum.sum()) if self.tokens_count.any() else None

    def trials_through(self, rounds: int | None) -> int | None:
        """Trials planned in the first ``rounds`` rounds (recorded once they are applied)."""
        if rounds is None:
            return None
        return int(sum(int(plan.sum()) for plan in self.plans[:rounds]))

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

    def apply_counts(self, delta: np.ndarray, costs: RoundCosts | None = None) -> None:
        """Add one round given as (L, M, K) category counts (simulation), with its per-cell
        ``costs`` where known (tokens rounded to whole tokens, as a ledger keeps them)."""
        self.counts += delta
        self.trials += delta.sum(axis=2)
        if costs is not None:
            self.tokens_sum += np.rint(costs.tokens).astype(np.int64)
            self.tokens_count += costs.token_trials
            self.gpu_s_sum += costs.gpu_s
        self.applied_rounds += 1

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Bayes@N posterior mean and sd per model, computed at most once per applied round.

        ``uniform``: ``nu = prior + counts`` (the paper). ``empirical``: the uniform pseudo-trials
        are replaced by a Dirichlet fitted to each model's evidence (its prior trials and
        counts), ``nu = eb(evidence) + evidence``."""
        if self._moments is None or self._moments[0] != self.applied_rounds:
            mu, sigma = stats.bayes_at_n_moments(
                self.counts, self.prior, self.weights, self.bayes_prior
            )
            self._moments = (self.applied_rounds, np.asarray(mu), np.asarray(sigma))
        return self._moments[1], self._moments[2]

    def estimate(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unbiased decision score, its standard error and the per-cell trial variance
        (:func:`adaptive_eval.stats.sequential.empirical_estimate`), once per applied round."""
        if self._estimate is None or self._estimate[0] != self.applied_rounds:
            nu = self.prior + self.counts
            pooled = self.pooled_variance
            theta, se, variance = sequential.estimate_with_variance(
                self.counts, nu, self.weights, pooled
            )
            self._estimate = (self.applied_rounds, theta, se, variance)
        return self._estimate[1], self._estimate[2], self._estimate[3]

    def intervals(self, design: IntervalDesign) -> ScoreIntervals:
        """Each model's score interval under ``design``, computed at most once per applied
        round and design (:func:`adaptive_eval.stats.intervals.score_intervals`)."""
        key = (self.applied_rounds, design)
        if self._intervals is None or self._intervals[0] != key:
            counts = self.counts.astype(np.float64)
            found = score_intervals(counts, self.prior + counts, self.weights, design)
            self._intervals = (key, found)
        return self._intervals[1]

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
        theta, se, variance = self.estimate()
        with np.errstate(invalid="ignore", divide="ignore"):
            tokens = np.where(
                self.tokens_count > 0, self.tokens_sum / np.maximum(self.tokens_count, 1), np.nan
            )
            gpu_s = np.where(self.trials > 0, self.gpu_s_sum / np.maximum(self.trials, 1), np.nan)
        return CampaignView(
            names=names,
            counts=frozen_copy(self.counts),
            trials=frozen_copy(self.trials),
            planned=frozen_copy(self.planned),
            capacity=capacity,
            confidence=confidence,
            min_trials=min_trials,
            round=self.applied_rounds,
            trials_used=self.trials_used,
            tokens_used=self.tokens_used,
            elapsed_s=elapsed_s,
            estimate=frozen_copy(theta),
            estimate_se=frozen_copy(se),
            cell_variance=frozen_copy(variance),
            cell_tokens=frozen_copy(tokens),
            cell_gpu_s=frozen_copy(gpu_s),
            rope=rope,
            error_control=error_control,
            futility=futility,
            prior=self.prior,
            weights=self.weights,
            bayes_prior=self.bayes_prior,
        )


@dataclass(frozen=True)
class ViewSettings:
    """What a :class:`CampaignView` carries besides the evidence: the campaign's names, caps
    and ``policy`` settings (one value for the controller and the simulator alike)."""

    names: tuple[str, ...]
    capacity: np.ndarray
    confidence: float
    min_trials: int
    rope: float | None
    error_control: str
    futility: float

    def view(self, state: RunState, elapsed_s: float = 0.0) -> CampaignView:
        return state.view(
            self.names,
            self.capacity,
            self.confidence,
            self.min_trials,
            elapsed_s,
            rope=self.rope,
            error_control=self.error_control,
            futility=self.futility,
        )


def frozen_copy(array: np.ndarray) -> np.ndarray:
    """A read-only copy: a snapshot (a view, a finished run) untouched by what changes the
    array after it."""
    copy = array.copy()
    copy.flags.writeable = False
    return copy


def expand_counts(
    counts: RoundCounts,
) -> list[tuple[int, int, int, int, float]]:
    """Per-trial rows (model, question, category, tokens, gpu_s) with the counts' sums.

    The first trial of a cell's category carries the token and GPU sums, the next known ones
    0 tokens, the rest -1 (unknown): :meth:`RunState.apply` then adds exactly the stored
    counts and sums.
    """
    rows: list[tuple[int, int, int, int, float]] = []
    for m, q, c, n, tokens, known, gpu in zip(
        counts.model.tolist(),
        counts.question.tolist(),
        counts.category.tolist(),
        counts.count.tolist(),
        counts.tokens_sum.tolist(),
        counts.tokens_known.tolist(),
        counts.gpu_s.tolist(),
        strict=True,
    ):
        rows.append((m, q, c, tokens if known else -1, gpu))
        rows += [(m, q, c, 0, 0.0)] * max(known - 1, 0)
        rows += [(m, q, c, -1, 0.0)] * (n - max(known, 1))
    return rows


def missing_items(
    plan: np.ndarray, starts: np.ndarray, have: set[tuple[int, int, int]]
) -> Iterator[WorkItem]:
    """The planned trials of a round that are not in ``have``, as runs of consecutive trials."""
    for model, question in zip(*np.nonzero(plan), strict=True):
        m, q = int(model), int(question)
        first = int(starts[m, q])
        run_start = None
        for trial in range(first, first + int(plan[m, q]) + 1):
            missing = trial < first + int(plan[m, q]) and (m, q, trial) not in have
            if missing and run_start is None:
                run_start = trial
            elif not missing and run_start is not None:
                yield WorkItem(m, q, run_start, trial - run_start)
                run_start = None
