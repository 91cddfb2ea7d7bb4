"""The generating worker's shared half: a batch expanded into one request per trial, generated
(by the engine a subclass holds) and graded into trials with their signals.

:class:`GenerationWorker` is what the ``vllm`` and ``openai`` backends build on; the options and
the driver-side set-up they share are :mod:`.generation`'s.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from adaptive_eval.backends.generation import GenerationSetup, make_grader
from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.types import Batch, BatchResult, Trial, trial_seed
from adaptive_eval.grading import GeneratedSample, Graded, Grader, bits_per_token


@dataclass(frozen=True, slots=True)
class TrialRequest:
    """One trial to generate: ``question`` is the index into the setup's questions."""

    question: int
    trial: int
    seed: int


def expand_batch(batch: Batch, setup: GenerationSetup) -> list[TrialRequest]:
    ids = setup.question_ids
    return [
        TrialRequest(
            item.question,
            trial,
            trial_seed(setup.campaign_seed, setup.model_name, ids[item.question], trial),
        )
        for item in batch.items
        for trial in item.trials
    ]


class Window(NamedTuple):
    """When a batch generated: wall-clock start and end, its seconds from its requests' entry
    to its last completion, and the engine seconds attributed to it (its share of the engine
    while it shared it with other batches; all of ``generate_s`` when it ran alone, then
    ``exclusive``)."""

    wall_start: float
    wall_end: float
    generate_s: float
    engine_s: float
    exclusive: bool = False


@dataclass(frozen=True)
class Generated:
    """A sample plus what the backend knows beyond :class:`GeneratedSample` (JSON-able)."""

    sample: GeneratedSample
    extra: dict[str, Any] = field(default_factory=dict)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def trial_signals(generated: Generated, graded: Graded) -> dict[str, Any]:
    """The ``signals`` dict of a trial: the grader's signals plus the sample's raw numbers."""
    sample = generated.sample
    signals: dict[str, Any] = (
        graded.signals.to_dict()
        if graded.signals is not None
        else {
            "prompt_bpt": sample.prompt_bpt,
            "completion_bpt": bits_per_token(sample.cumulative_logprob, sample.completion_tokens),
        }
    )
    signals.update(
        finish_reason=sample.finish_reason,
        cumulative_logprob=_finite(sample.cumulative_logprob),
        prompt_logprob_sum=_finite(sample.prompt_logprob_sum),
        grader_invalid=graded.invalid,
    )
    signals.update(generated.extra)
    return signals


class GenerationWorker:
    """Base of the generating workers: batch expansion, grading and Trial construction.

    Subclasses implement :meth:`generate`, returning one :class:`Generated` per request, in
    order, and set ``device_factor`` (device-seconds per second of generation: the GPUs a worker
    holds, at least 1). A subclass that learns of finished samples one by one overrides
    :meth:`generate_and_grade` to hand each to :meth:`grade_async` at once, so grading overlaps
    the rest of the generation.

    An actor runs several batches at once (a threaded actor). By default generation holds a
    lock and grading does not, so one batch is graded while the next one generates; a
    subclass that feeds one engine from every batch (:mod:`adaptive_eval.backends.feed`)
    overrides :meth:`generate_and_grade` and keeps the engine's queue full across batches.
    """

    device_factor: float = 1.0

    def __init__(self, setup: GenerationSetup, offset: int, worker_id: str) -> None:
        self.setup = setup
        self.offset = offset
        self.worker_id = worker_id
        self.grader: Grader = make_grader(setup.grader_name, setup.grader_params)
        self._grade_pool: ThreadPoolExecutor | None = None
        self._generate_lock = threading.Lock()
        self.warm_up_grader()

    def warm_up_grader(self) -> None:
        """Grade made-up samples now, ``grade_threads`` at once, so that the grader's checker
        processes start while the worker loads rather than during its first batch (where the
        device would wait on them)."""
        if not self.setup.questions:
            return
        question = self.setup.questions[0]
        sample = GeneratedSample(text=f"\\boxed{{{question.answer}}}", completion_tokens=1)
        if self.setup.grade_threads <= 1:
            self.grader(sample, question)
            return
        pool = self._pool()
        list(pool.map(lambda _: self.grader(sample, question), range(self.setup.grade_threads)))

    def _pool(self) -> ThreadPoolExecutor:
        if self._grade_pool is None:
            self._grade_pool = ThreadPoolExecutor(
                self.setup.grade_threads, thread_name_prefix="grade"
            )
        return self._grade_pool

    # -- to implement -----------------------------------------------------------------------
    def generate(self, requests: Sequence[TrialRequest]) -> list[Generated]:
        raise NotImplementedError

    # -- the batch ----------------------------------------------------------------------------
    def run(self, batch: Batch) -> BatchResult:
        started = time.perf_counter()
        maybe_crash(self.setup.crash_once)
        requests = expand_batch(batch, self.setup)
        samples, pending, window = self.generate_and_grade(requests, batch.batch_id)
        if len(samples) != len(requests):
            raise BackendError(
                f"{self.worker_id}: backend returned {len(samples)} samples for "
                f"{len(requests)} requests"
            )
        graded = [future.result() for future in pending]
        gpu_s = window.engine_s * self.device_factor
        timing = {
            "batch_id": batch.batch_id,
            "generate_start": window.wall_start,
            "generate_end": window.wall_end,
            "generate_s": window.generate_s,
            "engine_s": window.engine_s,
        }
        trials = build_trials(
            batch, requests, samples, graded, gpu_s, self.setup.num_categories, timing
        )
        # Batches that share the engine overlap in time: a batch's busy time is its share of
        # the engine's time (its engine seconds), so that a worker's batches add up to its busy
        # time; a batch that had the engine to itself is busy for its whole run.
        wall = time.perf_counter() - started
        busy = wall if window.exclusive else min(window.engine_s, wall)
        return BatchResult(batch.batch_id, batch.round, self.worker_id, trials, busy, gpu_s)

    def generate_and_grade(
        self, requests: Sequence[TrialRequest], label: Any = None
    ) -> tuple[list[Generated], list[Future[Graded]], Window]:
        """Generate (under the lock) and start grading; returns the samples, their grading
        futures and the generation window."""
        with self._generate_lock:
            wall_start = time.time()
            generate_started = time.perf_counter()
            samples = self.generate(requests)
            generate_s = time.perf_counter() - generate_started
            wall_end = time.time()
        pending = [self.grade_async(r, s) for r, s in zip(requests, samples, strict=False)]
        return samples, pending, Window(wall_start, wall_end, generate_s, generate_s, True)

    def grade_async(self, request: TrialRequest, generated: Generated) -> Future[Graded]:
        """Grade one sample on the grading threads (inline with ``grade_threads: 1``)."""
        question = self.setup.questions[request.question]
        if self.setup.grade_threads <= 1:
            future: Future[Graded] = Future()
            future.set_result(self.grader(generated.sample, question))
            return future
        return self._pool().submit(self.grader, generated.sample, question)

    def grade(self, requests: Sequence[TrialRequest], samples: Sequence[Generated]) -> list[Graded]:
        pending = [self.grade_async(r, s) for r, s in zip(requests, samples, strict=True)]
        return [future.result() for future in pending]

    def close(self) -> None:
        if self._grade_pool is not None:
            self._grade_pool.shutdown(wait=False, cancel_futures=True)
            self._grade_pool = None


def build_trials(
    batch: Batch,
    requests: Sequence[TrialRequest],
    samples: Sequence[Generated],
    graded: Sequence[Graded],
    gpu_s: float,
    num_categories: int,
    timing: dict[str, Any] | None = None,
) -> tuple[Trial, ...]:
    """One Trial per request; device time is shared out by completion tokens."""
    tokens = [max(0, s.sample.completion_tokens) for s in samples]
    total = sum(tokens)
    count = max(len(samples), 1)
    out = []
    for i, (request, generated, grade) in enumerate(zip(requests, samples, graded, strict=True)):
        if not 0 <= grade.category < num_categories:
            raise BackendError(
                f"grader gave category {grade.category} outside 0.."
                f"{num_categories - 1} for question {request.question} trial "
                f"{request.trial}"
            )
        sample = generated.sample
        signals = trial_signals(generated, grade)
        if timing:
            signals.update(timing)
        share = tokens[i] / total if total > 0 else 1.0 / count
        out.append(
            Trial(
                model=batch.model,
                question=request.question,
                trial=request.trial,
                seed=request.seed,
                category=int(grade.category),
                tokens=sample.completion_tokens,
                prompt_tokens=sample.prompt_tokens,
                latency_s=sample.latency_s,
                gpu_s=gpu_s * share,
                answer=grade.answer,
                reason=grade.reason,
                text=sample.text,
                signals=signals,
            )
        )
    return tuple(out)


def maybe_crash(marker: str | None) -> None:
    """Fault injection for tests: the first call that finds no ``marker`` file creates it and
    kills this process at once (as an engine crash would); every later call returns."""
    if marker is None:
        return
    path = Path(marker)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    os._exit(17)
