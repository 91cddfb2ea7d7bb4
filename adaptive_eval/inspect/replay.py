"""An Inspect model that serves recorded outcomes: ``replay/<model>`` over an (L, M, N) npz.

For examples, tests and benchmarks of the bridge without a model server: epoch ``e`` of sample
``id`` answers ``C`` when ``outcomes[model, id, e - 1]`` is 1 (else ``I``), with a token usage
(without one Inspect fetches a tokenizer from the internet to count the tokens). A model is not
told which sample and epoch it answers: ``replay_task``'s solver (:func:`recorded_run`) writes
them into the sample's store, which the model reads with Inspect's public
``inspect_ai.util.store()`` (:func:`current_run`).

    import adaptive_eval.inspect.replay  # registers the provider
    eval(replay_task(path), model=["replay/m1", "replay/m2"], model_args={"path": path})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from inspect_ai import Task
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    modelapi,
)
from inspect_ai.scorer import Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import ToolChoice, ToolInfo
from inspect_ai.util import EarlyStopping, store

_FILES: dict[str, tuple[dict[str, int], dict[str, int], np.ndarray]] = {}
#: The store key under which :func:`recorded_run` keeps the run's sample id and epoch.
RUN_KEY = "adaptive_eval_replay_run"


def recorded(path: str | Path) -> tuple[dict[str, int], dict[str, int], np.ndarray]:
    """(model -> row, question -> column, outcomes (L, M, N)) of a replay npz, read once."""
    key = str(Path(path).resolve())
    if key not in _FILES:
        with np.load(key) as data:
            outcomes = np.asarray(data["outcomes"])
            models = [str(m) for m in data["models"]]
            names = "questions" if "questions" in data else "question_ids"
            questions = [str(q) for q in data[names]]
        _FILES[key] = (
            {m: i for i, m in enumerate(models)},
            {q: i for i, q in enumerate(questions)},
            outcomes,
        )
    return _FILES[key]


class ReplayAPI(ModelAPI):
    """``replay/<name>``: the recorded outcome of (name, sample, epoch) as ``C`` or ``I``."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008 (ModelAPI's signature)
        path: str | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        if path is None:
            raise ValueError("replay/<model> needs model_args path=<npz of recorded outcomes>")
        rows, self.columns, outcomes = recorded(path)
        if model_name not in rows:
            raise ValueError(f"model {model_name!r} is not in {path} ({', '.join(rows)})")
        self.outcomes = outcomes[rows[model_name]]

    def max_connections(self) -> int:
        return 64

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        sample, epoch = current_run()
        outcome = int(self.outcomes[self.columns[sample], epoch - 1])
        output = ModelOutput.from_content(self.model_name, "C" if outcome == 1 else "I")
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output


@modelapi(name="replay")
def replay() -> type[ModelAPI]:
    """The ``replay`` provider (Inspect's registered-factory form)."""
    return ReplayAPI


def current_run() -> tuple[str, int]:
    """The (sample id, epoch) being answered, as :func:`recorded_run` stored them."""
    run = store().get(RUN_KEY)
    if run is None:
        raise RuntimeError("replay models answer inside replay_task's solver (recorded_run) only")
    sample, epoch = run
    return str(sample), int(epoch)


@solver
def recorded_run() -> Solver:
    """Generate, telling the replay model which run it answers (the sample's store)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.store.set(RUN_KEY, [str(state.sample_id), int(state.epoch)])
        return await generate(state)

    return solve


@scorer(metrics=[accuracy()])
def graded_answer() -> Scorer:
    """The answer is the grade (``C`` or ``I``), as a recorded outcome is."""

    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=state.output.completion.strip())

    return score


def replay_task(
    path: str | Path, epochs: int | None = None, early_stopping: EarlyStopping | None = None
) -> Task:
    """A task over the npz's questions, ``epochs`` (default: its N) per sample."""
    _, columns, outcomes = recorded(path)
    return Task(
        dataset=[Sample(id=q, input=f"question {q}", target="C") for q in columns],
        solver=recorded_run(),
        scorer=graded_answer(),
        epochs=epochs or int(outcomes.shape[2]),
        early_stopping=early_stopping,
    )
