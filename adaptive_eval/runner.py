"""Run a campaign in a run directory: fresh start, resume, or refusal of a different campaign."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import numpy as np
import yaml

from adaptive_eval.campaign import Campaign, build_campaign
from adaptive_eval.config import CampaignConfig
from adaptive_eval.controller import Controller
from adaptive_eval.errors import InputError
from adaptive_eval.logs import SilentLog, open_event_log
from adaptive_eval.report import render_console, summarize, write_outputs
from adaptive_eval.store import TrialStore
from adaptive_eval.types import Batch, BatchResult, Stop, StopReason


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _differences(a, b, f"{path}[{i}]")
        ]
    return [] if old == new else [f"{path}: {json.dumps(old)} -> {json.dumps(new)}"]


def open_run_dir(campaign: Campaign, run_dir: Path) -> tuple[TrialStore, str, bool]:
    """Open or create the store; refuse a directory that holds another campaign."""
    config = campaign.config
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError("exists and is not a directory", source=str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    store = TrialStore(run_dir, fsync=config.output.fsync)
    identity = campaign.identity
    stored = store.get_meta("fingerprint")
    if stored is None:
        campaign_id = f"{config.name}-{uuid.uuid4().hex[:8]}"
        store.set_meta(
            fingerprint=campaign.fingerprint,
            identity=identity,
            campaign_id=campaign_id,
            models=list(campaign.names),
            questions=list(campaign.question_ids),
            limits=config.limits(),
        )
        (run_dir / "config.yaml").write_text(
            yaml.safe_dump(config.portable_dump(), sort_keys=False)
        )
        return store, campaign_id, False
    changes = _differences(store.get_meta("identity"), identity)
    # Runs recorded before the limits left the identity still hold them there: not a change.
    changes = [c for c in changes if not c.startswith(_LIMIT_PATHS)]
    if stored != campaign.fingerprint and not changes:
        store.set_meta(fingerprint=campaign.fingerprint, identity=identity)
    elif stored != campaign.fingerprint:
        store.close()
        raise InputError(
            "holds a different campaign; refusing to resume it with this config. Changed: "
            + "; ".join(changes[:5])
            + ". Use a new --out directory, or restore the config "
            "(execution and output settings may change freely)",
            source=str(run_dir),
        )
    _record_limits(store, config, run_dir)
    return store, str(store.get_meta("campaign_id")), True


_LIMIT_PATHS = ("config.budget", "config.policy.max_trials_per_question")


def _record_limits(store: TrialStore, config: CampaignConfig, run_dir: Path) -> None:
    """A resume with other limits extends (or tightens) the campaign: keep a record of it and
    the run folder's config.yaml in step, so ``adaptive-eval report DIR`` reads the new limits."""
    limits = config.limits()
    before = store.get_meta("limits")
    if before == limits:
        return
    history = list(store.get_meta("extensions") or [])
    if before is not None:
        history.append({"from": before, "to": limits, "trials": store.count_trials()})
    store.set_meta(limits=limits, extensions=history)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.portable_dump(), sort_keys=False))


class _Progress:
    """A tqdm bar over trials, measured against the fixed-N baseline."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="trial", desc="sampling", dynamic_ncols=True)

    def __call__(self, controller: Controller) -> None:
        if self.bar is None:
            return
        recorded = controller.store.count_trials()
        self.bar.n = recorded
        undecided = sum(not d.settled for d in controller.decisions)
        self.bar.set_postfix(
            undecided_pairs=undecided, round=controller.state.applied_rounds, refresh=False
        )
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def build_summary(
    campaign: Campaign,
    controller: Controller,
    campaign_id: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    state = controller.state
    mu, sigma = state.moments()
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = (state.counts @ campaign.weights).sum(axis=1) / state.trials.sum(axis=1)
    return summarize(
        name=campaign.config.name,
        campaign_id=campaign_id,
        names=campaign.names,
        mu=mu,
        sigma=sigma,
        trials=state.trials,
        weighted_mean=np.nan_to_num(weighted),
        confidence=campaign.config.policy.confidence,
        decisions=controller.decisions,
        stop=controller.stop,
        savings=controller.savings(),
        prior_note=campaign.prior_note,
        extra=extra,
    )


def run_campaign(
    config: CampaignConfig, run_dir: Path, *, console: IO[str] | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Run (or resume) a campaign to its stop; write summary.json and report.md."""
    from adaptive_eval.dispatch import Dispatcher, init_ray

    campaign = build_campaign(config)  # every input is validated before Ray starts
    store, campaign_id, resumed = open_run_dir(campaign, run_dir)
    log, handle = open_event_log(run_dir, campaign_id, "warning" if quiet else "info", console)
    progress = _Progress(
        campaign.num_models * campaign.num_questions * campaign.fixed_n,
        config.output.progress and not quiet,
    )
    try:
        execution = config.execution
        log.info(
            "campaign_start",
            resumed=resumed,
            models=len(campaign.names),
            questions=campaign.num_questions,
            categories=campaign.num_categories,
            fixed_n=campaign.fixed_n,
            prior=campaign.prior_note,
        )
        init_ray(execution.ray_address, execution.num_cpus)
        dispatcher = Dispatcher(
            campaign.plans,
            campaign.offsets,
            in_flight_per_worker=execution.in_flight_per_worker,
            max_batch_retries=execution.max_batch_retries,
            shared_slots=execution.gpu_slots,
        )
        from adaptive_eval.library import attach

        port = attach(campaign, store, dispatcher, campaign_id)  # the trial library, if any
        controller = Controller(campaign, store, port, log, on_progress=progress)
        try:
            controller.run()
        finally:
            port.shutdown()
            progress.close()
        stats = dispatcher.stats
        summary = build_summary(
            campaign,
            controller,
            campaign_id,
            extra={
                "resumed": resumed,
                "elapsed_s": controller.elapsed_s,
                "dispatch": {
                    "workers": dispatcher.num_workers,
                    "batches": stats.batches,
                    "failed_batches": stats.failures,
                    "worker_restarts": stats.restarts,
                    "worker_utilisation": stats.utilisation(),
                    "model_loads": stats.loads,
                    "load_s": stats.load_s,
                },
            },
        )
        write_outputs(run_dir, summary)
        log.info(
            "campaign_done",
            stop_reason=summary["stop_reason"],
            trials_used=summary["trials_used"],
            trials_saved=summary["compute_saved"]["trials_fraction"],
        )
        return summary
    finally:
        store.close()
        handle.close()


class _NoDispatch:
    """Stands in for the dispatcher when a finished run is re-read offline."""

    def submit(self, batches: list[Batch]) -> None:
        pass

    def poll(self, timeout: float) -> list[BatchResult]:
        return []

    def pending(self) -> int:
        return 0


def report_run(config: CampaignConfig, run_dir: Path) -> dict[str, Any]:
    """Rebuild the posterior from a run's store (no Ray) and rewrite its outputs."""
    campaign = build_campaign(config)
    store, campaign_id, resumed = open_run_dir(campaign, run_dir)
    if not resumed:
        raise InputError("holds no recorded campaign", source=str(run_dir))
    try:
        controller = Controller(campaign, store, _NoDispatch(), SilentLog())
        controller.logged_through = 1 << 60  # re-reading logs nothing
        # A set stop keeps resume() from planning new rounds: reading never writes a plan.
        controller.stop = Stop(StopReason.INTERRUPTED, "run did not finish")
        controller.resume()
        stops = [e for e in store.events() if e[1] in ("stop", "stop_withdrawn")]
        last = stops[-1] if stops else None
        if last is not None and last[1] == "stop":
            controller.stop = Stop(StopReason(last[2]["reason"]), last[2]["detail"])
        elif not store.get_meta("finished"):
            controller.stop = None
        summary = build_summary(
            campaign,
            controller,
            campaign_id,
            extra={
                "elapsed_s": store.get_meta("elapsed_s"),
                "finished": bool(store.get_meta("finished")),
            },
        )
        write_outputs(run_dir, summary)
        return summary
    finally:
        store.close()


__all__ = ["build_summary", "open_run_dir", "render_console", "report_run", "run_campaign"]
