"""Allocation policies: which models get trials in the next round."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adaptive_eval.policy import Allocator, CampaignView
from adaptive_eval.registry import allocators
from adaptive_eval.types import PairDecision


def even_plan(
    view: CampaignView, chosen: np.ndarray, round_trials: int, trials_per_round: int | None
) -> np.ndarray:
    """Give each chosen model the same number of trials on every question.

    Per question, ``k = trials_per_round`` or the smallest k that makes the round at least
    ``round_trials`` trials, so a round late in a campaign (few models left) still fills the
    workers. Questions behind the model's most-sampled question catch up first.
    """
    num_questions = view.planned.shape[1]
    plan = np.zeros_like(view.planned)
    count = int(chosen.sum())
    if count == 0:
        return plan
    k = trials_per_round or max(1, math.ceil(round_trials / (count * num_questions)))
    target = view.planned[chosen].max(axis=1, keepdims=True)
    plan[chosen] = k + (target - view.planned[chosen])
    return plan


@dataclass(frozen=True)
class Uniform:
    """Every model that can take more trials gets them, equally: with early stopping off this
    is exactly the fixed-N run."""

    trials_per_round: int | None = None
    name: str = "uniform"

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
    ) -> np.ndarray:
        chosen = view.planned.min(axis=1) < view.capacity
        return even_plan(view, chosen, round_trials, self.trials_per_round)


@dataclass(frozen=True)
class Pairwise:
    """Sample the models of the least-resolved undecided pairs (smallest z first).

    ``pairs_per_round`` caps how many pairs are served per round (all undecided pairs if None);
    models needed by other goals (min trials, CI width) are always served.
    """

    pairs_per_round: int | None = None
    trials_per_round: int | None = None
    name: str = "pairwise"

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
    ) -> np.ndarray:
        room = view.planned.min(axis=1) < view.capacity
        # Pairs whose models are both at capacity cannot be served: skip them before the cap,
        # or a tie stuck at the cap would starve every other open pair.
        open_pairs = sorted(
            (d for d in decisions if not d.settled and (room[d.a] or room[d.b])),
            key=lambda d: d.z,
        )
        in_pairs = np.zeros(view.num_models, dtype=bool)
        for d in open_pairs:
            in_pairs[[d.a, d.b]] = True
        served = np.zeros(view.num_models, dtype=bool)
        for d in open_pairs[: self.pairs_per_round]:
            served[[d.a, d.b]] = True
        # Models needed for a reason other than an open pair are always served.
        chosen = (needs & ~in_pairs) | (needs & served) | view.below_min()
        chosen &= room
        return even_plan(view, chosen, round_trials, self.trials_per_round)


@allocators.register("uniform")
def uniform(trials_per_round: int | None = None) -> Allocator:
    return Uniform(trials_per_round)


@allocators.register("pairwise")
def pairwise(pairs_per_round: int | None = None, trials_per_round: int | None = None) -> Allocator:
    if pairs_per_round is not None and pairs_per_round < 1:
        raise ValueError(f"pairs_per_round must be >= 1, got {pairs_per_round}")
    return Pairwise(pairs_per_round, trials_per_round)
