"""``replay``: serves recorded trials of a finished run, in order.

The npz holds ``outcomes`` (L, M, N) integer categories (array name set by ``key``), optional
``tokens`` (L, M, N) and ``models`` (L,). Trial ``i`` of a cell is column ``i``; a cell asked for
trial ``N`` or later is exhausted. Replaying a fixed-N run through the adaptive controller shows
what adaptive sampling would have saved on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import numpy as np

from adaptive_eval.backends.base import (
    BackendContext,
    BackendPlan,
    Worker,
    expand_items,
    result_from_arrays,
)
from adaptive_eval.backends.simulated import select_models
from adaptive_eval.base.errors import ExhaustedError, InputError
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.config import ModelEntry, file_sha256
from adaptive_eval.npzio import NpzFile, check_categories
from adaptive_eval.registry import backends


class ReplayWorker:
    def __init__(
        self,
        names: tuple[str, ...],
        question_ids: tuple[str, ...],
        outcomes: np.ndarray,
        tokens: np.ndarray | None,
        seed: int,
        offset: int,
    ) -> None:
        self.names = names
        self.question_ids = question_ids
        self.outcomes = outcomes
        self.tokens = tokens
        self.seed = seed
        self.offset = offset

    def run(self, batch: Batch) -> BatchResult:
        started = time.perf_counter()
        local = batch.model - self.offset
        recorded = self.outcomes.shape[2]
        for item in batch.items:
            if item.first_trial + item.count > recorded:
                raise ExhaustedError(
                    f"replay of {self.names[local]!r} question {self.question_ids[item.question]!r}"
                    f" asked for trial {item.first_trial + item.count - 1} but only {recorded} "
                    "were recorded"
                )
        questions, trials, seeds = expand_items(
            batch, self.question_ids, self.names[local], self.seed
        )
        categories = self.outcomes[local, questions, trials]
        tokens = None if self.tokens is None else self.tokens[local, questions, trials]
        return result_from_arrays(
            batch, "replay", started, questions, trials, seeds, categories, tokens
        )


def _recorded_scores(outcomes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each model's score over every recorded trial."""
    scores: np.ndarray = weights[outcomes].mean(axis=(1, 2))
    return scores


def _make(
    names: tuple[str, ...],
    question_ids: tuple[str, ...],
    outcomes: np.ndarray,
    tokens: np.ndarray | None,
    seed: int,
    offset: int,
) -> Callable[[], Worker]:
    return partial(ReplayWorker, names, question_ids, outcomes, tokens, seed, offset)


@backends.register("replay")
def replay(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    if entry.path is None:
        raise InputError(
            "replay backend needs path: an npz of recorded outcomes",
            source=context.source,
            field=f"{context.field}.path",
        )
    path = context.resolve_path(entry.path)
    file = NpzFile(path, field=context.field)
    key = entry.key or "outcomes"
    outcomes = file.get(key, ndim=3, kind="i").astype(np.int64)
    num_models, num_questions, recorded = outcomes.shape
    if recorded == 0:
        raise file.error(key, f"has no trials (shape {outcomes.shape})")
    if outcomes.min() < 0:
        bad = tuple(int(i) for i in np.argwhere(outcomes < 0)[0])
        raise file.error(key, f"negative category {outcomes[bad]} at index {bad}")
    tokens = None
    if file.has("tokens"):
        tokens = file.get("tokens", ndim=3, kind="i").astype(np.int64)
        if tokens.shape != outcomes.shape:
            raise file.error("tokens", f"shape {tokens.shape} differs from {key} {outcomes.shape}")
        if tokens.min() < 0:
            raise file.error("tokens", "negative token count")
    names = file.names("models", num_models, "model-")
    question_ids = file.names("questions", num_questions, "q")
    keep = select_models(names, entry.select, file, context.field)
    kept_names = tuple(names[i] for i in keep)
    kept_outcomes = np.ascontiguousarray(outcomes[keep])
    kept_tokens = None if tokens is None else np.ascontiguousarray(tokens[keep])
    return BackendPlan(
        backend="replay",
        models=kept_names,
        question_ids=question_ids,
        num_categories=None,  # known only from the rubric; range checked by the campaign
        capacity=recorded,
        workers=entry.workers or context.default_workers,
        actor_options={"num_cpus": 0.25},
        make_worker=partial(
            _make, kept_names, question_ids, kept_outcomes, kept_tokens, context.campaign_seed
        ),
        files={"outcomes": file_sha256(path)},
        reports_tokens=kept_tokens is not None,
        known_scores=partial(_recorded_scores, kept_outcomes),
        describe=f"replay {path.name}[{key}]: {len(kept_names)} models x {num_questions} "
        f"questions x {recorded} recorded trials",
        validate_categories=partial(check_categories, kept_outcomes, file=file, name=key),
    )
