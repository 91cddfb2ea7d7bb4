"""Resuming a campaign from its Inspect logs: all its evals together (:func:`retry`), and the
campaign of an eval retried alone, recovered from the logs of its previous attempts.

A campaign's rounds need every model's trials, so its evals must resume together, as
``eval_set``'s own retry resumes them (``retry_immediate=False``); :func:`retry` does that from
the logs with Inspect's public ``eval_set``.

``inspect_ai.eval_retry(logs)`` retries logs one at a time. The retried eval keeps its
``task_id`` and gets a new ``run_id``; the evals of one ``eval(task, model=[...])`` call share
its ``run_id``. So the campaign's logs are the connected logs of one folder: the retried eval's
``task_id`` leads to the runs it was part of, those to their other models' ``task_id``\\ s, and
so on (a retry of a retry). For each model the newest of its logs holds the runs Inspect keeps
(a sample without error or invalidation, with its scores). Inspect hands the retried eval's own
kept runs back through ``complete_sample``; the partners' are read here.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.inspect.context import local_path, sample_scores

#: The limits of a log's config that ``eval_set`` compares (part of its ``task_identifier``).
_LIMITS = ("message_limit", "token_limit", "time_limit", "working_limit")
#: Model -> the task id of its log :func:`retry` resumes, while it runs (None: not in a retry).
_RESUMING: dict[str, str] | None = None


@dataclass(frozen=True)
class PriorLog:
    """The newest previous log of one model of the campaign."""

    location: str
    status: str  # "success": that eval is over; otherwise it is still to be retried
    samples: tuple[str, ...]
    epochs: int
    #: (sample id, epoch, scores by scorer) of every run Inspect would reuse
    runs: tuple[tuple[str, int, dict[str, Any]], ...]


def newest_by_model(logs: Iterable[tuple[Any, Any]]) -> dict[str, tuple[Any, Any]]:
    """The newest (header, EvalLogInfo) of each model: created later, or the same eval's log
    recovered after a crash (``-recovered.eval``: not ``started``, written later)."""
    newest: dict[str, tuple[Any, Any, Any]] = {}
    for log, info in logs:
        key = (log.eval.created, log.status != "started", float(info.mtime or 0))
        if log.eval.model not in newest or key > newest[log.eval.model][0]:
            newest[log.eval.model] = (key, log, info)
    return {model: (log, info) for model, (_, log, info) in newest.items()}


async def prior_logs(
    folder: str, task_id: str, eval_id: str, run_id: str = "", task: str = ""
) -> dict[str, PriorLog]:
    """The newest previous log in ``folder`` of each model of the campaign that the eval
    (``task_id``, ``eval_id`` of the call ``run_id``, task ``task``) belongs to (empty unless
    it is a retry); the logs of the call ``run_id`` itself are not previous ones."""
    import inspect_ai.log
    from inspect_ai.log import read_eval_log_async

    if not folder:
        return {}
    # list_eval_logs_async from 0.3.252; list_eval_logs does not wait on the loop before it
    listing = getattr(inspect_ai.log, "list_eval_logs_async", None)
    if listing is not None:
        infos = list(await listing(folder, recursive=False))
    else:
        infos = list(inspect_ai.log.list_eval_logs(folder, recursive=False))
    headers = []
    for info in infos:
        try:
            log = await read_eval_log_async(info, header_only=True)
        except Exception:  # a log being written, or not a log: not a previous attempt
            continue
        spec = log.eval
        if (task and spec.task != task) or (run_id and spec.run_id == run_id):
            continue  # another task's eval (of this call or another), or an eval of this call
        if spec.eval_id != eval_id:
            headers.append((log, info))
    tasks, runs = {task_id}, set()
    grew = True
    while grew:  # the connected logs: task ids <-> run ids
        grew = False
        for log, _ in headers:
            if (log.eval.task_id in tasks) != (log.eval.run_id in runs):
                tasks.add(log.eval.task_id)
                runs.add(log.eval.run_id)
                grew = True
    found: dict[str, PriorLog] = {}
    connected = [(log, info) for log, info in headers if log.eval.task_id in tasks]
    for model, (header, info) in newest_by_model(connected).items():
        log = await read_eval_log_async(info)
        kept = tuple(
            (str(s.id), int(s.epoch), sample_scores(s))
            for s in log.samples or []
            if s.error is None and getattr(s, "invalidation", None) is None and s.scores
        )
        found[model] = PriorLog(
            str(info.name),
            str(header.status),
            tuple(str(i) for i in header.eval.dataset.sample_ids or ()),
            int(header.eval.config.epochs or 1),
            kept,
        )
    return found


def _local(name: str) -> str:
    return str(local_path(name).resolve())


def newest_logs(logs: Any) -> list[tuple[Any, Any]]:
    """(header, EvalLogInfo) of the newest log of each model among ``logs``: a log folder, or
    what ``eval_retry`` takes (a log, its path or ``EvalLogInfo``, or a list of them)."""
    from inspect_ai.log import EvalLog, EvalLogInfo, list_eval_logs, read_eval_log

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
            if isinstance(item, EvalLog | EvalLogInfo):
                location = item.location if isinstance(item, EvalLog) else item.name
            else:
                location = str(item)
            if not location:
                raise InputError("retry: a log that was never written to a file")
            wanted[_local(location)] = location
        infos = [
            info
            for folder in sorted({str(Path(path).parent) for path in wanted})
            for info in list_eval_logs(folder, recursive=False)
            if _local(info.name) in wanted
        ]
        found = {_local(info.name) for info in infos}
        lost = [wanted[path] for path in wanted if path not in found]
        if lost:
            raise InputError(f"{lost[0]}: not an Inspect log (or no longer there)")
    headers = [(read_eval_log(info, header_only=True), info) for info in infos]
    return list(newest_by_model(headers).values())


def retry(logs: Any, **options: Any) -> list[Any]:
    """Resume a campaign's evals together from their logs (as ``eval_set``'s retry does, with
    Inspect's public ``eval_set``): ``logs`` is the campaign's log folder or what ``eval_retry``
    takes; the newest log of each model is resumed (a still-``started`` log, after a ``kill
    -9``, is recovered first). ``eval_set`` pairs each log with its task and model (its
    ``task_identifier``) and runs the evals that did not succeed together, in one ``eval()``,
    each reusing the runs its log kept; the bridge rebuilds its rounds from them (and from the
    logs of evals that did succeed). ``options`` go to ``eval_set`` (``display``,
    ``max_samples``, ``retry_attempts``: by default none); the logs stay in their folder. The
    task must be re-creatable from Inspect's registry, as for ``eval_retry``. Returns the newest
    log of each model (headers, as ``eval_set`` returns them)."""
    import dataclasses
    import inspect as python_inspect

    from inspect_ai import Epochs, eval_set
    from inspect_ai.model import get_model
    from inspect_ai.solver import SolverSpec

    newest = newest_logs(logs)
    folders = sorted({str(Path(_local(str(info.name))).parent) for _, info in newest})
    if len(folders) > 1:
        raise InputError(
            f"retry: the logs are in {len(folders)} folders ({', '.join(folders)}); a "
            "campaign's logs are the log folder of its eval() call"
        )
    folder = folders[0]
    wanted = options.pop("log_dir", None)
    if wanted is not None and _local(str(wanted)) != folder:
        raise InputError(
            f"retry: log_dir={wanted!r}: the logs are resumed where they are ({folder!r}), "
            "where eval_set finds the runs they kept"
        )
    same, models = set(), []
    for header, _ in newest:
        spec, config = header.eval, header.eval.config
        task = spec.task_registry_name or spec.task
        if spec.task_file:
            if not Path(spec.task_file).exists():
                raise InputError(f"{header.location}: its task file {spec.task_file} is not there")
            task = f"{spec.task_file}@{task}"
        models.append(
            get_model(
                model=spec.model,
                config=spec.model_generate_config,
                base_url=spec.model_base_url,
                **spec.model_args,
            )
        )
        reducer = tuple(config.epochs_reducer) if config.epochs_reducer else None
        limits = {key: getattr(config, key, None) for key in _LIMITS}
        generate = header.plan.config.model_dump(exclude_none=True)
        run = (task, spec.task_args_passed, spec.solver, spec.solver_args or {}, config.epochs)
        same.add(_frozen([*run, reducer, config.limit, limits, generate]))
    if len(same) > 1:
        raise InputError(
            "retry: the logs' evals ran different tasks, task arguments, solvers, epochs, "
            "sample limits or generation settings; retry the logs of one campaign"
        )
    defaults: dict[str, Any] = {
        "max_tasks": len(models),  # the evals of a campaign run together
        "limit": config.limit,
        "max_samples": config.max_samples,
        "retry_attempts": 0,  # one attempt, as eval() makes
        "retry_cleanup": False,  # every log of every attempt stays
        "log_dir_allow_dirty": True,  # the folder may hold other tasks' logs
        **{key: value for key, value in limits.items() if value is not None},
        **generate,
    }
    if "retry_immediate" in python_inspect.signature(eval_set).parameters:
        defaults["retry_immediate"] = False  # retry failed evals together (none here)
    if config.epochs:
        defaults["epochs"] = Epochs(config.epochs, list(reducer) if reducer else None)
    if spec.solver:  # a solver given to eval() (eval_retry passes it on too)
        args: dict[str, Any] = {"args": spec.solver_args or {}}
        if "args_passed" in {f.name for f in dataclasses.fields(SolverSpec)}:
            args["args_passed"] = getattr(spec, "solver_args_passed", None) or {}
        defaults["solver"] = SolverSpec(spec.solver, **args)
    global _RESUMING
    _RESUMING = {str(h.eval.model): str(h.eval.task_id) for h, _ in newest}  # ids to keep
    try:
        with _where(spec.task_file):
            _, logs_out = eval_set(
                tasks=task,
                task_args=spec.task_args_passed,
                model=models,
                log_dir=folder,
                **{**defaults, **options},
            )
    finally:
        _RESUMING = None
    return list(logs_out)


@contextlib.contextmanager
def _where(task_file: str | None) -> Iterator[None]:
    """Run from a folder where Inspect names the task file as the logs name it. It names a
    task's file relative to the working folder when the file is under it, else by its
    absolute path, and ``eval_set`` pairs a log with its task by that name (its
    ``task_identifier``): a log that names the file absolutely is resumed from a folder that
    is not above the file (a relative name is resolved from here, as ``eval_retry`` does)."""
    if task_file and Path(task_file).is_absolute() and Path(task_file).is_relative_to(Path.cwd()):
        with (
            tempfile.TemporaryDirectory(prefix="adaptive-eval-retry-") as away,
            contextlib.chdir(away),
        ):
            yield
    else:
        yield


def resumed_elsewhere(task_id: str, model: str) -> str | None:
    """One line when :func:`retry` is running and an eval did not resume one of its logs
    (None: it did, or no retry runs): ``eval_set`` keeps a log's task id when it resumes the
    log, and gives a task it could not pair with its log a new one (it would run that eval
    from scratch)."""
    if _RESUMING is None or task_id in _RESUMING.values():
        return None
    return (
        f"retry: eval_set did not pair the eval of {model} with its log (it gave the eval task "
        f"id {task_id}, the log has {_RESUMING.get(model, 'none')}), so it would run the eval "
        "from scratch; nothing was run. eval_set pairs them by the task's file as named from "
        "the working folder, the task's and the model's arguments, generation settings and "
        "limits: run retry from the folder the campaign's eval() ran in, with the same task "
        "code and no changed option"
    )


def _frozen(value: Any) -> Any:
    """A hashable copy of a JSON-like value (dicts and lists of the logs' headers)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value
