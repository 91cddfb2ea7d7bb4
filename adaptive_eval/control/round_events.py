"""What a round changed, as events committed with the round (``events.jsonl`` and the store).

A round's events are buffered while it is decided and planned, then committed in one
transaction with the run's elapsed time and logged; rounds committed before a resume are
replayed silently, so each event is logged exactly once however often the run was resumed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adaptive_eval.base.types import Verdict
from adaptive_eval.decide.core import RoundDecision
from adaptive_eval.store import TrialStore

#: Why a ``pair_decision`` event is logged in its round: the pair was decided in it, or was
#: decided earlier and has just become adjacent in the ranking (``decided_at_round`` says when).
DECIDED_NOW = "decided in this round"
#: A decide or plan phase slower than this is logged (a warning after its first, warm-up, call).
SLOW_POLICY_S = 0.05
BECAME_ADJACENT = "decided earlier; adjacent in the ranking from this round"


class RoundEvents:
    """The buffered events of the current round and what was logged before it."""

    def __init__(
        self, store: TrialStore, log: Any, names: tuple[str, ...], record: bool = True
    ) -> None:
        self.store = store
        self.log = log
        self.names = names
        # Rounds whose events (and elapsed time) were committed: a resume replays them silently,
        # and a re-read (``record=False``: ``report``) replays every round so.
        self.logged_through = int(store.get_meta("events_through") or -1) if record else 1 << 62
        self._events: list[tuple[str, str, dict[str, Any]]] = []
        # Each pair's verdict as last logged, whether or not the pair is adjacent now: a pair
        # that left the adjacent list and came back was logged as decided twice (at rounds 29
        # and 37 of the demo), and report.html drew it twice.
        self._logged_verdicts: dict[frozenset[int], Verdict] = {}
        self.warmed: set[str] = set()  # phases whose first slow call (table building) was seen

    def timed(self, phase: str, seconds: float) -> None:
        """Note how long a decision phase took; a slow one is logged."""
        if seconds <= SLOW_POLICY_S:
            return
        if phase not in self.warmed:
            # A phase's first slow call builds the rules' tables (boundaries, caches) once per
            # run: expected, logged to events.jsonl only. Later slow calls are the policy's.
            self.warmed.add(phase)
            self.log.info("policy_warmup", phase=phase, seconds=round(seconds, 4))
            return
        self.log.warning("slow_policy", phase=phase, seconds=round(seconds, 4))

    def emit(self, kind: str, level: str = "info", **payload: Any) -> None:
        """Buffer an event of the current round (see :meth:`flush`)."""
        self._events.append((kind, level, payload))

    def flush(self, round_index: int, elapsed_s: float) -> None:
        """Commit the round's events with the elapsed time in one transaction, then log them."""
        events, self._events = self._events, []
        if round_index <= self.logged_through:
            return
        self.store.add_events(
            round_index,
            [(kind, payload) for kind, _, payload in events],
            events_through=round_index,
            elapsed_s=elapsed_s,
        )
        self.logged_through = round_index
        for kind, level, payload in events:
            getattr(self.log, level)(kind, round=round_index, **payload)

    def decided(
        self,
        outcome: RoundDecision,
        trials_used: int,
        trials_through: Callable[[int | None], int | None],
        savings: Callable[[], dict[str, Any]],
    ) -> None:
        """The events of one round's decisions: pairs newly futile, verdicts that changed, the
        compute so far when one did, and a stop reached or withdrawn."""
        names, now = self.names, outcome.round
        futile_before = {frozenset((d.a, d.b)) for d in outcome.decisions_before if d.futile}
        changed = False
        for d in outcome.decisions:
            pair = frozenset((d.a, d.b))
            if d.futile and pair not in futile_before:
                self.emit(
                    "pair_futile",
                    a=names[d.a],
                    b=names[d.b],
                    z=round(d.z, 4),
                    trials_needed_per_question=d.projected,
                    trials_used=trials_used,
                )
            old = self._logged_verdicts.get(pair, Verdict.UNDECIDED)
            if d.verdict is not old and (d.settled or old.settled):
                changed = True
                self._logged_verdicts[pair] = d.verdict
                self.emit(
                    "pair_decision",
                    a=names[d.a],
                    b=names[d.b],
                    z=round(d.z, 4),
                    decision=d.verdict.value,
                    rule=d.rule,
                    # The rule's own round: a pair settled before it became adjacent in the
                    # ordering is logged now, but was decided then (as summary.json says).
                    decided_at_round=d.look,
                    trials_at_decision=trials_through(d.look),
                    logged=DECIDED_NOW if d.look in (None, now) else BECAME_ADJACENT,
                    trials_used=trials_used,
                )
        if changed:
            self.emit("compute", level="debug", **savings())
        stop, before = outcome.stop, outcome.stop_before
        if stop is not None and before is None:
            self.emit("stop", reason=stop.reason.value, detail=stop.detail)
        if stop is None and before is not None:
            self.emit("stop_withdrawn", reason=before.reason.value)
