"""How a run's workers start: dispatch modes registered by name, chosen by ``execution.dispatch``.

A mode is a launcher: given a :class:`LaunchRequest` it starts the workers and returns them as
:class:`Workers` (batches in, results out). ``ray`` (the default) starts or joins a Ray cluster
and runs one actor per worker (:class:`~adaptive_eval.dispatch.pool.Dispatcher`); ``inline`` runs
the workers in this process, one batch at a time, without Ray
(:class:`~adaptive_eval.dispatch.inline.InlineDispatcher`: small campaigns, CI jobs,
benchmarks). Another mode (a scheduler of one's own, a test's instrumented one) registers the
same way, ``@dispatch_modes.register("name")``, and a config names it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.errors import ClusterError
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.control import cluster
from adaptive_eval.dispatch.inline import InlineDispatcher
from adaptive_eval.dispatch.pool import Dispatcher
from adaptive_eval.dispatch.stats import DispatchStats
from adaptive_eval.logs import EventSink, no_events
from adaptive_eval.registry import Registry
from adaptive_eval.settings import ExecutionSettings


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

#: The dispatch modes by name (``execution.dispatch``).
dispatch_modes: Registry[Workers] = Registry("dispatch mode")


def launcher(name: str, *, source: str | None = None) -> Launcher:
    """The mode registered as ``name``; an unknown one is an InputError listing the known."""
    found: Launcher = dispatch_modes.factory(name, source=source, field="execution.dispatch")
    return found


@dispatch_modes.register("ray")
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


@dispatch_modes.register("inline")
def launch_inline(request: LaunchRequest) -> Workers:
    """The workers in this process, no Ray."""
    return InlineDispatcher(
        request.plans,
        request.offsets,
        max_batch_retries=request.execution.max_batch_retries,
        on_event=request.on_event,
    )
