"""What dispatch counts over a run: batches, failures, restarts, model loads and retries, and
summary.json's ``dispatch`` block over every leg of a run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.logs import EventSink
from adaptive_eval.base.summary_schema import Dispatch, record
from adaptive_eval.base.types import Batch
from adaptive_eval.dispatch.actors import EVENT_ERROR_CHARS


@dataclass
class DispatchStats:
    batches: int = 0
    failures: int = 0
    restarts: int = 0
    loads: int = 0
    load_s: float = 0.0
    first_submit: float | None = None
    last_result: float | None = None
    #: Per worker, when each of its batches ran: ``(result_at - busy_s, result_at)`` on the
    #: driver's clock. A worker runs several batches at once (``in_flight_per_worker``), so
    #: their busy times overlap and only the union of the windows is time the worker worked.
    busy_windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    request_retries: int = 0  # requests a worker sent again (the openai backend's retries)
    retry_reasons: Counter[str] = field(default_factory=Counter)

    def failed_batch(
        self,
        batch: Batch,
        worker: str,
        error: str | None,
        max_batch_retries: int,
        attempts: dict[int, int],
        on_event: EventSink,
    ) -> None:
        """Count a failed batch (``attempts``: failures so far by batch id) and log it; raise
        :class:`BackendError` once it failed more than ``max_batch_retries`` times, else the
        caller runs it again. One rule for Ray and inline dispatch."""
        self.failures += 1
        tries = attempts.get(batch.batch_id, 0) + 1
        attempts[batch.batch_id] = tries
        retry = tries <= max_batch_retries
        on_event(
            "info" if retry else "error",
            "batch_failed",
            {
                "batch": batch.batch_id,
                "round": batch.round,
                "model": batch.model,
                "worker": worker,
                "attempt": tries,
                "retry": retry,
                "error": (error or "")[:EVENT_ERROR_CHARS],
            },
        )
        if not retry:
            raise BackendError(
                f"batch {batch.batch_id} (model {batch.model}, round {batch.round}) failed "
                f"{tries} times; last error on {worker}: {error}"
            )

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

    def worked(self, worker: str, result_at: float, busy_s: float) -> None:
        """Record that ``worker`` ran a batch for ``busy_s`` seconds up to ``result_at``."""
        self.busy_windows.setdefault(worker, []).append((result_at - busy_s, result_at))

    def utilisation(self) -> float:
        """Mean fraction of the dispatch wall time each worker spent running batches: the
        union of its batches' windows within the dispatch span, over that span (at most 1;
        batches that overlap on one worker count once)."""
        if self.first_submit is None or self.last_result is None or not self.busy_windows:
            return 0.0
        start, end = self.first_submit, self.last_result
        wall = end - start
        if wall <= 0:
            return 0.0
        covered = [covered_length(windows, start, end) for windows in self.busy_windows.values()]
        return sum(covered) / (wall * len(covered))


def covered_length(windows: list[tuple[float, float]], start: float, end: float) -> float:
    """Length of the union of ``windows`` clipped to ``[start, end]``.

    >>> covered_length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)], 0.0, 10.0)
    4.0
    """
    total, reach = 0.0, start
    for low, high in sorted(windows):
        low, high = max(low, reach), min(high, end)
        if high > low:
            total += high - low
            reach = high
    return total


def dispatch_summary(dispatcher: Any) -> Dispatch:
    """This leg's counts: summary.json's ``dispatch`` block for a run of one leg."""
    stats = dispatcher.stats
    return Dispatch(
        workers=dispatcher.num_workers,
        batches=stats.batches,
        failed_batches=stats.failures,
        worker_restarts=stats.restarts,
        worker_utilisation=stats.utilisation(),
        model_loads=stats.loads,
        load_s=stats.load_s,
        request_retries=stats.request_retries,
        request_retry_reasons=dict(stats.retry_reasons),
    )


#: Dispatch figures that describe the workers rather than add up over a run's legs.
_LARGEST = ("workers",)


def combine_dispatch(before: Dispatch | None, this_leg: Dispatch, dispatched: bool) -> Dispatch:
    """summary.json's ``dispatch`` over every leg of a run (a resume is a leg): batches,
    failures, restarts, loads and retries summed, workers the most any leg had, utilisation
    weighted by batches. A leg that started no worker adds nothing. What an earlier version
    counted and this one does not (e.g. the removed prefetch's ``prefetch``) is kept."""
    if before is None or not before.model_fields_set:
        return this_leg
    if not dispatched:
        return before
    old_record, new_record = record(before), record(this_leg)
    merged: dict[str, Any] = {}
    for key in [*old_record, *(k for k in new_record if k not in old_record)]:
        old, new = old_record.get(key), new_record.get(key)
        if key in _LARGEST:
            merged[key] = max(old or 0, new or 0)
        elif key == "worker_utilisation":
            old_batches = old_record.get("batches") or 0
            new_batches = new_record.get("batches") or 0
            weight = old_batches + new_batches
            merged[key] = (
                ((old or 0.0) * old_batches + (new or 0.0) * new_batches) / weight
                if weight
                else 0.0
            )
        elif isinstance(old, dict) or isinstance(new, dict):
            parts = [part for part in (old, new) if isinstance(part, dict)]
            merged[key] = {
                name: sum(part.get(name, 0) for part in parts)
                for name in sorted({name for part in parts for name in part})
            }
        elif isinstance(new, int | float) and isinstance(old, int | float):
            merged[key] = old + new
        else:
            merged[key] = new if new is not None else old
    return Dispatch.model_validate(merged)
