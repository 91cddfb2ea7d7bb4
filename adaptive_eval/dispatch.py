"""Dispatch on Ray: a pool of long-lived worker actors fed from per-backend queues.

Each worker actor keeps ``in_flight_per_worker`` batches queued (Ray runs an actor's calls in
order), so while it works on one batch the next is already waiting and the worker never waits on
the controller. Results come back through ``ray.wait``. A batch whose worker raised is
re-queued up to ``max_batch_retries`` times; a dead actor is restarted by Ray
(``max_restarts``) and its unfinished batches are re-queued. No trial is recorded from a failed
batch, so re-dispatching cannot double-count.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from adaptive_eval import interrupts
from adaptive_eval.backends.base import BackendPlan, Worker
from adaptive_eval.cluster_address import address_problem
from adaptive_eval.errors import BackendError, ClusterError, InputError
from adaptive_eval.types import Batch, BatchResult

RESTART_PROBE_INTERVAL_S = 0.5
#: Attempts at starting a local Ray cluster, and the pause before each retry (seconds). Ray
#: waits a fixed 30 s for its raylet; on a loaded machine a second try usually succeeds.
RAY_START_ATTEMPTS = 3
RAY_START_BACKOFF_S = (2.0, 10.0)
#: Ray settings of a local cluster (see :func:`init_ray`).
LOCAL_RAY_SYSTEM_CONFIG = {
    "enable_worker_prestart": False,
    "prestart_worker_first_driver": False,
    # Ray starts its workers at nice 15 so that they yield to the raylet. Here the workers are
    # the engines: the step loop that feeds an accelerator (or, on CPU, computes) then yields to
    # every other process on the host, the driver's controller included. On the 2-core project
    # machine that cost the CPU vLLM campaign 30% of its throughput (docs/continuous-feed.md).
    "worker_niceness": 0,
}
#: Ray's environment for a run, set before Ray is first imported (see :func:`init_ray`): every
#: worker line in ray.log as written (no "[repeated Nx across cluster]" folding), no usage
#: statistics sent.
RAY_ENVIRONMENT = {"RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0"}
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


#: Seconds the workers get to close their engines at the end of a run, before their actors are
#: ended regardless.
CLOSE_TIMEOUT_S = 30.0
#: Longest error text written to an event (a worker's traceback can be long).
EVENT_ERROR_CHARS = 2000
#: Events a shared slot keeps for diagnostics (:meth:`SlotActor.report`).
SLOT_EVENTS = 4096

#: ``on_event(level, kind, payload)``: diagnostics as they happen (batch failures and retries,
#: worker deaths and restarts), for the run's events.jsonl.
EventSink = Callable[[str, str, dict[str, Any]], None]


def _no_events(level: str, kind: str, payload: dict[str, Any]) -> None:
    pass


#: Whether :func:`init_ray` began the Ray session of this process (so :func:`stop_ray` ends it;
#: a session a caller began, such as the test suite's shared cluster, is left alone).
_session_is_ours = False
#: Whether that session's cluster was started here (no ``ray_address``), not joined.
_cluster_is_local = False


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


def _drained(worker: Worker | None) -> dict[str, Any] | None:
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
        _close(self.worker)

    def run(self, batch: Batch) -> Reply:
        result = self._run(batch)
        return Reply(result, _drained(self.worker))

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
        _close(worker)

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
            _close(old)
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
            _close(old)  # free the engine's memory before the next load
        finally:
            with self._gate:
                self._swapping, self._retire = False, False
                self._gate.notify_all()

    def run(self, batch: Batch, plan_index: int) -> Reply:
        result = self._run(batch, plan_index)
        return Reply(result, _drained(self.worker))

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


def _close(worker: Worker | None) -> None:
    close = getattr(worker, "close", None)
    if callable(close):
        close()


@dataclass
class _Slot:
    actor: Any
    worker_id: str
    plan_index: int | None  # None: a shared slot, serving any swappable plan
    outstanding: int = 0
    busy_s: float = 0.0
    target: int | None = None  # the plan a shared slot holds (or will, once queued calls run)
    recovering: bool = False  # Ray is restarting the actor; no work until ready() answers
    probe: Any = None  # the ready() call in flight while recovering
    probe_at: float = 0.0  # when to send the next ready() while recovering
    dead: bool = False  # Ray gave up restarting it
    died_at: float = 0.0  # when its last death was seen


@dataclass
class DispatchStats:
    batches: int = 0
    failures: int = 0
    restarts: int = 0
    loads: int = 0
    load_s: float = 0.0
    first_submit: float | None = None
    last_result: float | None = None
    busy_s: dict[str, float] = field(default_factory=dict)
    request_retries: int = 0  # requests a worker sent again (the openai backend's retries)
    retry_reasons: Counter[str] = field(default_factory=Counter)

    def note(self, worker: str, batch: Batch, diagnostics: Any, on_event: EventSink) -> None:
        """Count what a worker reported with a batch; a ``request_retries`` event per report."""
        if not diagnostics or not diagnostics.get("request_retries"):
            return
        retries = int(diagnostics["request_retries"])
        self.request_retries += retries
        self.retry_reasons.update(diagnostics.get("reasons") or {})
        on_event(
            "info",
            "request_retries",
            {
                "worker": worker,
                "batch": batch.batch_id,
                "retries": retries,
                "reasons": diagnostics.get("reasons") or {},
                "total": self.request_retries,
            },
        )

    def utilisation(self) -> float:
        """Mean fraction of the dispatch wall time each worker spent running batches."""
        if self.first_submit is None or self.last_result is None or not self.busy_s:
            return 0.0
        wall = self.last_result - self.first_submit
        return sum(self.busy_s.values()) / (wall * len(self.busy_s)) if wall > 0 else 0.0


def init_ray(
    address: str | None,
    num_cpus: int | None,
    *,
    quiet: bool = False,
    attempts: int = RAY_START_ATTEMPTS,
    on_event: EventSink = _no_events,
) -> None:
    """Connect to ``address`` or start a small local cluster, retrying a slow start.

    A local cluster gets no dashboard and ``num_cpus`` (default: this machine's CPUs) worker
    slots. ``quiet`` keeps Ray's own warnings and the workers' output off the console.
    """
    # Ray reads these when it is imported (RAY_DEDUP_LOGS into a module constant): set after
    # ``import ray``, the workers' repeated lines still came folded ("[repeated 4x across
    # cluster]"). A value the user set is kept.
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return
    if quiet:
        logging.getLogger("ray").setLevel(logging.ERROR)
    options: dict[str, Any] = {"log_to_driver": not quiet}
    if address:
        options["address"] = address
    else:
        options.update(
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=False,
            configure_logging=False,
            # Workers are long-lived actors, each started on demand; idle task workers that
            # Ray would prestart (one per CPU) only add load while the node starts.
            _system_config=LOCAL_RAY_SYSTEM_CONFIG,
        )
    global _session_is_ours, _cluster_is_local
    _session_is_ours = True  # from the first try on: a start cut short leaves processes too
    _cluster_is_local = not address
    for attempt in range(1, attempts + 1):
        try:
            problem = address_problem(address) if address else None
            if problem is not None:  # ray.init would wait for it forever
                raise ConnectionError(problem)
            try:
                ray.init(**options)
            except SystemExit as stop:  # ray.init's own SIGTERM handler: sys.exit(15)
                if stop.code == signal.SIGTERM:
                    raise interrupts.Terminated(signal.SIGTERM) from None
                raise
            finally:
                interrupts.reclaim()
            return
        except Exception as error:  # Ray raises bare Exception, TimeoutError, ConnectionError
            ray.shutdown()
            text = f"{type(error).__name__}: {error}"
            if attempt == attempts and address:
                raise ClusterError(
                    f"could not connect to Ray at {address} in {attempts} attempts (last: "
                    f"{text}); start the cluster there (`ray start --head`) or correct "
                    "execution.ray_address"
                ) from error
            if attempt == attempts:
                raise ClusterError(
                    f"could not start a local Ray cluster in {attempts} attempts (last: "
                    f"{text}). On a loaded machine, retry later or lower execution.num_cpus; or "
                    "start a cluster with `ray start --head` and set execution.ray_address"
                ) from error
            pause = RAY_START_BACKOFF_S[min(attempt - 1, len(RAY_START_BACKOFF_S) - 1)]
            on_event(
                "warning",
                "ray_start_retry",
                {"attempt": attempt, "of": attempts, "pause_s": pause, "error": text},
            )
            time.sleep(pause)


def stop_ray() -> None:
    """End the Ray session :func:`init_ray` began in this process, with its local cluster's
    processes; Ctrl-C cannot cut it short (a second one used to leave Ray's processes behind
    and a traceback from Ray's exit handler on the console)."""
    global _session_is_ours
    if not _session_is_ours:
        return
    import ray

    with interrupts.ignored():
        ray.shutdown()
    _session_is_ours = False


#: Ray's resource names for the actor options that reserve them.
_RESOURCE_OPTIONS = {"num_cpus": "CPU", "num_gpus": "GPU"}


@dataclass(frozen=True)
class WorkerRequest:
    """``count`` worker actors of one kind (a config entry, or the shared slots) and what each
    reserves from Ray."""

    label: str
    count: int
    each: dict[str, float]


def _reserved(actor_options: dict[str, Any]) -> dict[str, float]:
    out = {
        resource: float(actor_options[option])
        for option, resource in _RESOURCE_OPTIONS.items()
        if actor_options.get(option)
    }
    for name, amount in (actor_options.get("resources") or {}).items():
        out[str(name)] = float(amount)
    return out


def worker_requests(
    plans: Sequence[BackendPlan], shared_slots: int | None = None
) -> list[WorkerRequest]:
    """The worker actors a campaign's dispatcher starts, as it starts them."""
    swappable = [bool(shared_slots) and plan.swappable for plan in plans]
    out = [
        WorkerRequest(
            f"models[{index}] ({plan.backend})", plan.workers, _reserved(plan.actor_options)
        )
        for index, plan in enumerate(plans)
        if not swappable[index]
    ]
    if any(swappable):
        largest = max(
            (plan.actor_options for plan, shared in zip(plans, swappable, strict=True) if shared),
            key=lambda o: (o.get("num_gpus", 0), o.get("num_cpus", 0)),
        )
        out.append(WorkerRequest("execution.gpu_slots", shared_slots or 1, _reserved(largest)))
    return out


def check_placement(
    requests: Sequence[WorkerRequest],
    available: dict[str, float],
    largest_node: dict[str, float] | None = None,
    *,
    cluster: str = "the Ray cluster",
    source: str | None = None,
) -> None:
    """Refuse (exit 2) workers that the cluster can never place.

    Ray waits for room forever: a worker that cannot be placed would hang the run's start-up
    with nothing on the console. Checked: the total each resource needs against what the
    cluster has, and the largest single worker against the largest node.
    """
    totals: dict[str, float] = {}
    for request in requests:
        for resource, amount in request.each.items():
            totals[resource] = totals.get(resource, 0.0) + request.count * amount
    for resource, needed in sorted(totals.items()):
        have = float(available.get(resource, 0.0))
        if needed > have + 1e-9:
            parts = ", ".join(
                f"{r.label} {r.count} x {r.each[resource]:g}"
                for r in requests
                if r.each.get(resource)
            )
            unit = f"{resource}s" if resource in _RESOURCE_OPTIONS.values() else resource
            raise InputError(
                f"the workers need {needed:g} {unit} ({parts}) but {cluster} has {have:g}, so "
                "they could never all start; lower the workers (models[].workers, "
                f"execution.workers, execution.gpu_slots) or give the cluster more {unit}"
                + (" (execution.num_cpus)" if resource == "CPU" else ""),
                source=source,
            )
    for request in requests if largest_node is not None else ():
        assert largest_node is not None
        for resource, amount in request.each.items():
            have = float(largest_node.get(resource, 0.0))
            if amount > have + 1e-9:
                raise InputError(
                    f"one {request.label} worker needs {amount:g} {resource} but the largest "
                    f"node of {cluster} has {have:g}, so it could never start",
                    source=source,
                )


def cluster_capacity(ray: Any) -> tuple[dict[str, float], dict[str, float]]:
    """(the connected cluster's total resources, the largest alive node's resources)."""
    total = {str(k): float(v) for k, v in ray.cluster_resources().items()}
    largest: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive", True):
            for name, amount in (node.get("Resources") or {}).items():
                largest[name] = max(largest.get(name, 0.0), float(amount))
    return total, largest


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
        on_event: EventSink = _no_events,
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
            level, message = niceness_note(niced, local_cluster=_cluster_is_local, driver=driver)
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
            queue = self._queues[self._plan_of_model[batch.model]]
            if batch.round < 0:  # speculative (prefetch): after all planned work
                queue.append(batch)
                continue
            speculative = next((i for i, b in enumerate(queue) if b.round < 0), len(queue))
            queue.insert(speculative, batch)
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
            slot.busy_s += result.busy_s
            self.stats.busy_s[slot.worker_id] = slot.busy_s
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
        self.stats.failures += 1
        attempts = self._attempts.get(batch.batch_id, 0) + 1
        self._attempts[batch.batch_id] = attempts
        retry = attempts <= self.max_batch_retries
        self._event(
            "info" if retry else "error",
            "batch_failed",
            {
                "batch": batch.batch_id,
                "round": batch.round,
                "model": batch.model,
                "worker": result.worker,
                "attempt": attempts,
                "retry": retry,
                "error": (result.error or "")[:EVENT_ERROR_CHARS],
            },
        )
        if not retry:
            raise BackendError(
                f"batch {batch.batch_id} (model {batch.model}, round "
                f"{batch.round}) failed {attempts} times; last error on "
                f"{result.worker}: {result.error}"
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


class InlineDispatcher:
    """Runs batches in this process, no Ray: for tests, offline re-reads and quick checks.

    ``shuffle_seed`` returns finished batches in a random order (as a real cluster might) and
    ``crash_after`` raises :class:`KeyboardInterrupt` after that many batches, to test that
    decisions do not depend on arrival order and that a killed run resumes cleanly.
    """

    def __init__(
        self,
        plans: Sequence[BackendPlan],
        offsets: Sequence[int],
        *,
        batches_per_poll: int = 3,
        shuffle_seed: int | None = None,
        crash_after: int | None = None,
        on_event: EventSink = _no_events,
    ) -> None:
        import random

        self._event = on_event
        self._workers = [
            WorkerActor(plan.make_worker(offset), f"inline-{i}")
            for i, (plan, offset) in enumerate(zip(plans, offsets, strict=True))
        ]
        self._plan_of_model = [i for i, plan in enumerate(plans) for _ in plan.models]
        self._queue: list[Batch] = []
        self._per_poll = batches_per_poll
        self._random = random.Random(shuffle_seed) if shuffle_seed is not None else None
        self._crash_after = crash_after
        self.stats = DispatchStats()
        self.submitted: list[Batch] = []
        self._worker_count = len(self._workers)  # as the Ray dispatcher: kept after shutdown

    @property
    def num_workers(self) -> int:
        return self._worker_count

    def submit(self, batches: Sequence[Batch]) -> None:
        self._queue.extend(batches)
        self.submitted.extend(batches)

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float) -> list[BatchResult]:
        if self._random is not None:
            self._random.shuffle(self._queue)
        taken, self._queue = self._queue[: self._per_poll], self._queue[self._per_poll :]
        results = []
        for batch in taken:
            if self._crash_after is not None and self.stats.batches >= self._crash_after:
                raise KeyboardInterrupt("simulated crash")
            worker = self._workers[self._plan_of_model[batch.model]]
            reply = worker.run(batch)
            self.stats.note(worker.worker_id, batch, reply.diagnostics, self._event)
            result = reply.result
            if result.error is not None:
                raise BackendError(result.error)
            self.stats.batches += 1
            results.append(result)
        return results

    def shutdown(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers.clear()
