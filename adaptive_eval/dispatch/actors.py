"""The Ray actors that hold the workers: one backend worker each, or a shared GPU slot that
swaps models. They run inside Ray's worker processes; the pool (:mod:`.pool`) feeds them."""

from __future__ import annotations

import gc
import os
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from adaptive_eval.backends.base import Worker
from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.types import Batch, BatchResult

#: Seconds the workers get to close their engines at the end of a run, before their actors are
#: ended regardless.
CLOSE_TIMEOUT_S = 30.0


#: Longest error text written to an event (a worker's traceback can be long).
EVENT_ERROR_CHARS = 2000


#: Events a shared slot keeps for diagnostics (:meth:`SlotActor.report`).
SLOT_EVENTS = 4096


def host_facts(worker: Worker | None) -> dict[str, Any]:
    """What the dispatcher checks of a worker's process: its niceness, and the cores its
    engine's thread holds (``engine_cpus`` of the vllm backend; None where not pinned)."""
    placement = getattr(worker, "engine_cpus", None)
    return {
        "niceness": os.getpriority(os.PRIO_PROCESS, 0),
        "engine_cpus": placement if isinstance(placement, dict) else None,
    }


@dataclass(frozen=True)
class Reply:
    """What a worker actor returns for a batch: the result, and what its worker counted since
    its previous reply (``drain_diagnostics``: request retries by reason; None: nothing)."""

    result: BatchResult
    diagnostics: dict[str, Any] | None = None


def drained(worker: Worker | None) -> dict[str, Any] | None:
    drain = getattr(worker, "drain_diagnostics", None)
    found: dict[str, Any] | None = drain() if callable(drain) else None
    return found


class WorkerActor:
    """Ray actor body: builds its backend worker once and runs batches on it."""

    def __init__(self, make_worker: Callable[[], Worker], worker_id: str) -> None:
        self.worker_id = worker_id
        self.worker = make_worker()

    def ready(self) -> str:
        return self.worker_id

    def host_facts(self) -> dict[str, Any]:
        return host_facts(self.worker)

    def close(self) -> None:
        """Close the worker (its engine, and what the engine left on disk) before the actor is
        ended: a killed actor's engine left its files behind."""
        close_worker(self.worker)

    def run(self, batch: Batch) -> Reply:
        result = self._run(batch)
        return Reply(result, drained(self.worker))

    def _run(self, batch: Batch) -> BatchResult:
        started = time.perf_counter()
        try:
            result = self.worker.run(batch)
        except Exception as error:  # a failed batch is data for the dispatcher, not a crash
            detail = f"{type(error).__name__}: {error}"
            if not isinstance(error, BackendError):
                detail += "\n" + traceback.format_exc(limit=6)
            return BatchResult.failed(batch, self.worker_id, detail, time.perf_counter() - started)
        return replace(result, worker=self.worker_id)


class SlotActor:
    """Ray actor body for a shared slot: holds one model's worker at a time and swaps on demand.

    The actor is threaded (``max_concurrency``) when a swappable backend's worker runs several
    batches at once (``BackendPlan.actor_concurrency``, ``concurrency`` here): every batch of the
    loaded model queued at the slot then runs at once, so a vLLM worker's feed keeps its engine
    full across batch boundaries as a dedicated worker's does. A gate (one condition variable)
    keeps the models apart: a batch for the loaded model enters while no batch of another model
    is waiting; a batch for another model waits until every batch inside has left, and only then
    is the old worker closed and the new one loaded (one thread swaps; no batch runs against a
    worker being closed or loaded, and batches of two models never run in the slot together).
    The dispatcher sends a slot only one model's batches at a time anyway
    (:meth:`Dispatcher._next_batch`); the gate holds whatever order Ray runs the calls in.

    A batch that fails unloads the worker (its engine may be dead), as before, but only once the
    other batches inside it have returned: they finish (or fail) on their own, and exactly the
    batches that failed are re-dispatched. A worker whose engine died (``broken``) takes no new
    batch; the next batch loads a fresh one.

    Loading is charged to the batch that needed it: its ``busy_s`` and ``gpu_s`` include the load,
    and its trials share that cost, so the compute ledger shows what time-sharing costs.
    """

    def __init__(
        self,
        factories: list[Callable[[], Worker]],
        devices: list[float],
        worker_id: str,
        concurrency: list[int] | None = None,
    ) -> None:
        self.factories = factories
        self.devices = devices
        self.worker_id = worker_id
        self.concurrency = concurrency or [1] * len(factories)
        self.loaded: int | None = None
        self.worker: Worker | None = None
        self._gate = threading.Condition()
        self._inside = 0  # batches running on self.worker
        self._swapping = False  # one thread is closing the worker or loading the next
        self._retire = False  # a batch failed: unload the worker once the batches inside left
        self._waiting: Counter[int] = Counter()  # batches waiting at the gate, by plan
        self.loads = 0
        self.max_inside = 0
        #: The latest (event, plan, batch id, batches inside) tuples: "enter", "leave", "fail",
        #: "load", "unload"; for diagnostics and tests.
        self.events: deque[tuple[str, int, int, int]] = deque(maxlen=SLOT_EVENTS)

    def ready(self) -> str:
        return self.worker_id

    def host_facts(self) -> dict[str, Any]:
        return host_facts(self.worker)

    def close(self) -> None:
        """Close the loaded worker (see :meth:`WorkerActor.close`)."""
        with self._gate:
            worker, self.worker, self.loaded = self.worker, None, None
        close_worker(worker)

    def report(self) -> dict[str, Any]:
        """What the slot did: loads, most batches inside at once, and its latest events."""
        with self._gate:
            return {
                "loads": self.loads,
                "max_inside": self.max_inside,
                "inside": self._inside,
                "loaded": self.loaded,
                "events": list(self.events),
            }

    def _usable(self, plan_index: int) -> bool:
        worker = self.worker
        return (
            worker is not None
            and self.loaded == plan_index
            and not self._swapping
            and not self._retire
            and getattr(worker, "broken", None) is None
        )

    def _enter(self, batch: Batch, plan_index: int) -> tuple[Worker, float]:
        """Wait at the gate until ``batch`` may run on its model's worker (loading it when the
        slot holds another model, or none); returns the worker and the seconds spent loading."""
        limit = max(self.concurrency[plan_index], 1)
        with self._gate:
            self._waiting[plan_index] += 1
            try:
                while True:
                    usable = self._usable(plan_index)
                    others = any(n for p, n in self._waiting.items() if p != plan_index)
                    if usable and not others and self._inside < limit:
                        assert self.worker is not None
                        self._entered(batch, plan_index)
                        return self.worker, 0.0
                    if not usable and not self._swapping and self._inside == 0:
                        break
                    self._gate.wait()
                self._swapping = True
                if self.worker is not None:
                    self.events.append(("unload", self.loaded or 0, batch.batch_id, 0))
                old, self.worker, self.loaded = self.worker, None, None
            finally:
                self._waiting[plan_index] -= 1
        try:
            close_worker(old)
            del old
            gc.collect()
            started = time.perf_counter()
            worker = self.factories[plan_index]()
            load_s = time.perf_counter() - started
        except BaseException:
            with self._gate:
                self._swapping, self._retire = False, False
                self._gate.notify_all()
            raise
        if hasattr(worker, "exit_on_engine_death"):
            # The slot unloads a worker whose engine died (see run); the worker must not end
            # the process under the batches of the slot.
            worker.exit_on_engine_death = False
        with self._gate:
            self.worker, self.loaded = worker, plan_index
            self._swapping, self._retire = False, False
            self.loads += 1
            self.events.append(("load", plan_index, batch.batch_id, 0))
            self._entered(batch, plan_index)
            self._gate.notify_all()
        return worker, load_s

    def _entered(self, batch: Batch, plan_index: int) -> None:
        self._inside += 1
        self.max_inside = max(self.max_inside, self._inside)
        self.events.append(("enter", plan_index, batch.batch_id, self._inside))

    def _leave(self, batch: Batch, plan_index: int, failed: bool) -> None:
        """A batch left its worker; the last batch out of a failed worker unloads it."""
        with self._gate:
            self._inside -= 1
            self._retire = self._retire or failed
            self.events.append(
                ("fail" if failed else "leave", plan_index, batch.batch_id, self._inside)
            )
            if not (self._retire and self._inside == 0 and not self._swapping):
                self._gate.notify_all()
                return
            self._swapping = True
            old, self.worker, self.loaded = self.worker, None, None
            self.events.append(("unload", plan_index, batch.batch_id, 0))
        try:
            close_worker(old)  # free the engine's memory before the next load
        finally:
            with self._gate:
                self._swapping, self._retire = False, False
                self._gate.notify_all()

    def run(self, batch: Batch, plan_index: int) -> Reply:
        result = self._run(batch, plan_index)
        return Reply(result, drained(self.worker))

    def _run(self, batch: Batch, plan_index: int) -> BatchResult:
        started = time.perf_counter()
        try:
            worker, load_s = self._enter(batch, plan_index)
        except Exception as error:  # the model failed to load
            return BatchResult.failed(
                batch,
                self.worker_id,
                f"{type(error).__name__}: {error}",
                time.perf_counter() - started,
            )
        try:
            result = worker.run(batch)
        except Exception as error:
            self._leave(batch, plan_index, failed=True)
            failed = BatchResult.failed(
                batch,
                self.worker_id,
                f"{type(error).__name__}: {error}",
                time.perf_counter() - started,
            )
            return replace(failed, load_s=load_s)  # the load happened: the dispatcher counts it
        self._leave(batch, plan_index, failed=False)
        charge = load_s * max(self.devices[plan_index], 1.0)
        share = charge / max(len(result.trials), 1)
        trials = tuple(replace(t, gpu_s=(t.gpu_s or 0.0) + share) for t in result.trials)
        return replace(
            result,
            worker=self.worker_id,
            trials=trials,
            busy_s=result.busy_s + load_s,
            gpu_s=result.gpu_s + charge,
            load_s=load_s,
        )


def close_worker(worker: Worker | None) -> None:
    close = getattr(worker, "close", None)
    if callable(close):
        close()
