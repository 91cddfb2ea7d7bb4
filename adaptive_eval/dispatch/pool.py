"""Dispatch on Ray: a pool of long-lived worker actors fed from per-backend queues.

Each worker actor keeps ``in_flight_per_worker`` batches queued (Ray runs an actor's calls in
order), so while it works on one batch the next is already waiting and the worker never waits on
the controller. Results come back through ``ray.wait``. A batch whose worker raised is
re-queued up to ``max_batch_retries`` times; a dead actor is restarted by Ray
(``max_restarts``) and its unfinished batches are re-queued. No trial is recorded from a failed
batch, so re-dispatching cannot double-count.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.logs import EventSink, no_events
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.dispatch.actors import (
    CLOSE_TIMEOUT_S,
    EVENT_ERROR_CHARS,
    Reply,
    SlotActor,
    WorkerActor,
)
from adaptive_eval.dispatch.cluster import (
    check_placement,
    cluster_capacity,
    cluster_is_local,
    worker_requests,
)
from adaptive_eval.dispatch.stats import DispatchStats

RESTART_PROBE_INTERVAL_S = 0.5
#: Where a cluster we did not start runs its workers niced, the dispatcher warns once.
NICENESS_HINT = (
    "Ray runs this cluster's workers at nice {nice}, so the engine loops yield to every other "
    "process on their hosts; start the cluster's nodes with RAY_worker_niceness=0 in their "
    "environment (deploy/ does)"
)


def niceness_note(niced: dict[str, int], *, local_cluster: bool, driver: int) -> tuple[str, str]:
    """(log level, message) for workers found running niced: a warning only where the user
    can act, with the remedy that works there.

    A cluster someone else started: its nodes need ``RAY_worker_niceness=0``. The local
    cluster this run started runs its workers at the driver's own niceness (Ray's
    ``worker_niceness`` is relative to the raylet, which inherits the shell's): a command
    started at nice 10 was told to restart "the cluster's nodes", which it never started; that
    is an informational event now. Workers niced beyond the driver on a local cluster are
    Ray's doing: the warning says so.
    """
    worst = max(niced.values())
    if not local_cluster:
        return "warning", NICENESS_HINT.format(nice=worst)
    if worst <= driver:
        return "info", (
            f"the workers run at nice {worst}, as this command does (it was started niced); "
            "start the command at nice 0 for engines at full priority"
        )
    return "warning", (
        f"the local cluster's workers run at nice {worst}, above this command's {driver}, "
        "although it asked Ray for worker_niceness 0; the engine loops yield to other processes"
    )


@dataclass
class _Slot:
    actor: Any
    worker_id: str
    plan_index: int | None  # None: a shared slot, serving any swappable plan
    outstanding: int = 0
    target: int | None = None  # the plan a shared slot holds (or will, once queued calls run)
    recovering: bool = False  # Ray is restarting the actor; no work until ready() answers
    probe: Any = None  # the ready() call in flight while recovering
    probe_at: float = 0.0  # when to send the next ready() while recovering
    dead: bool = False  # Ray gave up restarting it
    died_at: float = 0.0  # when its last death was seen


class Dispatcher:
    """Routes batches to the actors of the backend that serves their model."""

    def __init__(
        self,
        plans: Sequence[BackendPlan],
        offsets: Sequence[int],
        *,
        in_flight_per_worker: int,
        max_batch_retries: int,
        actor_restarts: int = 3,
        shared_slots: int | None = None,
        on_event: EventSink = no_events,
    ) -> None:
        import ray

        self._ray = ray
        self._event = on_event
        self.in_flight_per_worker = in_flight_per_worker
        self.max_batch_retries = max_batch_retries
        self.stats = DispatchStats()
        self._queues: list[deque[Batch]] = [deque() for _ in plans]
        self._inflight: dict[Any, tuple[Batch, _Slot]] = {}
        self._attempts: dict[int, int] = {}
        self._probes: dict[Any, _Slot] = {}
        self._slots: list[_Slot] = []
        check_placement(worker_requests(plans, shared_slots), *cluster_capacity(ray))
        remote = ray.remote(WorkerActor)
        # The worker factories are pinned here for the dispatcher's lifetime, so that Ray can
        # rebuild a restarted actor from them.
        self._factories = [
            ray.put(plan.make_worker(offset)) for plan, offset in zip(plans, offsets, strict=True)
        ]
        self._swappable = [i for i, plan in enumerate(plans) if shared_slots and plan.swappable]
        for plan_index, plan in enumerate(plans):
            if plan_index in self._swappable:
                continue
            for replica in range(plan.workers):
                worker_id = f"{plan.backend}-{plan_index}-{replica}"
                options = dict(plan.actor_options)
                if plan.actor_concurrency > 1:
                    options["max_concurrency"] = plan.actor_concurrency
                actor = remote.options(
                    max_restarts=actor_restarts, max_task_retries=0, **options
                ).remote(self._factories[plan_index], worker_id)
                self._slots.append(_Slot(actor, worker_id, plan_index))
        if self._swappable:
            self._start_shared_slots(plans, offsets, shared_slots or 1, actor_restarts)
        ray.get([slot.actor.ready.remote() for slot in self._slots])
        self._check_hosts()
        self._worker_count = len(self._slots)
        self._plan_of_model = [i for i, plan in enumerate(plans) for _ in plan.models]

    def _check_hosts(self) -> None:
        """Warn once if the workers run niced; log where their engines' threads run."""
        facts = dict(
            zip(
                [slot.worker_id for slot in self._slots],
                self._ray.get([slot.actor.host_facts.remote() for slot in self._slots]),
                strict=True,
            )
        )
        placements = {w: f["engine_cpus"] for w, f in facts.items() if f["engine_cpus"]}
        if placements:
            self._event("info", "engine_cpus", {"workers": placements})
        niced = {worker: f["niceness"] for worker, f in facts.items() if f["niceness"] > 0}
        if niced:
            driver = os.getpriority(os.PRIO_PROCESS, 0)
            level, message = niceness_note(niced, local_cluster=cluster_is_local(), driver=driver)
            self._event(level, "workers_niced", {"workers": niced, "message": message})

    def _start_shared_slots(
        self, plans: Sequence[BackendPlan], offsets: Sequence[int], count: int, actor_restarts: int
    ) -> None:
        """Slots that time-share the swappable plans' models (more models than GPUs)."""
        factories = [plan.make_worker(offset) for plan, offset in zip(plans, offsets, strict=True)]
        devices = [plan.devices_per_worker for plan in plans]
        # Slots must fit the largest swappable model (most GPUs, then CPUs).
        largest = max(
            (plans[i].actor_options for i in self._swappable),
            key=lambda o: (o.get("num_gpus", 0), o.get("num_cpus", 0)),
        )
        options: dict[str, Any] = dict(largest)
        # A slot runs every batch of its loaded model queued at it at once, as a dedicated
        # worker does (one thread per batch, plus one for control calls); the slot's gate holds
        # each model to its own backend's concurrency and keeps models apart.
        concurrency = [max(plan.actor_concurrency, 1) for plan in plans]
        threads = max(concurrency[i] for i in self._swappable)
        if threads > 1:
            options["max_concurrency"] = threads
        remote = self._ray.remote(SlotActor)
        for index in range(count):
            worker_id = f"slot-{index}"
            actor = remote.options(
                max_restarts=actor_restarts, max_task_retries=0, **options
            ).remote(factories, devices, worker_id, concurrency)
            self._slots.append(_Slot(actor, worker_id, None))

    @property
    def num_workers(self) -> int:
        return self._worker_count

    def submit(self, batches: Sequence[Batch]) -> None:
        for batch in batches:
            self._queues[self._plan_of_model[batch.model]].append(batch)
        self._fill()

    def pending(self) -> int:
        return len(self._inflight) + sum(len(queue) for queue in self._queues)

    def poll(self, timeout: float) -> list[BatchResult]:
        """Results that finished within ``timeout`` seconds (at least one unless timed out)."""
        timeout = self._send_probes(timeout)
        waitables = [*self._inflight, *self._probes]
        if not waitables:
            time.sleep(timeout)
            return []
        ready, _ = self._ray.wait(waitables, num_returns=1, timeout=timeout)
        if ready:
            more, _ = self._ray.wait(waitables, num_returns=len(waitables), timeout=0)
            ready = list(dict.fromkeys([*ready, *more]))
        results = []
        now = time.perf_counter()
        for ref in ready:
            if ref in self._probes:
                self._probe_done(ref)
                continue
            batch, slot = self._inflight.pop(ref)
            slot.outstanding -= 1
            try:
                reply: Reply = self._ray.get(ref)
            except self._ray.exceptions.RayActorError as error:
                if self._worker_died(slot, error):
                    self._retry(
                        batch, BatchResult.failed(batch, slot.worker_id, f"worker died: {error}")
                    )
                else:  # queued behind the batch that killed it: not this batch's fault
                    self._queues[self._plan_of_model[batch.model]].appendleft(batch)
                continue
            except self._ray.exceptions.RayError as error:  # the call itself failed
                self._retry(batch, BatchResult.failed(batch, slot.worker_id, str(error)))
                continue
            result = reply.result
            self.stats.note(slot.worker_id, batch, reply.diagnostics, self._event)
            if result.error is None and not batch.answered_by(result.trials):
                result = BatchResult.failed(
                    batch, slot.worker_id, "returned trials do not match the batch"
                )
            self.stats.last_result = now
            self.stats.worked(slot.worker_id, now, result.busy_s)
            if result.load_s:
                self.stats.loads += 1
                self.stats.load_s += result.load_s
            if result.error is None:
                self.stats.batches += 1
                results.append(result)
            else:
                self._retry(batch, result)
        self._fill()
        return results

    def _worker_died(self, slot: _Slot, error: Exception) -> bool:
        """Start watching a restart; True for the first failure seen of this death."""
        if slot.recovering or slot.dead:
            return False
        self.stats.restarts += 1
        slot.died_at = time.perf_counter()
        self._event(
            "warning",
            "worker_died",
            {"worker": slot.worker_id, "error": str(error)[:EVENT_ERROR_CHARS]},
        )
        slot.target = None  # a restarted shared slot holds no model
        slot.recovering, slot.probe_at = True, 0.0
        return True

    def _send_probes(self, timeout: float) -> float:
        """Ask recovering actors whether they are back; returns how long poll may wait."""
        now = time.perf_counter()
        for slot in self._slots:
            if not slot.recovering or slot.probe is not None:
                continue
            if now >= slot.probe_at:
                slot.probe = slot.actor.ready.remote()
                self._probes[slot.probe] = slot
            else:
                timeout = min(timeout, slot.probe_at - now)
        return max(timeout, 0.0)

    def _probe_done(self, ref: Any) -> None:
        slot = self._probes.pop(ref)
        slot.probe = None
        try:
            self._ray.get(ref)
        except self._ray.exceptions.ActorUnavailableError:
            slot.probe_at = time.perf_counter() + RESTART_PROBE_INTERVAL_S  # still restarting
            return
        except self._ray.exceptions.RayActorError as error:
            slot.dead, slot.recovering = True, False
            self._event(
                "error",
                "worker_dead",
                {"worker": slot.worker_id, "error": str(error)[:EVENT_ERROR_CHARS]},
            )
            alive = [s for s in self._slots if not s.dead and s.plan_index == slot.plan_index]
            if not alive:
                raise BackendError(
                    f"every worker of {slot.worker_id.rsplit('-', 1)[0]} is dead and Ray "
                    f"stopped restarting them: {error}"
                ) from None
            return
        slot.recovering = False
        self._event(
            "info",
            "worker_restarted",
            {"worker": slot.worker_id, "down_s": round(time.perf_counter() - slot.died_at, 3)},
        )

    def _retry(self, batch: Batch, result: BatchResult) -> None:
        self.stats.failed_batch(
            batch,
            result.worker,
            result.error,
            self.max_batch_retries,
            self._attempts,
            self._event,
        )
        self._queues[self._plan_of_model[batch.model]].appendleft(batch)

    def _fill(self) -> None:
        """Top up workers one batch at a time, least loaded first, so load stays even."""
        progress = True
        while progress:
            progress = False
            for slot in sorted(self._slots, key=lambda s: s.outstanding):
                if slot.outstanding >= self.in_flight_per_worker or slot.dead or slot.recovering:
                    continue
                picked = self._next_batch(slot)
                if picked is None:
                    continue
                batch, plan_index = picked
                if slot.plan_index is None:
                    ref = slot.actor.run.remote(batch, plan_index)
                else:
                    ref = slot.actor.run.remote(batch)
                self._inflight[ref] = (batch, slot)
                slot.outstanding += 1
                progress = True
                if self.stats.first_submit is None:
                    self.stats.first_submit = time.perf_counter()

    def _next_batch(self, slot: _Slot) -> tuple[Batch, int] | None:
        """The next batch for a slot. A shared slot keeps its loaded model while that model has
        queued work and swaps only once drained, to the model with the most work waiting that no
        other slot holds; a load is thus amortised over everything queued for the model. Up to
        ``in_flight_per_worker`` batches of the slot's model are queued at it (and run there at
        once when its backend runs batches concurrently); a batch of another model is sent only
        once every batch of the current one has returned."""
        if slot.plan_index is not None:
            queue = self._queues[slot.plan_index]
            return (queue.popleft(), slot.plan_index) if queue else None
        if slot.target is not None and self._queues[slot.target]:
            return self._queues[slot.target].popleft(), slot.target
        if slot.outstanding:
            return None
        held = {s.target for s in self._slots if s is not slot and s.plan_index is None}
        waiting = [i for i in self._swappable if self._queues[i]]
        if not waiting:
            return None
        slot.target = max(waiting, key=lambda i: (i not in held, len(self._queues[i]), -i))
        return self._queues[slot.target].popleft(), slot.target

    def shutdown(self) -> None:
        """Close every worker (bounded by :data:`CLOSE_TIMEOUT_S`), then end the actors."""
        closing = [slot.actor.close.remote() for slot in self._slots]
        if closing:
            self._ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
        for slot in self._slots:
            self._ray.kill(slot.actor)
        self._slots.clear()
