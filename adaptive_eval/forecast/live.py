"""The forecast of the rest of a run from all its evidence so far: what it computes.

After an applied round the controller hands a snapshot (its decision core, with every pair
rule's memory, and its state, with the rounds in flight) to the process beside the run
(:mod:`adaptive_eval.forecast.forecaster`: when, where, and what a failure costs), which runs
that very core forward on ``simulations`` truths drawn from the evidence
(:mod:`adaptive_eval.forecast.predictive`: each cell's posterior, tilted to a deconvolved
spacing of the models' scores, which measured best here; docs/forecast.md): the paths of
:mod:`adaptive_eval.forecast.paths` from the snapshot, the path simulator whose paths from
before the run the pre-run forecast summarises, without the budget, so each path also says where
a pair the budget would leave unsettled settles. Where every plug-in has a batched form the
continuations advance together (:func:`~adaptive_eval.forecast.paths.run_together`: one round of
numpy calls for all of them, stopped ones dropping out); otherwise one by one
(:func:`~adaptive_eval.forecast.paths.run_path`). Nothing is replayed and a settled pair stays
settled.

The rest of the run is priced at the run's own costs so far: a new trial of a cell costs the
cell's mean tokens (the model's where the cell has none) and GPU-seconds, and takes the run's
steady seconds per trial since its first result (start-up, Ray and engine loads, counted once in
what has elapsed, not per trial).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaptive_eval.base.accounting import budget_short_sentence
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import DecisionCore, RoundDecision
from adaptive_eval.decide.spec import DecisionSpec
from adaptive_eval.decide.state import RoundCosts, RunState
from adaptive_eval.forecast.batched import Continuations, RowCosting
from adaptive_eval.forecast.campaign import Range
from adaptive_eval.forecast.paths import (
    PathStart,
    freeze_core,
    prior_trials,
    run_path,
    run_paths,
    run_together,
)
from adaptive_eval.forecast.predictive import Predictive
from adaptive_eval.forecast.simulate import Costing, Truth

#: Simulated continuations per live forecast unless ``output.live_forecast`` says otherwise:
#: the 10th and 90th percentiles from 20 draws at the least.
LIVE_SIMULATIONS = 20


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


def forecast_rest(
    decision: DecisionSpec,
    snapshot: Snapshot,
    predictive: str = "spacing",
    truths: list[np.ndarray] | None = None,
) -> LiveForecast:
    """Run the snapshot's core forward ``snapshot.simulations`` times (see the module), each
    on a truth drawn from ``predictive``; ``truths``: on these instead (a benchmark's oracle,
    which knows the true category probabilities)."""
    started = time.process_time()  # compute, not wall: a busy machine slows the wall clock
    start = PathStart.of_snapshot(decision, snapshot.core, snapshot.state)
    batched = start.batched()
    # The snapshot's core and state, thawed once (a path thaws its own copies).
    core, state = (batched[1], batched[2]) if batched is not None else start.begin()[:2]
    if truths is None:
        drawn = Predictive.of(state.counts + prior_trials(decision), decision.weights, predictive)
        truths = [
            drawn.draw(np.random.default_rng([snapshot.seed, snapshot.round, index]))
            for index in range(snapshot.simulations)
        ]
    if batched is not None:
        rng = np.random.default_rng([snapshot.seed, snapshot.round, len(truths)])
        runs = run_together(start, batched, truths, rng, _row_costs(state))
    else:
        runs = _one_by_one(start, snapshot, state, truths)
    settled_now = sum(d.settled for d in core.decisions)
    return _summarise(decision, snapshot, state, runs, settled_now, started)


def _row_costs(state: RunState) -> RowCosting:
    """Each round of the continuations priced at the run's own costs so far
    (:func:`_unit_costs`)."""
    unit_tokens, unit_gpu, has_tokens = _unit_costs(state)
    has_gpu = bool(unit_gpu.any())

    def price(plan: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        gpu = plan * unit_gpu if has_gpu else None
        if not has_tokens:
            return None, None, gpu
        return plan * unit_tokens, plan, gpu

    return price


def _one_by_one(
    start: PathStart, snapshot: Snapshot, state: RunState, truths: list[np.ndarray]
) -> Continuations:
    """Each continuation by the core itself (:func:`run_path`): plug-ins with no batched form."""
    costing = _run_costs(state)
    weights = start.decision.weights

    def continuation(index: int) -> tuple[int, float, float, list[tuple[int, int]]]:
        rng = np.random.default_rng([snapshot.seed, snapshot.round, index, 1])
        path: list[tuple[int, int]] = []

        def watch(view: CampaignView, outcome: RoundDecision) -> None:
            path.append((view.trials_used, sum(d.settled for d in outcome.decisions)))

        run = run_path(start, Truth(truths[index], weights), rng, watch=watch, costing=costing)
        tokens = float(run.state.tokens_sum.sum() - state.tokens_sum.sum())
        gpu_s = float(run.state.gpu_s_sum.sum() - state.gpu_s_sum.sum())
        return run.state.trials_used, tokens, gpu_s, path

    runs = run_paths(continuation, len(truths))
    finals, tokens, gpu_s, paths = zip(*runs, strict=True) if runs else ((), (), (), ())
    return Continuations(np.asarray(finals), np.asarray(tokens), np.asarray(gpu_s), tuple(paths))


def _summarise(
    decision: DecisionSpec,
    snapshot: Snapshot,
    state: RunState,
    runs: Continuations,
    settled_now: int,
    started: float,
) -> LiveForecast:
    budget = decision.limits.trial_budget
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


__all__ = [
    "LIVE_SIMULATIONS",
    "LiveForecast",
    "Snapshot",
    "duration",
    "forecast_rest",
]
