"""The in-process dispatcher with the tests' knobs: batches returned in a random order, and a
crash on purpose, to test that decisions do not depend on arrival order and that a killed run
resumes cleanly. The production :class:`~adaptive_eval.dispatch.inline.InlineDispatcher` has
neither."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from adaptive_eval.backends.base import BackendPlan
from adaptive_eval.base.types import Batch, BatchResult
from adaptive_eval.dispatch.inline import InlineDispatcher


class UnrulyInlineDispatcher(InlineDispatcher):
    """:class:`InlineDispatcher` that, with ``shuffle_seed``, shuffles its queue before each poll
    (finished batches arrive in a random order, as on a real cluster), and with ``crash_after``
    raises :class:`KeyboardInterrupt` before running a batch once that many have finished."""

    def __init__(
        self,
        plans: Sequence[BackendPlan],
        offsets: Sequence[int],
        *,
        shuffle_seed: int | None = None,
        crash_after: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__(plans, offsets, **options)
        self._random = random.Random(shuffle_seed) if shuffle_seed is not None else None
        self._crash_after = crash_after

    def poll(self, timeout: float) -> list[BatchResult]:
        if self._random is not None:
            self._random.shuffle(self._queue)
        return super().poll(timeout)

    def _run_one(self, batch: Batch) -> BatchResult | None:
        if self._crash_after is not None and self.stats.batches >= self._crash_after:
            raise KeyboardInterrupt("simulated crash")
        return super()._run_one(batch)
