"""``adaptive-eval run CONFIG --out DIR``: run (or resume) a campaign and write its outputs.

Every input is checked (config, files, engines, whether the workers fit the cluster) before
anything is written to the run folder; the folder is then locked for the run's lifetime, the
run loop (:mod:`adaptive_eval.loop.runner`) drives the controller to its stop, and summary.json,
report.md and report.html are written from the final state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from adaptive_eval.base import interrupts
from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import Comparison, LiveForecastPoint, Summary
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.control.pilot import Grow
from adaptive_eval.control.run_result import FinishedRun
from adaptive_eval.dispatch import cluster
from adaptive_eval.dispatch.preflight import check_before_sampling, check_services
from adaptive_eval.forecast.check import RecordedForecast, forecast_check
from adaptive_eval.loop import runner
from adaptive_eval.loop.rundir import prepare_run_dir
from adaptive_eval.outputs.provenance import collect
from adaptive_eval.outputs.report import write_outputs
from adaptive_eval.outputs.summary import build_summary
from adaptive_eval.store import TrialStore

#: Where a run launched from a forecast finds it (``adaptive-eval forecast --out``).
FORECAST_FILE = "forecast.json"
#: A pilot's trials per question (``adaptive-eval forecast --pilot K --out``), which every later
#: leg of the run in that folder keeps as its ``min_trials_per_question``.
PILOT_FILE = "pilot.json"

#: ``finish(campaign, run)``: compare's verdicts, which a compare run adds to summary.json.
Finish = Callable[[Campaign, FinishedRun], Comparison]


def pilot_trials(run_dir: Path) -> int | None:
    """The trials per question a pilot recorded in ``run_dir`` asks of every later leg (its
    ``min_trials_per_question``), or ``None`` without a pilot."""
    path = run_dir / PILOT_FILE
    if not path.exists():
        return None
    try:
        return int(json.loads(path.read_text())["trials_per_question"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"cannot be read ({error})", source=str(path)) from None


def with_recorded_pilot(campaign: Campaign, run_dir: Path) -> Campaign:
    """``campaign`` as every leg in ``run_dir`` runs it: a pilot there raised
    ``min_trials_per_question`` to its trials (never lowered it)."""
    trials = pilot_trials(run_dir)
    return campaign if trials is None else campaign.with_min_trials(trials)


def run_campaign(
    campaign: Campaign,
    run_dir: Path,
    *,
    console: IO[str] | None = None,
    quiet: bool = False,
    finish: Finish | None = None,
) -> Summary:
    """Run (or resume) ``campaign`` in ``run_dir`` to its stop; write summary.json, report.md
    and report.html. A pilot recorded in the folder raises the campaign's minimum trials
    (:func:`with_recorded_pilot`); ``finish`` (compare's) adds its verdicts to the summary.
    Where the workers run is the campaign's ``execution.dispatch``
    (:mod:`adaptive_eval.dispatch.launch`)."""
    campaign = with_recorded_pilot(campaign, run_dir)
    summary = sample(campaign, run_dir, console=console, quiet=quiet, finish=finish)
    assert summary is not None  # only a pilot ends without one
    return summary


def sample(
    campaign: Campaign,
    run_dir: Path,
    *,
    console: IO[str] | None = None,
    quiet: bool = False,
    finish: Finish | None = None,
    pilot: int | None = None,
    grow: Grow | None = None,
) -> Summary | None:
    """Check the inputs against the cluster, lock ``run_dir`` and run the campaign there to its
    stop (or, with ``pilot``, through its first ``pilot`` trials per question, and on while
    ``grow`` names a larger total: ``None``)."""
    check_before_sampling(campaign)
    cluster.check_engines(campaign)
    check_services(campaign)  # after the engines: httpx missing is named first
    cluster.check_local_placement(campaign)
    conclude = concluder(run_dir, finish)  # a damaged forecast.json: refused before sampling
    lock = prepare_run_dir(run_dir)
    try:
        return runner.execute(
            campaign,
            run_dir,
            conclude,
            console=console,
            quiet=quiet,
            pilot=pilot,
            grow=grow,
        )
    finally:
        lock.release()


def live_history(store: TrialStore, run_dir: Path) -> list[LiveForecastPoint] | None:
    """The live forecasts the run recorded (None: none was made), or an error naming the
    folder where the record is damaged."""
    recorded = store.get_meta("live_forecast")
    if not recorded:
        return None
    try:
        return [LiveForecastPoint.model_validate(point) for point in recorded]
    except (ValidationError, TypeError) as error:
        raise InputError(
            f"the recorded live forecast is damaged ({str(error).splitlines()[0]})",
            source=str(run_dir),
        ) from None


def concluder(run_dir: Path, finish: Finish | None = None) -> runner.Conclude:
    """The end of a run or a re-read: the summary built (with ``finish``'s verdicts and, for a
    run launched from a forecast, how it compares) and every output written while the folder is
    still locked. The folder's forecast.json is read now, once: the forecast the run starts
    from (a damaged one is refused before anything is sampled)."""
    forecast_file = run_dir / FORECAST_FILE
    recorded = RecordedForecast.read(forecast_file) if forecast_file.exists() else None

    def conclude(campaign: Campaign, run: FinishedRun, store: TrialStore) -> Summary:
        comparison = None if finish is None else finish(campaign, run)
        forecast = None
        if recorded is not None:
            forecast = forecast_check(
                recorded,
                run,
                campaign.run.fingerprint,
                reused=int(store.get_meta("library_reused") or 0),
                exit_code=None if comparison is None else comparison.exit_code,
            )
        summary = build_summary(
            campaign,
            run,
            collect(run_dir, store),
            comparison=comparison,
            forecast=forecast,
            live_forecast=live_history(store, run_dir),
        )
        with interrupts.deferred():  # a stop signal now waits for report.html (issue 48)
            write_outputs(run_dir, summary, store)
        return summary

    return conclude
