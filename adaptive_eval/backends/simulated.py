"""``simulated``: draws categories from known per-question probabilities.

The scenario npz holds ``probs`` (L, M, C+1) with rows summing to 1, ``models`` (L,), optional
``tokens_mean`` (L, M), ``questions`` (M,) and ``weights`` (C+1,). Every trial's category and token
count are a pure function of its seed, so any worker, in any order, after any resume, draws the
same outcome for the same trial.

An entry's ``latency`` (:class:`~adaptive_eval.config.schema.LatencyModel`) emulates generation
time.
With ``engine_seqs`` the worker emulates a continuously batched engine (:class:`EngineModel`):
each trial holds one of ``engine_seqs`` decode slots for ``per_trial_s + per_token_s * length``
seconds, lengths optionally heavy-tailed (lognormal, ``tokens_median``, ``tokens_p99_ratio``,
seeded by the trial), and every batch queued at the worker shares the slots first come first
served (``feed``), as the vLLM worker's continuous feed does; ``feed: false`` runs one batch at
a time, the engine draining at every batch boundary (the vLLM worker before the feed).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import threading
import time
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adaptive_eval.backends.base import (
    ArrayWorker,
    BackendContext,
    BackendPlan,
    EntryModels,
    result_from_arrays,
    uniform_from_seeds,
    worker_maker,
)
from adaptive_eval.base.errors import InputError
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.config.registry import backends
from adaptive_eval.config.schema import LatencyModel, ModelEntry, file_sha256, shown_value
from adaptive_eval.inputs.npz import NpzFile

PROB_TOLERANCE = 1e-6
OptionsT = TypeVar("OptionsT", bound=BaseModel)
Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def heavy_tail_lengths(
    seeds: np.ndarray, median: float, p99_ratio: float = 20.0, cap: int | None = None
) -> np.ndarray:
    """Completion lengths drawn from trial seeds: lognormal with this median and a p99 of
    ``p99_ratio`` times it, capped at ``cap``, at least 1. A pure function of each seed."""
    sigma = math.log(p99_ratio) / Z99
    normal = np.sqrt(-2 * np.log1p(-uniform_from_seeds(seeds, 3))) * np.cos(
        2 * np.pi * uniform_from_seeds(seeds, 4)
    )
    lengths = median * np.exp(sigma * normal)
    if cap is not None:
        lengths = np.minimum(lengths, cap)
    out: np.ndarray = np.maximum(1, np.rint(lengths)).astype(np.int64)
    return out


def lognormal_lengths(seeds: np.ndarray, latency: LatencyModel) -> np.ndarray | None:
    """Each trial's emulated completion length (None without ``tokens_median``)."""
    if latency.tokens_median is None:
        return None
    return heavy_tail_lengths(
        seeds, latency.tokens_median, latency.tokens_p99_ratio, latency.max_tokens
    )


#: The most tokens a simulated completion may average (1e300 was accepted).
MAX_TOKENS_MEAN = 1e7


class EngineModel:
    """A continuously batched engine, emulated: ``slots`` sequences decode at once and a trial
    holds one slot for its service time; trials enter first come first served as slots free
    up. With ``feed`` every batch's trials join the one queue the moment the batch arrives;
    without it a batch's trials enter only once the previous batch has left the engine.

    ``schedule`` is exact for this model (a FIFO queue with ``slots`` servers and known service
    times), so a batch thread only sleeps until its computed end: no stepping loop.
    """

    def __init__(self, slots: int, feed: bool) -> None:
        self.slots = slots
        self.feed = feed
        self._free = [0.0] * slots  # when each slot frees up (a heap), perf_counter time
        self._lock = threading.Lock()
        self.slot_s = 0.0  # sequence-seconds served
        self.first_start: float | None = None
        self.last_end = 0.0

    def schedule(self, services: np.ndarray, now: float) -> float:
        """Queue trials with these service times at ``now``; returns when the last ends."""
        end = now
        with self._lock:
            if not self.feed:
                drained = max(now, max(self._free))
                self._free = [drained] * self.slots
            for service in services.tolist():
                start = max(now, heapq.heappop(self._free))
                finish = start + service
                heapq.heappush(self._free, finish)
                end = max(end, finish)
                if self.first_start is None:
                    self.first_start = start
            self.slot_s += float(services.sum())
            self.last_end = max(self.last_end, end)
        return end


class SimulatedWorker(ArrayWorker):
    def __init__(
        self,
        models: EntryModels,
        cumulative: np.ndarray,
        tokens_mean: np.ndarray | None,
        latency: LatencyModel | None,
        load_s: float,
        offset: int,
        worker_id: str = "simulated",
    ) -> None:
        super().__init__(models, offset)
        self.cumulative = cumulative
        self.tokens_mean = tokens_mean
        self.latency = latency
        self.worker_id = worker_id
        self.engine: EngineModel | None = None
        if latency is not None and latency.engine_seqs is not None:
            self.engine = EngineModel(latency.engine_seqs, latency.feed)
        if load_s:
            time.sleep(load_s)  # emulates loading weights into a (time-shared) GPU slot

    def run(self, batch: Batch) -> BatchResult:
        started = time.perf_counter()
        local, questions, trials, seeds = self.expand(batch)
        cells = self.cumulative[local, questions]
        uniforms = uniform_from_seeds(seeds, stream=0)
        categories = (uniforms[:, None] >= cells[:, :-1]).sum(axis=1)
        tokens = None
        if self.tokens_mean is not None:
            # Gamma-like spread (shape 4) around the cell mean via the Wilson-Hilferty cube.
            normal = np.sqrt(-2 * np.log1p(-uniform_from_seeds(seeds, 1))) * np.cos(
                2 * np.pi * uniform_from_seeds(seeds, 2)
            )
            shape = 4.0
            cube = (1 - 1 / (9 * shape) + normal * np.sqrt(1 / (9 * shape))) ** 3
            tokens = np.maximum(1, np.rint(self.tokens_mean[local, questions] * cube)).astype(
                np.int64
            )
        gpu_s = 0.0
        engine_share = None
        if self.latency is not None and self.engine is not None:
            gpu_s = engine_share = self._wait_for_engine(seeds, tokens, self.engine)
        elif self.latency is not None:
            gpu_s = (
                self.latency.per_batch_s
                + self.latency.per_trial_s * len(trials)
                + self.latency.per_token_s * (0 if tokens is None else int(tokens.sum()))
            )
            remaining = gpu_s - (time.perf_counter() - started)
            if remaining > 0:
                time.sleep(remaining)
        result = result_from_arrays(
            batch, self.worker_id, started, questions, trials, seeds, categories, tokens, gpu_s
        )
        if engine_share is None:
            return result
        # Busy for its share of the engine: the batches sharing it add up to its busy time.
        return dataclasses.replace(result, busy_s=engine_share)

    def _wait_for_engine(
        self, seeds: np.ndarray, tokens: np.ndarray | None, engine: EngineModel
    ) -> float:
        """Queue the trials on the engine and sleep until the last ends; returns this batch's
        share of the engine: its sequence-seconds over the engine's slots."""
        latency = self.latency
        assert latency is not None
        lengths = lognormal_lengths(seeds, latency)
        if lengths is None:
            lengths = tokens if tokens is not None else np.zeros(len(seeds), dtype=np.int64)
        services = latency.per_trial_s + latency.per_token_s * lengths.astype(np.float64)
        end = engine.schedule(services, time.perf_counter()) + latency.per_batch_s
        remaining = end - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return float(services.sum()) / engine.slots


def _true_scores(probs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each model's true score: the mean over questions of its expected weight."""
    scores: np.ndarray = (probs @ weights).mean(axis=1)
    return scores


def entry_npz(entry: ModelEntry, context: BackendContext, needs: str) -> tuple[Path, NpzFile]:
    """The npz an entry's ``path`` names, resolved against the config; ``needs`` is the error
    where the entry has no path (what the path must name)."""
    if entry.path is None:
        raise InputError(needs, source=context.source, field=f"{context.field}.path")
    path = context.resolve_path(entry.path)
    return path, NpzFile(path, field=context.field)


def select_models(
    names: tuple[str, ...], select: list[str] | None, file: NpzFile, field: str
) -> list[int]:
    if select is None:
        return list(range(len(names)))
    missing = [name for name in select if name not in names]
    if missing:
        raise InputError(
            f"select names model {missing[0]!r} not in {file.path} (models: {', '.join(names)})",
            source=file.path,
            field=f"{field}.select",
        )
    return [names.index(name) for name in select]


class SimulatedOptions(BaseModel):
    """``options:`` of a simulated entry: emulate what a GPU backend would cost to load."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    swappable: bool = False
    load_s: float = Field(0.0, ge=0, description="Seconds to load the model into a worker.")
    devices: float = Field(0.0, ge=0, description="GPUs a worker would hold (for accounting).")


def parse_options(model: type[OptionsT], entry: ModelEntry, context: BackendContext) -> OptionsT:
    """Validate an entry's ``options:`` mapping; errors name ``models[i].options.KEY``."""
    try:
        return model.model_validate(entry.options)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise InputError(
            f"{first['msg']} (got {_repr(first.get('input'))})",
            source=context.source,
            field=f"{context.field}.options.{key}",
        ) from None


def _repr(value: object) -> str:
    try:
        return repr(value)
    except ValueError:  # an integer past Python's printable digits
        return shown_value(value)


@backends.register("simulated")
def simulated(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    options = parse_options(SimulatedOptions, entry, context)
    path, file = entry_npz(entry, context, "simulated backend needs path: a scenario npz")
    probs = file.get("probs", ndim=3, kind="f").astype(np.float64)
    if np.any(probs < 0):
        bad = tuple(int(i) for i in np.argwhere(probs < 0)[0])
        raise file.error("probs", f"negative probability {probs[bad]} at index {bad}")
    sums = probs.sum(axis=2)
    off = np.abs(sums - 1) > PROB_TOLERANCE
    if off.any():
        bad = tuple(int(i) for i in np.argwhere(off)[0])
        raise file.error("probs", f"probabilities of cell {bad} sum to {sums[bad]:.8f}, not 1")
    num_models, num_questions, num_categories = probs.shape
    names = file.names("models", num_models, "model-")
    question_ids = file.names("questions", num_questions, "q")
    tokens_mean = None
    if file.has("tokens_mean"):
        tokens_mean = file.get("tokens_mean", ndim=2, kind="fi").astype(np.float64)
        if tokens_mean.shape != (num_models, num_questions):
            raise file.error(
                "tokens_mean",
                f"shape {tokens_mean.shape} does not match probs "
                f"(L, M) = {(num_models, num_questions)}",
            )
        if np.any(tokens_mean <= 0):
            raise file.error("tokens_mean", "must be positive")
        if np.any(tokens_mean > MAX_TOKENS_MEAN):
            worst = float(tokens_mean.max())
            raise file.error(
                "tokens_mean",
                f"holds {worst:g} tokens per completion; at most {MAX_TOKENS_MEAN:g} (the "
                "token counts and budgets would overflow)",
            )
    weights = None
    if file.has("weights"):
        weights = tuple(float(w) for w in file.get("weights", ndim=1, kind="fi"))
    keep = select_models(names, entry.select, file, context.field)
    cumulative = np.cumsum(probs[keep], axis=2)
    models = EntryModels(tuple(names[i] for i in keep), question_ids, context.campaign_seed)
    kept_tokens = None if tokens_mean is None else tokens_mean[keep]
    latency = entry.latency
    concurrency = 1
    if latency is not None and latency.engine_seqs is not None and latency.feed:
        # Every batch queued at the worker shares its engine: one thread per batch.
        concurrency = max(2, context.execution.in_flight_per_worker + 1)
    return BackendPlan(
        backend="simulated",
        models=models.names,
        question_ids=question_ids,
        num_categories=num_categories,
        capacity=None,
        workers=entry.workers or context.default_workers,
        actor_options={"num_cpus": 0.5},
        make_worker=worker_maker(
            SimulatedWorker, models, cumulative, kept_tokens, entry.latency, options.load_s
        ),
        files={"scenario": file_sha256(path)},
        reports_tokens=kept_tokens is not None,
        known_scores=partial(_true_scores, probs[keep]),
        weights=weights,
        swappable=options.swappable,
        execution_options=frozenset(SimulatedOptions.model_fields),
        devices_per_worker=options.devices,
        actor_concurrency=concurrency,
        describe=f"simulated {path.name}: {len(models.names)} models x {num_questions} questions,"
        f" {num_categories} categories",
    )
