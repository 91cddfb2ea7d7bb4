"""The pool's in-process stand-in: the same interface, the workers called in this process (no
Ray). Tests and offline runs use it."""

from __future__ import annotations

from collections.abc import Sequence

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.logs import EventSink, no_events
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.dispatch.actors import WorkerActor
from adaptive_eval.dispatch.stats import DispatchStats


class InlineDispatcher:
    """Runs batches in this process, no Ray: for tests, offline re-reads and quick checks.

    A failed batch is run again up to ``max_batch_retries`` times, as the Ray dispatcher does
    (:meth:`DispatchStats.failed_batch`), then fails the run. The tests' variant, which returns
    batches in a random order and crashes on purpose, is
    :class:`adaptive_eval._testing.dispatch.UnrulyInlineDispatcher`.
    """

    def __init__(
        self,
        plans: Sequence[BackendPlan],
        offsets: Sequence[int],
        *,
        batches_per_poll: int = 3,
        max_batch_retries: int = 0,
        on_event: EventSink = no_events,
    ) -> None:
        self.max_batch_retries = max_batch_retries
        self._attempts: dict[int, int] = {}
        self._event = on_event
        self._workers = [
            WorkerActor(plan.make_worker(offset), f"inline-{i}")
            for i, (plan, offset) in enumerate(zip(plans, offsets, strict=True))
        ]
        self._plan_of_model = [i for i, plan in enumerate(plans) for _ in plan.models]
        self._queue: list[Batch] = []
        self._per_poll = batches_per_poll
        self.stats = DispatchStats()
        self._worker_count = len(self._workers)  # as the Ray dispatcher: kept after shutdown

    @property
    def num_workers(self) -> int:
        return self._worker_count

    def submit(self, batches: Sequence[Batch]) -> None:
        self._queue.extend(batches)

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float) -> list[BatchResult]:
        taken, self._queue = self._queue[: self._per_poll], self._queue[self._per_poll :]
        results = []
        for batch in taken:
            result = self._run_one(batch)
            if result is not None:
                results.append(result)
        return results

    def _run_one(self, batch: Batch) -> BatchResult | None:
        """Run one batch: its result, or None when it failed and was queued to run again."""
        worker = self._workers[self._plan_of_model[batch.model]]
        reply = worker.run(batch)
        self.stats.note(worker.worker_id, batch, reply.diagnostics, self._event)
        result = reply.result
        if result.error is not None:
            self.stats.failed_batch(
                batch,
                worker.worker_id,
                result.error,
                self.max_batch_retries,
                self._attempts,
                self._event,
            )
            self._queue.insert(0, batch)  # run again first, as the Ray dispatcher does
            return None
        self.stats.batches += 1
        return result

    def shutdown(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers.clear()
