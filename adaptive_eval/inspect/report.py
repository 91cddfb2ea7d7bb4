"""``adaptive-eval report LOG_DIR``: an Inspect log folder decided by the bridge, as our outputs.

The logs hold what the bridge decided (``results.early_stopping.metadata``: the campaign's
models, goal, policy, rubric, score map and each model's trials per sample) and every scored
run; trial ``t`` of a cell is epoch ``t + 1``. The runs are written as a ``replay`` of the
campaign's config (:class:`~adaptive_eval.inspect.campaign.CampaignSpec`) and run by
``adaptive-eval run`` (or compare's steered campaign) in this process. That loop must take the
trials the bridge took, cell by cell (the same core on the same trials): a difference is an
error, never a silent report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import Summary
from adaptive_eval.config.schema import load_config
from adaptive_eval.inspect.bridge import MANAGER, ScoreMap
from adaptive_eval.inspect.campaign import CampaignSpec, Goal, build
from adaptive_eval.inspect.context import sample_scores
from adaptive_eval.inspect.resume import newest_by_model
from adaptive_eval.workflows.compare import comparison_finish
from adaptive_eval.workflows.run import run_campaign


@dataclass(frozen=True)
class InspectReport:
    summary: Summary
    run_dir: Path
    exit_code: int  # compare's (0 not worse, 3 regression, 4 undecided); 0 for a ranking
    #: Scored runs each model's log holds, whether the campaign used them or not (runs past
    #: the plan: after the bridge disengaged, or made ahead of it before issue 48).
    runs: dict[str, int]

    @property
    def unused(self) -> int:
        """Runs the logs hold that the campaign did not use (compute the saving leaves out)."""
        return sum(self.runs.values()) - self.summary.trials_used

    def runs_line(self) -> str:
        """One line counting every run the logs hold against the trials the campaign used."""
        line = (
            f"Inspect logs: {sum(self.runs.values())} runs of {len(self.runs)} models; the "
            f"campaign used {self.summary.trials_used}"
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

    headers, campaigns = [], set()
    for info in list_eval_logs(str(log_dir), recursive=False):
        header = read_eval_log(info, header_only=True)
        stopping = header.results.early_stopping if header.results is not None else None
        if stopping is not None and stopping.manager == MANAGER:
            headers.append((header, info))
            campaigns.add(str(stopping.metadata.get("campaign")))
    if not headers:
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
    return {model: read_eval_log(info) for model, (_, info) in newest_by_model(headers).items()}


def report_inspect(log_dir: Path, out_dir: Path | None = None) -> InspectReport:
    """Rebuild the campaign from the logs, run it on their trials, write the outputs."""
    logs = bridged_logs(log_dir)
    # the bridge's record of the campaign's end: the newest log that saw it finish, else any
    # (an eval retried alone logged the campaign as it stood when it ended)
    finished = [log for log in logs.values() if log.results.early_stopping.metadata.get("finished")]
    meta = max(finished or logs.values(), key=lambda log: log.eval.created)
    meta = meta.results.early_stopping.metadata
    if "models" not in meta:
        raise InputError("the bridge never opened its campaign in these logs", source=str(log_dir))
    models: list[str] = list(meta["models"])
    missing = [m for m in models if m not in logs]
    if missing:
        raise InputError(f"no finished log of {', '.join(missing)}", source=str(log_dir))
    first = logs[models[0]]  # the samples in the dataset's order (as the bridge indexed them)
    ids = first.eval.dataset.sample_ids or sorted({str(s.id) for s in first.samples or []})
    questions = tuple(str(i) for i in ids)
    epochs = int(meta["epochs"])
    goal = Goal(**meta["goal"])
    score_map = ScoreMap(meta["score_map"], meta.get("scorer"))
    weights = tuple(float(w) for w in meta["weights"])
    spec = CampaignSpec(
        str(meta["campaign"]), tuple(models), questions, epochs, weights, meta["policy"], goal
    )
    index = {q: i for i, q in enumerate(questions)}
    runs: dict[str, int] = {}
    outcomes = np.zeros((len(models), len(questions), epochs), dtype=np.int8)
    used: dict[str, int] = {}
    for m, model in enumerate(models):
        log = logs[model]
        # the eval that resumed the campaign last logs every model's trials
        per_sample = (meta.get("resumed") or {}).get("trials_per_sample", {}).get(model) or (
            log.results.early_stopping.metadata["trials_per_sample"]
        )
        seen = np.zeros((len(questions), epochs), dtype=bool)
        for sample in log.samples or []:
            if not sample.scores or str(sample.id) not in index:
                continue
            q = index[str(sample.id)]
            where = f"{model}, sample {sample.id}, epoch {sample.epoch}"
            outcomes[m, q, sample.epoch - 1] = score_map.category(sample_scores(sample), where)
            seen[q, sample.epoch - 1] = True
            runs[model] = runs.get(model, 0) + 1
        for q, n in enumerate(per_sample):
            if not seen[q, : int(n)].all():
                raise InputError(
                    f"{model} on sample {questions[q]}: the bridge used {n} epochs but the log "
                    f"lacks epoch {int(np.argmin(seen[q, : int(n)])) + 1}",
                    source=str(log_dir),
                )
        used[model] = int(sum(per_sample))
    out = out_dir or log_dir / "adaptive-eval"
    config = load_config(spec.write(out / "campaign", outcomes))
    campaign, judge = build(config, goal)
    finish = None if judge is None else comparison_finish(str(goal.candidate), judge)
    run_dir = out / "run"
    summary = run_campaign(campaign, run_dir, quiet=True, finish=finish)
    ran = {row.name: row.trials for row in summary.models}
    for model in models:
        if int(ran[model]) != used[model]:
            raise InputError(
                f"the replay of the logs took {ran[model]} trials of {model}, the bridge "
                f"{used[model]}: the logs do not hold the bridge's campaign",
                source=str(run_dir),
            )
    code = summary.comparison.exit_code if summary.comparison is not None else 0
    return InspectReport(summary, run_dir, code, runs)
