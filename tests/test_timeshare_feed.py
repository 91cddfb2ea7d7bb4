"""Shared slots (``execution.gpu_slots``) run their loaded model's queued batches at once.

The slot actor's gate is tested in-process with scripted workers (the batches inside, the swap,
an engine that dies under several batches); the dispatcher and the actor together on Ray with the
simulated backend's engine emulation; time-sharing with the feed records exactly the trials of
dedicated workers. The vLLM version (a real engine killed in a slot mid-feed) is in
tests/test_vllm_backend.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from helpers import ledger as read_ledger
from helpers import load, mimic_success, timeshare_config, write_config, write_scenario

from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import Batch, BatchResult, Trial, WorkItem
from adaptive_eval.dispatch.actors import SlotActor

WAIT_S = 10.0


def until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Engine:
    """What the scripted workers of one test share: which batches are inside which worker,
    and the switches the test flips to let a batch generate, grade, or die."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, int, int]] = []  # (event, plan, worker serial or batch id)
        self.generated: dict[int, threading.Event] = {}
        self.graded: dict[int, threading.Event] = {}
        self.serial = 0

    def gate(self, table: dict[int, threading.Event], batch_id: int) -> threading.Event:
        with self.lock:
            return table.setdefault(batch_id, threading.Event())

    def note(self, *event: Any) -> None:
        with self.lock:
            self.log.append(event)


class ScriptedWorker:
    """A worker whose batches stay in its 'engine' until the test lets them generate, then
    grade until the test lets them finish. ``kill()`` fails every batch in the engine (and
    marks the worker ``broken``, as the vLLM worker does); closing the worker while a batch
    is still running in it fails that batch loudly."""

    def __init__(self, engine: Engine, plan: int) -> None:
        self.engine, self.plan = engine, plan
        with engine.lock:
            engine.serial += 1
            self.serial = engine.serial
        self.in_engine: set[int] = set()
        self.running = 0
        self.most = 0
        self.closed = False
        self.broken: str | None = None
        self.dead = threading.Event()
        engine.note("load", plan, self.serial)

    def kill(self) -> list[int]:
        with self.engine.lock:
            inside = sorted(self.in_engine)
            self.broken = "engine died"
        self.dead.set()
        return inside

    def run(self, batch: Batch) -> BatchResult:
        engine = self.engine
        with engine.lock:
            assert not self.closed, "a batch ran on a closed worker"
            assert self.broken is None, "a batch ran on a broken worker"
            self.running += 1
            self.most = max(self.most, self.running)
            self.in_engine.add(batch.batch_id)
        engine.note("enter", self.plan, batch.batch_id)
        try:
            generated = engine.gate(engine.generated, batch.batch_id)
            while not generated.wait(0.01):
                if self.dead.is_set():
                    raise BackendError(f"engine died with batch {batch.batch_id} inside")
            with engine.lock:
                self.in_engine.discard(batch.batch_id)
            engine.gate(engine.graded, batch.batch_id).wait(WAIT_S)
            with engine.lock:
                if self.closed:
                    raise AssertionError(f"worker closed while batch {batch.batch_id} graded")
            trials = tuple(
                Trial(batch.model, item.question, t, seed=1000 * item.question + t, category=1)
                for item in batch.items
                for t in item.trials
            )
            return BatchResult(batch.batch_id, batch.round, "scripted", trials, 1.0, 1.0)
        finally:
            with engine.lock:
                self.running -= 1
                self.in_engine.discard(batch.batch_id)
            engine.note("leave", self.plan, batch.batch_id)

    def close(self) -> None:
        with self.engine.lock:
            assert self.running == 0, f"closed with {self.running} batch(es) running"
            self.closed = True
        self.engine.note("close", self.plan, self.serial)


class Slot:
    """A :class:`SlotActor` run in-process, each ``run`` call on its own thread (as Ray runs a
    threaded actor's calls)."""

    def __init__(self, plans: int, concurrency: int) -> None:
        self.engine = Engine()
        self.workers: list[ScriptedWorker] = []

        def factory(plan: int) -> Callable[[], ScriptedWorker]:
            def make() -> ScriptedWorker:
                time.sleep(0.01)  # loading takes time
                worker = ScriptedWorker(self.engine, plan)
                self.workers.append(worker)
                return worker

            return make

        self.actor = SlotActor(
            [factory(p) for p in range(plans)],  # type: ignore[misc]
            [1.0] * plans,
            "slot-t",
            [concurrency] * plans,
        )
        self.pool = ThreadPoolExecutor(16)

    def run(self, batch: Batch, plan: int) -> Future[BatchResult]:
        return self.pool.submit(lambda: self.actor.run(batch, plan).result)

    def entered(self) -> list[int]:
        with self.engine.lock:
            return [b for e, _, b in self.engine.log if e == "enter"]

    def release(self, *batch_ids: int) -> None:
        for batch_id in batch_ids:
            self.engine.gate(self.engine.generated, batch_id).set()
            self.engine.gate(self.engine.graded, batch_id).set()


@pytest.fixture
def slot() -> Iterator[Slot]:
    made = Slot(plans=2, concurrency=4)
    yield made
    for worker in made.workers:
        worker.dead.set()
    for event in [*made.engine.generated.values(), *made.engine.graded.values()]:
        event.set()
    made.pool.shutdown(wait=True, cancel_futures=True)


def batch(batch_id: int, model: int) -> Batch:
    return Batch(batch_id, 0, model, (WorkItem(model, batch_id, 0, 2),))


def test_a_slot_runs_its_models_batches_at_once_and_swaps_only_when_they_left(
    slot: Slot,
) -> None:
    first = [slot.run(batch(i, 0), 0) for i in (1, 2, 3)]
    until(lambda: len(slot.entered()) == 3, "three batches of model 0 inside")
    assert slot.actor.report()["max_inside"] == 3 and len(slot.workers) == 1

    other = slot.run(batch(10, 1), 1)  # another model: waits for model 0's batches to leave
    time.sleep(0.2)
    late = slot.run(batch(4, 0), 0)  # model 0 again, after model 1 asked: waits its turn
    time.sleep(0.2)
    assert sorted(slot.entered()) == [1, 2, 3] and len(slot.workers) == 1

    slot.release(1, 2)
    for future in first[:2]:
        assert future.result(WAIT_S).error is None
    time.sleep(0.2)
    assert len(slot.workers) == 1  # batch 3 is still inside: no swap under it
    slot.release(3)
    until(lambda: 10 in slot.entered(), "model 1's batch inside after the swap")
    assert first[2].result(WAIT_S).error is None
    assert slot.workers[0].closed and slot.actor.report()["loaded"] == 1
    assert 4 not in slot.entered()  # model 0 waits for model 1's batch
    slot.release(10)
    result = other.result(WAIT_S)
    assert result.error is None and result.load_s > 0
    slot.release(4)
    assert late.result(WAIT_S).error is None

    # The log: each load follows the close of the worker before, with nothing running;
    # between two loads only the loaded model's batches ran.
    loaded, running = None, 0
    for event, plan, _ in slot.engine.log:
        if event == "load":
            assert running == 0
            loaded = plan
        elif event == "close":
            assert running == 0
        elif event == "enter":
            assert plan == loaded
            running += 1
        elif event == "leave":
            running -= 1
    assert [(e, p) for e, p, _ in slot.engine.log if e in ("load", "close")] == [
        ("load", 0),
        ("close", 0),
        ("load", 1),
        ("close", 1),
        ("load", 0),
    ]
    report = slot.actor.report()
    assert report["loads"] == 3 and report["inside"] == 0
    # Only the batch that needed a load is charged for it.
    assert sum(f.result().load_s > 0 for f in first) == 1


def test_an_engine_death_fails_exactly_the_batches_inside_and_the_slot_reloads(
    slot: Slot,
) -> None:
    futures = {i: slot.run(batch(i, 0), 0) for i in (1, 2, 3)}
    until(lambda: len(slot.entered()) == 3, "three batches inside")
    slot.engine.gate(slot.engine.generated, 3).set()  # batch 3 generated, grades a while
    until(lambda: slot.workers[0].in_engine == {1, 2}, "batch 3 out of the engine")

    inside = slot.workers[0].kill()
    assert inside == [1, 2]
    for i in inside:
        assert "engine died" in (futures[i].result(WAIT_S).error or "")
    # A batch arriving now must not run on the dead engine; batch 3 is still grading on the
    # old worker, which therefore stays open.
    futures[4] = slot.run(batch(4, 0), 0)
    time.sleep(0.3)
    assert sorted(slot.entered()) == [1, 2, 3] and not slot.workers[0].closed
    slot.release(3)
    assert futures[3].result(WAIT_S).error is None  # it left the engine before the death
    until(lambda: 4 in slot.entered(), "batch 4 on a fresh worker")
    assert slot.workers[0].closed and len(slot.workers) == 2
    slot.release(4)
    assert futures[4].result(WAIT_S).error is None
    failed = sorted(i for i, f in futures.items() if f.result().error is not None)
    assert failed == inside


def test_a_failed_batch_unloads_the_worker_once_the_others_have_left(slot: Slot) -> None:
    futures = [slot.run(batch(i, 0), 0) for i in (1, 2)]
    until(lambda: len(slot.entered()) == 2, "two batches inside")
    slot.engine.gate(slot.engine.generated, 2).set()  # batch 2 generated, grades a while
    until(lambda: slot.workers[0].in_engine == {1}, "batch 2 out of the engine")
    slot.workers[0].dead.set()  # batch 1 fails
    assert futures[0].result(WAIT_S).error is not None
    time.sleep(0.2)
    assert not slot.workers[0].closed  # batch 2 is still grading on it
    slot.release(2)
    assert futures[1].result(WAIT_S).error is None
    until(lambda: slot.workers[0].closed, "the failed worker unloaded")
    assert slot.actor.report()["loaded"] is None


def test_a_slot_keeps_its_backends_concurrency() -> None:
    made = Slot(plans=1, concurrency=2)
    try:
        futures = [made.run(batch(i, 0), 0) for i in (1, 2, 3)]
        until(lambda: len(made.entered()) == 2, "two batches inside")
        time.sleep(0.2)
        assert len(made.entered()) == 2  # the third waits for a batch to leave
        made.release(*made.entered()[:1])
        until(lambda: len(made.entered()) == 3, "the third batch inside")
        made.release(1, 2, 3)
        assert all(f.result(WAIT_S).error is None for f in futures)
        assert made.actor.report()["max_inside"] == 2
    finally:
        made.pool.shutdown(wait=True)


# -- on Ray: the dispatcher and the slot actor ------------------------------------------------


def engine_timeshare_config(tmp_path: Path, slots: int | None, in_flight: int) -> dict[str, Any]:
    """Three swappable simulated models with an emulated engine each (8 sequences at once,
    every trial holding one for 0.1 to 0.3 s), batches of 4."""
    write_scenario(
        tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=8), names=["a", "b", "c"]
    )
    data = timeshare_config(
        0.05,
        slots,
        latency={
            "engine_seqs": 8,
            "per_trial_s": 0.1,
            "per_token_s": 0.002,
            "tokens_median": 50,
            "tokens_p99_ratio": 4,
            "max_tokens": 100,
        },
    )
    data["execution"] = {
        "gpu_slots": slots,
        "batch_size": 4,
        "workers": 1,
        "in_flight_per_worker": in_flight,
    }
    return data


@pytest.mark.slow
def test_a_dispatched_slot_runs_several_batches_of_its_model_at_once(
    tmp_path: Path, ray_local: None
) -> None:
    import ray

    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.dispatch import Dispatcher

    campaign = build_campaign(
        load(write_config(tmp_path / "c.yaml", engine_timeshare_config(tmp_path, 1, 3)))
    )
    assert all(plan.actor_concurrency == 4 for plan in campaign.run.plans)
    dispatcher = Dispatcher(
        campaign.run.plans,
        campaign.run.offsets,
        in_flight_per_worker=3,
        max_batch_retries=0,
        shared_slots=1,
    )
    try:
        batches = [
            Batch(
                10 * model + i, 0, model, (WorkItem(model, i, 0, 2), WorkItem(model, i + 4, 0, 2))
            )
            for model in range(3)
            for i in range(4)
        ]
        dispatcher.submit(batches)
        results: list[BatchResult] = []
        deadline = time.monotonic() + 120
        while dispatcher.pending() and time.monotonic() < deadline:
            results.extend(dispatcher.poll(1.0))
        assert dispatcher.pending() == 0
        assert sorted(r.batch_id for r in results) == sorted(b.batch_id for b in batches)
        by_id = {b.batch_id: b for b in batches}
        assert all(by_id[r.batch_id].answered_by(r.trials) for r in results)
        (slot,) = dispatcher._slots
        report = ray.get(slot.actor.report.remote(), timeout=60)
    finally:
        dispatcher.shutdown()
    assert report["max_inside"] >= 2, report  # the feed held several batches of the slot
    # Every batch was queued before the first ran: one load per model, each model's batches
    # run together, and nothing ran during a swap.
    assert report["loads"] == 3 and dispatcher.stats.loads == 3
    order: list[int] = []
    loaded, inside = None, 0
    for event, plan, _, count in report["events"]:
        if event == "load":
            assert inside == 0
            loaded = plan
            order.append(plan)
        elif event == "enter":
            assert plan == loaded
            inside += 1
            assert count == inside
        elif event in ("leave", "fail"):
            inside -= 1
    assert sorted(order) == [0, 1, 2]
    assert sum(r.load_s > 0 for r in results) == 3


ledger = partial(read_ledger, columns="model, question, trial, category, tokens")


@pytest.mark.slow
def test_time_sharing_with_the_feed_records_the_trials_of_dedicated_workers(
    tmp_path: Path, ray_local: None
) -> None:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.workflows.run import run_campaign

    shared = summary_dict(
        run_campaign(
            build_campaign(
                load(
                    write_config(tmp_path / "shared.yaml", engine_timeshare_config(tmp_path, 1, 3))
                )
            ),
            tmp_path / "shared",
            quiet=True,
        )
    )
    dedicated = summary_dict(
        run_campaign(
            build_campaign(
                load(
                    write_config(tmp_path / "own.yaml", engine_timeshare_config(tmp_path, None, 3))
                )
            ),
            tmp_path / "own",
            quiet=True,
        )
    )
    assert shared["dispatch"]["workers"] == 1 and dedicated["dispatch"]["workers"] == 3
    assert shared["dispatch"]["model_loads"] >= 3
    assert shared["dispatch"]["failed_batches"] == 0
    rows = ledger(tmp_path / "shared")
    assert len(rows) == len({row[:3] for row in rows})  # every trial once
    assert rows == ledger(tmp_path / "own")
    assert shared["pairs"] == dedicated["pairs"]
