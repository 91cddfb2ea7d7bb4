"""The backend contract.

A backend factory (registered by name) turns one ``models:`` entry of the config into a
:class:`BackendPlan`, on the driver, before any Ray call: it validates its files and says which
models it serves, how many categories its outcomes have (if it produces categories itself),
how many trials a cell can give at most, and how to build a :class:`Worker` inside a Ray actor.

Workers run in actors and must be constructible from a picklable zero-argument callable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from adaptive_eval.base.types import Batch, BatchResult, Trial, trial_seed
from adaptive_eval.config.settings import ExecutionSettings, GenerationSettings


class Worker(Protocol):
    """Runs batches inside a Ray actor. Raising means the batch failed and is re-dispatched."""

    def run(self, batch: Batch) -> BatchResult: ...


@dataclass(frozen=True)
class BackendContext:
    """What a backend factory may use besides its own entry: the campaign's settings it needs,
    resolved (:mod:`adaptive_eval.config.settings`), never the config itself."""

    campaign_seed: int
    question_ids: tuple[str, ...] | None  # set when a dataset is configured
    source: str
    field: str
    default_workers: int
    resolve_path: Callable[[str], Any]  # a path of the config, absolute
    execution: ExecutionSettings  # where workers run (ray_address) and what they queue
    generation: GenerationSettings  # dataset, sampling and grader of generating backends
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)  # for plug-ins


@dataclass(frozen=True)
class BackendPlan:
    """One config entry, validated: the models it serves and how to build its workers.

    ``models`` are display names; the campaign gives them consecutive global indices starting
    at the entry's offset. ``make_worker(offset)`` returns a picklable zero-argument callable
    that builds the worker inside its actor.
    """

    backend: str
    models: tuple[str, ...]
    question_ids: tuple[str, ...]
    num_categories: int | None
    capacity: int | None
    workers: int
    actor_options: dict[str, Any]
    make_worker: Callable[[int], Callable[[], Worker]]
    files: dict[str, str] = dataclasses.field(
        default_factory=dict
    )  # role -> sha256, recorded in the run
    weights: tuple[float, ...] | None = None  # suggested rubric weights shipped with the data
    describe: str = ""
    load_cost_s: float = 0.0  # time to load a model into a worker slot (time-sharing)
    validate_categories: Callable[[int], None] | None = None  # checks data against C+1
    # Whether shared worker slots may load and unload this backend's models (time-sharing).
    swappable: bool = False
    devices_per_worker: float = 0.0  # GPUs a worker holds; load time is charged at this rate
    # Batches one worker actor may run at once (threads): a generating worker grades one batch
    # while the next generates. The worker must be thread-safe when this is above 1.
    actor_concurrency: int = 1
    # Entry options that change how trials run, not what they are: a resume may change them.
    execution_options: frozenset[str] = frozenset()
    # Whether its trials carry a token count (``budget.tokens`` can only count those).
    reports_tokens: bool = True
    # Whether it generates from ``dataset`` with ``sampling`` and grades with ``grader``.
    generating: bool = False
    # Each model's true (simulated) or recorded (replay) score under rubric weights, where the
    # backend knows it before sampling; None for generating backends.
    known_scores: Callable[[np.ndarray], np.ndarray] | None = None
    # Where its workers call a service (a server): None where it answers, else one line naming
    # it; asked before the workers start (:func:`adaptive_eval.dispatch.preflight.check_services`).
    reachable: Callable[[], str | None] | None = None


def worker_maker(
    worker: Callable[..., Worker], *args: Any
) -> Callable[[int], Callable[[], Worker]]:
    """A :attr:`BackendPlan.make_worker` for a worker built as ``worker(*args, offset)``:
    ``make_worker(offset)`` is that call, left for the actor to make (picklable where ``args``
    are)."""
    return partial(partial, worker, *args)


def uniform_from_seeds(seeds: np.ndarray, stream: int) -> np.ndarray:
    """Deterministic uniforms in [0, 1) from integer seeds (splitmix64 finaliser).

    ``stream`` separates independent draws made from the same seed.
    """
    with np.errstate(over="ignore"):
        x = seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(stream + 1)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def expand_items(
    batch: Batch, question_ids: Sequence[str], model_name: str, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten a batch into arrays of (question index, trial index, trial seed)."""
    questions: list[int] = []
    trials: list[int] = []
    seeds: list[int] = []
    name = model_name
    for item in batch.items:
        qid = question_ids[item.question]
        for trial in item.trials:
            questions.append(item.question)
            trials.append(trial)
            seeds.append(trial_seed(seed, name, qid, trial))
    return (
        np.asarray(questions, dtype=np.int64),
        np.asarray(trials, dtype=np.int64),
        np.asarray(seeds, dtype=np.int64),
    )


@dataclass(frozen=True)
class EntryModels:
    """The models of one config entry as its workers index them: row ``i`` of the entry's
    arrays is model ``names[i]``; ``question_ids`` are the dataset's, and each trial's seed
    derives from the campaign ``seed`` (:func:`~adaptive_eval.base.types.trial_seed`)."""

    names: tuple[str, ...]
    question_ids: tuple[str, ...]
    seed: int


class ArrayWorker:
    """What the workers that read or draw their trials from arrays over their entry's models
    (replay, simulated) share: the entry's ``models`` and ``offset``, its first global model
    index (a batch of model ``m`` reads row ``m - offset`` of the arrays)."""

    def __init__(self, models: EntryModels, offset: int) -> None:
        self.models = models
        self.offset = offset

    def expand(self, batch: Batch) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """The batch's row of the entry's arrays, then its trials' question, trial and seed
        arrays (:func:`expand_items`)."""
        local = batch.model - self.offset
        models = self.models
        questions, trials, seeds = expand_items(
            batch, models.question_ids, models.names[local], models.seed
        )
        return local, questions, trials, seeds


def result_from_arrays(
    batch: Batch,
    worker: str,
    started: float,
    questions: np.ndarray,
    trials: np.ndarray,
    seeds: np.ndarray,
    categories: np.ndarray,
    tokens: np.ndarray | None,
    gpu_s: float = 0.0,
) -> BatchResult:
    """Pack per-trial arrays into a :class:`BatchResult`; GPU time is shared by token count."""
    busy = time.perf_counter() - started
    count = len(trials)
    if tokens is not None and tokens.sum() > 0:
        shares = tokens / tokens.sum()
    else:
        shares = np.full(count, 1.0 / max(count, 1))
    latency = busy / max(count, 1)
    out = tuple(
        Trial(
            model=batch.model,
            question=int(questions[i]),
            trial=int(trials[i]),
            seed=int(seeds[i]),
            category=int(categories[i]),
            tokens=None if tokens is None else int(tokens[i]),
            latency_s=latency,
            gpu_s=float(gpu_s * shares[i]),
        )
        for i in range(count)
    )
    return BatchResult(batch.batch_id, batch.round, worker, out, busy, gpu_s)
