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

from inspect_ai import Task, eval_retry, eval_set, task
from inspect_ai import eval as inspect_eval
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


@task
def retried_campaign(path: str, name: str, models: list[str]) -> Task:
    """A registered task (eval_retry re-creates the task from the registry, once per log)."""
    bridge = adaptive_stopping(name, models=models, wait_s=60, register_s=0.3)
    return replay_task(path, early_stopping=bridge)


@pytest.mark.slow  # ~15 s: an eval, three retries one after another, a report
def test_eval_retry_resumes_the_campaign_from_the_logs(tmp_path: Path) -> None:
    """One model fails at epoch 4, its partners end with it; ``eval_retry`` of the three logs
    (one at a time) ends with the decisions and trials of the uninterrupted campaign, and runs
    nothing again that Inspect kept."""
    CALLS.clear()
    FAILED.clear()
    FAILING.clear()
    FAILING.add("m1")
    path = helpers.write_replay(tmp_path, [0.25, 0.55, 0.85], questions=12, epochs=16, seed=1)
    models = [f"flaky_replay/m{i}" for i in range(3)]
    log_dir = str(tmp_path / "logs")
    first = inspect_eval(
        retried_campaign(str(path), "eval-retry", models),
        model=models,
        model_args={"path": str(path)},
        log_dir=log_dir,
        display="none",
        max_samples=8,
    )
    assert [log.status for log in first] == ["error"] * 3
    kept = {log.eval.model: len([s for s in log.samples or [] if s.scores]) for log in first}
    assert all(kept.values())  # each eval kept runs that a retry must not make again
    ran_before = Counter(CALLS)

    retried = eval_retry(first, log_dir=log_dir, display="none", max_samples=8)
    assert [log.status for log in retried] == ["success"] * 3, [log.error for log in retried]
    last = retried[-1].results.early_stopping.metadata
    assert last["finished"] and last["resumed"]["partners_to_come"] == []
    assert retried[0].results.early_stopping.metadata["resumed"]["partners_to_come"] == [
        models[1],
        models[2],
    ]
    # the cost: the evals retried before their partners ran epochs ahead of the plan
    ahead = [
        log.results.early_stopping.metadata["resumed"]["runs_ahead_of_plan"] for log in retried
    ]
    print("AHEAD", ahead, last["trials"], last["resumed"]["kept_runs"])
    assert ahead[2] == {}
    sim = helpers.own_loop(path, last, tmp_path / "own", Goal())
    assert [(d["a"], d["b"], d["verdict"]) for d in last["decisions"]] == [
        (last["models"][d.a], last["models"][d.b], d.verdict.value) for d in sim.decisions
    ]
    for i, model in enumerate(models):
        assert last["resumed"]["trials_per_sample"][model] == sim.trials[i].tolist()
    # nothing Inspect kept ran again: a run made twice was not in its eval's first log
    for log in first:
        model = log.eval.model.split("/")[1]
        logged = {(str(s.id), s.epoch) for s in log.samples or [] if s.scores}
        for sample, epoch in logged:
            assert CALLS[(model, sample, epoch)] == ran_before[(model, sample, epoch)] == 1

    # the report of the folder reads the campaign's end from the eval retried last
    from adaptive_eval.inspect.report import report_inspect

    found = report_inspect(Path(log_dir), tmp_path / "report")
    assert found.summary.stop_reason == last["stop"]["reason"]
    assert {row.name: row.trials for row in found.summary.models} == last["trials"]
