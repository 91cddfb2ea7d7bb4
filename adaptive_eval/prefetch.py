"""Speculative prefetch: keep the engines busy while a round's stragglers finish.

A round is applied whole, and the round ``rounds_in_flight`` later is planned only once it is:
with heavy-tailed completion lengths the engines drain while one round's longest completions
run. Waiting is what keeps decisions deterministic and unbiased (long completions are more
often wrong, so a posterior without them would flatter a model), so the plans stay exactly as
they are; what changes is *when* a planned trial is generated. While rounds are in flight the
controller also sends *speculative* batches (round :data:`SPECULATIVE_ROUND`) holding the trials
most likely to be planned next: the next trial indices of the cells the latest round planned,
in its proportions. A trial is its seed, so a trial generated early is the same trial; it is
recorded only when a round plans it (then it joins that round at once, or on arrival if still
in flight), and a round never waits for anything it did not plan. Plans, recorded trials and
decisions are therefore identical with and without prefetch (tested); the cost is the
speculative trials no round ever plans, which are counted (``dispatch.prefetch`` in
summary.json) and priced into the compute ledger's used side by the runner.

Invariant per cell (m, q): the unclaimed speculative trials are exactly the indices
``[planned[m, q], planned[m, q] + ahead[m, q])``, since plans take a cell's trials in order and
speculation always takes the next ones past what is planned or already speculated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from adaptive_eval.types import Batch, BatchResult, Trial, WorkItem

#: The round index of a speculative batch: not a round of the plan.
SPECULATIVE_ROUND = -1

Key = tuple[int, int, int]  # model, question, trial


@dataclass
class PrefetchCounts:
    """What speculation sent and what rounds used of it (trials)."""

    sent: int = 0
    used: int = 0  # claimed by a round: recorded as that round's trials


class Prefetcher:
    """Speculative trials ahead of the plans, at most ``target`` unclaimed at a time."""

    def __init__(self, target: int, num_models: int, num_questions: int) -> None:
        self.target = target
        self.ahead = np.zeros((num_models, num_questions), dtype=np.int64)
        self.counts = PrefetchCounts()
        self._ready: dict[Key, tuple[Trial, int, str]] = {}  # generated, not yet planned
        self._flying: dict[Key, int] = {}  # sent, not back: trial -> speculative batch id
        # Per speculative batch in flight: its trials claimed so far -> the round claiming each.
        self._claims: dict[int, dict[Key, int]] = {}

    @property
    def unclaimed(self) -> int:
        return int(self.ahead.sum())

    def take(
        self, round_index: int, items: Iterable[WorkItem]
    ) -> tuple[list[WorkItem], list[BatchResult]]:
        """Split a new round's planned trials: generated ones become its results now, ones in
        flight are claimed for it (they join it on arrival), the rest are to be sent."""
        to_send: list[WorkItem] = []
        ready: dict[int, list[Trial]] = {}
        workers: dict[int, str] = {}
        for item in items:
            m, q = item.model, item.question
            covered = min(item.count, int(self.ahead[m, q]))
            self.ahead[m, q] -= covered
            for trial in range(item.first_trial, item.first_trial + covered):
                key = (m, q, trial)
                if key in self._ready:
                    generated, batch_id, worker = self._ready.pop(key)
                    ready.setdefault(batch_id, []).append(generated)
                    workers[batch_id] = worker
                else:
                    self._claims[self._flying.pop(key)][key] = round_index
            self.counts.used += covered
            if covered < item.count:
                to_send.append(WorkItem(m, q, item.first_trial + covered, item.count - covered))
        results = [
            BatchResult(batch_id, round_index, workers[batch_id], tuple(trials), 0.0)
            for batch_id, trials in ready.items()
        ]
        return to_send, results

    def receive(self, result: BatchResult) -> list[BatchResult]:
        """A speculative batch is back: its claimed trials as results of the rounds that
        planned them; the rest are kept until a round plans them."""
        claims = self._claims.pop(result.batch_id, None)
        if claims is None:
            return []  # a duplicate delivery
        claimed: dict[int, list[Trial]] = {}
        for trial in result.trials:
            key = (trial.model, trial.question, trial.trial)
            self._flying.pop(key, None)
            round_index = claims.get(key)
            if round_index is None:
                self._ready[key] = (trial, result.batch_id, result.worker)
            else:
                claimed.setdefault(round_index, []).append(trial)
        return [
            BatchResult(result.batch_id, round_index, result.worker, tuple(trials), 0.0)
            for round_index, trials in sorted(claimed.items())
        ]

    def choose(
        self, latest_plan: np.ndarray, planned: np.ndarray, capacity: np.ndarray, room: int
    ) -> list[WorkItem]:
        """Up to ``room`` more speculative trials (at most ``target`` unclaimed), spread over
        the cells of the latest plan in its proportions, never past a cell's capacity."""
        room = min(room, self.target - self.unclaimed)
        if room <= 0:
            return []
        headroom = np.maximum(capacity - planned - self.ahead, 0)
        weights = np.where(headroom > 0, latest_plan, 0).astype(np.float64)
        if weights.sum() <= 0:
            return []
        room = min(room, int(headroom.sum()))
        share = weights / weights.sum() * room
        take = np.minimum(np.floor(share).astype(np.int64), headroom)
        # Largest remainders first, one trial each, until the room is used.
        order = np.argsort(-(share - np.floor(share)), axis=None, kind="stable")
        left = room - int(take.sum())
        for flat in order:
            if left <= 0:
                break
            cell = np.unravel_index(flat, take.shape)
            if weights[cell] > 0 and take[cell] < headroom[cell]:
                take[cell] += 1
                left -= 1
        # Cells at their cap leave room over: the heaviest cells with headroom take it.
        for flat in np.argsort(-weights, axis=None, kind="stable"):
            if left <= 0:
                break
            cell = np.unravel_index(flat, take.shape)
            extra = min(left, int(headroom[cell] - take[cell])) if weights[cell] > 0 else 0
            take[cell] += extra
            left -= extra
        items = []
        for m, q in zip(*np.nonzero(take), strict=True):
            first = int(planned[m, q] + self.ahead[m, q])
            items.append(WorkItem(int(m), int(q), first, int(take[m, q])))
            self.ahead[m, q] += take[m, q]
        return items

    def sent(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            self._claims[batch.batch_id] = {}
            for item in batch.items:
                for trial in item.trials:
                    self._flying[(batch.model, item.question, trial)] = batch.batch_id
            self.counts.sent += batch.size

    def summary(self) -> dict[str, int | float]:
        """Counts for summary.json; unused ready trials' tokens and device time are priced."""
        ready = [trial for trial, _, _ in self._ready.values()]
        return {
            "sent": self.counts.sent,
            "used": self.counts.used,
            "unused": self.counts.sent - self.counts.used,
            "unused_ready": len(ready),
            "unused_in_flight": len(self._flying),
            "unused_tokens": sum(t.tokens or 0 for t in ready),
            "unused_gpu_s": round(sum(t.gpu_s or 0.0 for t in ready), 6),
        }
