"""Compute used versus the fixed-N baseline: one formula, one function."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Savings:
    """Compute of an adaptive run next to the fixed-N run it replaces.

    ``trials_fraction`` = 1 - trials_used / baseline_trials (negative when the adaptive run
    used more, e.g. a max_trials cap above fixed_n).
    """

    fixed_n: int
    trials_used: int
    baseline_trials: int
    trials_fraction: float
    tokens_used: int | None
    baseline_tokens: float | None
    tokens_fraction: float | None
    gpu_s_used: float | None
    baseline_gpu_s: float | None
    gpu_fraction: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cell_means(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per-cell mean; cells never observed borrow their model's mean, then the global mean."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cell = total / count
        model = total.sum(axis=1) / count.sum(axis=1)
    overall = total.sum() / count.sum()
    model = np.where(np.isfinite(model), model, overall)
    filled: np.ndarray = np.where(count > 0, cell, model[:, None])
    return filled


def compute_savings(
    trials: np.ndarray,
    tokens_sum: np.ndarray,
    tokens_count: np.ndarray,
    gpu_s_sum: np.ndarray,
    fixed_n: int,
) -> Savings:
    """Trials, tokens and GPU-seconds used, and what fixed N per question would have cost.

    Trials are exact: the baseline runs ``fixed_n`` trials on every (model, question) cell, i.e.
    ``L * M * fixed_n``. Tokens and GPU-seconds of the baseline are estimated as
    ``sum_cells fixed_n * mean_cell``, the mean observed per trial in each cell (a model's mean
    for a cell it never sampled), since cost differs a lot between models and questions. The
    saved fractions price the used trials the same way, so trials without a token count do not
    inflate them (with every count known, that is exactly the tokens used).
    Arrays are (L, M): ``trials`` per cell, ``tokens_sum`` and ``tokens_count`` over trials with a
    known token count, ``gpu_s_sum`` attributed GPU-seconds (zero when unknown).

    >>> s = compute_savings(np.array([[10, 30]]), np.array([[100, 600]]), np.array([[10, 30]]),
    ...                     np.zeros((1, 2)), fixed_n=40)
    >>> s.baseline_trials, s.trials_fraction, s.tokens_used, s.baseline_tokens
    (80, 0.5, 700, 1200.0)
    """
    trials = np.asarray(trials)
    used = int(trials.sum())
    baseline = int(trials.size * fixed_n)
    tokens_used: int | None = None
    baseline_tokens: float | None = None
    tokens_estimate: float | None = None
    if tokens_count.sum() > 0:
        tokens_used = int(tokens_sum.sum())
        per_trial = _cell_means(tokens_sum, tokens_count)
        baseline_tokens = float((per_trial * fixed_n).sum())
        # Trials with no token count are priced like the rest of their cell, so the saved
        # fraction compares like with like (exactly tokens_used when every count is known).
        tokens_estimate = float((per_trial * trials).sum())
    gpu_used: float | None = None
    baseline_gpu: float | None = None
    if gpu_s_sum.sum() > 0:
        gpu_used = float(gpu_s_sum.sum())
        baseline_gpu = float((_cell_means(gpu_s_sum, trials) * fixed_n).sum())

    def fraction(spent: float | None, reference: float | None) -> float | None:
        if spent is None or not reference:
            return None
        return 1.0 - spent / reference

    return Savings(
        fixed_n,
        used,
        baseline,
        1.0 - used / baseline if baseline else 0.0,
        tokens_used,
        baseline_tokens,
        fraction(tokens_estimate, baseline_tokens),
        gpu_used,
        baseline_gpu,
        fraction(gpu_used, baseline_gpu),
    )


def budget_short_sentence(budget: int, short: float, needed: float | None) -> str:
    """What the live forecast says of a trial budget too small for the campaign: "the trial
    budget (B) will likely leave k pair(s) unsettled that the campaign can settle; about B'
    trials would settle them". One wording for the console, the headline and the reports."""
    settle = "" if needed is None else f"; about {needed:,.0f} trials would settle them"
    return (
        f"the trial budget ({budget:,}) will likely leave {short:.0f} pair(s) unsettled that "
        f"the campaign can settle{settle}"
    )
