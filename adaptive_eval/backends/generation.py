"""Shared machinery of the generating backends (``vllm``, ``openai``).

On the driver, before Ray starts (:func:`prepare_generation`): the dataset is loaded and every
prompt rendered (so a bad file or template is an :class:`InputError` naming it), the grader is
built once to check its name and parameters, and the entry's options are read with
:class:`Options`, which names ``models[i].options.X`` in every error.

In the worker (:class:`GenerationWorker`): a batch is expanded into one :class:`TrialRequest` per
trial, each with its own seed ``trial_seed(campaign seed, model name, question id, trial)``, so a
trial's completion does not depend on which other trials shared its batch; the backend generates a
:class:`~adaptive_eval.grading.GeneratedSample` per request; each sample is graded inside the
worker and becomes a :class:`~adaptive_eval.base.types.Trial` carrying the category, answer, reason,
completion text, token counts and a JSON-able ``signals`` dict.

Nothing here imports vllm, httpx or torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

from adaptive_eval.backends.base import BackendContext, BackendPlan, Worker, worker_maker
from adaptive_eval.base.errors import InputError
from adaptive_eval.config.schema import ModelEntry
from adaptive_eval.config.settings import ExecutionSettings, GenerationSettings, SamplingSettings
from adaptive_eval.grading import Grader, build_grader
from adaptive_eval.inputs.datasets import Dataset, Question, load_dataset, render_prompt

DEFAULT_GRADER = "math"

#: Options every generating backend accepts besides its own.
COMMON_OPTIONS = {
    "system_prompt": "system message placed before the question (default: none)",
    "num_cpus": "CPUs reserved for each worker actor",
    "grade_threads": "threads grading a batch's samples in parallel (default 4)",
    "test_crash_once": "tests only: the first batch run by any worker of this entry kills its "
    "process (os._exit) after creating this file; later batches run",
}


#: Options of the generating backends that change how trials are run, not which samples are
#: drawn or how they are graded: safe to change between a run and its resume. (For the config's
#: run identity: ``BackendPlan.execution_options``.)
EXECUTION_OPTIONS = frozenset(
    {
        "num_cpus",
        "grade_threads",
        "test_crash_once",
        "load_cost_s",
        "stream_grading",
        "max_concurrency",
        "timeout_s",
        "max_retries",
        "backoff",
        "backoff_max",
        "api_key_env",
        "headers",
        "cpu_kvcache_gb",
        "test_kill_engine_mid_feed",
    }
)


def feed_concurrency(execution: ExecutionSettings) -> int:
    """Threads of a generating worker actor: one per batch the dispatcher queues at it (so that
    all of them feed the engine, or the request pool, at once), plus one for control calls."""
    return max(2, execution.in_flight_per_worker + 1)


class Options:
    """Reads ``entry.options`` with typed getters; errors name ``models[i].options.<key>``.

    Call :meth:`finish` last: any key no getter asked for is unknown, and the error lists the
    accepted ones (``extra_known`` names keys a caller consumed on its own).
    """

    def __init__(self, entry: ModelEntry, context: BackendContext, backend: str) -> None:
        self.values: dict[str, Any] = dict(entry.options)
        self.source = context.source
        self.prefix = f"{context.field}.options"
        self.backend = backend
        self.seen: set[str] = set()

    def error(self, key: str, message: str) -> InputError:
        return InputError(message, source=self.source, field=f"{self.prefix}.{key}")

    def has(self, key: str) -> bool:
        return key in self.values

    def raw(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return self.values.get(key, default)

    def string(
        self, key: str, default: str | None = None, *, choices: Sequence[str] | None = None
    ) -> str | None:
        value = self.raw(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive_minimum: bool = False,
        integer: bool = False,
    ) -> float | None:
        value = self.raw(key, default)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (integer and not isinstance(value, int))
            or not math.isfinite(value)
        ):
            kind = "an integer" if integer else "a number"
            raise self.error(key, f"must be {kind}, got {value!r}")
        if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
            sign = ">" if exclusive_minimum else ">="
            raise self.error(key, f"must be {sign} {minimum:g}, got {value!r}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be <= {maximum:g}, got {value!r}")
        return value

    def integer(
        self, key: str, default: int | None = None, *, minimum: int | None = None
    ) -> int | None:
        value = self.number(key, default, minimum=minimum, integer=True)
        return None if value is None else int(value)

    def boolean(self, key: str, default: bool | None = None) -> bool | None:
        value = self.raw(key, default)
        if value is not None and not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.raw(key, None)
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.error(key, f"must be a mapping with string keys, got {value!r}")
        return dict(value)

    def finish(self, known: Mapping[str, str] | Sequence[str] = ()) -> None:
        allowed = sorted(set(self.seen) | set(known))
        for key in self.values:
            if key not in self.seen and key not in known:
                close = get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(
                    key,
                    f"unknown option {key!r} for the {self.backend} backend"
                    f"{hint} (accepted: {', '.join(allowed)})",
                )


@dataclass(frozen=True)
class GenerationSetup:
    """Everything a generating worker needs besides its backend's own settings (picklable)."""

    model_name: str
    campaign_seed: int
    questions: tuple[Question, ...]
    prompts: tuple[str, ...]  # the rendered user message of each question
    system_prompt: str | None
    sampling: SamplingSettings
    grader_name: str
    grader_params: dict[str, Any]
    num_categories: int
    grade_threads: int = 4
    crash_once: str | None = None

    @property
    def question_ids(self) -> tuple[str, ...]:
        return tuple(q.id for q in self.questions)

    def messages(self, question: int) -> list[dict[str, str]]:
        """Chat messages of a question: an optional system message, then the user prompt."""
        out = []
        if self.system_prompt:
            out.append({"role": "system", "content": self.system_prompt})
        out.append({"role": "user", "content": self.prompts[question]})
        return out


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare_generation` found on the driver."""

    setup: GenerationSetup
    dataset: Dataset
    grader: Grader
    num_cpus: float | None

    def plan(
        self,
        entry: ModelEntry,
        context: BackendContext,
        *,
        backend: str,
        worker: Callable[..., Worker],
        settings: Any,
        files: Mapping[str, str],
        describe: str,
        cpus: float,
        num_gpus: int = 0,
        **backend_fields: Any,
    ) -> BackendPlan:
        """The entry's plan: its one model over the dataset's questions, graded in the worker.

        A worker is ``worker(setup, settings, offset)``, one batch per thread for every batch
        queued at it (:func:`feed_concurrency`); it reserves ``num_cpus`` CPUs (default
        ``cpus``) and ``num_gpus`` GPUs. ``files`` are recorded after the dataset's digest,
        ``describe`` is followed by the questions and the grader; ``backend_fields`` are the
        backend's own :class:`BackendPlan` fields."""
        setup = self.setup
        actor_options: dict[str, Any] = {
            "num_cpus": self.num_cpus if self.num_cpus is not None else cpus
        }
        if num_gpus:
            actor_options["num_gpus"] = num_gpus
        return BackendPlan(
            backend=backend,
            models=(setup.model_name,),
            question_ids=setup.question_ids,
            num_categories=setup.num_categories,
            capacity=None,
            workers=entry.workers or context.default_workers,
            actor_options=actor_options,
            actor_concurrency=feed_concurrency(context.execution),
            make_worker=worker_maker(worker, setup, settings),
            files={"dataset": self.dataset.sha256, **files},
            weights=tuple(getattr(self.grader, "default_weights", ())) or None,
            describe=f"{describe}: {len(setup.questions)} questions, grader {setup.grader_name}",
            devices_per_worker=float(num_gpus),
            generating=True,
            **backend_fields,
        )


def grader_spec(settings: GenerationSettings) -> tuple[str, dict[str, Any]]:
    """The grader's name and parameters (the default grader where the config names none)."""
    spec = settings.grader
    if spec is None:
        return DEFAULT_GRADER, {}
    return spec.name, dict(spec.params)


def make_grader(name: str, params: dict[str, Any], source: str | None = None) -> Grader:
    """``build_grader`` with the error re-pointed at the config's ``grader`` field."""
    try:
        return build_grader(name, **params)
    except InputError as error:
        sub = error.field if error.field and error.field != "grader" else None
        message = str(error)
        raise InputError(
            message, source=error.source or source, field="grader" + (f".{sub}" if sub else "")
        ) from None


def load_questions(context: BackendContext, backend: str) -> Dataset:
    spec = context.generation.dataset
    if spec is None:
        raise InputError(
            f"the {backend} backend needs questions: add a dataset: section with a JSONL path",
            source=context.source,
            field="dataset",
        )
    dataset = load_dataset(spec.path, spec.id_field, spec.problem_field, spec.answer_field)
    if spec.limit is not None and spec.limit < len(dataset):
        dataset = Dataset(dataset.questions[: spec.limit], dataset.sha256, dataset.path)
    return dataset


def render_prompts(context: BackendContext, dataset: Dataset) -> tuple[str, ...]:
    spec = context.generation.dataset
    assert spec is not None
    out = []
    for question in dataset.questions:
        try:
            out.append(render_prompt(question, spec.template, spec.instruction))
        except InputError as error:
            raise InputError(
                str(error).removeprefix("template: "),
                source=context.source,
                field="dataset.template",
            ) from None
    return tuple(out)


def prepare_generation(
    entry: ModelEntry, context: BackendContext, options: Options, model_name: str
) -> Prepared:
    """Load and check the dataset, prompts and grader; read the common options."""
    dataset = load_questions(context, options.backend)
    prompts = render_prompts(context, dataset)
    name, params = grader_spec(context.generation)
    grader = make_grader(name, params, context.source)
    crash = options.string("test_crash_once")
    setup = GenerationSetup(
        model_name=model_name,
        campaign_seed=context.campaign_seed,
        questions=dataset.questions,
        prompts=prompts,
        system_prompt=options.string("system_prompt"),
        sampling=context.generation.sampling,
        grader_name=name,
        grader_params=params,
        num_categories=int(grader.num_categories),
        grade_threads=options.integer("grade_threads", 4, minimum=1) or 4,
        crash_once=None if crash is None else str(context.resolve_path(crash)),
    )
    num_cpus = options.number("num_cpus", None, minimum=0)
    return Prepared(setup, dataset, grader, num_cpus)


__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_GRADER",
    "EXECUTION_OPTIONS",
    "GenerationSetup",
    "Options",
    "Prepared",
    "feed_concurrency",
    "make_grader",
    "prepare_generation",
]
