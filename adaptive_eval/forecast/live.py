"""The forecast of the rest of a run, made again and again from all its evidence so far, beside
the loop (never in its way).

**What is computed.** After an applied round the controller hands a snapshot (its decision core,
with every pair rule's memory, and its state, with the rounds in flight) to one background
process; the loop goes on. The process runs that very core forward on ``simulations`` truths
drawn from the evidence (:mod:`adaptive_eval.forecast.predictive`: each cell's posterior, tilted
to a deconvolved spacing of the models' scores, which measured best here; docs/forecast.md),
without the budget, so each path also says where a pair the budget would leave unsettled
settles. Where every plug-in has a batched form the continuations advance together
(:mod:`adaptive_eval.forecast.batched`: one round of numpy calls for all of them, stopped ones
dropping out); otherwise one by one (:func:`~adaptive_eval.forecast.simulate.run_core`). Nothing
is replayed and a settled pair stays settled.

**When.** The first forecast is asked for as soon as a round is applied; after it, a new one
whenever the process is free and the run has moved on: by :data:`FRESH_SHARE` of the forecast
total in trials (or by :data:`FRESH_GROWTH` of its own trials, where that comes first), a pair
settled or dropped, or :data:`REFRESH_S` of wall time. The process
computes at most :data:`DUTY` of the run's wall time (it shares the machine with the run), and
the simulations grow (to :data:`MAX_GROWTH` times ``output.live_forecast``) while a forecast
takes less than :data:`TARGET_S`.

**The process** is forked from the run's process when the campaign starts, before Ray or any
other thread runs in it (so it starts warm: nothing to import, the campaign already in memory),
and spawned instead where threads already run (a fork would copy their locks held). It builds
the boundary tables the continuations will need while it waits (:meth:`~policies.batched.
GroupSequentialRows.levels`), runs at nice 19, and dies with the run's process however that
dies (``PR_SET_PDEATHSIG``, and the end of its pipe). A forecast that fails, a process that dies,
a snapshot that cannot be sent: one ``live_forecast_failed`` event and one console line for the
run; the forecast then goes on in the run's own process (at most :data:`INLINE_DUTY` of its
wall time), or, failing that too, stops.

The rest of the run is priced at the run's own costs so far: a new trial of a cell costs the
cell's mean tokens (the model's where the cell has none) and GPU-seconds, and takes the run's
steady seconds per trial since its first result (start-up, Ray and engine loads, counted once in
what has elapsed, not per trial).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from types import MappingProxyType
from typing import Any

import numpy as np

from adaptive_eval.base.accounting import budget_short_sentence
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.decide.batch import BatchSettings
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import DecisionCore, RoundDecision
from adaptive_eval.decide.state import RoundCosts, RunState
from adaptive_eval.forecast.batched import BatchCore, Continuations, continue_runs, without_budget
from adaptive_eval.forecast.campaign import Range
from adaptive_eval.forecast.predictive import Predictive
from adaptive_eval.forecast.simulate import Costing, Truth, run_core

#: Simulated continuations per live forecast unless ``output.live_forecast`` says otherwise:
#: the 10th and 90th percentiles from 20 draws at the least.
LIVE_SIMULATIONS = 20
#: A new forecast once the run has recorded this share of the latest forecast's total since it,
FRESH_SHARE = 0.1
#: ... or grown its trials by this share since it (early on, a first forecast from two trials a
#: question can be far off, and 10% of a total three times too large is a third of the run),
FRESH_GROWTH = 0.5
#: ... or this many seconds have passed (the wall time to go drifts with the run's rate).
REFRESH_S = 30.0
#: The share of the run's wall time the background process may compute (it shares the machine:
#: on 2 cores an inline campaign keeps one busy).
DUTY = 0.25
#: The share a forecast made in the run's own process may take (it holds the loop meanwhile).
INLINE_DUTY = 0.05
#: The simulations double while a forecast takes less than this, up to MAX_GROWTH times the
#: configured number (more draws, steadier 10-90% ranges).
TARGET_S = 1.0
MAX_GROWTH = 8
#: A run whose process cannot fork safely (threads run in it) spawns its forecast process only
#: once it is this old: a test or toy campaign would pay the spawn's imports for nothing.
SPAWN_AFTER_S = 2.0
#: No forecast in a run's first second, and no table built in its process's: a run that short
#: (a test, a toy campaign) needs none, and the work would only take CPU from it (and from the
#: test suite's other runs beside it).
FIRST_AFTER_S = 1.0
#: The process's niceness: below the run's on a shared core, but not starved by a busy machine
#: (at 19 a loaded 2-core machine gave it about 1% of a core: the first forecast of a run took
#: 135 s and none followed). Its share of the run's time is bounded by DUTY anyway.
NICE = 10
#: ``PR_SET_PDEATHSIG`` (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Snapshot:
    """What the background process needs of the run after one applied round."""

    round: int
    core: bytes  # the pickled decision core (rules' memory included)
    state: bytes  # the pickled run state (rounds in flight included)
    elapsed_s: float
    seconds_per_trial: float | None  # the steady rate since the first result
    seed: int
    simulations: int

    @classmethod
    def of(
        cls,
        core: DecisionCore,
        state: RunState,
        *,
        elapsed_s: float = 0.0,
        seconds_per_trial: float | None = None,
        seed: int = 0,
        simulations: int = LIVE_SIMULATIONS,
    ) -> Snapshot:
        """The snapshot of a run whose ``core`` has decided on its ``state``."""
        return cls(
            state.applied_rounds,
            freeze_core(core),
            pickle.dumps(state),
            elapsed_s,
            seconds_per_trial,
            seed,
            simulations,
        )


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
    seconds: float = 0.0  # the forecast's own compute time (CPU seconds of its process)
    seconds_per_trial: float | None = None  # the rate the wall time was priced at

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

    def line(self, trials_now: int | None = None, seconds_per_trial: float | None = None) -> str:
        """The progress line's part, counted down to ``trials_now`` recorded: "about 9,800
        trials to go (7,100 to 14,300), about 4 min, as of 40%". The age is the share of the
        forecast total the run had when it was made; the wall time is what is left at
        ``seconds_per_trial`` (the run's rate now; else the forecast's own)."""
        since = max(0, (trials_now or self.trials_used) - self.trials_used)
        to_go = self.trials_to_go
        low, mid, high = (max(0.0, v - since) for v in (to_go.p10, to_go.p50, to_go.p90))
        text = f"about {mid:,.0f} trials to go ({low:,.0f} to {high:,.0f})"
        rate = seconds_per_trial or self.seconds_per_trial
        if rate is not None:
            text += f", about {duration(mid * rate)}"
        elif self.wall_s_to_go is not None and to_go.p50 > 0:
            text += f", about {duration(self.wall_s_to_go.p50 * mid / to_go.p50)}"
        total = self.trials.p50
        if total > 0:
            text += f", as of {min(100.0, 100 * self.trials_used / total):.0f}%"
        return text

    def budget_warning(self) -> str | None:
        """What the budget will leave unsettled, once the median path says so."""
        if self.budget_trials is None or not self.budget_short or self.budget_short < 1:
            return None
        return budget_short_sentence(self.budget_trials, self.budget_short, self.budget_needed)


def duration(seconds: float) -> str:
    """A wall time as a person says it: "40 s", "4 min", "1.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
    campaign: Campaign,
    snapshot: Snapshot,
    predictive: str = "spacing",
    truths: list[np.ndarray] | None = None,
) -> LiveForecast:
    """Run the snapshot's core forward ``snapshot.simulations`` times (see the module), each
    on a truth drawn from ``predictive``; ``truths``: on these instead (a benchmark's oracle,
    which knows the true category probabilities)."""
    started = time.process_time()  # compute, not wall: a busy machine slows the wall clock
    state: RunState = pickle.loads(snapshot.state)
    core = thaw_core(snapshot.core)
    if truths is None:
        counts = state.counts + np.rint(np.maximum(campaign.prior - 1, 0)).astype(np.int64)
        drawn = Predictive.of(counts, campaign.weights, predictive)
        truths = [
            drawn.draw(np.random.default_rng([snapshot.seed, snapshot.round, index]))
            for index in range(snapshot.simulations)
        ]
    stopping = without_budget(core.stopping)
    batch = BatchCore.of(core, campaign.capacity, stopping)
    if batch is not None:
        runs = _together(campaign, batch, core, state, truths, snapshot)
    else:
        runs = _one_by_one(campaign, snapshot, state, truths)
    settled_now = sum(d.settled for d in core.decisions)
    return _summarise(campaign, snapshot, state, runs, settled_now, started)


def _together(
    campaign: Campaign,
    batch: BatchCore,
    core: DecisionCore,
    state: RunState,
    truths: list[np.ndarray],
    snapshot: Snapshot,
) -> Continuations:
    """The continuations advanced together (:func:`continue_runs`)."""
    probs = np.stack(truths)
    rng = np.random.default_rng([snapshot.seed, snapshot.round, len(truths)])
    settings = BatchSettings.of(campaign.view_settings(), campaign.prior, campaign.weights)
    unit_tokens, unit_gpu, has_tokens = _unit_costs(state)

    def sample(plan: np.ndarray, ids: np.ndarray, before: np.ndarray) -> np.ndarray:
        drawn = np.zeros((*plan.shape, probs.shape[-1]), dtype=np.int64)
        cells = np.nonzero(plan)
        p = probs[ids[cells[0]], cells[1], cells[2]]
        n = plan[cells]
        if p.shape[-1] == 2:  # a binomial draw: the same law, a fifth of the time
            hits = rng.binomial(n, np.clip(p[:, 1], 0.0, 1.0))
            drawn[(*cells, np.zeros_like(n))] = n - hits
            drawn[(*cells, np.ones_like(n))] = hits
        else:
            drawn[cells] = rng.multinomial(n, p)
        return drawn

    has_gpu = bool(unit_gpu.any())

    def price(plan: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        gpu = plan * unit_gpu if has_gpu else None
        if not has_tokens:
            return None, None, gpu
        return plan * unit_tokens, plan, gpu

    return continue_runs(batch, core, state, settings, len(truths), sample, price)


def _one_by_one(
    campaign: Campaign, snapshot: Snapshot, state: RunState, truths: list[np.ndarray]
) -> Continuations:
    """Each continuation by the core itself (:func:`run_core`): plug-ins with no batched form."""
    costing = _run_costs(state)
    finals, tokens, gpu_s, paths = [], [], [], []
    for index, probs in enumerate(truths):
        rng = np.random.default_rng([snapshot.seed, snapshot.round, index, 1])
        core = thaw_core(snapshot.core)
        core.stopping = without_budget(core.stopping)
        core.limits = replace(core.limits, trial_budget=None)
        run = pickle.loads(snapshot.state)
        path: list[tuple[int, int]] = []

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
        finals.append(run.trials_used)
        tokens.append(float(run.tokens_sum.sum() - state.tokens_sum.sum()))
        gpu_s.append(float(run.gpu_s_sum.sum() - state.gpu_s_sum.sum()))
        paths.append(path)
    return Continuations(np.asarray(finals), np.asarray(tokens), np.asarray(gpu_s), tuple(paths))


def _summarise(
    campaign: Campaign,
    snapshot: Snapshot,
    state: RunState,
    runs: Continuations,
    settled_now: int,
    started: float,
) -> LiveForecast:
    budget = campaign.settings.budget.trials
    used = state.trials_used
    settle, short, needed = [], [], []
    for final, path in zip(runs.trials.tolist(), runs.paths, strict=True):
        last_settled = path[-1][1] if path else settled_now
        settle.append(float(last_settled - settled_now))
        if budget is not None:
            within = [s for t, s in path if t <= budget]
            at_budget = within[-1] if within else settled_now
            short.append(float(last_settled - at_budget))
            reach = next((t for t, s in path if s >= last_settled), final)
            needed.append(float(reach))
    finals = [float(f) for f in runs.trials.tolist()]
    to_go = [f - used for f in finals]
    rate = snapshot.seconds_per_trial
    return LiveForecast(
        snapshot.round,
        used,
        snapshot.elapsed_s,
        snapshot.simulations,
        Range.of(finals),
        Range.of(to_go),
        Range.of(runs.tokens) if state.tokens_count.any() else None,
        Range.of(runs.gpu_s) if state.gpu_s_sum.any() else None,
        None if rate is None else Range.of([t * rate for t in to_go]),
        Range.of(settle),
        settled_now,
        budget,
        None if budget is None else float(np.median(short)),
        None if budget is None else float(np.median(needed)),
        time.process_time() - started,
        rate,
    )


def _unit_costs(state: RunState) -> tuple[np.ndarray, np.ndarray, bool]:
    """Each cell's cost of one more trial at the run's own costs so far: tokens (the cell's
    mean, the model's where the cell has none, the run's where the model has none) and
    GPU-seconds; and whether any token count is known."""
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
    return unit_tokens, unit_gpu, bool(known.any())


def _run_costs(state: RunState) -> Costing:
    """Each simulated round priced at the run's own costs so far (:func:`_unit_costs`)."""
    unit_tokens, unit_gpu, has_tokens = _unit_costs(state)

    def price(plan: np.ndarray, before: np.ndarray, counts: np.ndarray) -> RoundCosts:
        trials = counts.sum(axis=2)
        if not has_tokens:
            return RoundCosts(np.zeros(trials.shape), np.zeros_like(trials), trials * unit_gpu)
        return RoundCosts(trials * unit_tokens, trials, trials * unit_gpu)

    return price


# -- the background process ----------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask the kernel to end this process when its parent ends (Linux), and step aside: the run
    it forecasts comes first."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # Ctrl-C reaches the whole terminal's process group: the run's process stops this one.
    for signum in (signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICE)


def _serve(conn: Connection, parent: int, campaign: Campaign | None) -> None:
    """The forecast process: build boundary tables while idle, forecast each snapshot sent,
    answer ``("done", forecast)`` or ``("failed", message)``; end when the pipe or the parent
    does."""
    _die_with_parent()
    if os.getppid() != parent:  # the parent ended before the death signal was asked for
        return
    try:
        if campaign is None:
            campaign = pickle.loads(conn.recv())
        assert campaign is not None
        warm = _warm_up(campaign)
        idle_from = time.monotonic() + FIRST_AFTER_S
        while True:
            wait = 1.0 if warm is None else max(idle_from - time.monotonic(), 0.0)
            if not conn.poll(wait):
                ready = warm is not None and time.monotonic() >= idle_from
                if ready and next(warm, None) is None:
                    warm = None  # every table built
                if os.getppid() != parent:
                    return
                continue
            snapshot = conn.recv()
            if snapshot is None:
                return
            try:
                conn.send(("done", forecast_rest(campaign, snapshot)))
            except Exception as error:
                conn.send(("failed", _failure(error)))
    except (EOFError, OSError, KeyboardInterrupt):
        return


def _warm_up(campaign: Campaign) -> Any:
    """One boundary table per step, in the order the continuations will need them."""
    from policies.batched import batched_pair_rule

    for rule in campaign.pair_rules:
        batched = batched_pair_rule(rule, campaign.capacity)
        if batched is None:
            continue
        settings = campaign.view_settings()
        for _ in batched.warm(settings.confidence, settings.error_control):
            yield True


def _forked(conn: Connection, parent: int, campaign: Campaign) -> None:
    """The forked child's whole life: serve, then leave without running the parent's exit
    handlers or flushing its buffers (they are the parent's)."""
    code = 0
    try:
        _serve(conn, parent, campaign)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _spawned(conn: Connection, parent: int) -> None:
    _serve(conn, parent, None)


class ForecastProcess:
    """The one background process and its pipe."""

    def __init__(self, campaign: Campaign) -> None:
        parent = os.getpid()
        ours, theirs = multiprocessing.Pipe()
        self.forked = threading.active_count() == 1 and hasattr(os, "fork")
        process: multiprocessing.process.BaseProcess
        if self.forked:
            process = multiprocessing.get_context("fork").Process(
                target=_forked, args=(theirs, parent, campaign), daemon=True
            )
        else:
            process = multiprocessing.get_context("spawn").Process(
                target=_spawned, args=(theirs, parent), daemon=True
            )
        process.start()
        theirs.close()
        self.process = process
        self.conn = ours
        if not self.forked:
            ours.send(pickle.dumps(campaign))

    def send(self, snapshot: Snapshot) -> None:
        self.conn.send(snapshot)

    def answer(self) -> tuple[str, Any] | None:
        """The process's answer if one is ready (never waits); raises if the process died."""
        if self.conn.poll(0):
            found: tuple[str, Any] = self.conn.recv()
            return found
        if not self.process.is_alive():
            raise RuntimeError(f"the forecast process ended (exit code {self.process.exitcode})")
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.close()
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.terminate()
            self.process.join(2)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if self.process.is_alive():
                self.process.kill()
                self.process.join(1)


class LiveForecaster:
    """Forecasts the rest of the run beside it (see the module).

    :meth:`start` when the campaign starts; :meth:`after_round` after each applied round sends a
    snapshot if one is due and the process is free, and returns a finished forecast if one is
    ready and the first failure (each may be ``None``); it never waits. ``inline=True``
    forecasts in this process instead (tests; and after a failure of the process)."""

    def __init__(
        self,
        campaign: Campaign,
        *,
        simulations: int = LIVE_SIMULATIONS,
        seed: int = 0,
        inline: bool = False,
    ) -> None:
        self.campaign = campaign
        self.minimum = simulations
        self.simulations = simulations
        self.seed = seed
        self.inline = inline
        self.process: ForecastProcess | None = None
        self.history: list[LiveForecast] = []
        self.failures: list[str] = []
        self.busy_s = 0.0  # compute seconds of the forecasts made so far
        self._pending: Snapshot | None = None
        self._sent: tuple[int, int, int, float] | None = None  # round, trials, settled, elapsed
        self._off = False

    def start(self) -> None:
        """Start the process now if it can be forked (no other thread runs yet: before Ray);
        else it is spawned once the run is :data:`SPAWN_AFTER_S` old."""
        if self.inline or self.process is not None or self._off:
            return
        if threading.active_count() == 1:
            self._launch()

    def _launch(self) -> str | None:
        try:
            self.process = ForecastProcess(self.campaign)
        except Exception as error:
            return self._fail(error)
        return None

    def after_round(
        self,
        core: DecisionCore,
        state: RunState,
        elapsed_s: float,
        seconds_per_trial: float | None = None,
    ) -> tuple[LiveForecast | None, str | None]:
        """(a finished forecast, the run's first failure): either may be None."""
        if self._off:
            return None, None
        found, failed = self._collect()
        if self._pending is not None or core.stop is not None or state.trials_used <= 0:
            return found, failed
        if not self._due(core, state, elapsed_s):
            return found, failed
        if not self.inline and elapsed_s < FIRST_AFTER_S:
            return found, failed
        if not self.inline and self.process is None:
            if elapsed_s < SPAWN_AFTER_S:
                return found, failed
            failed = self._launch() or failed
            if self.process is None:
                return found, failed
        try:
            snapshot = Snapshot.of(
                core,
                state,
                elapsed_s=elapsed_s,
                seconds_per_trial=seconds_per_trial,
                seed=self.seed,
                simulations=self.simulations,
            )
        except Exception as error:
            return found, self._fail(error) or failed
        self._sent = (
            state.applied_rounds,
            state.trials_used,
            sum(d.settled or d.futile for d in core.decisions),
            elapsed_s,
        )
        if self.inline:
            return self._here(snapshot, found, failed)
        try:
            assert self.process is not None
            self.process.send(snapshot)
            self._pending = snapshot
        except Exception as error:
            return found, self._fail(error) or failed
        return found, failed

    def _due(self, core: DecisionCore, state: RunState, elapsed_s: float) -> bool:
        """Whether the run has moved on enough since the last forecast (see the module), within
        the compute share the process may take."""
        if self._sent is None:
            return True
        sent_round, sent_trials, sent_settled, sent_elapsed = self._sent
        if state.applied_rounds <= sent_round:
            return False
        duty = INLINE_DUTY if self.inline else DUTY
        if self.busy_s > duty * max(elapsed_s, 1e-9):
            return False
        total = self.history[-1].trials.p50 if self.history else 0.0
        since = state.trials_used - sent_trials
        moved = since >= min(FRESH_SHARE * total, FRESH_GROWTH * sent_trials)
        decided = sum(d.settled or d.futile for d in core.decisions) != sent_settled
        return moved or decided or elapsed_s - sent_elapsed >= REFRESH_S

    def _here(
        self, snapshot: Snapshot, found: LiveForecast | None, failed: str | None
    ) -> tuple[LiveForecast | None, str | None]:
        """Forecast ``snapshot`` in this process."""
        try:
            made = forecast_rest(self.campaign, snapshot)
        except Exception as error:
            return found, self._fail(error) or failed
        self._keep(made)
        return made, failed

    def _collect(self) -> tuple[LiveForecast | None, str | None]:
        if self._pending is None or self.process is None:
            return None, None
        try:
            answer = self.process.answer()
        except Exception as error:
            return None, self._fail(error)
        if answer is None:
            return None, None
        self._pending = None
        kind, value = answer
        if kind == "done":
            self._keep(value)
            return value, None
        return None, self._fail(value)

    def _keep(self, made: LiveForecast) -> None:
        self.history.append(made)
        self.busy_s += made.seconds
        if made.seconds < TARGET_S / 2:
            self.simulations = min(self.simulations * 2, self.minimum * MAX_GROWTH)
        elif made.seconds > 2 * TARGET_S:
            self.simulations = max(self.simulations // 2, self.minimum)

    def _fail(self, error: BaseException | str) -> str | None:
        """Note a failure; the first of the run is returned (one event, one line). The forecast
        goes on in this process after a failure of the background one, and stops after a
        failure here."""
        message = error if isinstance(error, str) else _failure(error)
        self.failures.append(message)
        if self.process is not None:
            self.process.close()
            self.process = None
        self._pending = None
        self._off = self.inline  # a failure here: no more forecasts for this run
        self.inline = True
        return message if len(self.failures) == 1 else None

    def close(self) -> None:
        """Stop the background process now: a forecast still computing is of no use once the
        run has ended."""
        if self.process is not None:
            self.process.close()
            self.process = None
        self._pending = None


def _failure(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]


__all__ = [
    "LIVE_SIMULATIONS",
    "LiveForecast",
    "LiveForecaster",
    "Snapshot",
    "duration",
    "forecast_rest",
    "freeze_core",
    "thaw_core",
    "without_budget",
]
