"""Resuming a campaign from its Inspect logs: all its evals together (:func:`retry`), and the
campaign of an eval retried alone, recovered from the logs of its previous attempts.

A campaign's rounds need every model's trials, so its evals must resume together, as
``eval_set``'s own retry resumes them (``retry_immediate=False``). :func:`retry` does that from
the logs with Inspect's public ``eval_set``, given the logs' task and models in their log folder:
``eval_set`` pairs each log with its task and model (``task_identifier``), recovers a log left
``started`` by a crash, and runs the evals that did not succeed together, in one ``eval()``,
each reusing the runs its log kept, so that the bridge samples only what the campaign's plan
still wants.

``inspect_ai.eval_retry(logs)`` retries logs one at a time (one ``eval_async`` per log). The
retried eval keeps its ``task_id`` and gets a new ``run_id``; the evals of the first
``eval(task, model=[...])`` call share that call's ``run_id``. So the campaign's logs are the
connected logs of one log folder: the retried eval's ``task_id`` leads to the runs it was part
of, those runs to their other models' ``task_id``\\ s, and so on (a retry of a retry). For each
model the newest of its logs holds the runs Inspect keeps: a sample without error or
invalidation, with its scores. Inspect hands the retried eval's own kept runs back through
``complete_sample``; the partners' are read here.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
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


async def prior_logs(
    folder: str, task_id: str, eval_id: str, run_id: str = "", task: str = ""
) -> dict[str, PriorLog]:
    """The newest previous log in ``folder`` of each model of the campaign that the eval
    (``task_id``, ``eval_id`` of the call ``run_id``, task ``task``) belongs to (empty unless
    it is a retry); the logs of the call ``run_id`` itself are not previous ones."""
    from inspect_ai.log import read_eval_log_async
    from inspect_ai.scorer import SampleScore

    if not folder:
        return {}
    headers = []
    for info in await _list_logs(folder):
        try:
            log = await read_eval_log_async(info, header_only=True)
        except Exception:  # a log being written, or not a log: not a previous attempt
            continue
        if task and log.eval.task != task:
            continue  # another task's eval (of this call or another)
        if run_id and log.eval.run_id == run_id:
            continue  # an eval of this call
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
            if s.error is None and getattr(s, "invalidation", None) is None and s.scores
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


async def _list_logs(folder: str) -> list[Any]:
    """The logs of a folder (not its subfolders): ``list_eval_logs_async`` where the release
    has it (0.3.252 and later), else ``list_eval_logs``, whose listing does not wait on the
    event loop in those releases."""
    import inspect_ai.log

    listing = getattr(inspect_ai.log, "list_eval_logs_async", None)
    if listing is not None:
        return list(await listing(folder, recursive=False))
    return list(inspect_ai.log.list_eval_logs(folder, recursive=False))


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
    """Resume a campaign's evals together from their logs (as ``eval_set``'s retry does, with
    Inspect's public ``eval_set``): ``logs`` is the campaign's log folder or what ``eval_retry``
    takes; the newest log of each model is resumed (a still-``started`` log, after a ``kill
    -9``, is recovered first). The evals that did not succeed run together in one ``eval()``;
    each reuses the runs its log kept, the bridge rebuilds its rounds from them (and from the
    logs of evals that did succeed) and samples only what the plan still wants, and every
    eval's log ends with the campaign's final record. ``options`` go to ``eval_set``
    (``display``, ``max_samples``, ``retry_attempts``: by default none); the logs stay in their
    folder (``eval_set``'s ``log_dir``). The task must be re-creatable from Inspect's
    registry, as for ``eval_retry``. Returns the newest log of each model (headers without
    the samples, as ``eval_set`` returns them: ``read_eval_log(log.location)`` reads one)."""
    import dataclasses
    import inspect as python_inspect

    from inspect_ai import Epochs, eval_set
    from inspect_ai.model import get_model
    from inspect_ai.solver import SolverSpec

    from adaptive_eval.base.errors import InputError

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
    tasks, solvers, configs, limits = set(), set(), set(), set()
    models = []
    max_samples = None
    spec: Any = None
    generate: dict[str, Any] = {}
    for header, _ in newest:
        spec = header.eval
        name = spec.task_registry_name or spec.task
        if spec.task_file:
            if not Path(spec.task_file).exists():
                raise InputError(f"{header.location}: its task file {spec.task_file} is not there")
            task = f"{spec.task_file}@{name}"
        else:
            task = name
        tasks.add((task, _frozen(spec.task_args_passed)))
        solvers.add((spec.solver, _frozen(spec.solver_args or {})))
        models.append(
            get_model(
                model=spec.model,
                config=spec.model_generate_config,
                base_url=spec.model_base_url,
                **spec.model_args,
            )
        )
        config = spec.config
        reducer = tuple(config.epochs_reducer) if config.epochs_reducer else None
        configs.add((config.epochs, reducer, config.limit))
        generate = header.plan.config.model_dump(exclude_none=True)
        limits.add((*((key, getattr(config, key, None)) for key in _LIMITS), _frozen(generate)))
        max_samples = config.max_samples
    if len(tasks) > 1 or len(solvers) > 1 or len(configs) > 1 or len(limits) > 1:
        raise InputError(
            "retry: the logs' evals ran different tasks, task arguments, solvers, epochs, "
            "sample limits or generation settings; retry the logs of one campaign"
        )
    ((task, _),) = tasks
    ((epochs, reducer, limit),) = configs
    set_limits = [(key, getattr(spec.config, key, None)) for key in _LIMITS]
    defaults: dict[str, Any] = {
        "max_tasks": len(models),  # the evals of a campaign run together
        "limit": limit,
        "max_samples": max_samples,
        "retry_attempts": 0,  # one attempt, as eval() makes
        "retry_cleanup": False,  # every log of every attempt stays
        "log_dir_allow_dirty": True,  # the folder may hold other tasks' logs
        **{key: value for key, value in set_limits if value is not None},
        **generate,
    }
    if "retry_immediate" in python_inspect.signature(eval_set).parameters:
        defaults["retry_immediate"] = False  # retry failed evals together (none here)
    if epochs:
        defaults["epochs"] = Epochs(epochs, list(reducer) if reducer else None)
    if spec.solver:  # a solver given to eval() (eval_retry passes it on too)
        args: dict[str, Any] = {"args": spec.solver_args or {}}
        if "args_passed" in {f.name for f in dataclasses.fields(SolverSpec)}:
            args["args_passed"] = getattr(spec, "solver_args_passed", None) or {}
        defaults["solver"] = SolverSpec(spec.solver, **args)
    with _where(spec.task_file), resuming({str(h.eval.task_id) for h, _ in newest}):
        _, logs_out = eval_set(
            tasks=task,
            task_args=spec.task_args_passed,
            model=models,
            log_dir=folder,
            **{**defaults, **options},
        )
    return list(logs_out)


@contextlib.contextmanager
def _where(task_file: str | None) -> Iterator[None]:
    """Run from a folder where Inspect names the task file as the logs name it. It names a
    task's file relative to the working folder when the file is under it, else by its
    absolute path, and ``eval_set`` pairs a log with its task by that name (its
    ``task_identifier``): a log that names the file absolutely is resumed from a folder that
    is not above the file (a relative name is resolved from here, as ``eval_retry`` does)."""
    if not task_file or not Path(task_file).is_absolute():
        yield
        return
    if not Path(task_file).is_relative_to(Path.cwd()):
        yield
        return
    with (
        tempfile.TemporaryDirectory(prefix="adaptive-eval-retry-") as away,
        contextlib.chdir(away),
    ):
        yield


#: The task ids of the logs :func:`retry` resumes, while it runs (None: not in a retry).
_RESUMING: set[str] | None = None


@contextlib.contextmanager
def resuming(task_ids: set[str]) -> Iterator[None]:
    """While :func:`retry` runs, the task ids its evals must have: ``eval_set`` keeps a log's
    task id when it resumes the log, and gives a task it could not pair with its log a new
    one (it would run that eval from scratch; the bridge refuses it, see
    :func:`resumed_elsewhere`)."""
    global _RESUMING
    _RESUMING = set(task_ids)
    try:
        yield
    finally:
        _RESUMING = None


def resumed_elsewhere(task_id: str, model: str) -> str | None:
    """One line when :func:`retry` is running and an eval did not resume one of its logs
    (None: it did, or no retry runs)."""
    if _RESUMING is None or task_id in _RESUMING:
        return None
    return (
        f"retry: eval_set did not pair the eval of {model} with its log (its task, task "
        "arguments, model arguments, generation settings or limits differ from the logged "
        "ones), so it would run the eval from scratch; nothing was run. Run retry from the "
        "folder the campaign's eval() ran in, with the same task code"
    )


#: The limits of a log's config that ``eval_set`` compares (part of its ``task_identifier``).
_LIMITS = ("message_limit", "token_limit", "time_limit", "working_limit")


def _frozen(value: Any) -> Any:
    """A hashable copy of a JSON-like value (dicts and lists of the logs' headers)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


__all__ = ["PriorLog", "newest_logs", "prior_logs", "resumed_elsewhere", "resuming", "retry"]
