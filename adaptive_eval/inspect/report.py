"""``adaptive-eval report LOG_DIR``: an Inspect log folder decided by the bridge, as our outputs.

The logs hold what the bridge decided (``results.early_stopping.metadata``: the campaign's
models, goal, policy, rubric, score map and each model's trials per sample) and every scored
run (sample, epoch). Trial ``t`` of a cell is epoch ``t + 1``, so the runs give back the trials
in the order the bridge used them; they are written as a ``replay`` of the campaign's config
(:class:`~adaptive_eval.inspect.campaign.CampaignSpec`) and run by ``adaptive-eval run`` (or
compare's steered campaign, for a candidate) in this process: summary.json, report.md and
report.html, and compare's exit code, from the project's own loop. That loop must take the
trials the bridge took, cell by cell (it is the same core on the same trials); a difference is
an error, never a silent report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import Summary
from adaptive_eval.config.schema import load_config
from adaptive_eval.inspect.bridge import MANAGER, ScoreMap
from adaptive_eval.inspect.campaign import CampaignSpec, Goal, build
from adaptive_eval.workflows.compare import comparison_finish
from adaptive_eval.workflows.run import run_campaign


@dataclass(frozen=True)
class InspectReport:
    summary: Summary
    run_dir: Path
    exit_code: int  # compare's (0 not worse, 3 regression, 4 undecided); 0 for a ranking
    #: Scored runs each model's log holds: every run Inspect made and kept, whether the
    #: campaign used it or not (runs past the plan: after the bridge disengaged, or made
    #: ahead of it by an eval retried alone before issue 48).
    runs: dict[str, int]

    @property
    def unused(self) -> int:
        """Runs the logs hold that the campaign did not use (compute the saving leaves out)."""
        return sum(self.runs.values()) - self.summary.trials_used

    def runs_line(self) -> str:
        """One line counting every run the logs hold against the trials the campaign used."""
        total = sum(self.runs.values())
        line = (
            f"Inspect logs: {total} runs of {len(self.runs)} models; the campaign used "
            f"{self.summary.trials_used}"
        )
        if self.unused > 0:
            line += (
                f"; {self.unused} were run but not used (past the plan: after the bridge "
                "disengaged, or ahead of it), compute the saving above leaves out"
            )
        return line


def is_inspect_folder(folder: Path) -> bool:
    return folder.is_dir() and any(
        p.suffix in (".eval", ".json") and p.name != "summary.json" for p in folder.iterdir()
    )


def bridged_logs(log_dir: Path) -> dict[str, Any]:
    """The newest log of each model that the bridge decided (a retried eval's log holds the
    runs Inspect kept from the first attempt)."""
    from inspect_ai.log import list_eval_logs, read_eval_log

    found: dict[str, Any] = {}
    campaigns: set[str] = set()
    for info in list_eval_logs(str(log_dir), recursive=False):
        log = read_eval_log(info)
        stopping = log.results.early_stopping if log.results is not None else None
        if stopping is None or stopping.manager != MANAGER:
            continue
        campaigns.add(str(stopping.metadata.get("campaign")))
        model = log.eval.model
        if model not in found or log.eval.created > found[model].eval.created:
            found[model] = log
    if not found:
        raise InputError(
            "holds no Inspect log decided by adaptive_eval.inspect (finished evals whose "
            "results.early_stopping.manager is 'adaptive_eval')",
            source=str(log_dir),
        )
    if len(campaigns) > 1:
        raise InputError(
            f"holds logs of {len(campaigns)} bridge campaigns ({', '.join(sorted(campaigns))}); "
            "report one folder per campaign",
            source=str(log_dir),
        )
    return found


def report_inspect(log_dir: Path, out_dir: Path | None = None) -> InspectReport:
    """Rebuild the campaign from the logs, run it on their trials, write the outputs."""
    logs = bridged_logs(log_dir)
    meta = _final_metadata(logs)
    if "models" not in meta:
        raise InputError("the bridge never opened its campaign in these logs", source=str(log_dir))
    models: list[str] = list(meta["models"])
    missing = [m for m in models if m not in logs]
    if missing:
        raise InputError(f"no finished log of {', '.join(missing)}", source=str(log_dir))
    first = logs[models[0]]
    questions = tuple(str(s) for s in _sample_ids(first))
    epochs = int(meta["epochs"])
    goal_meta = meta["goal"]
    goal = Goal(
        goal_meta["kind"], goal_meta["candidate"], goal_meta["margin"], goal_meta["settle_all"]
    )
    score_map = ScoreMap(
        {_key(k): int(v) for k, v in meta["score_map"].items()}, meta.get("scorer")
    )
    spec = CampaignSpec(
        str(meta["campaign"]),
        tuple(models),
        questions,
        epochs,
        tuple(float(w) for w in meta["weights"]),
        dict(meta["policy"]),
        goal,
    )
    index = {q: i for i, q in enumerate(questions)}
    runs: dict[str, int] = {}
    outcomes = np.zeros((len(models), len(questions), epochs), dtype=np.int8)
    used = np.zeros((len(models), len(questions)), dtype=np.int64)
    for m, model in enumerate(models):
        log = logs[model]
        # an eval retried alone (eval_retry) logged the campaign as it stood when it ended;
        # the eval retried last logs every model's trials of the finished campaign
        resumed = meta.get("resumed") or {}
        per_sample = (
            resumed.get("trials_per_sample", {}).get(model)
            or (log.results.early_stopping.metadata["trials_per_sample"])
        )
        used[m] = per_sample
        seen: dict[int, set[int]] = defaultdict(set)
        for sample in log.samples or []:
            if not sample.scores or str(sample.id) not in index:
                continue
            q = index[str(sample.id)]
            where = f"{model}, sample {sample.id}, epoch {sample.epoch}"
            outcomes[m, q, sample.epoch - 1] = score_map.category(_as_sample_scores(sample), where)
            seen[q].add(sample.epoch - 1)
            runs[model] = runs.get(model, 0) + 1
        for q, n in enumerate(per_sample):
            lacking = set(range(int(n))) - seen[q]
            if lacking:
                raise InputError(
                    f"{model} on sample {questions[q]}: the bridge used {n} epochs but the log "
                    f"lacks epoch {min(lacking) + 1}",
                    source=str(log_dir),
                )
    out = out_dir or log_dir / "adaptive-eval"
    config_path = spec.write(out / "campaign", outcomes)
    config = load_config(config_path)
    campaign, judge = build(config, goal)
    finish = None
    if judge is not None and goal.candidate is not None:
        finish = comparison_finish(goal.candidate, judge)
    run_dir = out / "run"
    summary = run_campaign(campaign, run_dir, quiet=True, finish=finish)
    _check_same_trials(summary, run_dir, used, models)
    code = summary.comparison.exit_code if summary.comparison is not None else 0
    return InspectReport(summary, run_dir, code, runs)


def report_command(log_dir: Path, out: str | None, html: bool, as_json: bool) -> int:
    """``adaptive-eval report LOG_DIR`` of Inspect logs: prints as ``report`` prints (the
    ranking, a compare's verdict, ``--json``, ``--html``); returns compare's exit code."""
    from adaptive_eval.base.summary_schema import json_text
    from adaptive_eval.outputs.report import render_console
    from adaptive_eval.outputs.report_html import FILENAME
    from adaptive_eval.workflows.compare import render

    found = report_inspect(log_dir, Path(out) if out else None)
    if html:
        print(found.run_dir / FILENAME)
    elif as_json:
        print(json_text(found.summary))
    elif found.summary.comparison is not None:
        print(render_console(found.summary) + "\n\n" + render(found.summary.comparison))
        print(found.runs_line())
    else:
        print(render_console(found.summary))
        print(found.runs_line())
    return found.exit_code


def _check_same_trials(
    summary: Summary, run_dir: Path, used: np.ndarray, models: list[str]
) -> None:
    ran = {row.name: row.trials for row in summary.models}
    for m, model in enumerate(models):
        if int(ran[model]) != int(used[m].sum()):
            raise InputError(
                f"the replay of the logs took {ran[model]} trials of {model}, the bridge "
                f"{int(used[m].sum())}: the logs do not hold the bridge's campaign",
                source=str(run_dir),
            )


def _final_metadata(logs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The bridge's summary of the campaign's end: the newest log that saw it finish (with
    ``eval_retry``, the eval retried last), else any."""
    finished = [log for log in logs.values() if log.results.early_stopping.metadata.get("finished")]
    pool = finished or list(logs.values())
    newest = max(pool, key=lambda log: log.eval.created)
    meta: Mapping[str, Any] = newest.results.early_stopping.metadata
    return meta


def _sample_ids(log: Any) -> list[str]:
    """The samples in the dataset's order (the order the bridge indexed them)."""
    ids = log.eval.dataset.sample_ids
    if ids:
        return [str(i) for i in ids]
    return sorted({str(s.id) for s in log.samples or []})


def _key(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _as_sample_scores(sample: Any) -> dict[str, Any]:
    from inspect_ai.scorer import SampleScore

    return {
        name: SampleScore(score=score, sample_id=sample.id, scorer=name)
        for name, score in (sample.scores or {}).items()
    }


__all__ = [
    "InspectReport",
    "bridged_logs",
    "is_inspect_folder",
    "report_command",
    "report_inspect",
]
