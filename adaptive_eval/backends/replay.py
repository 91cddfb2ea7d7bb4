"""``replay``: serves recorded trials of a finished run, in order.

The npz holds ``outcomes`` (L, M, N) integer categories (array name set by ``key``), optional
``tokens`` (L, M, N) and ``models`` (L,). Trial ``i`` of a cell is column ``i``; a cell asked for
trial ``N`` or later is exhausted. Replaying a fixed-N run through the adaptive controller shows
what adaptive sampling would have saved on it.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from adaptive_eval.backends.base import (
    ArrayWorker,
    BackendContext,
    BackendPlan,
    EntryModels,
    result_from_arrays,
    worker_maker,
)
from adaptive_eval.backends.simulated import entry_npz, select_models
from adaptive_eval.base.errors import ExhaustedError
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.config.registry import backends
from adaptive_eval.config.schema import ModelEntry, file_sha256
from adaptive_eval.inputs.npz import check_categories


class ReplayWorker(ArrayWorker):
    def __init__(
        self, models: EntryModels, outcomes: np.ndarray, tokens: np.ndarray | None, offset: int
    ) -> None:
        super().__init__(models, offset)
        self.outcomes = outcomes
        self.tokens = tokens

    def run(self, batch: Batch) -> BatchResult:
        started = time.perf_counter()
        local, questions, trials, seeds = self.expand(batch)
        recorded = self.outcomes.shape[2]
        for item in batch.items:
            if item.first_trial + item.count > recorded:
                raise ExhaustedError(
                    f"replay of {self.models.names[local]!r} question "
                    f"{self.models.question_ids[item.question]!r}"
                    f" asked for trial {item.first_trial + item.count - 1} but only {recorded} "
                    "were recorded"
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


@backends.register("replay")
def replay(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    path, file = entry_npz(entry, context, "replay backend needs path: an npz of recorded outcomes")
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
    models = EntryModels(tuple(names[i] for i in keep), question_ids, context.campaign_seed)
    kept_outcomes = np.ascontiguousarray(outcomes[keep])
    kept_tokens = None if tokens is None else np.ascontiguousarray(tokens[keep])
    return BackendPlan(
        backend="replay",
        models=models.names,
        question_ids=question_ids,
        num_categories=None,  # known only from the rubric; range checked by the campaign
        capacity=recorded,
        workers=entry.workers or context.default_workers,
        actor_options={"num_cpus": 0.25},
        make_worker=worker_maker(ReplayWorker, models, kept_outcomes, kept_tokens),
        files={"outcomes": file_sha256(path)},
        reports_tokens=kept_tokens is not None,
        known_scores=partial(_recorded_scores, kept_outcomes),
        describe=f"replay {path.name}[{key}]: {len(models.names)} models x {num_questions} "
        f"questions x {recorded} recorded trials",
        validate_categories=partial(check_categories, kept_outcomes, file=file, name=key),
    )
