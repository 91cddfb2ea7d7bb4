"""``adaptive-eval report DIR``: rebuild a recorded run's summary.json, report.md and
report.html from its store, without Ray (a compare folder with its verdicts)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import Summary
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import compare_campaign
from adaptive_eval.loop import runner
from adaptive_eval.loop.rundir import earlier_outputs
from adaptive_eval.store import RunLock, TrialStore
from adaptive_eval.workflows.compare import comparison_finish
from adaptive_eval.workflows.run import Finish, concluder


def report_run(campaign: Campaign, run_dir: Path) -> Summary:
    """Rebuild the posterior of ``campaign`` (built from the run's config.yaml, or the config
    ``report --config`` names) from the run's
    store, without Ray, and rewrite its outputs.

    Keeps what only the run itself knew (``dispatch``, ``resumed``) from the store's metadata,
    or from the summary.json being replaced when the run predates that metadata.
    """
    if not (run_dir / TrialStore.FILENAME).exists() and not earlier_outputs(run_dir):
        raise InputError("holds no recorded campaign", source=str(run_dir))
    finish: Finish | None = None
    steering = compare_steering(run_dir)
    if steering is not None:  # a compare folder: the same steered campaign and its verdicts
        candidate = str(steering["candidate"])
        if "margin" not in steering:  # recorded without one: the config's compare.margin neither
            settings = dataclasses.replace(campaign.run.settings, compare=None)
            run = dataclasses.replace(campaign.run, settings=settings)
            campaign = Campaign(campaign.decision, run)
        campaign, judge = compare_campaign(campaign, candidate, steering.get("margin"))
        finish = comparison_finish(candidate, judge)

    with RunLock(run_dir):
        return runner.reread(campaign, run_dir, concluder(run_dir, finish))


def compare_steering(run_dir: Path) -> dict[str, Any] | None:
    """What ``compare`` recorded of its candidate (and margin) in the run's identity, if any."""
    if not (run_dir / TrialStore.FILENAME).exists():
        return None
    store = TrialStore(run_dir, readonly=True)
    try:
        identity = store.get_meta("identity")
    finally:
        store.close()
    steering = identity.get("compare") if isinstance(identity, dict) else None
    return steering if isinstance(steering, dict) and "candidate" in steering else None
