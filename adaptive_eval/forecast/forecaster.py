"""The live forecast beside the run: when a forecast is made, where it is computed, and what a
failure costs (what a forecast computes: :mod:`adaptive_eval.forecast.live`).

**When.** The first forecast is asked for as soon as a round is applied (after the run's first
second, :data:`FIRST_AFTER_S`); after it, a new one whenever the process is free and the run
has moved on: by :data:`FRESH_SHARE` of the forecast total in trials (or by
:data:`FRESH_GROWTH` of its own trials, where that comes first), a pair settled or dropped, or
:data:`REFRESH_S` of wall time. The process computes at most :data:`DUTY` of the run's wall
time in CPU seconds (it shares the machine with the run), and the simulations grow (to
:data:`MAX_GROWTH` times ``output.live_forecast``) while a forecast takes less than
:data:`TARGET_S`.

**The process** is forked from the run's process when the campaign starts, before Ray or any
other thread runs in it (so it starts warm: nothing to import, the campaign already in memory),
and spawned instead where threads already run (a fork would copy their locks held). It builds
the boundary tables the continuations will need while it waits (:meth:`~policies.batched.
GroupSequentialRows.warm`), runs at nice :data:`NICE`, and dies with the run's process however
that dies (``PR_SET_PDEATHSIG``, and the end of its pipe). A forecast that fails, a process that
dies, a snapshot that cannot be sent: one ``live_forecast_failed`` event and one console line
for the run; the forecast then goes on in the run's own process (at most :data:`INLINE_DUTY` of
its wall time), or, failing that too, stops.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from adaptive_eval.decide.core import DecisionCore
from adaptive_eval.decide.spec import DecisionSpec
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.live import LIVE_SIMULATIONS, LiveForecast, Snapshot, forecast_rest

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


def _serve(conn: Connection, parent: int, decision: DecisionSpec | None) -> None:
    """The forecast process: build boundary tables while idle, forecast each snapshot sent,
    answer ``("done", forecast)`` or ``("failed", message)``; end when the pipe or the parent
    does."""
    _die_with_parent()
    if os.getppid() != parent:  # the parent ended before the death signal was asked for
        return
    try:
        if decision is None:
            decision = pickle.loads(conn.recv())
        assert decision is not None
        warm = _warm_up(decision)
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
                conn.send(("done", forecast_rest(decision, snapshot)))
            except Exception as error:
                conn.send(("failed", _failure(error)))
    except (EOFError, OSError, KeyboardInterrupt):
        return


def _warm_up(decision: DecisionSpec) -> Any:
    """One boundary table per step, in the order the continuations will need them."""
    from policies.batched import batched_pair_rule

    for rule in decision.pair_rules:
        batched = batched_pair_rule(rule, decision.capacity)
        if batched is None:
            continue
        settings = decision.view_settings()
        for _ in batched.warm(settings.confidence, settings.error_control):
            yield True


def _forked(conn: Connection, parent: int, decision: DecisionSpec) -> None:
    """The forked child's whole life: serve, then leave without running the parent's exit
    handlers or flushing its buffers (they are the parent's)."""
    code = 0
    try:
        _serve(conn, parent, decision)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _spawned(conn: Connection, parent: int) -> None:
    _serve(conn, parent, None)


class ForecastProcess:
    """The one background process and its pipe."""

    def __init__(self, decision: DecisionSpec) -> None:
        parent = os.getpid()
        ours, theirs = multiprocessing.Pipe()
        self.forked = threading.active_count() == 1 and hasattr(os, "fork")
        process: multiprocessing.process.BaseProcess
        if self.forked:
            process = multiprocessing.get_context("fork").Process(
                target=_forked, args=(theirs, parent, decision), daemon=True
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
            ours.send(pickle.dumps(decision))

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
        decision: DecisionSpec,
        *,
        simulations: int = LIVE_SIMULATIONS,
        seed: int = 0,
        inline: bool = False,
    ) -> None:
        self.decision = decision
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
            self.process = ForecastProcess(self.decision)
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
            made = forecast_rest(self.decision, snapshot)
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


__all__ = ["ForecastProcess", "LiveForecaster"]
