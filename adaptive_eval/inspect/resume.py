"""Resuming a campaign from its Inspect logs: all its evals together (:func:`retry`), and the
campaign of an eval retried alone, recovered from the logs of its previous attempts.

A campaign's rounds need every model's trials, so its evals must resume together, as
``eval_set``'s own retry resumes them (``retry_immediate=False``). :func:`retry` does that from
the logs, as ``eval_retry`` is given them: one ``eval()`` of every log's task and model
(Inspect's ``PreviousTask``, as ``eval_set`` builds them), so each eval reuses the runs its log
kept and samples only what the campaign's plan still wants.

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


@dataclass(frozen=True)
class Lookback:
    """What an eval's log folder says about its campaign when the eval starts without its
    partners: the newest previous log of each model (``prior``), and the models with a log of
    the eval's own ``eval()`` call (``in_run``: Inspect creates the logs of a call's evals
    before the first starts, where they all can run at once)."""

    prior: dict[str, PriorLog]
    in_run: frozenset[str]


async def prior_logs(
    log_location: str, task_id: str, eval_id: str, run_id: str = "", task: str = ""
) -> Lookback:
    """The newest previous log of each model of the campaign that the eval (``task_id``,
    ``eval_id`` of the call ``run_id``, task ``task``, writing ``log_location``) belongs to
    (empty unless it is a retry), and the models with a log of this call."""
    from inspect_ai.log import list_eval_logs_async, read_eval_log_async
    from inspect_ai.scorer import SampleScore

    if not log_location:
        return Lookback({}, frozenset())
    folder = str(Path(log_location.removeprefix("file://")).parent)
    headers = []
    in_run: set[str] = set()
    for info in await list_eval_logs_async(folder, recursive=False):
        try:
            log = await read_eval_log_async(info, header_only=True)
        except Exception:  # a log being written, or not a log: not a previous attempt
            continue
        if task and log.eval.task != task:
            continue  # another task's eval (of this call or another)
        if run_id and log.eval.run_id == run_id:
            in_run.add(log.eval.model)
        elif log.eval.eval_id != eval_id:
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
        if model not in newest or _newer(info, log, *newest[model]):
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
    return Lookback(found, frozenset(in_run))


def _newer(info: Any, log: Any, than_info: Any, than_log: Any) -> bool:
    """Whether a log is newer than another of the same model: created later, or the same eval's
    log recovered after a crash (``-recovered.eval``: not ``started``, written later)."""

    def key(info: Any, log: Any) -> tuple[Any, bool, float]:
        return (log.eval.created, log.status != "started", float(info.mtime or 0))

    return key(info, log) > key(than_info, than_log)


def _local(name: str) -> str:
    """A log's location as a resolved local path (Inspect names them ``file:///...``)."""
    return str(Path(name.removeprefix("file://")).resolve())


def newest_logs(logs: Any) -> list[tuple[Any, Any]]:
    """(header, EvalLogInfo) of the newest log of each model among ``logs``: a log folder, or
    what ``eval_retry`` takes (a log, its path or ``EvalLogInfo``, or a list of them)."""
    from inspect_ai.log import EvalLog, EvalLogInfo, list_eval_logs, read_eval_log

    from adaptive_eval.base.errors import InputError

    if isinstance(logs, str | Path) and Path(logs).is_dir():
        infos = list_eval_logs(str(logs), recursive=False)
        if not infos:
            raise InputError(f"{logs}: holds no Inspect log to retry")
    else:
        items = list(logs) if isinstance(logs, list | tuple) else [logs]
        if not items:
            raise InputError("retry: no log given")
        wanted: dict[str, str] = {}
        for item in items:
            if isinstance(item, EvalLog):
                location = item.location
            elif isinstance(item, EvalLogInfo):
                location = item.name
            else:
                location = str(item)
            if not location:
                raise InputError("retry: a log that was never written to a file")
            wanted[_local(location)] = location
        infos = []
        for folder in sorted({str(Path(path).parent) for path in wanted}):
            for info in list_eval_logs(folder, recursive=False):
                if _local(info.name) in wanted:
                    infos.append(info)
        found = {_local(info.name) for info in infos}
        lost = [wanted[path] for path in wanted if path not in found]
        if lost:
            raise InputError(f"{lost[0]}: not an Inspect log (or no longer there)")
    newest: dict[str, tuple[Any, Any]] = {}
    for info in infos:
        header = read_eval_log(info, header_only=True)
        model = header.eval.model
        if model not in newest or _newer(info, header, newest[model][1], newest[model][0]):
            newest[model] = (header, info)
    return list(newest.values())


def retry(logs: Any, **options: Any) -> list[Any]:
    """Resume a campaign's evals together from their logs, in one ``eval()`` (as ``eval_set``'s
    retry does): ``logs`` is the campaign's log folder or what ``eval_retry`` takes; the newest
    log of each model is resumed (a still-``started`` log, after a ``kill -9``, is recovered
    first, as ``eval_retry`` recovers it). Each eval reuses the runs its log kept; the bridge
    rebuilds its rounds from them and samples only what the plan still wants, and every eval's
    log ends with the campaign's final record. ``options`` go to ``inspect_ai.eval``
    (``display``, ``max_samples``, ``log_dir``: by default the first log's folder). The task must
    be re-creatable from Inspect's registry, as for ``eval_retry``."""
    from inspect_ai import Epochs
    from inspect_ai import eval as inspect_eval
    from inspect_ai._eval.evalset import _recover_crashed_log
    from inspect_ai._eval.task.task import PreviousTask
    from inspect_ai.model import get_model

    from adaptive_eval.base.errors import InputError

    previous = []
    configs = set()
    folders = []
    for header, info in newest_logs(logs):
        folders.append(str(Path(_local(str(info.name))).parent))
        header, info = _recover_crashed_log(header, info)
        spec = header.eval
        name = spec.task_registry_name or spec.task
        if spec.task_file:
            if not Path(spec.task_file).exists():
                raise InputError(f"{info.name}: its task file {spec.task_file} is not there")
            task = f"{spec.task_file}@{name}"
        else:
            task = name
        model = get_model(
            model=spec.model,
            config=spec.model_generate_config,
            base_url=spec.model_base_url,
            **spec.model_args,
        )
        previous.append(
            PreviousTask(
                id=spec.task_id,
                task=task,
                task_args=spec.task_args_passed,
                model=model,
                model_roles=None,
                sandbox=spec.sandbox,
                log=header,
                log_info=info,
            )
        )
        config = spec.config
        reducer = tuple(config.epochs_reducer) if config.epochs_reducer else None
        configs.add((config.epochs, reducer, config.limit))
        max_samples = config.max_samples
    if len(configs) > 1:
        raise InputError(
            "retry: the logs' evals ran different epochs or sample limits; retry the logs of "
            "one campaign"
        )
    ((epochs, reducer, limit),) = configs
    defaults: dict[str, Any] = {
        "log_dir": folders[0],
        "max_tasks": len(previous),  # the evals of a campaign run together
        "limit": limit,
        "max_samples": max_samples,
    }
    if epochs:
        defaults["epochs"] = Epochs(epochs, list(reducer) if reducer else None)
    logs_out: list[Any] = inspect_eval(tasks=previous, model=None, **{**defaults, **options})
    return logs_out


__all__ = ["Lookback", "PriorLog", "newest_logs", "prior_logs", "retry"]
