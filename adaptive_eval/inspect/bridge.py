"""``inspect_ai.util.EarlyStopping`` backed by the project's decision core (docs/inspect.md).

One :class:`AdaptiveStopping` serves every model of an ``eval(task, model=[...])`` call:
Inspect calls ``start_task`` once per eval (one per model), then ``schedule_sample(id, epoch)``
before each run and ``complete_sample(id, epoch, scores)`` after it, without naming the model;
:mod:`~adaptive_eval.inspect.context` tells which eval a call belongs to. Rounds are
:class:`~adaptive_eval.inspect.rounds.RoundBook`'s: a run whose round boundary has not come
waits for it (Inspect schedules epoch by epoch, so the runs a round needs were scheduled
before). A wait longer than ``wait_s`` (a trial that errored without a score) disengages the
bridge: every later epoch runs, no further decision is taken, and the log says why; never a
decision on a partial view. Evals of the campaign that cannot start while this one runs end it
with one line before any run: the campaign's evals resume together
(:func:`~adaptive_eval.inspect.resume.retry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.checkpoint import Judge, exit_code
from adaptive_eval.forecast.forecaster import LiveForecaster
from adaptive_eval.forecast.live import LIVE_SIMULATIONS
from adaptive_eval.inspect import context
from adaptive_eval.inspect.campaign import CampaignSpec, Goal, check_policy
from adaptive_eval.inspect.resume import prior_logs, resumed_elsewhere
from adaptive_eval.inspect.rounds import Fate, RoundBook
from adaptive_eval.workflows.imports import DEFAULT_MAP, _norm, parse_map

if TYPE_CHECKING:
    from inspect_ai.dataset import Sample
    from inspect_ai.log import EvalSpec
    from inspect_ai.scorer import SampleScore
    from inspect_ai.util import EarlyStop

#: The inspect-ai releases the bridge supports: from the oldest it is tested on (the first
#: with everything it uses, docs/inspect.md) up to, not including, the next minor release
#: (``pyproject.toml``'s ``inspect`` extra says the same; ``make test-inspect-range`` runs the
#: Inspect tests on both ends). It uses Inspect's public API only.
SUPPORTED = ((0, 3, 154), (0, 4, 0))
#: The newest release the tests ran on (the ``dev`` extra pins it).
NEWEST_TESTED = (0, 3, 285)
MANAGER = "adaptive_eval"
#: Bumped when the metadata written to Inspect's log changes shape (2: ``resumed`` has no
#: ``partners_to_come`` and ``runs_ahead_of_plan``: an eval retried alone no longer runs ahead).
METADATA_VERSION = 2


def check_inspect_version(version: str | None = None) -> str:
    """The installed inspect-ai version, or one line saying why the bridge cannot use it."""
    try:
        import inspect_ai
    except ImportError:
        raise InputError(
            "inspect-ai is not installed; pip install 'adaptive-eval[inspect]'"
        ) from None
    found = version or str(inspect_ai.__version__)
    try:
        parts = context.release(found)
    except ValueError:
        raise InputError(f"inspect-ai version {found!r} is not a release number") from None
    low, high = SUPPORTED
    if not low <= parts < high:
        shown = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high[:2]))}"
        raise InputError(
            f"inspect-ai {found} is not supported by adaptive_eval.inspect (supported: "
            f"inspect-ai{shown}); pip install 'adaptive-eval[inspect]' for a supported release"
        )
    return found


#: What Inspect's own scorers return (inspect-ai 0.3.285, ``inspect_ai/scorer/``; see
#: :data:`VALUE_SINCE` for the values older releases do not return), by their
#: registered name: known before any sample runs. ``model_graded_qa`` / ``_fact`` add ``P``
#: with ``partial_credit=True``; with their own ``grade_pattern`` they return what it matches
#: (not known). A scorer of one's own declares its values as ``@scorer(metrics=[...],
#: score_values=["C", "P", "I"])`` (Inspect keeps extra ``@scorer`` arguments as its metadata).
BUILTIN_VALUES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("match", "includes", "pattern", "answer", "exact", "math"), ("C", "I")),
    "choice": ("C", "I", "N"),
    **dict.fromkeys(("model_graded_qa", "model_graded_fact"), ("C", "I")),
}
#: Values an Inspect scorer returns from a release on only: ``choice`` answers ``N`` (no
#: answer) from 0.3.264; before it an unanswered choice was ``I``.
VALUE_SINCE: dict[tuple[str, str], tuple[int, int, int]] = {("choice", "N"): (0, 3, 264)}
#: Inspect scorers whose score is a number in [0, 1], not a grade.
CONTINUOUS = {"f1": "an F1 score in [0, 1]"}
#: The metadata key a scorer declares its score values under.
DECLARED = "score_values"


class ScoreMap:
    """Inspect scores to categories, as ``import --format inspect`` maps them: ``C`` / 1 /
    true -> 1 and ``I`` / 0 / false -> 0 by default, any other value by ``mapping``
    (``{"P": 1}`` or ``["P=1"]``, the ``--map`` form); ``scorer`` names the scorer to read
    when the task has several. A mapping that is not one is one line here."""

    def __init__(
        self,
        mapping: Mapping[Any, int] | Sequence[str] | None = None,
        scorer: str | None = None,
    ) -> None:
        if isinstance(mapping, str):
            raise InputError(f"score_map {mapping!r}: give a dict ({{'P': 1}}) or a list (['P=1'])")
        if mapping is None:
            table = dict(DEFAULT_MAP)
        elif not isinstance(mapping, Mapping):
            table = parse_map([str(item) for item in mapping])
        else:
            table = {}
            for key, value in mapping.items():
                try:
                    norm = _norm(key)
                except ValueError:
                    raise InputError(
                        f"score_map key {key!r} is neither a number nor a string"
                    ) from None
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise InputError(
                        f"score_map {key!r}: category {value!r} is not an integer "
                        f"(score_map={{{key!r}: CATEGORY}})"
                    )
                table[norm] = int(value)
        if not table:
            raise InputError("score_map is empty; map at least the scores C and I")
        for key, value in table.items():
            if value < 0:
                raise InputError(f"score_map {key!r}: category {value} is below 0")
        if scorer is not None and (not isinstance(scorer, str) or not scorer):
            raise InputError(f"scorer= names a scorer of the task, got {scorer!r}")
        self.table: dict[float | str, int] = table
        self.scorer = scorer

    def categories(self) -> int:
        return max(self.table.values()) + 1

    def check_scorers(self, scorers: Sequence[Any] | None, task: str) -> None:
        """Before any sample runs: the task's scorers (``EvalSpec.scorers``) against
        ``scorer=`` and the map. A scorer that declares its values (an Inspect scorer whose
        values are known, or ``score_values=`` in its ``@scorer``) must have each mapped; one
        that does not is checked at its first score."""
        if not scorers:
            return
        keys: list[str] = []
        for spec in scorers:
            keys.append(context.unique_scorer_name(str(spec.name), keys))
        absent = f"no scorer {self.scorer!r} (scorers: {', '.join(keys)}); name one with scorer="
        spec = self._chosen(dict(zip(keys, scorers, strict=True)), f"task {task}", absent)
        name, options, metadata = str(spec.name), dict(spec.options or {}), spec.metadata or {}
        values: tuple[Any, ...]
        if DECLARED in metadata:
            declared = metadata[DECLARED]
            if isinstance(declared, str) or not isinstance(declared, Sequence):
                raise InputError(
                    f"task {task}: scorer {name!r} declares {DECLARED}={declared!r}; "
                    "give a list of the values it returns"
                )
            values, source = tuple(declared), f"scorer {name!r} (its {DECLARED})"
        elif name in CONTINUOUS:
            raise InputError(
                f"task {task}: scorer {name!r} returns {CONTINUOUS[name]}, not categories; "
                "grade the task with a scorer that returns C / I (exact(), match(), ...)"
            )
        elif name in BUILTIN_VALUES and not options.get("grade_pattern"):
            known = BUILTIN_VALUES[name]
            values = tuple(v for v in known if context.since(VALUE_SINCE.get((name, v), ())))
            values += ("P",) if options.get("partial_credit") else ()
            source = f"Inspect's scorer {name!r}"
        else:
            return
        where = f"task {task}: {source}"
        for value in values:
            self._mapped(value, where, f"{where} can return {value!r}, which has")

    def category(self, scores: Mapping[str, SampleScore], where: str) -> int:
        names = ", ".join(sorted(scores)) or "none"
        absent = f"no score from scorer {self.scorer!r} (scorers: {names})"
        value = self._chosen(dict(sorted(scores.items())), where, absent).score.value
        return self.table[self._mapped(value, where, f"{where}: score {value!r} has")]

    def _chosen(self, found: Mapping[str, Any], where: str, absent: str) -> Any:
        """The entry of ``found`` (by scorer key) of ``scorer=``, else the only one."""
        if self.scorer is not None:
            if self.scorer not in found:
                raise InputError(f"{where}: {absent}")
            return found[self.scorer]
        if len(found) != 1:
            raise InputError(
                f"{where}: {len(found)} scorers ({', '.join(found)}); name one with scorer="
            )
        return next(iter(found.values()))

    def _mapped(self, value: Any, where: str, said: str) -> Any:
        """``value``'s key in the table, else one error naming ``where`` it came from (``said``
        says where and what it is: ``"...: score 'P' has"``)."""
        try:
            key = _norm(value)
        except ValueError as error:
            raise InputError(f"{where}: {error}") from None
        if key not in self.table:
            raise InputError(
                f"{said} no category; map it with "
                f"score_map={{{value!r}: CATEGORY}} (mapped: {sorted(map(str, self.table))})"
            )
        return key


#: How often a waiting call looks whether a partner eval has failed (seconds).
PARTNER_CHECK_S = 1.0


def _seconds(name: str, value: Any, what: str, after: str = "") -> float:
    """A positive, finite number of seconds, else one line naming the argument: ``wait_s=-1``
    made every wait end at once, which disengaged the bridge (every epoch ran) silently."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{name} must be a number of seconds ({what}), got {value!r}")
    if value <= 0:
        raise InputError(f"{name} must be > 0 seconds ({what}), got {value!r}{after}")
    return float(value)


class CampaignEnded(RuntimeError):
    """An eval of the campaign failed: its partners end too (and resume with it)."""


#: Bridges by campaign name, so that the tasks ``eval_retry`` re-creates (one per log) share one.
_SHARED: dict[str, AdaptiveStopping] = {}


def adaptive_stopping(
    name: str = "inspect",
    goal: str = "rank",
    *,
    candidate: str | None = None,
    margin: float | None = None,
    settle_all: bool = False,
    models: Sequence[str] | None = None,
    policy: Mapping[str, Any] | None = None,
    weights: Sequence[float] | None = None,
    score_map: Mapping[Any, int] | Sequence[str] | None = None,
    scorer: str | None = None,
    wait_s: float = 600.0,
    register_s: float = 1.0,
    folder: str | Path | None = None,
    live_forecast: int = LIVE_SIMULATIONS,
) -> AdaptiveStopping:
    """The early stopping for a task (``Task(..., early_stopping=adaptive_stopping(...))``).

    ``goal``: ``rank`` (settle the ranking at ``policy.confidence``) or ``compare``
    (``candidate`` against every other model; ``margin``: non-inferiority). ``policy``: the
    project's ``policy:`` section (confidence, rope, stopping, min_trials_per_question, ...;
    ``max_trials_per_question`` is the task's epochs). ``models``: the eval's models, in the
    order the campaign indexes them (default: those whose evals start within ``register_s``
    seconds of each other, sorted). A bridge of the same ``name`` that has not finished is
    returned again (``eval_retry`` builds the task once per log). ``live_forecast``: the
    simulations of the forecast of the rest of the campaign, made beside it as rounds come in
    (:mod:`adaptive_eval.forecast.live`; the log's ``live_forecast``; 0: none). ``folder``: where
    the config the campaign is built from is also written (``campaign.yaml``, of ``external``
    models: ``adaptive-eval validate`` prints its plan; default none). Bad input is one
    :class:`~adaptive_eval.base.errors.InputError` line here, before any sample runs.
    """
    check_inspect_version()
    shared = _SHARED.get(name)
    if shared is not None and not shared.done:
        return shared
    bridge = AdaptiveStopping(
        name,
        Goal(goal, candidate, margin, settle_all),
        models=models,
        policy=policy,
        weights=weights,
        score_map=ScoreMap(score_map, scorer),
        wait_s=wait_s,
        register_s=register_s,
        folder=folder,
        live_forecast=live_forecast,
    )
    _SHARED[name] = bridge
    return bridge


class AdaptiveStopping:
    """The EarlyStopping protocol (``start_task``, ``schedule_sample``, ``complete_sample``,
    ``complete_task``) over one :class:`RoundBook` shared by every eval of the call."""

    def __init__(
        self,
        name: str,
        goal: Goal,
        *,
        models: Sequence[str] | None = None,
        policy: Mapping[str, Any] | None = None,
        weights: Sequence[float] | None = None,
        score_map: ScoreMap | None = None,
        wait_s: float = 600.0,
        register_s: float = 1.0,
        folder: str | Path | None = None,
        live_forecast: int = LIVE_SIMULATIONS,
    ) -> None:
        goal.check(models)
        context.watch()  # Inspect's hooks: which eval() call an eval is part of, what ended
        if isinstance(live_forecast, bool) or not isinstance(live_forecast, int):
            raise InputError(f"live_forecast must be a whole number >= 0, got {live_forecast!r}")
        if live_forecast < 0:
            raise InputError(f"live_forecast must be >= 0 (0: none), got {live_forecast}")
        self.live_simulations = live_forecast
        self.name = name
        self.goal = goal
        self.models = tuple(models) if models is not None else None
        self.policy = dict(policy or {})
        self.score_map = score_map or ScoreMap()
        try:
            self.weights = tuple(float(w) for w in (weights or range(self.score_map.categories())))
        except (TypeError, ValueError):
            raise InputError(
                f"weights must be numbers, one per category; got {weights!r}"
            ) from None
        if self.score_map.categories() > len(self.weights):
            top = max(self.score_map.table, key=lambda k: self.score_map.table[k])
            raise InputError(
                f"score_map maps {top!r} to category {self.score_map.table[top]}, but weights "
                f"has {len(self.weights)} (categories 0 - {len(self.weights) - 1}): "
                f"weights={list(self.weights)}"
            )
        self.wait_s = _seconds(
            "wait_s",
            wait_s,
            "how long a run waits for its round",
            ": no run would wait, so the bridge would disengage and every epoch run",
        )
        self.register_s = _seconds(
            "register_s", register_s, "how long the evals of one call take to start"
        )
        self.folder = Path(folder) if folder is not None else None
        if "max_trials_per_question" in self.policy:
            raise InputError(
                "policy.max_trials_per_question is the task's epochs under Inspect; set epochs"
            )
        check_policy(name, self.policy)
        self._run: str | None = None  # the attempt's eval() call (Inspect's run_id)
        self._reset()

    def _reset(self) -> None:
        """A fresh campaign (a new attempt rebuilds it from the runs Inspect reuses)."""
        self.evals: dict[str, EvalSpec] = {}  # model -> its eval, this attempt
        self.completed: set[str] = set()  # models whose eval completed
        self.questions: tuple[str, ...] | None = None
        self.epochs: int | None = None
        self.book: RoundBook | None = None
        self.judge: Judge | None = None
        self.spec: CampaignSpec | None = None
        self.disengaged: str | None = None
        #: Bad input found once the evals registered, or a partner eval that failed: every
        #: call of every eval raises it, so the campaign's evals end (and resume) together.
        self.failed: Exception | None = None
        self.skipped: dict[str, int] = {}
        self.overhead_s = 0.0
        self.calls = 0
        self._changed: asyncio.Condition | None = None
        self._last_start = 0.0
        self._index: dict[str, int] = {}
        self._question_index: dict[str, int] = {}
        #: An eval retried alone whose partners' evals are over: the campaign rebuilt from
        #: their logs (None: not such a retry).
        self.resumed: dict[str, Any] | None = None
        #: How many evals of this task the attempt's eval() call runs at once (None: not
        #: known; :func:`~adaptive_eval.inspect.context.evals_at_once`).
        self._at_once: int | None = None
        self._looked_back = False
        #: The folder of the campaign's previous logs, when this attempt resumes it.
        self._prior_folder: str | None = None
        self._scheduled: set[tuple[str, str, int]] = set()  # runs asked for in this attempt
        #: Models whose runs Inspect handed back from a previous attempt (a resume).
        self._reused: set[str] = set()
        earlier = getattr(self, "live", None)  # an attempt's forecast ends with it
        if earlier is not None:
            earlier.close()
        #: The forecast of the rest of the campaign (None: off or not open yet), and when the
        #: campaign opened (its elapsed time is the forecast's clock).
        self.live: LiveForecaster | None = None
        self.live_failed: str | None = None
        self._opened_at = 0.0

    # -- state ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Every eval that started has completed (a new eval() call gets a new bridge)."""
        return bool(self.evals) and set(self.evals) <= self.completed

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        async with self._condition():
            self._condition().notify_all()

    # -- the protocol ---------------------------------------------------------------------------
    async def start_task(self, task: EvalSpec, samples: list[Sample], epochs: int) -> str:
        ids = tuple(str(s.id) for s in samples)
        if task.model in self.evals or task.run_id != (self._run or task.run_id):
            # The same model starts again, or a new eval() call: a new attempt (eval_set's
            # retry of a failed call, retry(), eval_retry's next log, a task re-run). The
            # campaign is rebuilt from the runs Inspect hands back.
            self._reset()
        self._run = task.run_id
        if self.questions is None:
            self.questions, self.epochs = ids, epochs
            self._question_index = {q: i for i, q in enumerate(ids)}
        elif ids != self.questions or epochs != self.epochs:
            raise InputError(
                f"eval of {task.model} runs {len(ids)} samples x {epochs} epochs, another "
                f"eval of this bridge {len(self.questions)} x {self.epochs}: one bridge decides "
                "one task across models"
            )
        elsewhere = resumed_elsewhere(task.task_id, task.model)
        if elsewhere is not None:
            raise InputError(elsewhere)
        if self.models is not None and task.model not in self.models:
            raise InputError(
                f"model {task.model!r} is not among the bridge's models ({', '.join(self.models)})"
            )
        if self.book is not None and task.model not in self._index:
            raise InputError(
                f"the eval of {task.model} started after the campaign opened with "
                f"{', '.join(self._index)}; pass models=[...] or start the evals in one call"
            )
        self.evals[task.model] = task
        self._at_once = context.evals_at_once(task.run_id, task.task, task.config.max_tasks)
        self.score_map.check_scorers(task.scorers, task.task)
        minimum = int(self.policy.get("min_trials_per_question", 2))
        if epochs < minimum:
            raise InputError(
                f"epochs={epochs} is below policy.min_trials_per_question={minimum}; run the "
                f"task with epochs >= {minimum} (the cap of trials per sample)"
            )
        self._last_start = time.monotonic()
        await self._notify()
        return MANAGER

    async def schedule_sample(self, id: str | int, epoch: int) -> EarlyStop | None:
        from inspect_ai.util import EarlyStop

        model = self._model_of_call()
        self._scheduled.add((model, str(id), epoch))
        book = await self._book()
        started = time.perf_counter()  # the bridge's own time, waits excluded
        if self.disengaged:
            return self._timed(started, None)
        m, q = self._index[model], self._question_index[str(id)]
        deadline = time.monotonic() + self.wait_s
        condition = self._condition()
        async with condition:
            while True:
                if self.failed is not None:
                    raise self.failed
                if self.disengaged:
                    return self._timed(started, None)
                fate = book.fate(m, q, epoch - 1)
                if fate is Fate.RUN:
                    return self._timed(started, None)
                if fate is Fate.SKIP:
                    self.skipped[model] = self.skipped.get(model, 0) + 1
                    stop = book.stop
                    reason = stop.detail if stop is not None else "campaign ended"
                    return self._timed(
                        started, EarlyStop(id=id, epoch=epoch, reason=reason or None)
                    )
                self.overhead_s += time.perf_counter() - started
                self._check_partners()
                left = deadline - time.monotonic()
                if left <= 0:
                    self.disengaged = (
                        f"waited {self.wait_s:g} s for round {book.state.applied_rounds + 1} "
                        f"(sample {id}, epoch {epoch} of {model}); every later epoch runs"
                    )
                    condition.notify_all()
                    return None
                await _wait(condition, min(left, PARTNER_CHECK_S))
                started = time.perf_counter()

    async def complete_sample(
        self, id: str | int, epoch: int, scores: dict[str, SampleScore]
    ) -> None:
        model = self._model_of_call()
        if (model, str(id), epoch) not in self._scheduled:
            self._reused.add(model)  # handed back from a previous attempt's log
        book = await self._book()
        started = time.perf_counter()
        where = f"{model}, sample {id}, epoch {epoch}"
        try:
            category = self._category(scores, where)
        except InputError as error:  # every eval of the campaign ends with this one line
            self.failed = error
            await self._notify()
            raise
        applied = book.record(
            self._index[model], self._question_index[str(id)], epoch - 1, category
        )
        self.overhead_s += time.perf_counter() - started
        self.calls += 1
        self._forecast(book)
        if applied:
            await self._notify()

    async def complete_task(self) -> dict[str, Any]:
        model = self._model_of_call()
        # Every eval reports the campaign's end: wait (bounded) for the others' last rounds.
        deadline = time.monotonic() + self.wait_s
        condition = self._condition()
        async with condition:
            while (
                self.book is not None
                and not self.book.finished
                and not self.disengaged
                and time.monotonic() < deadline
            ):
                self._check_partners()
                await _wait(condition, min(deadline - time.monotonic(), PARTNER_CHECK_S))
        self.completed.add(model)
        if self.done and self.live is not None:
            self.live.close()
        return self.metadata(model)

    def _forecast(self, book: RoundBook) -> None:
        """Hand the campaign's latest round to the live forecast and keep what it finished
        (never waits); its first failure is one warning line."""
        if self.live is None:
            return
        elapsed = time.monotonic() - self._opened_at
        _, failed = self.live.after_round(book.core, book.state, elapsed)
        if failed is not None and self.live_failed is None:
            self.live_failed = failed
            logging.getLogger(__name__).warning(
                "adaptive_stopping %r: the live forecast failed (%s); the campaign goes on",
                self.name,
                failed,
            )

    def _check_partners(self) -> None:
        """Raise once an eval of this campaign has failed (a run of it ended with an error that
        fails it, by its ``fail_on_error``; seen through Inspect's ``SampleEnd`` hook): its
        rounds cannot come, and ending the others too lets ``eval_set``'s retry resume the
        campaign's evals together."""
        if self.failed is None:
            runs = len(self.questions or ()) * (self.epochs or 0)
            for model, spec in self.evals.items():
                if model in self.completed:
                    continue
                if context.eval_failed(spec.eval_id, spec.config.fail_on_error, runs):
                    self.failed = CampaignEnded(
                        f"the eval of {model} failed before the campaign ended; its partners "
                        "end too, so that a retry (eval_set) resumes them together"
                    )
                    break
        if self.failed is not None:
            raise self.failed

    # -- reading Inspect's context --------------------------------------------------------------
    def _model_of_call(self) -> str:
        """The model of the eval this call belongs to: the model Inspect evaluates in the
        call's context (``get_model()``), one of the attempt's evals."""
        name = context.current_model()
        if name is None or name not in self.evals:
            raise InputError(
                f"cannot tell which eval a call belongs to (active model {name!r}; evals: "
                f"{', '.join(sorted(self.evals))})"
            )
        return name

    async def _book(self) -> RoundBook:
        """The campaign's round book, built once every eval of the campaign has registered.

        After ``register_s`` without them: an eval retried alone whose partners' evals are
        over opens the campaign from their logs (:meth:`_look_back`); partners that this
        ``eval()`` call can still start beside the started ones (:meth:`_coming`) are waited
        for, up to ``wait_s``; partners it cannot start while this eval runs (an eval retried
        alone by ``eval_retry``, or ``max_tasks`` below the number of models) end the eval at
        once with one line, before anything is run."""
        if self.failed is not None:
            raise self.failed
        if self.book is not None:
            return self.book
        condition = self._condition()
        async with condition:
            while self.book is None:
                if self.failed is not None:
                    raise self.failed
                names = sorted(self.evals)
                since = time.monotonic() - self._last_start
                try:
                    if self.models is not None and set(self.models) <= set(names):
                        self._open(tuple(self.models))
                        break
                    if since >= self.register_s:
                        if not self._looked_back and await self._look_back(names):
                            break  # opened from the logs of the partners' finished evals
                        coming = self._coming(names)
                        if self.models is None:
                            if not coming:  # every eval of the call that can start has
                                self._open(tuple(names))
                                break
                            if since >= self.wait_s:
                                absent = [f"{coming} more model(s) of its eval() call"]
                                raise self._cannot_open(names, absent, False)
                        else:
                            absent = [m for m in self.models if m not in names]
                            if coming is not None and coming < len(absent):
                                raise self._cannot_open(names, absent, True)
                            if since >= self.wait_s:
                                raise self._cannot_open(names, absent, False)
                except InputError as error:
                    self.failed = error
                    raise
                finally:
                    condition.notify_all()
                await _wait(condition, self.register_s / 4)
        assert self.book is not None  # the loop ends once it is opened
        return self.book

    def _coming(self, started: list[str]) -> int | None:
        """How many more evals of the campaign's task this ``eval()`` call can start beside
        the ``started`` ones (None: not known): the call's evals of the task (Inspect's
        ``RunStart`` hook names the task of each) that run at once (``max_tasks``)."""
        if self._at_once is None:
            return None
        return max(self._at_once - len(started), 0)

    def _cannot_open(self, started: list[str], absent: list[str], never: bool) -> InputError:
        """One line: the evals of ``absent`` cannot (``never``: not while this eval runs) or
        did not (within ``wait_s``) start beside ``started``'s; nothing was run."""
        task_ids = [self.evals[m].task_id for m in started]
        resuming = bool(
            self._reused or self._prior_folder or any(map(context.ran_before, task_ids))
        )
        folder = self._prior_folder or "LOG_DIR"
        who = f"the eval of {', '.join(started)}"
        if never and resuming:
            why = (
                f"{who} was retried alone (eval_retry retries a campaign's logs one at a time) "
                f"and the eval of {', '.join(absent)} cannot start while it runs"
            )
        elif never:
            why = (
                f"the eval of {', '.join(absent)} cannot start while {who} runs (eval(..., "
                f"max_tasks=) below the campaign's {len(started) + len(absent)} models?)"
            )
        else:
            why = f"the eval of {', '.join(absent)} did not start within wait_s={self.wait_s:g} s"
        remedy = (
            f"retry the campaign's evals together: adaptive_eval.inspect.retry({folder!r}), or "
            "the same eval_set(..., retry_immediate=False) again"
            if resuming
            else f"run the campaign's evals at once (max_tasks >= {len(started) + len(absent)})"
        )
        return InputError(
            f"adaptive_stopping {self.name!r}: {why}, so its rounds cannot come; nothing was "
            f"run{' (every run stays in the logs)' if resuming else ''}; {remedy}"
        )

    async def _look_back(self, started: list[str]) -> bool:
        """For an eval retried alone whose partners' evals are all over, open the campaign from
        their logs (its models and every run Inspect kept; returns True), where this process
        can know their folder (:func:`~adaptive_eval.inspect.context.log_folder`).

        An eval retried alone while a partner's eval is not over is refused by :meth:`_book`
        (nothing run): ``eval_retry`` runs that partner only after this eval ends, so this eval
        cannot wait for the rounds that need it (it used to run every epoch its model might
        still need ahead of the plan: 192 runs where the campaign used 144)."""
        self._looked_back = True
        if not started:
            return False
        model = started[0]
        spec = self.evals[model]
        folder = context.log_folder(spec.eval_set_id, spec.task_id)
        if folder is None:
            return False
        prior = await prior_logs(
            folder,
            spec.task_id,
            spec.eval_id,
            self._run or "",
            spec.task,
        )
        models = tuple(self.models or sorted(set(prior) | set(started)))
        partners = [m for m in models if m not in started]
        if prior:
            self._prior_folder = folder
        coming = self._coming(started)
        if not partners or coming is None or coming > 0:
            return False  # every eval started, or the partners of this call may be starting
        for name, log in prior.items():
            if name in models and (log.samples != self.questions or log.epochs != self.epochs):
                raise InputError(
                    f"{log.location}: the previous eval of {name} ran {len(log.samples)} samples "
                    f"x {log.epochs} epochs, this retry {len(self.questions or ())} x "
                    f"{self.epochs}: not the same campaign"
                )
        if any(m not in prior or prior[m].status != "success" for m in partners):
            return False  # partners that cannot start while this eval runs: _book refuses
        self._open(models)
        assert self.book is not None
        kept: dict[str, int] = {}
        for name, log in prior.items():
            if name not in self._index:
                continue
            for sample, epoch, scores in log.runs:
                if sample not in self._question_index or epoch > (self.epochs or 0):
                    continue
                where = f"{log.location}: {name}, sample {sample}, epoch {epoch}"
                category = self._category(scores, where)
                self.book.record(
                    self._index[name], self._question_index[sample], epoch - 1, category
                )
                kept[name] = kept.get(name, 0) + 1
        self.resumed = {
            "logs": {m: prior[m].location for m in models if m in prior},
            "kept_runs": kept,
        }
        return True

    def _category(self, scores: Mapping[str, Any], where: str) -> int:
        category = self.score_map.category(scores, where)
        if category >= len(self.weights):
            raise InputError(
                f"{where}: category {category} has no rubric weight (weights: {list(self.weights)})"
            )
        return category

    def _open(self, models: tuple[str, ...]) -> None:
        self.goal.check(models)
        assert self.questions is not None and self.epochs is not None
        self.spec = CampaignSpec(
            self.name, models, self.questions, self.epochs, self.weights, self.policy, self.goal
        )
        campaign, self.judge = self.spec.build(self.folder)
        self._index = {name: i for i, name in enumerate(models)}
        self.book = RoundBook(campaign)
        self._opened_at = time.monotonic()
        if self.live_simulations > 0:
            self.live = LiveForecaster(campaign.decision, simulations=self.live_simulations)
            self.live.start()

    def _timed(self, started: float, value: EarlyStop | None) -> EarlyStop | None:
        self.overhead_s += time.perf_counter() - started
        self.calls += 1
        return value

    # -- what the log keeps ---------------------------------------------------------------------
    def metadata(self, model: str) -> dict[str, Any]:
        """The summary Inspect logs with the eval (``results.early_stopping.metadata``)."""
        book, spec = self.book, self.spec
        out: dict[str, Any] = {
            "version": METADATA_VERSION,
            "campaign": self.name,
            "model": model,
            "goal": dataclasses.asdict(self.goal),
            "policy": self.policy,
            "weights": list(self.weights),
            "score_map": {str(k): v for k, v in self.score_map.table.items()},
            "scorer": self.score_map.scorer,
            "disengaged": self.disengaged,
            "bridge_overhead_ms_per_call": 1e3 * self.overhead_s / max(self.calls, 1),
        }
        if book is None or spec is None:
            return out
        trials = book.state.trials
        names = spec.models
        index = names.index(model)
        fixed = len(spec.questions) * spec.epochs
        view = book.view()
        theta, se = view.theta, view.theta_se
        out.update(
            models=list(names),
            samples=len(spec.questions),
            epochs=spec.epochs,
            rounds=book.state.applied_rounds,
            finished=book.finished,
            stop=None
            if book.stop is None
            else {"reason": book.stop.reason.value, "detail": book.stop.detail},
            confidence=view.confidence,
            error_control=view.error_control,
            error_budget=round(1.0 - view.confidence, 12),
            decisions=[
                {
                    "a": names[d.a],
                    "b": names[d.b],
                    "verdict": d.verdict.value,
                    "z": None if not np.isfinite(d.z) else round(float(d.z), 6),
                    "alpha": d.alpha,
                    "look": d.look,
                    "futile": d.futile,
                }
                for d in book.decisions
            ],
            scores={
                n: {"estimate": float(theta[i]), "se": float(se[i])} for i, n in enumerate(names)
            },
            trials={n: int(trials[i].sum()) for i, n in enumerate(names)},
            trials_fixed_n=fixed,
            saved=round(1.0 - float(trials[index].sum()) / fixed, 6),
            saved_all=round(1.0 - float(trials.sum()) / (fixed * len(names)), 6),
            trials_per_sample=[int(n) for n in trials[index]],
            skipped_epochs=self.skipped.get(model, 0),
            unused_results=book.unused_results(),
        )
        if self.live is not None:
            out["live_forecast"] = [point.record() for point in self.live.history]
            out["live_forecast_failed"] = self.live_failed
        if self.resumed is not None:
            out["resumed"] = {
                **self.resumed,
                "trials_per_sample": {n: [int(t) for t in trials[i]] for i, n in enumerate(names)},
            }
        if self.judge is not None:
            verdicts = self.judge(book.decisions)
            out["comparison"] = {
                "candidate": self.goal.candidate,
                "verdicts": {names[v.incumbent]: v.decision for v in verdicts},
                "exit_code": exit_code([v.decision for v in verdicts]),
            }
        return out


async def _wait(condition: asyncio.Condition, timeout: float) -> None:
    """Wait (holding ``condition``) for a notification or ``timeout`` seconds. A cancellation
    always propagates (``asyncio.wait_for`` can swallow one that meets the wake-up, and the
    loops around this would then outlive their eval)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(timeout, 0.0)):
            await condition.wait()
