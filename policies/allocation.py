"""Allocation policies: which models get trials in the next round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from adaptive_eval.base.types import PairDecision
from adaptive_eval.config.registry import allocators
from adaptive_eval.decide.contracts import CampaignView, Goals, even_plan
from adaptive_eval.stats import allocation as lower_bound

#: Share of what a model lacks of its trial target that one round may give it. Targets come
#: from variance estimates that are conservative on few trials and shrink as trials come in,
#: so approaching a target in halves overshoots it less (HumanEval+ replay, +-0.02: 60,917
#: trials against 63,740 in one step; benchmarks/scores.py).
TARGET_STEP = 0.5

#: A count per round (None: the allocator's own choice).
PerRound = Annotated[int | None, Field(ge=1)]


@allocators.register("uniform")
@dataclass(frozen=True)
class Uniform:
    """Every model that can take more trials gets them, equally: with early stopping off this
    is exactly the fixed-N run."""

    trials_per_round: PerRound = None
    name: str = "uniform"

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
        goals: Goals | None = None,
    ) -> np.ndarray:
        chosen = view.planned.min(axis=1) < view.capacity
        return even_plan(view, chosen, round_trials, self.trials_per_round)


@allocators.register("pairwise")
@dataclass(frozen=True)
class Pairwise:
    """Sample the models of the least-resolved undecided pairs (smallest z first).

    ``pairs_per_round`` caps how many pairs are served per round (all undecided pairs if None);
    models needed by other goals (min trials, CI width) are always served.
    """

    pairs_per_round: PerRound = None
    trials_per_round: PerRound = None
    name: str = "pairwise"

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
        goals: Goals | None = None,
    ) -> np.ndarray:
        room = view.planned.min(axis=1) < view.capacity
        # Pairs whose models are both at capacity cannot be served: skip them before the cap,
        # or a tie stuck at the cap would starve every other open pair.
        open_pairs = sorted(
            (d for d in decisions if d.open and (room[d.a] or room[d.b])),
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


def split_integer(total: int, weights: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Split ``total`` into integers proportional to ``weights``, each at most ``room``.

    Largest-remainder rounding; a part that hits its room passes its excess to the others
    (water filling). Deterministic: ties go to the lower index.

    >>> split_integer(10, np.array([1.0, 1.0, 2.0]), np.array([10, 1, 10])).tolist()
    [3, 1, 6]
    """
    open_ = room > 0
    weights = np.where(open_, np.maximum(np.asarray(weights, dtype=np.float64), 0.0), 0.0)
    out = np.zeros(len(weights), dtype=np.int64)
    left = int(min(total, int(room.sum())))
    # The first pass has every part with room open and the weights masked to them already.
    free, w = room, weights
    while left > 0:
        if out.any():
            free = room - out
            open_ = free > 0
            w = np.where(open_, weights, 0.0)
        weight = w.sum()
        if weight <= 0:
            w = open_.astype(np.float64)
            weight = w.sum()
            if weight == 0:
                break
        share = left * w / weight
        base = np.floor(share).astype(np.int64)
        remainder = left - int(base.sum())
        if remainder:
            order = np.argsort(base - share, kind="stable")  # ties to the lower index
            base[order[:remainder]] += 1
        base = np.minimum(base, free)
        given = int(base.sum())
        if given == 0:
            break
        out += base
        left -= given
    return out


def question_weights(view: CampaignView, scheme: str, cost: str) -> np.ndarray:
    """(L, M) per-question sampling weights of each model: Neyman ``sd_q / sqrt(cost_q)`` or
    equal.

    ``sd_q`` is the per-trial sd under the plain posterior mean (:meth:`CampaignView.
    spread_variance`), not the decisions' pooled-centred one, which starves a question with no
    failure yet (issue 26, docs/sequential.md "Saturated ties")."""
    shape = view.planned.shape
    if scheme == "uniform" or view.cell_variance is None:
        return np.ones(shape)
    spread = view.spread_variance()
    variance = view.cell_variance if spread is None else spread
    sd = np.sqrt(np.maximum(variance, 1e-12))
    weights: np.ndarray = sd / np.sqrt(cell_cost(view, cost))
    return weights


def spread_trials(
    count: int, weights: np.ndarray, planned: np.ndarray, room: np.ndarray
) -> np.ndarray:
    """Give ``count`` trials of one model to its questions so that each question's total
    (``planned`` plus its share) tracks its share of ``weights``: the questions furthest below
    ``w_q / sum(w) * (sum(planned) + count)`` first, none beyond its ``room``
    (:func:`split_integer`)."""
    goal = weights / weights.sum() * (planned.sum() + count)
    deficit = np.maximum(goal - planned, 0.0)
    if deficit.sum() <= 0:
        deficit = weights
    return split_integer(count, deficit, room)


def row_means(values: np.ndarray) -> np.ndarray:
    """``values.mean(axis=1)`` of a float (L, M) array: the same row sums divided by ``M``
    (``np.mean`` computes exactly that), without its per-call bookkeeping, which costs more
    than the sums on a campaign's arrays."""
    means: np.ndarray = values.sum(axis=1) / values.shape[1]
    return means


def cell_cost(view: CampaignView, cost: str) -> np.ndarray:
    """(L, M) observed cost of one trial per cell, in units of the model's mean (1 if unknown)."""
    shape = view.planned.shape
    source = {"tokens": view.cell_tokens, "gpu_s": view.cell_gpu_s}.get(cost)
    if cost == "trials" or source is None:
        return np.ones(shape)
    values = np.asarray(source, dtype=np.float64)
    known = np.isfinite(values) & (values > 0)
    if not known.any():
        return np.ones(shape)
    overall = float(values[known].mean())
    filled = np.where(known, values, overall)
    return np.asarray(filled / overall, dtype=np.float64)


def per_trial_variance(view: CampaignView, scheme: str) -> np.ndarray:
    """A_i: variance of model i's score estimate times its trials, under the question scheme.

    Uniform across questions: ``(1/M) sum_q v_q``; Neyman: ``((1/M) sum_q sd_q)^2``.
    """
    if view.cell_variance is None:
        fallback: np.ndarray = np.asarray(
            view.sigma**2 * np.maximum(view.trials.sum(axis=1), 1), dtype=np.float64
        )
        return fallback
    v = np.maximum(np.asarray(view.cell_variance, dtype=np.float64), 1e-12)
    if scheme == "neyman":
        return np.asarray(row_means(np.sqrt(v)) ** 2, dtype=np.float64)
    return np.asarray(row_means(v), dtype=np.float64)


@allocators.register("track_and_stop")
@dataclass(frozen=True)
class TrackAndStop:
    """Sample in the proportions of the plug-in lower-bound program (Garivier & Kaufmann 2016).

    Each round: over the undecided adjacent pairs (i, j), solve
    ``min sum_i c_i T_i  s.t.  A_i/T_i + A_j/T_j <= gap_ij^2 / (2 log(1/(2.4 delta)))`` with
    ``gap = max(|D|, eps - |D|)`` from the current decision scores, ``delta`` the pair's error
    budget and ``c_i`` the model's observed cost per trial (``cost``); then give the round's
    trials so that each model's total tracks its share of the solution (C-tracking), with
    forced exploration: a model in an open pair below ``sqrt(total)`` trials is served first.
    A model a goal gives a trial target (the width goal's ``goals.trial_targets``) tracks the
    larger of that target and its share of the pair program; pairs are served only where a
    goal wants them settled (``goals.settle_pairs``).
    Within a model, trials go to questions by ``questions``: ``neyman`` (proportional to the
    question's sd under the plain posterior mean over sqrt(cost), at least ``min_trials`` each)
    or ``uniform``. The estimate stays the mean of per-question means, so the
    allocation changes its variance, not what it estimates.
    """

    questions: Literal["neyman", "uniform"] = "neyman"
    cost: Literal["trials", "tokens", "gpu_s"] = "trials"
    trials_per_round: PerRound = None
    #: The program's gap is at least ``gap_floor * epsilon`` (without a rope, 1e-3).
    gap_floor: Annotated[float, Field(gt=0, le=2)] = 0.5
    name: str = "track_and_stop"

    def pair_targets(
        self, view: CampaignView, pairs: list[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The program's solution T* (L,) and the model costs used."""
        costs = row_means(cell_cost(view, self.cost))
        if not pairs:
            return np.zeros(view.num_models), costs
        index = np.asarray(pairs, dtype=np.int64)
        theta, variance = self.program_inputs(view)
        epsilon = view.rope
        gap = lower_bound.pair_gap(theta[index[:, 0]] - theta[index[:, 1]], epsilon)
        floor = epsilon * self.gap_floor if epsilon else 1e-3
        gap = np.maximum(gap, floor)
        radius = gap**2 / (2 * lower_bound.kl_log_term(view.pair_alpha()))
        return lower_bound.allocation_program(variance, index, radius, costs), costs

    def program_inputs(self, view: CampaignView) -> tuple[np.ndarray, np.ndarray]:
        """What the program plugs in: the decision scores (L,) and each model's per-trial
        variance A (L,) under the question scheme (benchmarks/sequential.py's oracle gives it
        the truth instead)."""
        return view.theta, per_trial_variance(view, self.questions)

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
        goals: Goals | None = None,
    ) -> np.ndarray:
        room = np.maximum(view.capacity[:, None] - view.planned, 0)
        has_room = room.sum(axis=1) > 0
        goals = goals or Goals()
        room_left = has_room.tolist()  # read per pair: Python bools index faster
        open_pairs = [
            (d.a, d.b)
            for d in decisions
            if goals.settle_pairs and d.open and (room_left[d.a] or room_left[d.b])
        ]
        in_pairs = np.zeros(view.num_models, dtype=bool)
        in_pairs[[model for pair in open_pairs for model in pair]] = True
        target = np.zeros(view.num_models)
        if goals.trial_targets is not None:
            target = np.where(needs, np.asarray(goals.trial_targets, dtype=np.float64), 0.0)
        young = view.below_min()
        # A model below min_trials is topped up to it at once, counting the trials already in
        # flight (one more per question per round would overshoot the minimum by the rounds in
        # flight); a model a goal needs without a target gets an even trial per question.
        plan: np.ndarray = np.minimum(
            np.maximum(view.min_trials - view.planned, 0) * young[:, None], room
        )
        others = needs & ~in_pairs & ~(target > 0) & ~young & has_room
        plan += even_plan(view, others, 0, 1)
        active = (in_pairs | (target > 0)) & has_room & ~young
        if not active.any():
            return plan
        optimal, _ = self.pair_targets(view, open_pairs)
        totals = view.planned.sum(axis=1).astype(np.float64)
        # At least one trial per question for each active model, as the even allocators give.
        size = self.trials_per_round or max(round_trials, view.planned.shape[1] * int(active.sum()))
        share = np.where(active, np.maximum(optimal, target), 0.0)
        if share.sum() <= 0:
            share = active.astype(np.float64)
        tracked = share / share.sum() * (totals[active].sum() + size)
        deficit = np.where(active, np.maximum(tracked - totals, 0.0), 0.0)
        explore = active & (totals < np.sqrt(totals[active].sum() + size))
        if explore.any():
            deficit = np.where(explore, np.maximum(deficit, deficit.max(initial=1.0)), deficit)
        model_room = np.where(active, room.sum(axis=1), 0)
        # A model only a target needs takes at most TARGET_STEP of what it lacks: a round
        # larger than the remaining need (late in a campaign, few models left) is not spent
        # on it.
        lacking = np.ceil(TARGET_STEP * np.maximum(target - totals, 0.0)).astype(np.int64)
        model_room = np.where(active & ~in_pairs, np.minimum(model_room, lacking), model_room)
        per_model = split_integer(size, deficit, model_room)
        # Each scheme's weights and the planned counts as floats, once for all the models.
        weights: dict[str, np.ndarray] = {}
        planned = view.planned.astype(np.float64)
        for model in np.nonzero(per_model)[0].tolist():
            scheme: str = self.questions
            if goals.questions is not None and not in_pairs[model]:
                scheme = goals.questions  # the goal's own scheme for a model only it needs
            if scheme not in weights:
                weights[scheme] = question_weights(view, scheme, self.cost)
            plan[model] += spread_trials(
                int(per_model[model]), weights[scheme][model], planned[model], room[model]
            )
        return plan
