"""The sequential loop: collect -> record -> apply -> decide -> allocate -> dispatch.

Determinism: rounds are planned ``rounds_in_flight`` ahead of the posterior and applied whole, in
round order. The plan of round r is made right after round r - rounds_in_flight is applied, so it
depends on the recorded trials alone, never on which batch happened to finish first. A resumed run
replays the stored rounds through the same code and reaches the same state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from adaptive_eval.base.accounting import Savings, compute_savings
from adaptive_eval.base.errors import BackendError
from adaptive_eval.base.types import (
    Batch,
    BatchResult,
    Trial,
    WorkItem,
    pack_batches,
)
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.control.round_events import RoundEvents
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import DecidedByCore, DecisionCore, RoundCore
from adaptive_eval.decide.state import RunState, expand_counts, missing_items
from adaptive_eval.stats.sequential import boundary_tables_built
from adaptive_eval.store import TrialStore


class DispatchPort(Protocol):
    def submit(self, batches: list[Batch]) -> None: ...
    def poll(self, timeout: float) -> list[BatchResult]: ...
    def pending(self) -> int: ...


class ForecastPoint(Protocol):
    """A forecast of the rest of the run, as the controller logs it."""

    @property
    def round(self) -> int: ...
    def record(self) -> dict[str, Any]: ...
    def budget_warning(self) -> str | None: ...
    def line(
        self, trials_now: int | None = None, seconds_per_trial: float | None = None
    ) -> str: ...


class RestForecaster(Protocol):
    """What forecasts the rest of the run beside the loop
    (:class:`adaptive_eval.forecast.forecaster.LiveForecaster`, wired in by the run loop): started
    with the campaign, then handed every round, it answers at once with a finished forecast or
    a failure, either may be None."""

    @property
    def history(self) -> Sequence[ForecastPoint]: ...
    def start(self) -> None: ...
    def after_round(
        self,
        core: DecisionCore,
        state: RunState,
        elapsed_s: float,
        seconds_per_trial: float | None = None,
    ) -> tuple[ForecastPoint | None, str | None]: ...
    def close(self) -> None: ...


@dataclass
class _Round:
    missing: int  # planned trials not yet recorded
    # model, question, category, tokens, gpu_s; None: recorded whole, read from the store
    trials: list[tuple[int, int, int, int, float]] | None


class Controller(DecidedByCore):
    """Drives one run: feeds recorded rounds to its decision core and dispatches its plans;
    :attr:`decisions` and :attr:`stop` are the core's (:class:`DecidedByCore`)."""

    def __init__(
        self,
        campaign: Campaign,
        store: TrialStore,
        dispatcher: DispatchPort,
        log: Any,
        on_progress: Callable[[Controller], None] | None = None,
        record_events: bool = True,  # False: a re-read of a recorded run writes no event
    ) -> None:
        self.campaign = campaign
        self.execution = campaign.run.settings.execution  # rounds in flight, batch size
        self.store = store
        self.dispatcher = dispatcher
        self.log = log
        self.on_progress = on_progress
        self.state = campaign.decision.empty_state()
        self.rounds: dict[int, _Round] = {}
        #: What decides (pairs, stop, plans): the campaign's rules, the same core the
        #: simulator and the benchmarks run. The controller only feeds it and records.
        self.core: RoundCore = campaign.decision.decision_core()
        self.settings = campaign.decision.view_settings()
        self.started = time.monotonic()
        self.elapsed_before = float(store.get_meta("elapsed_s") or 0.0)
        self.record_events = record_events
        self.events = RoundEvents(store, log, campaign.names, record_events)
        self._next_batch_id = store.max_batch_id()
        self._sent: dict[int, Batch] = {}  # batches in flight, by id
        #: The forecast of the rest of the run after each round (None: off); never waited on.
        self.live: RestForecaster | None = None
        self._budget_warned = False
        self._live_before: list[dict[str, Any]] | None = None
        #: Trials recorded in this leg, and (elapsed, trials) when its first result came: the
        #: time before it is start-up (Ray, engine loads), the time after it the steady rate.
        self.recorded = 0
        self.first_result: tuple[float, int] | None = None

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> None:
        self.resume()
        while self.step():
            pass
        self.store.set_meta(elapsed_s=self.elapsed_s, finished=True)

    def step(self) -> bool:
        """One turn: collect finished batches, record them, then apply every complete round."""
        results = self.dispatcher.poll(timeout=0.5)
        self.record(results)
        advanced = self.next_round_complete()
        while self.next_round_complete():
            self.advance()
        if self.live is not None and (advanced or results):
            self.forecast_rest()
        if not results and self.rounds and self.dispatcher.pending() == 0:
            raise BackendError(
                f"rounds {sorted(self.rounds)} lack trials but no work is in "
                "flight; a backend returned incomplete batches"
            )
        return not self.finished()

    def advance(self) -> None:
        """Apply the next round, decide, plan ahead, and commit the round's events at once."""
        self.apply_round()
        if self.state.applied_rounds == 1 and self.record_events:
            self.note_first_round()
        self.decide()
        self.plan()
        self.flush_events()

    # -- phases ---------------------------------------------------------------------------------
    def record(self, results: list[BatchResult]) -> None:
        """Make each result durable first; only then does it count towards its round."""
        late = [r for r in results if r.round not in self.rounds]
        for result in late:
            self.log.warning("late_result_ignored", batch=result.batch_id, round=result.round)
        results = [r for r in results if r.round in self.rounds]
        for result in results:
            self._check_complete(result)
        counts = self.store.record_many(results, self.campaign.run.settings.output.keep_completions)
        for result, added in zip(results, counts, strict=True):
            if added != len(result.trials):
                self.log.warning(
                    "duplicate_trials_ignored",
                    batch=result.batch_id,
                    duplicates=len(result.trials) - added,
                )
            self.recorded += added
            entry = self.rounds[result.round]
            entry.missing -= added
            if entry.trials is None:  # recorded whole before a resume: nothing here is new
                continue
            if added == len(result.trials):
                fresh: Sequence[Trial] = result.trials
            else:
                fresh = self._unseen(result) if added else []
            entry.trials.extend(
                (
                    t.model,
                    t.question,
                    t.category,
                    -1 if t.tokens is None else t.tokens,
                    t.gpu_s or 0.0,
                )
                for t in fresh
            )
        if results and self.first_result is None:
            self.first_result = (self.elapsed_s, self.recorded)
            if self.record_events and self.store.get_meta("first_result") is None:
                # Once per campaign: a forecast of its wall time prices start-up apart.
                self.store.set_meta(
                    first_result={"elapsed_s": self.elapsed_s, "trials": self.recorded}
                )
        if results and self.on_progress:
            self.on_progress(self)

    def _check_complete(self, result: BatchResult) -> None:
        """A result must hold exactly its batch's trials: nothing missing, nothing extra."""
        batch = self._sent.pop(result.batch_id, None)
        if batch is None:
            return  # a duplicate delivery: the store ignores its trials
        if not batch.answered_by(result.trials):
            raise BackendError(
                f"batch {batch.batch_id} from {result.worker}: returned trials do not match the "
                f"batch ({len(result.trials)} returned, {batch.size} asked for)"
            )

    def submit(self, batches: list[Batch]) -> None:
        for batch in batches:
            self._sent[batch.batch_id] = batch
        self.dispatcher.submit(batches)

    def _unseen(self, result: BatchResult) -> list[Trial]:
        """Trials this batch itself inserted (the first writer of a trial keeps its row)."""
        mine = self.store.batch_trial_keys(result.batch_id, result.round)
        return [t for t in result.trials if (t.model, t.question, t.trial) in mine]

    def next_round_complete(self) -> bool:
        entry = self.rounds.get(self.state.applied_rounds)
        return entry is not None and entry.missing <= 0

    def apply_round(self) -> None:
        round_index = self.state.applied_rounds
        entry = self.rounds.pop(round_index)
        if entry.trials is None:  # a resumed round recorded whole: its counts, from the store
            entry.trials = expand_counts(self.store.round_counts(round_index))
        # Sorting makes the applied order independent of arrival order.
        table = np.asarray(sorted(entry.trials), dtype=np.float64).reshape(-1, 5)
        ints = table[:, :4].astype(np.int64)
        self.state.apply(ints[:, 0], ints[:, 1], ints[:, 2], ints[:, 3], table[:, 4])

    def decide(self) -> None:
        started = time.perf_counter()
        tables = boundary_tables_built()
        outcome = self.core.decide(self.view())
        if boundary_tables_built() > tables:
            # A new error budget (Holm's step-down hands a settled pair's on) needs its
            # boundaries computed once: a warm-up, not a slow policy.
            self.events.warmed.discard("decide")
        self._warn_if_slow("decide", started)
        self.events.decided(
            outcome, self.state.trials_used, self.state.trials_through, self._compute
        )

    def plan(self) -> None:
        """Plan and dispatch rounds until ``rounds_in_flight`` are ahead of the posterior."""
        depth = self.execution.rounds_in_flight
        while len(self.state.plans) - self.state.applied_rounds < depth:
            started, stop_before = time.perf_counter(), self.core.stop
            in_flight = len(self.state.plans) - self.state.applied_rounds
            plan = self.core.next_plan(self.view(), in_flight)
            self._warn_if_slow("allocate", started)
            if plan is None:
                if stop_before is None and self.stop is not None:
                    self.events.emit("stop", reason=self.stop.reason.value, detail=self.stop.detail)
                return
            round_index = len(self.state.plans)
            self.store.add_round(round_index, plan)
            starts = self.state.add_plan(plan)
            self.rounds[round_index] = _Round(int(plan.sum()), [])
            cells = zip(*np.nonzero(plan), strict=True)
            items = [WorkItem(int(m), int(q), int(starts[m, q]), int(plan[m, q])) for m, q in cells]
            self.submit(self.batches(round_index, items))

    def note_first_round(self) -> None:
        """When the first round is in (once per campaign): the time before it is start-up
        (Ray, engine loads), which a forecast of the run's wall time counts once."""
        if self.store.get_meta("first_round") is None:
            mark = {"elapsed_s": self.elapsed_s, "trials": self.state.trials_used}
            self.store.set_meta(first_round=mark)
            self.log.info("first_round", **mark)

    def forecast_rest(self) -> None:
        """Hand the latest round to the live forecast and log what it has finished: an event,
        the run's forecast history (store metadata, summary.json's ``live_forecast``), and once a
        warning when the budget will leave a settleable pair unsettled."""
        assert self.live is not None
        # The forecast runs the campaign's own rules forward (a pilot's run forecasts nothing).
        assert isinstance(self.core, DecisionCore)
        found, failed = self.live.after_round(
            self.core, self.state, self.elapsed_s, self.seconds_per_trial()
        )
        if failed is not None:
            self.log.warning("live_forecast_failed", message=failed)
        if found is None:
            return
        self.log.info("live_forecast", **found.record())
        if self._live_before is None:  # an earlier leg's forecasts stay in the history
            self._live_before = list(self.store.get_meta("live_forecast") or [])
        history = self._live_before + [f.record() for f in self.live.history]
        self.store.set_meta(live_forecast=history)
        warning = found.budget_warning()
        if warning is not None and not self._budget_warned:
            self._budget_warned = True
            self.log.warning("budget_short", message=warning, round=found.round)

    def finished(self) -> bool:
        return self.stop is not None and not self.rounds

    # -- helpers --------------------------------------------------------------------------------
    def seconds_per_trial(self) -> float | None:
        """The steady rate of this leg: seconds per trial recorded since its first result
        (None before a second result)."""
        if self.first_result is None:
            return None
        start, trials = self.first_result
        elapsed = self.elapsed_s
        if self.recorded <= trials or elapsed <= start:
            return None
        return (elapsed - start) / (self.recorded - trials)

    @property
    def elapsed_s(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def view(self) -> CampaignView:
        return self.settings.view(self.state, self.elapsed_s)

    def batches(self, round_index: int, items: Iterable[WorkItem]) -> list[Batch]:
        found = pack_batches(round_index, items, self.execution.batch_size, self._next_batch_id)
        self._next_batch_id += len(found)
        return found

    def savings(self) -> Savings:
        state = self.state
        return compute_savings(
            state.trials,
            state.tokens_sum,
            state.tokens_count,
            state.gpu_s_sum,
            self.campaign.run.fixed_n,
        )

    def _compute(self) -> dict[str, Any]:
        return self.savings().as_dict()

    def _warn_if_slow(self, phase: str, started: float) -> None:
        self.events.timed(phase, time.perf_counter() - started)

    def flush_events(self) -> None:
        self.events.flush(self.state.applied_rounds, self.elapsed_s)

    # -- resume ---------------------------------------------------------------------------------
    def resume(self) -> None:
        """Rebuild the state from the store, re-dispatch what was in flight, then plan ahead.

        Complete rounds keep no trials in memory: :meth:`apply_round` reads each one's counts
        from the store, aggregated in SQL, when its turn comes, so memory does not grow with
        the number of recorded trials. Only rounds still missing trials load their keys.
        """
        plans = self.store.rounds()
        recorded = self.store.trials_per_round()
        for round_index, plan in enumerate(plans):
            starts = self.state.add_plan(plan)
            missing = int(plan.sum()) - recorded.get(round_index, 0)
            if not missing:
                self.rounds[round_index] = _Round(0, None)
                continue
            counts = self.store.round_counts(round_index)
            self.rounds[round_index] = _Round(missing, expand_counts(counts))
            have = self.store.round_trial_keys(round_index)
            self.submit(self.batches(round_index, missing_items(plan, starts, have)))
        if plans:
            self.log.info(
                "resume",
                rounds=len(plans),
                trials=sum(recorded.values()),
                in_flight=sum(r.missing for r in self.rounds.values()),
            )
        self.decide()
        self.plan()
        self.flush_events()
        while self.next_round_complete():
            self.advance()
