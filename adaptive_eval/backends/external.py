"""``external``: models whose trials another harness samples and reports (the Inspect bridge).

The campaign decides what to sample; the caller runs those trials and records their outcomes
(:class:`~adaptive_eval.decide.core.DecisionCore` over the caller's own loop). The entry names
the models, the questions and the most trials a cell can have, in its options; it reads no file
and has no worker that can sample:

    models:
      - backend: external
        options: {models: [m1, m2], questions: [q1, q2, q3], trials: 8}

A campaign of such models is built, validated and forecast like any other, but ``run`` refuses it
before anything starts (its trials are not this process's to draw).
"""

from __future__ import annotations

from functools import partial

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adaptive_eval.backends.base import BackendContext, BackendPlan, Worker
from adaptive_eval.backends.simulated import parse_options
from adaptive_eval.base.errors import BackendError
from adaptive_eval.config.registry import backends
from adaptive_eval.config.schema import MAX_TRIALS_PER_QUESTION, ModelEntry


class ExternalOptions(BaseModel):
    """``options:`` of an external entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    models: list[str] = Field(min_length=1, description="The models, in the campaign's order.")
    questions: list[str] = Field(min_length=1, description="The questions, in order.")
    trials: int = Field(
        ge=1, le=MAX_TRIALS_PER_QUESTION, description="The most trials of one model on a question."
    )

    @field_validator("models", "questions")
    @classmethod
    def _distinct(cls, names: list[str]) -> list[str]:
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"names {twice[0]!r} twice")
        return names


def _not_here(models: tuple[str, ...]) -> str:
    return (
        f"models {', '.join(models)} are of backend 'external': another harness samples them "
        "(the Inspect bridge), so this command cannot"
    )


def _no_worker(models: tuple[str, ...], offset: int) -> Worker:
    raise BackendError(_not_here(models))


@backends.register("external")
def external(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    options = parse_options(ExternalOptions, entry, context)
    models = tuple(options.models)
    return BackendPlan(
        backend="external",
        models=models,
        question_ids=tuple(options.questions),
        num_categories=None,  # known only from the rubric
        capacity=options.trials,
        workers=1,
        actor_options={"num_cpus": 0},
        make_worker=partial(partial, _no_worker, models),
        describe=f"external: {len(models)} models x {len(options.questions)} questions x "
        f"at most {options.trials} trials, sampled by their harness",
        reachable=partial(_not_here, models),
    )
