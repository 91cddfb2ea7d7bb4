"""Continuous request feed: one loop owns an engine and keeps it topped up from every batch.

A worker actor runs several batches at once (a threaded actor, one thread per queued batch).
Each batch thread hands its requests to the :class:`Feed` and waits; a single feeder thread
owns the engine: it adds every submitted batch's requests to the engine's queue as soon as they
arrive, steps the engine, and hands each finished request to its batch (which starts grading it
at once). A batch is done the moment its own last request finishes, so the next batches'
requests are already decoding while the current batch's longest completions run, and the
engine pays the long tail of a heavy-tailed length distribution once per campaign instead of
once per batch.

Nothing about sampling changes: every request carries its own seed, so a trial's completion
does not depend on which requests it shared the engine with.

Failures: a request the engine refuses when it is added (``ValueError``/``TypeError``) fails
only its own batch, and that batch's requests already added are aborted; the engine keeps
running. An exception from ``step`` means the engine is dead: every batch with requests inside
it (and every batch still waiting to enter) fails with a :class:`BackendError`, so the
dispatcher re-queues exactly those batches and nothing of them is recorded; the feed refuses
all later work.

Device time: each ``step``'s seconds are shared among the batches then inside the engine in
proportion to their unfinished requests, so the batches' device seconds add up to the engine's
busy time, however much they overlap.

Nothing here imports vllm.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from adaptive_eval.base.errors import BackendError


class FeedEngine(Protocol):
    """What the feed needs from an engine (called from the feeder thread only)."""

    def add(self, items: Sequence[Any]) -> list[str]:
        """Add requests; return their ids, in order. ``ValueError``/``TypeError``: refused
        (nothing of the call stays in the engine)."""
        ...

    def step(self) -> list[tuple[str, Any]]:
        """Run one engine step; return ``(request id, output)`` of the requests that finished."""
        ...

    def abort(self, ids: Sequence[str]) -> None: ...


class EngineDied(BackendError):
    """The engine raised while stepping: every batch inside it failed."""


class UnmatchedOutput(BackendError):
    """The engine returned an output whose id matches no request the feed added (an engine
    whose request-id scheme the feed does not know). The engine itself is healthy: every batch
    inside failed, their requests were aborted and drained, and the feed refuses later work so
    that the worker can drive the engine another way."""


@dataclass(eq=False)
class FeedJob:
    """One batch's requests inside the feed."""

    label: Any  # for messages and tests: the batch id
    items: Sequence[Any]
    on_finish: Callable[[int, Any, float], Any]  # (index, output, latency) -> result
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    ids: dict[str, int] = field(default_factory=dict)
    submitted: float = 0.0  # perf_counter when handed to the feed
    admitted: float | None = None  # perf_counter when its requests entered the engine
    wall_start: float = 0.0  # time.time() when its requests entered the engine
    wall_end: float = 0.0
    finished: float = 0.0  # perf_counter when its last request finished
    engine_s: float = 0.0  # engine step seconds attributed to this batch
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def generate_s(self) -> float:
        start = self.admitted if self.admitted is not None else self.submitted
        return max(self.finished - start, 0.0)

    def wait(self) -> list[Any]:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.results


@dataclass
class FeedStats:
    steps: int = 0
    step_s: float = 0.0  # seconds inside engine.step
    jobs: int = 0
    max_jobs_inside: int = 0  # most batches with requests inside the engine at once
    overlapped_jobs: int = 0  # batches admitted while another batch was inside the engine


class Feed:
    """Owns an engine through one feeder thread (started on the first submit).

    ``lock`` is held by the feeder while it has work and released while it idles, so that code
    driving the same engine another way (one blocking ``generate`` call) can take turns with it.
    ``fault`` (tests only) is called after every step with the batches inside the engine; an
    exception it raises is treated exactly like one from ``step``. ``on_start`` runs first
    thing in the feeder thread (the worker pins it to its cores there).
    """

    def __init__(
        self,
        engine: FeedEngine,
        lock: threading.Lock | None = None,
        *,
        on_engine_death: Callable[[BaseException], None] | None = None,
        fault: Callable[[Sequence[FeedJob]], None] | None = None,
        on_start: Callable[[], None] | None = None,
        name: str = "feed",
    ) -> None:
        self.engine = engine
        self.lock = lock or threading.Lock()
        self.on_engine_death = on_engine_death
        self.fault = fault
        self.on_start = on_start
        self.name = name
        self.stats = FeedStats()
        self._cond = threading.Condition()
        self._incoming: list[FeedJob] = []
        self._active: list[FeedJob] = []  # jobs with requests inside the engine
        self._by_id: dict[str, tuple[FeedJob, int]] = {}
        self._dead: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- the batch threads' side ----------------------------------------------------------------
    def submit(
        self, items: Sequence[Any], on_finish: Callable[[int, Any, float], Any], label: Any = None
    ) -> FeedJob:
        job = FeedJob(label, items, on_finish, [None] * len(items), len(items))
        job.submitted = time.perf_counter()
        with self._cond:
            if self._dead is not None:
                raise EngineDied(f"the engine died earlier: {self._dead}")
            if self._closed:
                raise BackendError("the worker closed its engine")
            if not items:
                job.admitted = job.finished = job.submitted
                job.wall_start = job.wall_end = time.time()
                job.done.set()
                return job
            self._incoming.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return job

    def run(
        self, items: Sequence[Any], on_finish: Callable[[int, Any, float], Any], label: Any = None
    ) -> FeedJob:
        """Submit and wait; raises the batch's error."""
        job = self.submit(items, on_finish, label)
        job.wait()
        return job

    def inside(self) -> list[Any]:
        """Labels of the batches with requests inside the engine now."""
        with self._cond:
            return [job.label for job in self._active]

    def close(self, reason: str = "the worker closed its engine") -> None:
        """Fail every batch not yet finished and stop the feeder (the engine stays as it is)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cond:
            self._fail(self._incoming + self._active, BackendError(reason))
            self._incoming, self._active = [], []
            self._by_id.clear()

    # -- the feeder thread --------------------------------------------------------------------
    def _loop(self) -> None:
        holding = False
        if self.on_start is not None:
            with contextlib.suppress(Exception):  # must not stop the engine; reports itself
                self.on_start()
        try:
            while True:
                with self._cond:
                    while not self._incoming and not self._active and not self._closed:
                        if holding:
                            self.lock.release()
                            holding = False
                        self._cond.wait()
                    if self._closed:
                        if self._active:  # abort what the engine still holds for them
                            self._abort(list(self._by_id))
                        return
                    incoming, self._incoming = self._incoming, []
                if not holding:
                    self.lock.acquire()
                    holding = True
                for job in incoming:
                    self._admit(job)
                if not self._active:
                    continue
                if not self._step():
                    return
        finally:
            if holding:
                self.lock.release()

    def _admit(self, job: FeedJob) -> None:
        try:
            ids = self.engine.add(job.items)
        except Exception as error:  # a request the engine refuses fails its batch only
            self._fail(
                [job],
                BackendError(f"the engine refused a request: {type(error).__name__}: {error}"),
            )
            return
        if len(ids) != len(job.items):
            self._abort(ids)
            self._fail([job], BackendError(f"engine returned {len(ids)} ids for {len(job.items)}"))
            return
        job.admitted = time.perf_counter()
        job.wall_start = time.time()
        with self._cond:
            if self._active:
                self.stats.overlapped_jobs += 1
            for index, rid in enumerate(ids):
                self._by_id[str(rid)] = (job, index)
            self._active.append(job)
            self.stats.jobs += 1
            self.stats.max_jobs_inside = max(self.stats.max_jobs_inside, len(self._active))

    def _step(self) -> bool:
        """One engine step; False when the engine died (everything inside has failed)."""
        started = time.perf_counter()
        try:
            finished = self.engine.step()
            if self.fault is not None:
                self.fault(list(self._active))
        except Exception as error:
            self._died(error)
            return False
        elapsed = time.perf_counter() - started
        self.stats.steps += 1
        self.stats.step_s += elapsed
        unfinished = sum(job.remaining for job in self._active)
        for job in self._active:
            job.engine_s += elapsed * job.remaining / max(unfinished, 1)
        now = time.perf_counter()
        for rid, output in finished:
            entry = self._by_id.pop(str(rid), None)
            if entry is None:
                self._unmatched(rid)
                return False
            job, index = entry
            if job.done.is_set():
                continue
            try:
                job.results[index] = job.on_finish(index, output, now - (job.admitted or now))
            except Exception as error:  # converting one output failed: its batch fails
                ids = [r for r, (j, _) in self._by_id.items() if j is job]
                self._abort(ids)
                for r in ids:
                    self._by_id.pop(r, None)
                job.remaining = 0
                self._finish(
                    job,
                    error
                    if isinstance(error, BackendError)
                    else BackendError(f"{type(error).__name__}: {error}"),
                )
                continue
            job.remaining -= 1
            if job.remaining == 0:
                self._finish(job, None)
        return True

    def _finish(self, job: FeedJob, error: BaseException | None) -> None:
        job.finished = time.perf_counter()
        job.wall_end = time.time()
        job.error = error
        with self._cond:
            if job in self._active:
                self._active.remove(job)
        job.done.set()

    def _died(self, error: BaseException) -> None:
        with self._cond:
            self._dead = error
            jobs = self._incoming + self._active
            self._incoming, self._active = [], []
            self._by_id.clear()
        labels = ", ".join(str(job.label) for job in jobs)
        failure = EngineDied(
            f"the engine died with requests of {len(jobs)} batch(es) inside ({labels}): "
            f"{type(error).__name__}: {error}"
        )
        if self.on_engine_death is not None:
            with contextlib.suppress(Exception):
                self.on_engine_death(error)
        self._fail(jobs, failure)

    def _unmatched(self, rid: str) -> None:
        with self._cond:
            self._closed = True
            jobs = self._incoming + self._active
            ids = list(self._by_id)
            self._incoming, self._active = [], []
            self._by_id.clear()
        self._abort(ids)
        drain = getattr(self.engine, "drain", None)
        if drain is not None:
            with contextlib.suppress(Exception):
                drain()
        self._fail(
            jobs,
            UnmatchedOutput(
                f"cannot match vLLM output {rid!r} to a request of any batch "
                f"({len(jobs)} batch(es) inside failed and are re-queued)"
            ),
        )

    def _abort(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        with contextlib.suppress(Exception):
            self.engine.abort(list(ids))

    @staticmethod
    def _fail(jobs: Sequence[FeedJob], error: BaseException) -> None:
        now = time.perf_counter()
        for job in jobs:
            if job.done.is_set():
                continue
            job.error = error
            job.finished = now
            job.wall_end = time.time()
            job.done.set()


__all__ = ["EngineDied", "Feed", "FeedEngine", "FeedJob", "FeedStats", "UnmatchedOutput"]
