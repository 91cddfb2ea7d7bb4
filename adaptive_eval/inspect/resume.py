"""A retried eval's campaign, recovered from the Inspect logs of its previous attempts.

``inspect_ai.eval_retry(logs)`` retries logs one at a time (0.3.285, ``_eval/eval.py``: "eval
them in turn", one ``eval_async`` per log, with a ``PreviousTask`` carrying the old log). The
retried eval keeps its ``task_id`` and gets a new ``run_id``; the evals of the first
``eval(task, model=[...])`` call share that call's ``run_id``. So the campaign's logs are the
connected logs of one log folder: the retried eval's ``task_id`` leads to the runs it was part
of, those runs to their other models' ``task_id``\\ s, and so on (a retry of a retry). For each
model the newest of its logs holds the runs Inspect keeps: a sample without error or
invalidation (``eval_log_sample_source``'s ``classify``), with its scores. Inspect hands the
retried eval's own kept runs back through ``complete_sample`` (``run_sample``'s reuse path);
the partners' are read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PriorLog:
    """The newest previous log of one model of the campaign."""

    model: str
    location: str
    status: str  # "success": that eval is over; otherwise it is still to be retried
    samples: tuple[str, ...]
    epochs: int
    #: (sample id, epoch, scores by scorer) of every run Inspect would reuse (as it hands a
    #: reused run's scores to ``complete_sample``)
    runs: tuple[tuple[str, int, dict[str, Any]], ...] = field(default=())


async def prior_logs(log_location: str, task_id: str, eval_id: str) -> dict[str, PriorLog]:
    """The newest previous log of each model of the campaign that the eval (``task_id``,
    ``eval_id``, writing ``log_location``) belongs to; empty unless it is a retry."""
    from inspect_ai.log import list_eval_logs_async, read_eval_log_async
    from inspect_ai.scorer import SampleScore

    if not log_location:
        return {}
    folder = str(Path(log_location).parent)
    headers = []
    for info in await list_eval_logs_async(folder, recursive=False):
        try:
            log = await read_eval_log_async(info, header_only=True)
        except Exception:  # a log being written, or not a log: not a previous attempt
            continue
        if log.eval.eval_id != eval_id:
            headers.append((info, log))
    tasks, runs = {task_id}, set()
    grew = True
    while grew:  # the connected logs: task ids <-> run ids
        grew = False
        for _, log in headers:
            spec = log.eval
            if (spec.task_id in tasks) != (spec.run_id in runs):
                tasks.add(spec.task_id)
                runs.add(spec.run_id)
                grew = True
    newest: dict[str, tuple[Any, Any]] = {}
    for info, log in headers:
        if log.eval.task_id not in tasks:
            continue
        model = log.eval.model
        if model not in newest or log.eval.created > newest[model][1].eval.created:
            newest[model] = (info, log)
    found: dict[str, PriorLog] = {}
    for model, (info, header) in newest.items():
        log = await read_eval_log_async(info)
        kept = tuple(
            (
                str(s.id),
                int(s.epoch),
                {k: SampleScore(score=v, sample_id=s.id, scorer=k) for k, v in s.scores.items()},
            )
            for s in log.samples or []
            if s.error is None and s.invalidation is None and s.scores
        )
        found[model] = PriorLog(
            model,
            str(info.name),
            str(header.status),
            tuple(str(i) for i in header.eval.dataset.sample_ids or ()),
            int(header.eval.config.epochs or 1),
            kept,
        )
    return found


__all__ = ["PriorLog", "prior_logs"]
