"""Dispatch on Ray: the pool that feeds batches to the worker actors and gathers results.

:mod:`.pool` is the driver's side (queues, in-flight batches, retries, restarts); :mod:`.actors`
is what runs inside Ray's worker processes; :mod:`.stats` counts; :mod:`.inline` stands in for
Ray in the same process; :mod:`.launch` holds the dispatch modes (``execution.dispatch``).
"""

from adaptive_eval.dispatch.inline import InlineDispatcher
from adaptive_eval.dispatch.launch import (
    DispatchMode,
    LaunchRequest,
    Starting,
    Workers,
    dispatch_modes,
    launcher,
    starting,
)
from adaptive_eval.dispatch.pool import Dispatcher
from adaptive_eval.dispatch.stats import (
    DispatchStats,
    combine_dispatch,
    dispatch_summary,
)

__all__ = [
    "DispatchMode",
    "DispatchStats",
    "Dispatcher",
    "InlineDispatcher",
    "LaunchRequest",
    "Starting",
    "Workers",
    "combine_dispatch",
    "dispatch_modes",
    "dispatch_summary",
    "launcher",
    "starting",
]
