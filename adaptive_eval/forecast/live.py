"""The forecast of the rest of a run, made after every round from all its evidence so far, beside
the loop (never in its way).

After an applied round the controller hands a snapshot (its decision core, with every pair
rule's memory, and its state, with the rounds in flight) to one background process; the loop
goes on. The process runs that very core forward (:func:`~adaptive_eval.forecast.simulate.run_core`,
continuing from the snapshot: nothing is replayed, a settled pair stays settled) on
``simulations`` truths drawn from the evidence (:mod:`adaptive_eval.forecast.predictive`: each
cell's posterior, tilted to a deconvolved spacing of the models' scores, which measured best
here; docs/forecast.md), without the budget, so each path also says where a pair the budget
would leave unsettled settles. A new snapshot is sent only when the process is free (the latest
round wins); a result is read when the loop next looks. A forecast that fails or a process that
dies is one ``live_forecast_failed`` event, and the run goes on without it.

The rest of the run is priced at the run's own costs so far: a new trial of a cell costs the
cell's mean tokens (the model's where the cell has none) and GPU-seconds, and takes the run's
steady seconds per trial since its first round (start-up, Ray and engine loads, counted once in
what has elapsed, not per trial).
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from types import MappingProxyType
from typing import Any

import numpy as np

from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.decide.contracts import AnyOf, CampaignView, StoppingRule
from adaptive_eval.decide.core import DecisionCore, RoundDecision
from adaptive_eval.decide.state import RoundCosts, RunState
from adaptive_eval.forecast.campaign import Range
from adaptive_eval.forecast.predictive import Predictive
from adaptive_eval.forecast.simulate import Costing, Truth, run_core

#: Simulated continuations per live forecast: 10th and 90th percentiles from 20 draws.
LIVE_SIMULATIONS = 20
#: The share of the run's wall time the background process may compute: after a forecast that
#: took s seconds, the next is asked for no sooner than s (1 / DUTY - 1) seconds later. On a
#: machine whose cores the run keeps busy (2 cores, inline dispatch, sibling hyperthreads) a
#: forecast computing all the time slowed a 50 x 500 campaign 14-21% even at nice 19.
DUTY = 0.1
#: A run this young gets no background process yet: a run of a few seconds (a test, a tiny
#: campaign) would pay its start-up for nothing.
START_AFTER_S = 3.0


@dataclass(frozen=True)
class Snapshot:
    """What the background process needs of the run after one applied round."""

    round: int
    core: bytes  # the pickled decision core (rules' memory included)
    state: bytes  # the pickled run state (rounds in flight included)
    elapsed_s: float
    seconds_per_trial: float | None  # the steady rate since the first round
    seed: int
    simulations: int


@dataclass(frozen=True)
class LiveForecast:
    """The rest of the run as forecast after round ``round`` (with ``trials_used`` recorded).
    ``*_to_go``: what is still to come; ``trials``: the run's total at its stop, unbudgeted.
    ``budget_short``: pairs the configured trial budget leaves unsettled in the median path
    (None: no trial budget); ``budget_needed``: the trials by which the median path settles
    them all."""

    round: int
    trials_used: int
    elapsed_s: float
    simulations: int
    trials: Range
    trials_to_go: Range
    tokens_to_go: Range | None
    gpu_s_to_go: Range | None
    wall_s_to_go: Range | None
    pairs_to_settle: Range
    settled_now: int
    budget_trials: int | None = None
    budget_short: float | None = None
    budget_needed: float | None = None
    seconds: float = 0.0  # the forecast's own compute time

    def record(self) -> dict[str, Any]:
        def rng(value: Range | None) -> dict[str, float] | None:
            return None if value is None else value.record()

        return {
            "round": self.round,
            "trials_used": self.trials_used,
            "elapsed_s": round(self.elapsed_s, 3),
            "simulations": self.simulations,
            "trials": rng(self.trials),
            "trials_to_go": rng(self.trials_to_go),
            "tokens_to_go": rng(self.tokens_to_go),
            "gpu_s_to_go": rng(self.gpu_s_to_go),
            "wall_s_to_go": rng(self.wall_s_to_go),
            "pairs_to_settle": rng(self.pairs_to_settle),
            "settled_now": self.settled_now,
            "budget_trials": self.budget_trials,
            "budget_short": self.budget_short,
            "budget_needed": self.budget_needed,
            "seconds": round(self.seconds, 3),
        }

    def line(self) -> str:
        """The progress line's part: "about 9,800 trials to go (7,100 to 14,300)"."""
        to_go = self.trials_to_go
        text = f"about {to_go.p50:,.0f} trials to go ({to_go.p10:,.0f} to {to_go.p90:,.0f})"
        if self.wall_s_to_go is not None:
            text += f", about {_duration(self.wall_s_to_go.p50)}"
        return text

    def budget_warning(self) -> str | None:
        """What the budget will leave unsettled, once the median path says so."""
        if self.budget_trials is None or not self.budget_short or self.budget_short < 1:
            return None
        needed = (
            ""
            if self.budget_needed is None
            else (f"; about {self.budget_needed:,.0f} trials would settle them")
        )
        return (
            f"the trial budget ({self.budget_trials:,}) will likely leave "
            f"{self.budget_short:.0f} pair(s) unsettled that the campaign can settle{needed}"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def without_budget(stopping: StoppingRule) -> StoppingRule:
    """The campaign's stopping rules less the ``budget`` rule (the forecast applies it)."""
    if isinstance(stopping, AnyOf):
        kept = [rule for rule in stopping.rules if rule.name != "budget"]
        return AnyOf(*kept)
    return stopping


def freeze_core(core: DecisionCore) -> bytes:
    """``core`` pickled (its rules' memories are read-only mappings, sent as dicts)."""
    memory = core.state.memory
    portable = copy.copy(core)
    if memory is not None:
        portable.state = replace(core.state, memory=tuple(dict(m) for m in memory))
    return pickle.dumps(portable)


def thaw_core(frozen: bytes) -> DecisionCore:
    """A fresh copy of the core :func:`freeze_core` pickled."""
    core: DecisionCore = pickle.loads(frozen)
    memory = core.state.memory
    if memory is not None:
        core.state = replace(core.state, memory=tuple(MappingProxyType(m) for m in memory))
    return core


def forecast_rest(
    campaign: Campaign, snapshot: Snapshot, predictive: str = "spacing"
) -> LiveForecast:
    """Run the snapshot's core forward ``snapshot.simulations`` times (see the module)."""
    started = time.perf_counter()
    state: RunState = pickle.loads(snapshot.state)
    counts = state.counts + np.rint(np.maximum(campaign.prior - 1, 0)).astype(np.int64)
    drawn = Predictive.of(counts, campaign.weights, predictive)
    costing = _run_costs(state)
    budget = campaign.settings.budget.trials
    used = state.trials_used
    settled_now = 0
    finals: list[float] = []
    tokens: list[float] = []
    gpu_s: list[float] = []
    settle: list[float] = []
    short: list[float] = []
    needed: list[float] = []
    for index in range(snapshot.simulations):
        rng = np.random.default_rng([snapshot.seed, snapshot.round, index])
        probs = drawn.draw(rng)
        core = thaw_core(snapshot.core)
        core.stopping = without_budget(core.stopping)
        core.limits = replace(core.limits, trial_budget=None)
        if index == 0:
            settled_now = sum(d.settled for d in core.decisions)
        run = pickle.loads(snapshot.state)
        path: list[tuple[int, int]] = []  # (trials, settled) after each simulated round

        def watch(
            view: CampaignView, outcome: RoundDecision, path: list[tuple[int, int]] = path
        ) -> None:
            path.append((view.trials_used, sum(d.settled for d in outcome.decisions)))

        run_core(
            core,
            run,
            campaign.view_settings(),
            Truth(probs, campaign.weights),
            rng,
            watch=watch,
            costing=costing,
            decided=True,
        )
        final = run.trials_used
        finals.append(float(final))
        last_settled = path[-1][1] if path else settled_now
        settle.append(float(last_settled - settled_now))
        tokens.append(float(run.tokens_sum.sum() - state.tokens_sum.sum()))
        gpu_s.append(float(run.gpu_s_sum.sum() - state.gpu_s_sum.sum()))
        if budget is not None:
            within = [s for t, s in path if t <= budget]
            at_budget = within[-1] if within else settled_now
            short.append(float(last_settled - at_budget))
            reach = next((t for t, s in path if s >= last_settled), final)
            needed.append(float(reach))
    to_go = [f - used for f in finals]
    rate = snapshot.seconds_per_trial
    known_tokens = bool(state.tokens_count.any())
    known_gpu = bool(state.gpu_s_sum.any())
    return LiveForecast(
        snapshot.round,
        used,
        snapshot.elapsed_s,
        snapshot.simulations,
        Range.of(finals),
        Range.of(to_go),
        Range.of(tokens) if known_tokens else None,
        Range.of(gpu_s) if known_gpu else None,
        None if rate is None else Range.of([t * rate for t in to_go]),
        Range.of(settle),
        settled_now,
        budget,
        None if budget is None else float(np.median(short)),
        None if budget is None else float(np.median(needed)),
        time.perf_counter() - started,
    )


def _run_costs(state: RunState) -> Costing:
    """Each simulated round priced at the run's own costs so far (see the module)."""
    counted = state.tokens_count
    known = counted > 0
    model_counted = counted.sum(axis=1)
    overall = state.tokens_sum.sum() / max(int(model_counted.sum()), 1)
    per_model = np.where(
        model_counted > 0, state.tokens_sum.sum(axis=1) / np.maximum(model_counted, 1), overall
    )
    cell = state.tokens_sum / np.maximum(counted, 1)
    unit_tokens = np.where(known, cell, per_model[:, None])
    unit_gpu = state.gpu_s_sum / np.maximum(state.trials, 1)
    has_tokens = bool(known.any())

    def price(plan: np.ndarray, before: np.ndarray, counts: np.ndarray) -> RoundCosts:
        trials = counts.sum(axis=2)
        if not has_tokens:
            return RoundCosts(np.zeros(trials.shape), np.zeros_like(trials), trials * unit_gpu)
        return RoundCosts(trials * unit_tokens, trials, trials * unit_gpu)

    return price


# -- the background process ----------------------------------------------------------------------

_CAMPAIGN: Campaign | None = None


def _start(campaign: Campaign) -> None:
    global _CAMPAIGN
    _CAMPAIGN = campaign
    # The forecast takes only what the run leaves idle: on a machine whose cores the run uses
    # (inline dispatch on 2 cores), it must not slow the run it forecasts.
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)


def _forecast_in_worker(snapshot: Snapshot) -> LiveForecast:
    assert _CAMPAIGN is not None
    return forecast_rest(_CAMPAIGN, snapshot)


class LiveForecaster:
    """One background process forecasting the rest of the run after each round it is free for.

    :meth:`after_round` sends a snapshot if the process is idle and returns a finished forecast
    if one is ready (``None`` otherwise); it never waits. ``inline=True`` forecasts in this
    process instead (tests, and where a process cannot be started)."""

    def __init__(
        self,
        campaign: Campaign,
        *,
        simulations: int = LIVE_SIMULATIONS,
        seed: int = 0,
        inline: bool = False,
    ) -> None:
        self.campaign = campaign
        self.simulations = simulations
        self.seed = seed
        self.inline = inline
        self._pool: ProcessPoolExecutor | None = None
        self._pending: Future[LiveForecast] | None = None
        self.history: list[LiveForecast] = []
        self.failures: list[str] = []
        self._first: tuple[float, int] | None = None  # (elapsed_s, trials) after round 0
        self._sent_round = 0  # the latest round a forecast was asked for
        self._rest_until = 0.0  # elapsed seconds before which no forecast is asked (DUTY)

    def seconds_per_trial(self, elapsed_s: float, trials: int) -> float | None:
        """The run's steady rate: elapsed time per trial since its first applied round (the
        start-up before it is not a per-trial cost)."""
        if self._first is None:
            if trials > 0:
                self._first = (elapsed_s, trials)
            return None
        start, first_trials = self._first
        if trials <= first_trials or elapsed_s <= start:
            return None
        return (elapsed_s - start) / (trials - first_trials)

    def after_round(
        self, core: DecisionCore, state: RunState, elapsed_s: float
    ) -> tuple[LiveForecast | None, str | None]:
        """(a finished forecast, a failure message): either may be None."""
        rate = self.seconds_per_trial(elapsed_s, state.trials_used)
        if not self.inline and elapsed_s < START_AFTER_S and self._pool is None:
            return None, None
        done, failed = self._collect()
        if done is not None and not self.inline:
            self._rest_until = elapsed_s + done.seconds * (1 / DUTY - 1)
        fresh = state.applied_rounds > self._sent_round and state.trials_used > 0
        rested = elapsed_s >= self._rest_until
        if self._pending is None and core.stop is None and fresh and rested:
            self._sent_round = state.applied_rounds
            try:
                snapshot = Snapshot(
                    state.applied_rounds,
                    freeze_core(core),
                    pickle.dumps(state),
                    elapsed_s,
                    rate,
                    self.seed,
                    self.simulations,
                )
            except Exception as error:
                return done, _failure(error)
            if self.inline:
                try:
                    found = forecast_rest(self.campaign, snapshot)
                except Exception as error:
                    return done, _failure(error)
                self.history.append(found)
                return found, failed
            try:
                self._pending = self._executor().submit(_forecast_in_worker, snapshot)
            except Exception as error:
                self.close()
                return done, _failure(error)
        return done, failed

    def _collect(self) -> tuple[LiveForecast | None, str | None]:
        pending = self._pending
        if pending is None or not pending.done():
            return None, None
        self._pending = None
        try:
            found = pending.result()
        except Exception as error:
            self.close()
            return None, _failure(error)
        self.history.append(found)
        return found, None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the driver may hold Ray's threads, which a fork would copy half-locked.
            self._pool = ProcessPoolExecutor(
                1, mp_context=get_context("spawn"), initializer=_start, initargs=(self.campaign,)
            )
        return self._pool

    def close(self) -> None:
        """Stop the background process now: a forecast still computing is of no use once the
        run has ended, and waiting for it kept a finished run's process alive 10 s and more
        (Python joins an executor's workers at exit)."""
        if self._pool is not None:
            workers = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            for worker in workers:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    worker.terminate()
            self._pool = None
        self._pending = None


def _failure(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]
