"""How a run's workers start: dispatch modes registered by name, chosen by ``execution.dispatch``.

A mode is a launcher: given a :class:`LaunchRequest` it starts the workers and returns them as
:class:`Workers` (batches in, results out). ``ray`` (the default) starts or joins a Ray cluster
and runs one actor per worker (:class:`~adaptive_eval.dispatch.pool.Dispatcher`); ``inline`` runs
the workers in this process, one batch at a time, without Ray
(:class:`~adaptive_eval.dispatch.inline.InlineDispatcher`: small campaigns, CI jobs,
benchmarks). Another mode (a scheduler of one's own, a test's instrumented one) registers the
same way, ``@dispatch_modes.register("name")``, and a config names it.

As the workers start, the run says so (:func:`starting`): a mode registered as a
:class:`DispatchMode` says it its own way (``ray`` names the cluster and Ray's log, ``inline``
shows no line), any other with :func:`announce_start`. The run loop names no mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.errors import ClusterError
from adaptive_eval.base.logs import EventSink, no_events
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.config.registry import Registry
from adaptive_eval.config.settings import ExecutionSettings
from adaptive_eval.dispatch import cluster
from adaptive_eval.dispatch.inline import InlineDispatcher
from adaptive_eval.dispatch.pool import Dispatcher
from adaptive_eval.dispatch.stats import DispatchStats


class Workers(Protocol):
    """Started workers, as the run loop drives them."""

    @property
    def num_workers(self) -> int: ...

    @property
    def stats(self) -> DispatchStats: ...

    def submit(self, batches: list[Batch]) -> None: ...
    def poll(self, timeout: float) -> list[BatchResult]: ...
    def pending(self) -> int: ...
    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class LaunchRequest:
    """What a dispatch mode needs to start a campaign's workers: the backends' worker plans and
    their trial offsets, the campaign's execution settings, whether the run is quiet, and where
    events go (``ray_log``: the file Ray's own output goes to, named in a failed start's
    message)."""

    plans: Sequence[BackendPlan]
    offsets: Sequence[int]
    execution: ExecutionSettings
    quiet: bool = False
    ray_log: Path | None = None
    on_event: EventSink = field(default=no_events)


Launcher = Callable[[LaunchRequest], Workers]


@dataclass(frozen=True)
class Starting:
    """What a run says as its workers start: a line for the console (``None``: no line; a
    quiet run shows none anyway) and the event it logs, with the event's fields."""

    line: str | None
    event: str
    fields: dict[str, Any]


#: How a mode announces its workers' start, given the mode's name and the launch request.
Announce = Callable[[str, LaunchRequest], Starting]


def announce_start(name: str, request: LaunchRequest) -> Starting:
    """The announcement of a mode that has none of its own: a line naming the mode, and a
    ``dispatch_start`` event."""
    return Starting(
        f"starting the workers (dispatch mode {name!r})\n",
        "dispatch_start",
        {"mode": name, "workers": len(request.plans)},
    )


@dataclass(frozen=True)
class DispatchMode:
    """A registered mode that carries how it announces its start: called, it launches."""

    launch: Launcher
    announce: Announce = announce_start

    def __call__(self, request: LaunchRequest) -> Workers:
        return self.launch(request)


def starting(name: str, launch: Launcher, request: LaunchRequest) -> Starting:
    """What the run says as the workers of mode ``name`` (its launcher ``launch``) start."""
    announce = launch.announce if isinstance(launch, DispatchMode) else announce_start
    return announce(name, request)


#: The dispatch modes by name (``execution.dispatch``).
dispatch_modes: Registry[Workers] = Registry("dispatch mode")


def launcher(name: str, *, source: str | None = None) -> Launcher:
    """The mode registered as ``name``; an unknown one is an InputError listing the known."""
    found: Launcher = dispatch_modes.factory(name, source=source, field="execution.dispatch")
    return found


def launch_ray(request: LaunchRequest) -> Workers:
    """Start (or join) the Ray cluster, then one actor per worker."""
    execution = request.execution
    try:
        cluster.init_ray(
            execution.ray_address,
            execution.num_cpus,
            quiet=request.quiet,
            on_event=request.on_event,
        )
    except ClusterError as error:
        where = f"; Ray's output is in {request.ray_log}" if request.ray_log else ""
        raise ClusterError(
            f"{error}{where} (a small campaign can run without Ray: "
            "--set execution.dispatch=inline)"
        ) from error
    return Dispatcher(
        request.plans,
        request.offsets,
        in_flight_per_worker=execution.in_flight_per_worker,
        max_batch_retries=execution.max_batch_retries,
        shared_slots=execution.gpu_slots,
        on_event=request.on_event,
    )


def ray_starting(name: str, request: LaunchRequest) -> Starting:
    """``ray`` names the cluster it starts or joins and the file Ray's output goes to."""
    address = request.execution.ray_address
    return Starting(
        f"starting Ray ({address or 'a local cluster'}) and the workers; "
        f"its output: {cluster.RAY_LOG}\n",
        "ray_starting",
        {"address": address},
    )


def launch_inline(request: LaunchRequest) -> Workers:
    """The workers in this process, no Ray."""
    return InlineDispatcher(
        request.plans,
        request.offsets,
        max_batch_retries=request.execution.max_batch_retries,
        on_event=request.on_event,
    )


def inline_starting(name: str, request: LaunchRequest) -> Starting:
    """``inline`` shows no line (the run goes on in this process at once)."""
    return Starting(None, "dispatch_start", {"mode": name, "workers": len(request.plans)})


dispatch_modes.register("ray")(DispatchMode(launch_ray, ray_starting))
dispatch_modes.register("inline")(DispatchMode(launch_inline, inline_starting))
