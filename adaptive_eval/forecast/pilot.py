"""``forecast --pilot auto``: how far a pilot grows before its forecast is worth planning on.

A pilot of 4 trials per question cannot tell a typical gap between twelve evenly spread models
from a tie (its resolution line says so), and a forecast from it spans evenly spread models and
clustered ones alike: on 12 models 0.06 apart, none of the realised costs fell inside its 10-90%
range (docs/forecast.md). The pilot is the run's own start, so sampling on costs nothing the run
would not spend: after the pilot's rounds, :func:`next_target` asks whether the evidence now
resolves the models' spacing (:class:`~adaptive_eval.forecast.predictive.Resolution`); if not,
the campaign samples on, its own rounds (the run reuses every one), to twice the trials, until
the spacing is resolved or the pilot has cost :data:`AUTO_SHARE` of the campaign's forecast
total (the live forecast of the rest of the run, :func:`~adaptive_eval.forecast.live.
forecast_rest`), or the campaign has stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive_eval.decide.core import DecisionCore
from adaptive_eval.decide.spec import DecisionSpec
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.live import Snapshot, forecast_rest
from adaptive_eval.forecast.paths import prior_trials
from adaptive_eval.forecast.predictive import Predictive, Resolution

#: The largest share of the campaign's forecast total trials an automatic pilot may spend.
AUTO_SHARE = 0.15
#: Where an automatic pilot starts (trials per question), as ``--pilot 4`` does.
AUTO_START = 4
#: Simulated continuations behind the growth decision's forecast total.
GROWTH_SIMULATIONS = 20


@dataclass(frozen=True)
class Growth:
    """One look of an automatic pilot: what the evidence resolves, the campaign's forecast
    total, and the pilot's next target in trials (``None``: the pilot is done, ``reason``
    says why)."""

    trials: int
    resolution: Resolution | None
    forecast_total: float | None
    target: int | None
    reason: str

    def line(self) -> str:
        """The console's line for this look."""
        if self.target is None:
            return f"pilot: {self.trials:,} trials; {self.reason}"
        return (
            f"pilot: {self.trials:,} trials; {self.reason}: sampling on to about "
            f"{self.target:,} trials (the run reuses them)"
        )


def resolution_of(state: RunState, decision: DecisionSpec) -> Resolution | None:
    """What the evidence of ``state`` tells of the models' spacing (``None``: too few models
    to say, or a model without a trial)."""
    counts = state.counts + prior_trials(decision)
    fitted = Predictive.of(counts, decision.weights, "spacing").fitted
    recorded = state.trials[state.trials > 0]
    if fitted is None or not len(recorded):
        return None
    return Resolution.of(fitted, float(np.median(recorded)))


def next_target(
    decision: DecisionSpec, core: DecisionCore, state: RunState, seed: int = 0
) -> Growth:
    """The automatic pilot's next look (see the module)."""
    trials = state.trials_used
    if core.stop is not None:
        return Growth(trials, None, None, None, "the campaign stopped within the pilot")
    told = resolution_of(state, decision)
    if told is None:
        return Growth(trials, None, None, None, "too few models to measure their spacing")
    if told.resolved:
        return Growth(trials, told, None, None, "it tells a typical gap from a tie")
    snapshot = Snapshot.of(core, state, seed=seed, simulations=GROWTH_SIMULATIONS)
    total = forecast_rest(decision, snapshot).trials.p50
    limit = int(AUTO_SHARE * total)
    if trials >= limit:
        return Growth(
            trials,
            told,
            total,
            None,
            f"it cannot tell a typical gap from a tie, but it has cost {trials / total:.0%} of "
            f"the forecast total ({total:,.0f}), the most a pilot may ({AUTO_SHARE:.0%})",
        )
    return Growth(
        trials,
        told,
        total,
        min(2 * trials, limit),
        "it cannot tell a typical gap from a tie yet",
    )
