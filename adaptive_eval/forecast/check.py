"""The forecast a run was launched from, against what the run did: summary.json's ``forecast``.

``adaptive-eval forecast --out DIR`` writes ``DIR/forecast.json``; the run there reads it back
(:class:`RecordedForecast`) and, at its end, sets each forecast measure's 10-90% range against the
actual value, and compare's exit code against the probability the forecast gave it
(:func:`forecast_check`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import (
    ForecastCheck,
    ForecastCurvePoint,
    ForecastMeasure,
    ForecastVerdict,
)
from adaptive_eval.control.run_result import FinishedRun
from adaptive_eval.forecast.campaign import Range, counts_pair

#: The measures a run is checked against its forecast on, in summary.json's order.
CHECKED = ("trials", "new_trials", "tokens", "gpu_s", "wall_s", "pairs_settled")


@dataclass(frozen=True)
class RecordedForecast:
    """forecast.json (format 1) as a run launched from it reads it: what the forecast was made
    of and the ranges the run is checked against."""

    fingerprint: str | None
    source: str | None  # the evidence: pilot, run, library or prior
    replayed: bool  # the evidence's trials are the run's own first ones
    evidence_trials: int
    candidate: str | None
    simulations: int | None
    ranges: Mapping[str, Range]  # of CHECKED, those forecast
    curve: tuple[tuple[int, Range], ...]  # trials -> pairs settled
    exit_codes: Mapping[str, float] | None  # compare's, within the budget where one was set

    @classmethod
    def read(cls, path: Path) -> RecordedForecast:
        """``path``'s forecast, or an error naming the file."""
        try:
            record = json.loads(path.read_text())
            evidence = record.get("evidence") or {}
            verdict = record.get("verdict")
            return cls(
                fingerprint=record.get("fingerprint"),
                source=evidence.get("source"),
                replayed=bool(evidence.get("replayed")),
                evidence_trials=int(evidence.get("trials") or 0),
                candidate=record.get("candidate"),
                simulations=record.get("simulations"),
                ranges={
                    key: Range(**record[key])
                    for key in CHECKED
                    if isinstance(record.get(key), dict)
                },
                curve=tuple(
                    (int(point["trials"]), Range(**point["pairs_settled"]))
                    for point in record.get("curve") or []
                ),
                exit_codes=None
                if not isinstance(verdict, dict)
                else {
                    str(row["code"]): row["probability"]
                    if row.get("probability_in_budget") is None
                    else row["probability_in_budget"]
                    for row in verdict.get("exit_codes") or []
                },
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise InputError(
                f"is not a forecast this run can read ({error})", source=str(path)
            ) from None


def forecast_check(
    forecast: RecordedForecast,
    run: FinishedRun,
    fingerprint: str,
    *,
    reused: int = 0,
    exit_code: int | None = None,
) -> ForecastCheck:
    """Forecast against what the run did (summary.json's ``forecast``): per measure the
    forecast's range, the actual value and whether it fell inside the 10-90% range; for a
    compare run (``exit_code``) launched from a verdict forecast, the probability it gave each
    exit code. ``reused``: the run's trials the library served (not new)."""
    actual = _realised(forecast, run, reused)
    measures = {
        key: ForecastMeasure(**found.record(), actual=value, inside=found.holds(value))
        for key, found in forecast.ranges.items()
        if (value := actual[key]) is not None
    }
    verdict = None
    if exit_code is not None and forecast.exit_codes is not None:
        verdict = ForecastVerdict(exit_code=exit_code, probabilities=dict(forecast.exit_codes))
    return ForecastCheck(
        same_campaign=forecast.fingerprint == fingerprint,
        evidence=forecast.source,
        simulations=forecast.simulations,
        measures=measures,
        curve=[ForecastCurvePoint(trials=t, **found.record()) for t, found in forecast.curve],
        verdict=verdict,
    )


def _realised(forecast: RecordedForecast, run: FinishedRun, reused: int) -> dict[str, float | None]:
    """What the run did, in the forecast's measures."""
    trials = run.view.trials_used
    names = run.view.names
    focus = names.index(forecast.candidate) if forecast.candidate in names else None
    if forecast.source == "library":
        new = trials - reused
    elif forecast.replayed:
        new = trials - forecast.evidence_trials
    else:
        new = trials
    gpu = run.savings.gpu_s_used
    return {
        "trials": trials,
        "new_trials": new,
        "tokens": run.savings.tokens_used,
        "gpu_s": gpu if gpu else None,
        "wall_s": run.facts.elapsed_s,
        "pairs_settled": sum(d.settled and counts_pair(d, focus) for d in run.decisions),
    }
