"""Resume: an eval_set whose evals all failed mid-campaign is retried by Inspect (eval_set's
own retry), which reuses the runs it kept; the bridge rebuilds its rounds from them and ends
where an uninterrupted campaign ends, sampling nothing twice."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval_set
from inspect_ai.log._samples import sample_active
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, modelapi
from inspect_ai.tool import ToolChoice, ToolInfo

from adaptive_eval.inspect import adaptive_stopping
from adaptive_eval.inspect.campaign import Goal
from adaptive_eval.inspect.replay import ReplayAPI, replay_task

_spec = importlib.util.spec_from_file_location(
    "inspect_bridge_helpers_resume", Path(__file__).with_name("test_inspect_bridge.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

CALLS: Counter[tuple[str, str, int]] = Counter()
FAILED: set[str] = set()
FAIL_EPOCH = 4
FAILING = {"m0", "m1", "m2"}  # the models whose first run of (q0, FAIL_EPOCH) fails


class FlakyReplay(ReplayAPI):
    """Replay whose first run of sample q0 at epoch 4 fails, once per model."""

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        active = sample_active()
        assert active is not None
        key = (self.model_name, str(active.sample.id), active.epoch)
        CALLS[key] += 1
        failing = self.model_name in FAILING and self.model_name not in FAILED
        if key[1:] == ("q0", FAIL_EPOCH) and failing:
            FAILED.add(self.model_name)
            raise RuntimeError("injected failure")
        return await super().generate(input, tools, tool_choice, config)


@modelapi(name="flaky_replay")
def flaky_replay() -> type[ReplayAPI]:
    return FlakyReplay


@pytest.mark.parametrize("failing", [("m0", "m1", "m2"), ("m1",)])
def test_eval_set_retry_resumes_the_campaign(tmp_path: Path, failing: tuple[str, ...]) -> None:
    """All three evals fail at once (a crash), or one does and its partners end with it."""
    CALLS.clear()
    FAILED.clear()
    FAILING.clear()
    FAILING.update(failing)
    path = helpers.write_replay(tmp_path, [0.25, 0.55, 0.85], questions=12, epochs=16, seed=1)
    models = [f"flaky_replay/m{i}" for i in range(3)]
    bridge = adaptive_stopping(f"resume-{len(failing)}", models=models, wait_s=60)
    success, logs = eval_set(
        replay_task(path, early_stopping=bridge),
        log_dir=str(tmp_path / "logs"),
        model=models,
        model_args={"path": str(path)},
        display="none",
        max_samples=8,
        retry_attempts=2,
        retry_wait=0.1,
        retry_immediate=False,  # retry the failed evals together, after the attempt
        retry_on_error=0,
    )
    assert success, [log.error for log in logs]
    assert set(failing) == FAILED
    meta: dict[str, Any] = {log.eval.model: log.results.early_stopping.metadata for log in logs}
    first = meta[models[0]]
    # ends where the uninterrupted campaign (the own loop on the same trials) ends
    sim = helpers.own_loop(path, first, tmp_path / "own", Goal())
    assert [(d["a"], d["b"], d["verdict"]) for d in first["decisions"]] == [
        (first["models"][d.a], first["models"][d.b], d.verdict.value) for d in sim.decisions
    ]
    for i, model in enumerate(models):
        assert meta[model]["trials_per_sample"] == sim.trials[i].tolist()
    # nothing Inspect kept was sampled again: only the failed runs and those in flight beside
    # them (cancelled when their eval failed, so not in its log) ran twice
    again = {key for key, n in CALLS.items() if n > 1}
    assert {(m, "q0", FAIL_EPOCH) for m in failing} <= again
    assert {epoch for _, _, epoch in again} <= {FAIL_EPOCH, FAIL_EPOCH + 1}
    assert len(again) <= 3 * 8  # at most max_samples in flight per model
