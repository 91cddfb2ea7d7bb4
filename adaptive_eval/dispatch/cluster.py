"""The Ray cluster a run uses: engines checked, placement checked, Ray started and stopped.

Everything here happens before the first batch or after the last: whether this interpreter has
the engines the config needs, whether the workers could ever be placed on the cluster (so a run
does not wait for Ray forever), starting or joining Ray with bounded retries, where Ray's own
output goes during a run, and ending the Ray session a run began.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base import interrupts
from adaptive_eval.base.errors import ClusterError, InputError
from adaptive_eval.base.logs import EventSink, no_events
from adaptive_eval.base.ray_address import address_problem
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.config.registry import BackendTraits, backends

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


#: Whether :func:`init_ray` began the Ray session of this process (so :func:`stop_ray` ends it;
#: a session a caller began, such as the test suite's shared cluster, is left alone).
_session_is_ours = False


#: Whether that session's cluster was started here (no ``ray_address``), not joined.
_cluster_is_local = False


def init_ray(
    address: str | None,
    num_cpus: int | None,
    *,
    quiet: bool = False,
    attempts: int = RAY_START_ATTEMPTS,
    on_event: EventSink = no_events,
) -> None:
    """Connect to ``address`` or start a small local cluster, retrying a slow start.

    A local cluster gets no dashboard and ``num_cpus`` (default: this machine's CPUs) worker
    slots. ``quiet`` keeps Ray's own warnings and the workers' output off the console. Where
    this process is already connected to Ray, that session is used as it is (an ``address``
    given is then not: one warning event says so).
    """
    # Ray reads these when it is imported (RAY_DEDUP_LOGS into a module constant): set after
    # ``import ray``, the workers' repeated lines still came folded ("[repeated 4x across
    # cluster]"). A value the user set is kept.
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        if address:  # a caller's own session (a notebook's ray.init): it is used, say so
            on_event("warning", "ray_already_connected", {"ray_address": address})
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


def check_engines(campaign: Campaign) -> None:
    """Refuse (exit 2) a campaign whose backends need an engine this interpreter lacks: the
    module each backend's registration names
    (:class:`~adaptive_eval.config.registry.BackendTraits`),
    checked with ``find_spec`` before Ray starts, so a missing engine is never imported into the
    driver just to be found missing."""
    for index, plan in enumerate(campaign.run.plans):
        traits: BackendTraits = backends.traits(plan.backend)
        module, install = traits.module, traits.install
        if module and importlib.util.find_spec(module) is None:
            raise InputError(
                f"the {plan.backend} backend needs the {module!r} package, which is not "
                f"installed; {install}",
                source=campaign.run.settings.source,
                field=f"models[{index}].backend",
            )


def check_local_placement(campaign: Campaign, *, planned_only: bool = False) -> None:
    """Refuse (exit 2), before Ray starts, workers a local cluster could never place.

    Only CPUs are known before a local cluster starts (Ray finds the GPUs itself); a cluster
    that is already up in this process, or one named by ``execution.ray_address``, is checked
    by the dispatcher against what it reports. ``planned_only`` checks the local cluster the
    config plans even so (``validate``, which starts nothing).
    """
    execution = campaign.run.settings.execution
    if execution.dispatch != "ray":
        return  # no Ray cluster to place them on (inline: the workers run in this process)
    if execution.ray_address or (ray_running() and not planned_only):
        return
    cpus = execution.num_cpus or os.cpu_count() or 1
    where = "execution.num_cpus" if execution.num_cpus else "this machine's CPU count"
    requests = [
        WorkerRequest(r.label, r.count, {"CPU": r.each["CPU"]})
        for r in worker_requests(campaign.run.plans, execution.gpu_slots)
        if r.each.get("CPU")
    ]
    check_placement(
        requests,
        {"CPU": float(cpus)},
        cluster=f"the local Ray cluster ({where})",
        source=campaign.run.settings.source,
    )


def ray_running() -> bool:
    ray = sys.modules.get("ray")  # never import Ray only to learn that it is not running
    return bool(ray is not None and ray.is_initialized())


#: Where Ray's own output goes during a run: its C++ driver messages (core_worker lines), its
#: Python warnings and the workers' forwarded output (stdout and stderr). The console keeps the
#: status line.
RAY_LOG = "ray.log"


@contextmanager
def ray_output_to(path: Path, console: IO[str]) -> Iterator[IO[str]]:
    """Point file descriptors 1 and 2 at ``path`` while Ray runs; yield the console to use.

    Ray's C++ core worker writes to descriptor 2 directly and the workers' forwarded output goes
    to the driver's stdout and stderr, so only redirecting the descriptors keeps them off the
    terminal. A console that is descriptor 2 itself is replaced by a copy of the original
    descriptor, so the status line and warnings still reach the terminal.
    """
    try:
        console_fd: int | None = console.fileno()
    except (AttributeError, OSError, ValueError):
        console_fd = None
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for fd in saved:
        os.dup2(target, fd)
    os.close(target)
    stream = os.fdopen(os.dup(saved[2]), "w", buffering=1) if console_fd == 2 else console
    try:
        yield stream
    finally:
        if stream is not console:
            stream.close()
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def cluster_is_local() -> bool:
    """Whether this process's Ray session started its own local cluster (not joined one)."""
    return _cluster_is_local
