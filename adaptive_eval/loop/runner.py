"""The run loop: a prepared run folder, its store and Ray's workers, and the controller driven
to its stop.

:func:`execute` runs (or resumes) a campaign whose folder is locked; :func:`reread` rebuilds a
finished run's state from its store without Ray. Both end by handing the campaign, the run's
frozen snapshot (:class:`~adaptive_eval.control.run_result.FinishedRun`, never the live controller)
and
its open store to the caller's ``conclude`` (the workflow, which writes the summary and the
reports), so the loop knows nothing of the outputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.logs import ConsoleLines, SilentLog, open_event_log
from adaptive_eval.base.summary_schema import Dispatch, Nightly, Summary, record
from adaptive_eval.base.types import Batch, BatchResult, Stop, StopReason
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.control.controller import Controller
from adaptive_eval.control.pilot import Grow, run_pilot
from adaptive_eval.control.run_result import FinishedRun, RunFacts, finished_run
from adaptive_eval.dispatch import (
    DispatchStats,
    LaunchRequest,
    Workers,
    combine_dispatch,
    dispatch_summary,
    launcher,
    starting,
)
from adaptive_eval.dispatch.cluster import RAY_LOG, ray_output_to
from adaptive_eval.forecast.forecaster import LiveForecaster
from adaptive_eval.loop.progress import Progress
from adaptive_eval.loop.rundir import finished_before, kept_from_run, open_run_dir
from adaptive_eval.store import TrialStore

#: ``conclude(campaign, run, store)``: the caller's summary (and outputs) from the run's frozen
#: snapshot, made while the folder is locked and its store open (provenance and the HTML
#: report's per-round charts read it). Its result is what the loop returns.
Conclude = Callable[[Campaign, FinishedRun, TrialStore], Summary]

Recorded = TypeVar("Recorded", bound=BaseModel)


def execute(
    campaign: Campaign,
    run_dir: Path,
    conclude: Conclude,
    *,
    console: IO[str] | None,
    quiet: bool,
    pilot: int | None = None,
    grow: Grow | None = None,
) -> Summary | None:
    """Run (or resume) ``campaign`` in ``run_dir``, which the caller has prepared and locked.

    Ray's own output goes to ``run_dir/ray.log`` for the run's lifetime; the workers (the
    config's dispatch mode, :mod:`adaptive_eval.dispatch.launch`) start only when the first
    batch needs sampling. ``pilot``: record only the run's first ``pilot`` trials per question
    (:mod:`adaptive_eval.control.pilot`; ``grow``: then on while it names a larger total) and
    return ``None`` without outputs, unless the campaign finished within them.
    """
    store, campaign_id, resumed = open_run_dir(campaign, run_dir, recover=True)
    try:
        with ray_output_to(run_dir / RAY_LOG, console or sys.stderr) as terminal:
            return _run_opened(
                campaign,
                run_dir,
                store,
                campaign_id,
                resumed,
                terminal,
                quiet,
                conclude,
                pilot,
                grow,
            )
    finally:
        store.close()


def _run_opened(
    campaign: Campaign,
    run_dir: Path,
    store: TrialStore,
    campaign_id: str,
    resumed: bool,
    terminal: IO[str],
    quiet: bool,
    conclude: Conclude,
    pilot: int | None,
    grow: Grow | None,
) -> Summary | None:
    settings = campaign.run.settings
    lines = ConsoleLines(terminal)
    # The console shows warnings (errors only with --quiet); everything goes to events.jsonl.
    log, handle = open_event_log(run_dir, campaign_id, "error" if quiet else "warning", lines)
    progress = Progress(lines, settings.output.progress and not quiet)

    def on_event(level: str, kind: str, payload: dict[str, Any]) -> None:
        getattr(log, level)(kind, **payload)

    store.on_event = on_event
    for kind, note in store.notes:
        log.warning(kind, message=note)
    for warning in campaign.run.warnings:
        log.warning("config_ignored", message=f"{settings.source}: {warning}")
    try:
        execution = settings.execution
        log.info(
            "campaign_start",
            resumed=resumed,
            finished=resumed and finished_before(run_dir, store),
            models=len(campaign.names),
            questions=campaign.num_questions,
            categories=campaign.num_categories,
            fixed_n=campaign.run.fixed_n,
            prior=campaign.decision.prior_note,
            ray_log=str(run_dir / RAY_LOG),
        )

        launch = launcher(execution.dispatch, source=settings.source)
        request = LaunchRequest(
            campaign.run.plans,
            campaign.run.offsets,
            execution,
            quiet=quiet,
            ray_log=run_dir / RAY_LOG,
            on_event=on_event,
        )

        def start_workers() -> Workers:
            said = starting(execution.dispatch, launch, request)
            if said.line is not None and not quiet:
                lines.write(said.line)
            log.info(said.event, **said.fields)
            return launch(request)

        dispatcher = StartOnDemand(start_workers)
        from adaptive_eval.control.library import attach

        port = attach(campaign, store, dispatcher, campaign_id)  # the trial library, if any
        controller = Controller(campaign, store, port, log, on_progress=progress)
        if pilot is None and settings.output.live_forecast > 0:
            controller.live = LiveForecaster(
                campaign.decision,
                simulations=settings.output.live_forecast,
                seed=settings.seed or 0,
            )
            controller.live.start()  # before Ray's threads: a warm fork
        finished = True
        try:
            if pilot is None:
                controller.run()
            else:
                finished = run_pilot(controller, pilot, grow, None if quiet else lines.say)
        finally:
            if controller.live is not None:
                controller.live.close()
            port.shutdown()
            progress.close(controller.finished(), int(store.get_meta("library_reused") or 0))
        # A resume that samples nothing (a finished run run again) used to zero the block.
        dispatch = combine_dispatch(
            _recorded(Dispatch, store.get_meta("dispatch"), run_dir),
            dispatch_summary(dispatcher),
            dispatcher.started,
        )
        store.set_meta(dispatch=record(dispatch), resumed=resumed)
        if not finished:
            log.info("pilot_done", trials=store.count_trials(), per_question=pilot)
            return None
        facts = RunFacts(resumed=resumed, elapsed_s=controller.elapsed_s, dispatch=dispatch)
        summary = conclude(campaign, finished_run(controller, campaign_id, facts), store)
        log.info(
            "campaign_done",
            stop_reason=summary.stop_reason,
            trials_used=summary.trials_used,
            trials_saved=summary.compute_saved.trials_fraction,
        )
        return summary
    finally:
        handle.close()


class StartOnDemand:
    """The dispatcher, started (Ray and its workers) when the first batch needs sampling.

    Behind the trial library, a run whose every trial the library holds never starts Ray (a
    night with nothing new to sample takes seconds, not Ray's start-up).
    """

    def __init__(self, start: Callable[[], Workers]) -> None:
        self._start = start
        self.inner: Workers | None = None

    @property
    def started(self) -> bool:
        return self.inner is not None

    def submit(self, batches: list[Batch]) -> None:
        if not batches:
            return
        if self.inner is None:
            self.inner = self._start()
        self.inner.submit(batches)

    def poll(self, timeout: float) -> list[BatchResult]:
        return [] if self.inner is None else list(self.inner.poll(timeout))

    def pending(self) -> int:
        return 0 if self.inner is None else int(self.inner.pending())

    @property
    def num_workers(self) -> int:
        return 0 if self.inner is None else int(self.inner.num_workers)

    @property
    def stats(self) -> DispatchStats:
        return DispatchStats() if self.inner is None else self.inner.stats

    def shutdown(self) -> None:
        if self.inner is not None and hasattr(self.inner, "shutdown"):
            self.inner.shutdown()


class _NoDispatch:
    """Stands in for the dispatcher when a finished run is re-read offline."""

    def submit(self, batches: list[Batch]) -> None:
        pass

    def poll(self, timeout: float) -> list[BatchResult]:
        return []

    def pending(self) -> int:
        return 0


def reread(campaign: Campaign, run_dir: Path, conclude: Conclude) -> Summary:
    """Rebuild a recorded run's state from its store (no Ray, nothing written to the store) and
    hand it to ``conclude``; ``run_dir`` must be locked by the caller."""
    store, campaign_id, resumed = open_run_dir(campaign, run_dir, leg=False)
    if not resumed:
        store.close()
        raise InputError("holds no recorded campaign", source=str(run_dir))
    for _, note in store.notes:
        print(f"adaptive-eval: note: {note}", file=sys.stderr)
    kept = kept_from_run(store, run_dir)
    try:
        controller = Controller(campaign, store, _NoDispatch(), SilentLog(), record_events=False)
        # A set stop keeps resume() from planning new rounds: reading never writes a plan.
        controller.core.interrupt(Stop(StopReason.INTERRUPTED, "run did not finish"))
        controller.resume()
        stops = [e for e in store.events() if e[1] in ("stop", "stop_withdrawn")]
        last = stops[-1] if stops else None
        if last is not None and last[1] == "stop":
            controller.core.interrupt(Stop(StopReason(last[2]["reason"]), last[2]["detail"]))
        elif not store.get_meta("finished"):
            controller.core.interrupt(None)
        facts = RunFacts(
            resumed=kept.get("resumed"),
            elapsed_s=store.get_meta("elapsed_s"),
            dispatch=_recorded(Dispatch, kept.get("dispatch"), run_dir),
            finished=bool(store.get_meta("finished")),
            nightly=_recorded(Nightly, kept.get("nightly"), run_dir),
        )
        return conclude(campaign, finished_run(controller, campaign_id, facts), store)
    finally:
        store.close()


def _recorded(block: type[Recorded], value: object, run_dir: Path) -> Recorded | None:
    """A block of summary.json the run's store kept (``None``: none was kept); a damaged one is
    an error naming the run folder and the block, never a count taken from the wrong type."""
    if value is None:
        return None
    try:
        return block.model_validate(value)
    except ValidationError as error:
        where = error.errors()[0]
        field = ".".join(str(part) for part in (block.__name__.lower(), *where["loc"]))
        raise InputError(
            f"the recorded {field} is damaged: {where['msg']}", source=str(run_dir)
        ) from None
