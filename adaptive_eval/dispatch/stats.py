"""What dispatch counts over a run: batches, failures, restarts, model loads and retries, and
summary.json's ``dispatch`` block over every leg of a run."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from adaptive_eval.base.types import Batch
from adaptive_eval.logs import EventSink


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


def dispatch_summary(dispatcher: Any) -> dict[str, Any]:
    stats = dispatcher.stats
    return {
        "workers": dispatcher.num_workers,
        "batches": stats.batches,
        "failed_batches": stats.failures,
        "worker_restarts": stats.restarts,
        "worker_utilisation": stats.utilisation(),
        "model_loads": stats.loads,
        "load_s": stats.load_s,
        "request_retries": stats.request_retries,
        "request_retry_reasons": dict(stats.retry_reasons),
    }


#: Dispatch figures that describe the workers rather than add up over a run's legs.
_LARGEST = ("workers",)


def combine_dispatch(
    before: dict[str, Any] | None, this_leg: dict[str, Any], dispatched: bool
) -> dict[str, Any]:
    """summary.json's ``dispatch`` over every leg of a run (a resume is a leg): batches,
    failures, restarts, loads and retries summed, workers the most any leg had, utilisation
    weighted by batches. A leg that started no worker adds nothing."""
    if not isinstance(before, dict) or not before:
        return this_leg
    if not dispatched:
        return before
    merged: dict[str, Any] = {}
    for key in before.keys() | this_leg.keys():
        old, new = before.get(key), this_leg.get(key)
        if key in _LARGEST:
            merged[key] = max(old or 0, new or 0)
        elif key == "worker_utilisation":
            old_batches, new_batches = before.get("batches") or 0, this_leg.get("batches") or 0
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
    return merged


#: The counters of :class:`DispatchCounts`, in summary.json's order, and the types each holds.
_COUNTERS: dict[str, tuple[type, ...]] = {
    "workers": (int,),
    "batches": (int,),
    "failed_batches": (int,),
    "worker_restarts": (int,),
    "worker_utilisation": (int, float),
    "model_loads": (int,),
    "load_s": (int, float),
    "request_retries": (int,),
}


@dataclass(frozen=True)
class DispatchCounts:
    """summary.json's ``dispatch`` block as a value (the summary schema's ``Dispatch``): what
    dispatch counted over every leg of a run, as :func:`combine_dispatch` recorded it in the
    store. ``None``: a counter the record does not hold (a run from before it was counted).

    ``other`` keeps what earlier versions recorded and this one no longer counts (e.g. the
    removed speculative prefetch's ``prefetch``); ``keys`` the record's keys in their order,
    so :meth:`as_record` gives back the very block that was recorded, byte for byte once
    written as JSON.
    """

    workers: int | None = None
    batches: int | None = None
    failed_batches: int | None = None
    worker_restarts: int | None = None
    worker_utilisation: float | None = None
    model_loads: int | None = None
    load_s: float | None = None
    request_retries: int | None = None
    request_retry_reasons: Mapping[str, int] | None = None
    other: Mapping[str, object] = field(default_factory=dict)
    keys: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DispatchCounts:
        """The counts of a recorded ``dispatch`` block; ``TypeError`` naming a counter of the
        wrong type."""
        known: dict[str, Any] = {}
        for key, value in record.items():
            kinds = _COUNTERS.get(key)
            wrong = isinstance(value, bool) or not isinstance(value, kinds or object)
            if kinds is not None and value is not None and wrong:
                raise TypeError(f"dispatch.{key} = {value!r}: not a count")
            if key == "request_retry_reasons" and value is not None:
                if not isinstance(value, Mapping) or not all(
                    isinstance(n, int) and not isinstance(n, bool) for n in value.values()
                ):
                    raise TypeError(f"dispatch.{key} = {value!r}: not counts by reason")
                value = {str(reason): count for reason, count in value.items()}
            known[key] = value
        names = {f.name for f in fields(cls)} - {"other", "keys"}
        return cls(
            **{key: value for key, value in known.items() if key in names},
            other={k: copy.deepcopy(v) for k, v in known.items() if k not in names},
            keys=tuple(record),
        )

    def as_record(self) -> dict[str, Any]:
        """The block as summary.json (and the store) hold it: the recorded keys, in order (a
        value built without a record: the counters it holds, in the schema's order)."""
        order = self.keys or (
            *(
                key
                for key in (*_COUNTERS, "request_retry_reasons")
                if getattr(self, key) is not None
            ),
            *self.other,
        )
        out: dict[str, Any] = {}
        for key in order:
            value = self.other[key] if key in self.other else getattr(self, key)
            out[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
        return out
