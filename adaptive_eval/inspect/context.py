"""What the bridge learns about Inspect's evals, through Inspect's public API only.

The ``EarlyStopping`` protocol names the eval in ``start_task`` only (its ``EvalSpec``). The
model of a later call is ``inspect_ai.model.get_model()`` with no argument ("the model
currently being evaluated": every protocol call runs in its eval's task context). The rest
comes from Inspect's public hooks (``inspect_ai.hooks``), registered once by :func:`watch`:
``RunStart`` names the task of every eval of an ``eval()`` call, ``EvalSetStart`` the log
folder of an ``eval_set``, ``RunEnd`` and ``TaskEnd`` every finished eval's log, ``SampleEnd``
each run's error. No module of ``inspect_ai`` whose path has a ``_``-prefixed part is read
(``tests/test_inspect_public_api.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: run id -> the task of each eval of that ``eval()`` call (``RunStart.task_names``)
_RUNS: dict[str, tuple[str, ...]] = {}
#: eval set id -> its log folder (``EvalSetStart.log_dir``)
_EVAL_SET_FOLDERS: dict[str, str] = {}
#: task id -> the folder of the newest finished log of that task seen in this process
_TASK_FOLDERS: dict[str, str] = {}
#: eval id -> how many of its runs ended with an error (``SampleEnd``)
_ERRORS: dict[str, int] = {}
_watching = False
#: From this release ``max_tasks`` bounds the evals of one task over several models too
#: (Inspect's issue #4195); before it, ``eval(task, model=[...])`` ran every model's eval at
#: once whatever ``max_tasks`` said (``max_tasks`` bounded several tasks only).
MAX_TASKS_BOUNDS_MODELS = (0, 3, 241)


def current_model() -> str | None:
    """The model of the eval whose context this is (None outside an eval)."""
    from inspect_ai.model import get_model

    try:
        return str(get_model())
    except Exception:  # no eval running here (and no INSPECT_EVAL_MODEL): not one of ours
        return None


def unique_scorer_name(name: str, used: Sequence[str]) -> str:
    """The key of a scorer's scores, as Inspect names them: its name, or the name followed by
    1, 2, ... when a scorer of the task already took it (``match``, ``match1``, ...)."""
    unique, count = name, 1
    while unique in used:
        unique = f"{name}{count}"
        count += 1
    return unique


def watch() -> None:
    """Subscribe to Inspect's hooks (once per process; a no-op after the first call)."""
    global _watching
    if _watching:
        return
    from inspect_ai.hooks import EvalSetStart, Hooks, RunEnd, RunStart, SampleEnd, TaskEnd, hooks

    class Watch(Hooks):
        """Cheap: a dict entry per call, per eval set, per finished log and per errored run."""

        async def on_run_start(self, data: RunStart) -> None:
            _RUNS[data.run_id] = tuple(data.task_names)

        async def on_eval_set_start(self, data: EvalSetStart) -> None:
            _EVAL_SET_FOLDERS[data.eval_set_id] = data.log_dir

        async def on_task_end(self, data: TaskEnd) -> None:
            _finished(data.log)

        async def on_run_end(self, data: RunEnd) -> None:
            for log in data.logs:
                _finished(log)

        async def on_sample_end(self, data: SampleEnd) -> None:
            if data.sample.error is not None:
                _ERRORS[data.eval_id] = _ERRORS.get(data.eval_id, 0) + 1

    hooks(name="adaptive_eval", description="adaptive_eval.inspect: which eval a call is")(Watch)
    _watching = True


def _finished(log: Any) -> None:
    location = str(getattr(log, "location", "") or "")
    if location:
        _TASK_FOLDERS[str(log.eval.task_id)] = str(local_path(location).parent)


def local_path(location: str) -> Path:
    """A log's location as a local path (Inspect names local logs ``file:///...``)."""
    return Path(location.removeprefix("file://"))


def evals_at_once(run_id: str, task: str, max_tasks: int | None) -> int | None:
    """How many evals of ``task`` the ``eval()`` call ``run_id`` runs at once (None: the call
    was not seen): its evals of the task (``RunStart``), at most ``max_tasks`` (the eval's
    ``EvalConfig.max_tasks``) where Inspect bounds them by it."""
    names = _RUNS.get(run_id)
    if names is None:
        return None
    count = sum(1 for name in names if name == task)
    if max_tasks is None:
        return count
    if not since(MAX_TASKS_BOUNDS_MODELS) and len(set(names)) == 1:
        return count  # one task over several models: all at once (issue #4195)
    return min(count, max_tasks)


def inspect_version() -> tuple[int, ...]:
    """The installed inspect-ai release as numbers (``0.3.285`` -> ``(0, 3, 285)``)."""
    import inspect_ai

    return release(str(inspect_ai.__version__))


def release(version: str) -> tuple[int, ...]:
    """``0.3.285`` (or ``0.3.286.dev3+g1a2b``) -> ``(0, 3, 285)``; ValueError if not one."""
    return tuple(int(part) for part in version.split("+")[0].split(".")[:3])


def since(version: tuple[int, ...]) -> bool:
    """Whether the installed inspect-ai is ``version`` or later (a local build, whose version
    is not a release number, behaves as the newest)."""
    try:
        return inspect_version() >= version
    except ValueError:
        return True


def log_folder(eval_set_id: str | None, task_id: str) -> str | None:
    """Where the logs of an eval's earlier attempts are, when this process can know: the
    eval set's folder, or the folder of a finished log of the same task (the eval retried
    keeps its ``task_id``). None for a plain ``eval()`` whose task never ended here."""
    if eval_set_id and eval_set_id in _EVAL_SET_FOLDERS:
        return _EVAL_SET_FOLDERS[eval_set_id]
    return _TASK_FOLDERS.get(task_id)


def ran_before(task_id: str) -> bool:
    """Whether an eval of this task (the same ``task_id``) finished earlier in this process."""
    return task_id in _TASK_FOLDERS


def eval_failed(eval_id: str, fail_on_error: bool | float | None, runs: int) -> bool:
    """Whether the eval's errored runs fail it, by Inspect's rule for ``fail_on_error``: any
    error (None or True), never (False), a share of its runs (below 1) or a count."""
    errors = _ERRORS.get(eval_id, 0)
    if errors == 0 or fail_on_error is False:
        return False
    if fail_on_error is None or fail_on_error is True:
        return True
    return errors >= (fail_on_error * runs if fail_on_error < 1 else fail_on_error)


def sample_scores(sample: Any) -> dict[str, Any]:
    """A logged sample's scores as Inspect hands them to ``complete_sample``."""
    from inspect_ai.scorer import SampleScore

    return {
        name: SampleScore(score=score, sample_id=sample.id, scorer=name)
        for name, score in (sample.scores or {}).items()
    }
