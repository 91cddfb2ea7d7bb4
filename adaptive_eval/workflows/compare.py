"""``adaptive-eval compare CONFIG --candidate NAME --out DIR``: a checkpoint against incumbents.

The campaign, its judge and its exit codes are :mod:`adaptive_eval.campaign.checkpoint`'s; this
runs it
as ``run`` runs a campaign (run-folder lock, ``ray.log``, progress) and renders its verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from adaptive_eval.base.summary_schema import Comparison, Summary
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import Judge, compare_campaign, comparison
from adaptive_eval.control.run_result import FinishedRun
from adaptive_eval.outputs.headline import trials_text
from adaptive_eval.outputs.presentation import COMPARE_EXIT_MEANING
from adaptive_eval.workflows.run import Finish, run_campaign


def comparison_finish(candidate: str, judge: Judge) -> Finish:
    """summary.json's ``comparison`` block from the finished controller: what a compare run
    and ``report``'s re-read of its folder both add."""

    def finish(campaign: Campaign, run: FinishedRun) -> Comparison:
        return comparison(
            campaign,
            run.view,
            run.decisions,
            candidate,
            judge,
            run.plans,
            run.stop,
            COMPARE_EXIT_MEANING,
        )

    return finish


def run_compare(
    campaign: Campaign,
    candidate: str,
    run_dir: Path,
    *,
    margin: float | None = None,
    settle_all: bool | None = None,
    console: IO[str] | None = None,
    quiet: bool = True,
) -> Summary:
    """Run (or resume) the comparison in ``run_dir`` as ``run`` runs a campaign (lock, ray.log,
    progress, the config's dispatch mode); write summary.json and the reports."""
    steered, judge = compare_campaign(campaign, candidate, margin, settle_all)
    finish = comparison_finish(candidate, judge)
    return run_campaign(steered, run_dir, console=console, quiet=quiet, finish=finish)


def render(result: Comparison) -> str:
    margin = result.margin
    test = f" (non-inferiority, margin {margin})" if margin is not None else ""
    lines = [f"candidate {result.candidate}{test}:"]
    for row in result.verdicts:
        lines.append(f"  vs {row.incumbent}: {row.decision} (z = {row.z:.2f}; {trials_text(row)})")
    lines.append(f"exit code {result.exit_code}: {COMPARE_EXIT_MEANING[result.exit_code]}")
    if result.stopped:
        lines.append(f"sampling stopped: {result.stopped}")
    return "\n".join(lines)
