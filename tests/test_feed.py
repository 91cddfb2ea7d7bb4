"""The continuous feed (``adaptive_eval.backends.feed``) against a small engine model.

The engine here is a deterministic continuous-batching model: each request is a number of
decode steps (its length); ``step`` advances up to ``capacity`` running requests by one token
(admitting waiting ones first in, first out) and returns those that finished. It is driven only
from the feed's thread, as a vLLM engine is. The real engine is exercised in
tests/test_vllm_backend.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from adaptive_eval.backends.feed import EngineDied, Feed, FeedJob, UnmatchedOutput
from adaptive_eval.base.errors import BackendError


class StepEngine:
    def __init__(self, capacity: int = 4, step_s: float = 0.001) -> None:
        self.capacity = capacity
        self.step_s = step_s
        self.waiting: list[tuple[str, int]] = []
        self.running: dict[str, int] = {}
        self.next_id = 0
        self.steps = 0
        self.thread: threading.Thread | None = None
        self.fail_at_step: int | None = None
        #: No step runs before this many requests were added (a loaded machine may run
        #: several steps before the test has submitted every batch).
        self.hold_until_requests = 0
        self.occupancy: list[int] = []
        self.aborted: list[str] = []
        self.labels: dict[str, Any] = {}

    def _same_thread(self) -> None:
        if self.thread is None:
            self.thread = threading.current_thread()
        assert self.thread is threading.current_thread(), "engine used from two threads"

    def add(self, items: Sequence[Any]) -> list[str]:
        self._same_thread()
        if any(length <= 0 for length in items):
            raise ValueError("a request with no tokens to generate")
        ids = []
        for length in items:
            rid = f"r{self.next_id}"
            self.next_id += 1
            self.waiting.append((rid, int(length)))
            ids.append(rid)
        return ids

    def step(self) -> list[tuple[str, Any]]:
        self._same_thread()
        if self.next_id < self.hold_until_requests:
            time.sleep(self.step_s)
            return []
        self.steps += 1
        if self.fail_at_step is not None and self.steps >= self.fail_at_step:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        while self.waiting and len(self.running) < self.capacity:
            rid, length = self.waiting.pop(0)
            self.running[rid] = length
        self.occupancy.append(len(self.running))
        time.sleep(self.step_s)
        finished = []
        for rid in list(self.running):
            self.running[rid] -= 1
            if self.running[rid] == 0:
                del self.running[rid]
                finished.append((rid, {"id": rid, "steps": self.steps}))
        return finished

    def abort(self, ids: Sequence[str]) -> None:
        self._same_thread()
        self.aborted.extend(ids)
        for rid in ids:
            self.running.pop(rid, None)
        self.waiting = [(r, n) for r, n in self.waiting if r not in ids]


def echo(index: int, output: Any, latency: float) -> tuple[int, Any]:
    return index, output


def submit_all(feed: Feed, batches: Sequence[Sequence[int]]) -> list[FeedJob]:
    return [feed.submit(list(lengths), echo, label=i) for i, lengths in enumerate(batches)]


def test_next_batches_enter_while_a_batch_tail_runs() -> None:
    """Batch 0 has one long request; the others' requests decode beside it and each batch
    returns when its own last request finishes, long before batch 0."""
    engine = StepEngine(capacity=4)
    feed = Feed(engine)
    jobs = submit_all(feed, [[2, 2, 2, 60], [3, 3, 3], [4, 4, 4], [3, 3]])
    for job in jobs:
        results = job.wait()
        assert [index for index, _ in results] == list(range(len(job.items)))
    ends = [max(out["steps"] for _, out in job.results) for job in jobs]
    assert ends[0] == 60 and max(ends[1:]) < 20, ends
    # The engine ran full while there was work waiting: no step with a free slot and a queue.
    total = sum(sum(lengths) for lengths in ([2, 2, 2, 60], [3, 3, 3], [4, 4, 4], [3, 3]))
    busy_steps = sum(1 for n in engine.occupancy if n == engine.capacity)
    assert busy_steps * engine.capacity + 60 >= total
    assert feed.stats.max_jobs_inside >= 2 and feed.stats.overlapped_jobs >= 1
    # Device seconds: the batches' shares add up to the engine's stepping time.
    assert sum(job.engine_s for job in jobs) == pytest.approx(feed.stats.step_s, rel=1e-6)
    assert jobs[0].engine_s > jobs[1].engine_s
    feed.close()


def test_batches_from_many_threads_get_their_own_outputs() -> None:
    engine = StepEngine(capacity=3)
    lock = threading.Lock()
    feed = Feed(engine, lock)
    got: dict[int, list[Any]] = {}

    def run(label: int) -> None:
        lengths = [1 + (label * 7 + i * 3) % 9 for i in range(5)]
        job = feed.run(lengths, lambda i, out, lat: (lengths[i], out["id"]), label=label)
        got[label] = job.results

    threads = [threading.Thread(target=run, args=(label,)) for label in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(got) == list(range(6))
    ids = [rid for results in got.values() for _, rid in results]
    assert len(ids) == len(set(ids)) == 30  # every request answered once, to its own batch
    for label, results in got.items():
        assert [n for n, _ in results] == [1 + (label * 7 + i * 3) % 9 for i in range(5)]
    # Idle: the feeder gives the engine lock back, so a blocking generate could take its turn.
    deadline = time.monotonic() + 5
    while lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not lock.locked()
    assert feed.run([2], echo).results[0][0] == 0  # and work after an idle spell still runs
    feed.close()


def test_engine_death_fails_exactly_the_batches_inside() -> None:
    """Requests of three batches are inside when the engine dies: those three fail (to be
    re-dispatched), the batch that finished before keeps its results, and the feed refuses
    new work."""
    engine = StepEngine(capacity=8)
    deaths: list[BaseException] = []
    seen_inside: list[list[Any]] = []

    def fault(jobs: Sequence[FeedJob]) -> None:
        if len(jobs) >= 3 and not seen_inside:
            seen_inside.append(sorted(job.label for job in jobs))
            raise RuntimeError("engine killed mid-feed")

    feed = Feed(engine, on_engine_death=deaths.append, fault=fault)
    first = feed.submit([1, 1], echo, label="done-before")
    first.wait()
    jobs = [feed.submit([5, 30, 30], echo, label=f"b{i}") for i in range(3)]
    for job in jobs:
        with pytest.raises(EngineDied, match="requests of 3 batch"):
            job.wait()
    assert seen_inside == [["b0", "b1", "b2"]]
    assert len(deaths) == 1 and "mid-feed" in str(deaths[0])
    assert first.error is None and len(first.results) == 2
    with pytest.raises(EngineDied):
        feed.submit([1], echo)


def test_a_step_error_fails_every_batch_inside() -> None:
    engine = StepEngine(capacity=2)
    engine.fail_at_step = 3
    engine.hold_until_requests = 4  # every batch inside when it dies
    feed = Feed(engine)
    jobs = submit_all(feed, [[10, 10], [10], [2]])
    errors = []
    for job in jobs:
        with pytest.raises(EngineDied) as info:
            job.wait()
        errors.append(str(info.value))
    assert all("illegal memory access" in message for message in errors)


def test_a_refused_request_fails_only_its_batch() -> None:
    engine = StepEngine(capacity=4)
    feed = Feed(engine)
    good, bad, other = submit_all(feed, [[6, 6], [3, 0], [2]])
    with pytest.raises(BackendError, match="refused a request"):
        bad.wait()
    assert [i for i, _ in good.wait()] == [0, 1]
    assert [i for i, _ in other.wait()] == [0]
    feed.close()


def test_a_failing_conversion_aborts_the_rest_of_its_batch() -> None:
    engine = StepEngine(capacity=4)
    feed = Feed(engine)

    def broken(index: int, output: Any, latency: float) -> Any:
        raise BackendError("cannot read this output")

    bad = feed.submit([1, 40, 40], broken, label="bad")
    good = feed.submit([3, 3], echo, label="good")
    with pytest.raises(BackendError, match="cannot read"):
        bad.wait()
    assert len(good.wait()) == 2
    assert len(engine.aborted) == 2  # the bad batch's two long requests left the engine
    feed.close()


def test_close_fails_unfinished_batches() -> None:
    engine = StepEngine(capacity=1, step_s=0.01)
    feed = Feed(engine)
    job = feed.submit([1000], echo)
    time.sleep(0.05)
    feed.close()
    with pytest.raises(BackendError, match="closed"):
        job.wait()
    with pytest.raises(BackendError, match="closed"):
        feed.submit([1], echo)


class RenamingEngine(StepEngine):
    """Returns outputs under ids the feed never handed out (an unknown id scheme)."""

    def __init__(self) -> None:
        super().__init__(capacity=4)
        self.drained = False

    def step(self) -> list[tuple[str, Any]]:
        return [("other-" + rid, out) for rid, out in super().step()]

    def drain(self) -> None:
        self.drained = True
        self.running.clear()
        self.waiting.clear()


def test_an_output_with_an_unknown_id_fails_the_batches_inside_and_stops_the_feed() -> None:
    engine = RenamingEngine()
    feed = Feed(engine)
    jobs = submit_all(feed, [[5, 5], [9]])
    for job in jobs:
        with pytest.raises(UnmatchedOutput, match="cannot match vLLM output 'other-r"):
            job.wait()
    assert sorted(engine.aborted) == ["r0", "r1", "r2"] and engine.drained
    assert not isinstance(jobs[0].error, EngineDied)  # the engine is healthy: no restart
    with pytest.raises(BackendError, match="closed"):
        feed.submit([3], echo)


def test_on_start_runs_in_the_feeder_thread_and_cannot_stop_it() -> None:
    """The worker pins the engine's thread in ``on_start``; a failing hook must not leave the
    batches waiting forever."""
    threads: list[threading.Thread] = []

    def hook() -> None:
        threads.append(threading.current_thread())
        raise OSError("pinning failed")

    engine = StepEngine(capacity=4)
    feed = Feed(engine, on_start=hook, name="feed-test")
    jobs = submit_all(feed, [[2, 3], [1]])
    assert [len(job.wait()) for job in jobs] == [2, 1]
    assert [t.name for t in threads] == ["feed-test"] and engine.thread is threads[0]
    feed.close()
