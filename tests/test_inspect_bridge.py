"""adaptive_eval.inspect: Inspect's EarlyStopping over the decision core, run through real
``inspect_ai.eval`` calls with several models at once (a replay ModelAPI, no network)."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval

from adaptive_eval.base.errors import InputError
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.simulate import Truth, replay_sampler
from adaptive_eval.inspect import adaptive_stopping
from adaptive_eval.inspect.bridge import check_inspect_version
from adaptive_eval.inspect.campaign import CampaignSpec, Goal
from adaptive_eval.inspect.replay import replay_task

_names = itertools.count()


def write_replay(folder: Path, scores: list[float], questions: int, epochs: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    p = np.asarray(scores)[:, None, None]
    outcomes = (rng.random((len(scores), questions, epochs)) < p).astype(np.int8)
    path = folder / "recorded.npz"
    np.savez(
        path,
        outcomes=outcomes,
        models=np.array([f"m{i}" for i in range(len(scores))]),
        questions=np.array([f"q{i}" for i in range(questions)]),
    )
    return path


def replay_eval(task: Any, models: list[str], path: Path, log_dir: Path, **options: Any) -> Any:
    """``inspect_eval`` of ``task`` on ``models`` served by the replay provider from ``path``."""
    return inspect_eval(
        task,
        model=models,
        model_args={"path": str(path)},
        display="none",
        log_dir=str(log_dir),
        **options,
    )


def run_bridge(path: Path, log_dir: Path, **kwargs: Any) -> list[Any]:
    with np.load(path) as data:
        models = [f"replay/{m}" for m in data["models"]]
    name = f"test-{next(_names)}"
    bridge = adaptive_stopping(name, models=models, wait_s=60, **kwargs)
    logs = replay_eval(
        replay_task(path, early_stopping=bridge), models, path, log_dir, max_samples=8
    )
    assert all(log.status == "success" for log in logs), [log.error for log in logs]
    return logs


def own_loop(path: Path, meta: dict[str, Any], folder: Path, goal: Goal) -> Any:
    """The project's own loop (``run_core``, the controller's: tests/test_core_parity.py) on a
    replay of the same recorded trials, with the config the bridge built."""
    with np.load(path) as data:
        outcomes = np.asarray(data["outcomes"]).astype(np.int64)
    spec = CampaignSpec(
        "own",
        tuple(meta["models"]),
        tuple(f"q{i}" for i in range(outcomes.shape[1])),
        outcomes.shape[2],
        tuple(meta["weights"]),
        meta["policy"],
        goal,
    )
    campaign, _ = spec.build(folder)
    truth = Truth(np.full((*outcomes.shape[:2], 2), 0.5), np.asarray(meta["weights"]))
    return simulate_campaign(
        campaign.decision, truth, np.random.default_rng(0), sampler=replay_sampler(outcomes, 2)
    )


def logged(logs: list[Any]) -> dict[str, dict[str, Any]]:
    return {log.eval.model: log.results.early_stopping.metadata for log in logs}


def test_three_models_in_one_eval_decide_as_the_own_loop(tmp_path: Path) -> None:
    path = write_replay(tmp_path, [0.25, 0.55, 0.85], questions=12, epochs=16, seed=1)
    logs = run_bridge(path, tmp_path / "logs")
    meta = logged(logs)
    first = next(iter(meta.values()))
    # every eval reports the one campaign
    assert all(m["decisions"] == first["decisions"] for m in meta.values())
    assert first["finished"] and first["stop"]["reason"] == "goal_met"
    sim = own_loop(path, first, tmp_path / "own", Goal())
    names = first["models"]
    own = [
        {"a": names[d.a], "b": names[d.b], "verdict": d.verdict.value, "look": d.look}
        for d in sim.decisions
    ]
    assert [{k: d[k] for k in ("a", "b", "verdict", "look")} for d in first["decisions"]] == own
    assert first["rounds"] == sim.rounds
    for i, model in enumerate(names):
        assert meta[model]["trials_per_sample"] == sim.trials[i].tolist()
        # Inspect ran exactly the trials the plan asked for, and skipped the rest
        samples = [s for s in logs[i].samples or [] if s.scores]
        assert len(samples) == int(sim.trials[i].sum())
        assert meta[model]["skipped_epochs"] == 12 * 16 - int(sim.trials[i].sum())
    assert first["saved_all"] > 0.2


def test_compare_with_margin_decides_as_the_own_gate(tmp_path: Path) -> None:
    path = write_replay(tmp_path, [0.6, 0.62, 0.3], questions=12, epochs=20, seed=2)
    goal = Goal("compare", "replay/m0", 0.15)
    logs = run_bridge(path, tmp_path / "logs", goal="compare", candidate="replay/m0", margin=0.15)
    first = logged(logs)["replay/m0"]
    sim = own_loop(path, first, tmp_path / "own", goal)
    names = first["models"]
    assert [(d["a"], d["b"], d["verdict"]) for d in first["decisions"]] == [
        (names[d.a], names[d.b], d.verdict.value) for d in sim.decisions
    ]
    assert sum(first["trials"].values()) == sim.total_trials
    verdicts = first["comparison"]["verdicts"]
    assert verdicts["replay/m1"] == "pass"  # 0.62 vs 0.6: within the margin
    assert verdicts["replay/m2"] == "pass"
    assert first["comparison"]["exit_code"] == 0


def test_bad_input_is_one_line_before_any_sample(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="at least 2 models"):
        adaptive_stopping(f"bad-{next(_names)}", models=["replay/m0"])
    with pytest.raises(InputError, match="needs candidate"):
        adaptive_stopping(f"bad-{next(_names)}", goal="compare")
    with pytest.raises(InputError, match="not supported"):
        check_inspect_version("0.2.1")
    with pytest.raises(InputError, match="per sample"):
        CampaignSpec("x", ("a", "b"), ("q",), 4, (0, 1), {"allocation": "track_and_stop"}).config()
    # epochs below the rule's minimum: refused by start_task, before any sample runs
    path = write_replay(tmp_path, [0.3, 0.6], questions=3, epochs=4, seed=0)
    bridge = adaptive_stopping(
        f"bad-{next(_names)}",
        models=["replay/m0", "replay/m1"],
        policy={"min_trials_per_question": 3},
    )
    logs = replay_eval(
        replay_task(path, epochs=2, early_stopping=bridge),
        ["replay/m0", "replay/m1"],
        path,
        tmp_path / "logs",
    )
    for log in logs:
        assert log.status == "error"
        assert "epochs=2 is below policy.min_trials_per_question=3" in log.error.message
        assert not log.samples


def test_unmappable_score_names_the_value_and_the_mapping(tmp_path: Path) -> None:
    from adaptive_eval.inspect.bridge import ScoreMap

    class Fake:
        def __init__(self, value: Any) -> None:
            self.score = type("S", (), {"value": value})()

    with pytest.raises(InputError, match=r"score 'P' has no category; map it with score_map"):
        ScoreMap().category({"s": Fake("P")}, "m, sample 1, epoch 1")  # type: ignore[dict-item]
    assert ScoreMap({"P": 1}).category({"s": Fake("P")}, "w") == 1  # type: ignore[dict-item]
    assert ScoreMap(["0.5=1"]).category({"s": Fake(0.5)}, "w") == 1  # type: ignore[dict-item]
    with pytest.raises(InputError, match="name one with scorer="):
        ScoreMap().category({"a": Fake("C"), "b": Fake("I")}, "w")  # type: ignore[dict-item]


def test_models_found_from_the_evals_that_start(tmp_path: Path) -> None:
    """Without models=, the campaign's models are the evals that start together (sorted); a
    ranking of one model is refused with one line in every eval's error."""
    path = write_replay(tmp_path, [0.2, 0.9], questions=6, epochs=8, seed=5)
    models = ["replay/m1", "replay/m0"]
    # The two evals of one eval() start milliseconds apart; 3 s to register leaves room for a
    # loaded machine (0.3 s left the second one out while other tests ran beside it).
    bridge = adaptive_stopping(f"found-{next(_names)}", register_s=3.0, wait_s=30)
    logs = replay_eval(replay_task(path, early_stopping=bridge), models, path, tmp_path / "logs")
    meta = logged(logs)["replay/m0"]
    assert meta["models"] == ["replay/m0", "replay/m1"]
    assert meta["decisions"][0]["verdict"] == "a>b"
    alone = adaptive_stopping(f"alone-{next(_names)}", register_s=0.3)
    logs = replay_eval(
        replay_task(path, early_stopping=alone), ["replay/m0"], path, tmp_path / "alone"
    )
    assert logs[0].status == "error"
    assert "goal 'rank' needs at least 2 models" in logs[0].error.message


def test_an_unmappable_score_ends_every_eval_with_one_line(tmp_path: Path) -> None:
    path = write_replay(tmp_path, [0.3, 0.6], questions=4, epochs=6, seed=6)
    models = ["replay/m0", "replay/m1"]
    bridge = adaptive_stopping(f"unmapped-{next(_names)}", models=models, score_map={"C": 1})
    logs = replay_eval(replay_task(path, early_stopping=bridge), models, path, tmp_path / "logs")
    for log in logs:  # the other eval does not wait for rounds that cannot come
        assert log.status == "error"
        assert "has no category; map it with score_map=" in log.error.message


def _scorer(name: str, options: dict[str, Any] | None = None, **metadata: Any) -> Any:
    """A scorer as ``EvalSpec.scorers`` lists it (its name, options and metadata)."""
    return SimpleNamespace(name=name, options=options or {}, metadata=metadata)


def test_a_score_map_that_is_not_one_is_one_line() -> None:
    from adaptive_eval.inspect.bridge import ScoreMap

    for mapping, message in [
        ({"P": "x"}, r"score_map 'P': category 'x' is not an integer"),
        ({"P": -1}, r"score_map 'P': category -1 is below 0"),
        ({("P",): 1}, r"score_map key \('P',\) is neither a number nor a string"),
        ("P=1", r"give a dict"),
        (["P:1"], r"--map 'P:1' is not VALUE=CATEGORY"),
        ({}, r"score_map is empty"),
    ]:
        with pytest.raises(InputError, match=message):
            ScoreMap(mapping)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"maps 'P' to category 2, but weights has 2"):
        adaptive_stopping(f"bad-{next(_names)}", score_map={"C": 1, "I": 0, "P": 2}, weights=[0, 1])
    with pytest.raises(InputError, match="weights must be numbers"):
        adaptive_stopping(f"bad-{next(_names)}", weights=["a", "b"])


def test_declared_score_values_are_checked_before_any_sample() -> None:
    from adaptive_eval.inspect.bridge import VALUE_SINCE, ScoreMap
    from adaptive_eval.inspect.context import inspect_version

    check = ScoreMap().check_scorers
    check([_scorer("match")], "t")  # C / I: the default map covers them
    check([_scorer("graded")], "t")  # declares nothing: checked at its first score
    check([_scorer("model_graded_qa", {"grade_pattern": "G: (.)", "partial_credit": True})], "t")
    if inspect_version() >= VALUE_SINCE[("choice", "N")]:
        with pytest.raises(InputError, match=r"Inspect's scorer 'choice' can return 'N'"):
            check([_scorer("choice")], "t")
    else:  # choice() answers N (no answer) from inspect-ai 0.3.264 only
        check([_scorer("choice")], "t")
    ScoreMap({"C": 1, "I": 0, "N": 0}).check_scorers([_scorer("choice")], "t")
    with pytest.raises(InputError, match=r"'model_graded_qa' can return 'P'.*score_map=\{'P'"):
        check([_scorer("model_graded_qa", {"partial_credit": True})], "t")
    with pytest.raises(InputError, match=r"'f1' returns an F1 score in \[0, 1\], not categor"):
        check([_scorer("f1")], "t")
    with pytest.raises(InputError, match=r"scorer 'rubric' \(its score_values\) can return 'P'"):
        check([_scorer("rubric", score_values=["C", "P", "I"])], "t")
    with pytest.raises(InputError, match=r"2 scorers \(match, match1\); name one with scorer="):
        check([_scorer("match"), _scorer("match")], "t")
    ScoreMap(scorer="match").check_scorers([_scorer("f1"), _scorer("match")], "t")
    with pytest.raises(InputError, match=r"no scorer 'exact' \(scorers: match\)"):
        ScoreMap(scorer="exact").check_scorers([_scorer("match")], "t")


def test_an_undeclared_value_stops_the_eval_before_any_sample(tmp_path: Path) -> None:
    """A scorer declaring a value the map lacks: every eval ends with one line from
    start_task, and no sample runs (the model is never called)."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, Scorer, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate

    @scorer(metrics=[accuracy()], score_values=["C", "P", "I"])
    def rubric() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score:
            return Score(value=state.output.completion.strip())

        return score

    path = write_replay(tmp_path, [0.3, 0.6], questions=4, epochs=4, seed=7)
    models = ["replay/m0", "replay/m1"]
    bridge = adaptive_stopping(f"declared-{next(_names)}", models=models)
    task = Task(
        dataset=[Sample(id=f"q{i}", input="x", target="C") for i in range(4)],
        solver=generate(),
        scorer=rubric(),
        epochs=4,
        early_stopping=bridge,
    )
    logs = replay_eval(task, models, path, tmp_path / "logs")
    for log in logs:
        assert log.status == "error"
        assert log.error.message.startswith("task ")
        assert "scorer 'rubric' (its score_values) can return 'P', which has no category" in (
            log.error.message
        )
        assert not log.samples
        assert log.stats.model_usage == {}


def test_a_wait_that_is_not_a_positive_time_is_refused() -> None:
    """wait_s=-1 made every wait end at once: the bridge disengaged and every epoch ran (576
    runs against 336), silently (issue 48, item 7)."""
    models = ["replay/m0", "replay/m1"]
    for value in (-1, 0, float("nan"), float("inf"), "10", True):
        with pytest.raises(InputError, match=rf"^wait_s must be .*got {value!r}"):
            adaptive_stopping(f"bad-{next(_names)}", models=models, wait_s=value)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"every epoch run"):
        adaptive_stopping(f"bad-{next(_names)}", models=models, wait_s=-1)
    with pytest.raises(InputError, match=r"^register_s must be > 0 seconds .*got -0.5"):
        adaptive_stopping(f"bad-{next(_names)}", models=models, register_s=-0.5)


def test_a_bad_policy_key_is_named_where_the_task_is_built(tmp_path: Path) -> None:
    """An unknown policy key failed every eval with "unknown key (value 1)" (Inspect shows an
    error's message, which left the field out): now one line naming it, as the CLI does, where
    the task is built; what only the opened campaign can check names its field too."""
    models = ["replay/m0", "replay/m1"]
    with pytest.raises(InputError) as caught:
        adaptive_stopping("named-key", models=models, policy={"bogus": 1})
    expected = "adaptive_stopping 'named-key': policy.bogus: unknown key (value 1)"
    assert caught.value.message == expected
    with pytest.raises(InputError, match=r"policy\.confidence: Input should be less than 1"):
        adaptive_stopping(f"bad-{next(_names)}", models=models, policy={"confidence": 2})
    # a pair rule's name is known once the campaign is built: every eval's error names it
    path = write_replay(tmp_path, [0.3, 0.6], questions=3, epochs=4, seed=0)
    bridge = adaptive_stopping("named-rule", models=models, policy={"pair_rules": ["nope"]})
    logs = replay_eval(replay_task(path, early_stopping=bridge), models, path, tmp_path / "logs")
    for log in logs:
        assert log.status == "error"
        assert log.error.message.startswith(
            "adaptive_stopping 'named-rule': policy.pair_rules[0]: unknown pair rule 'nope'"
        ), log.error.message
        assert "campaign.yaml" not in log.error.message


def test_evals_that_cannot_start_together_end_with_one_line_not_a_hang(tmp_path: Path) -> None:
    """With max_tasks below the number of models the first eval waited for ever for its
    partners (wait_s did not bound it), which could not start before it ended. Found from the
    eval() call (its evals of the task, by Inspect's RunStart hook, and its max_tasks): one
    line at once, nothing run. Inspect before 0.3.241 ran every model of one task at once
    whatever max_tasks said (its issue #4195): there the campaign runs, as it should."""
    import time

    from adaptive_eval.inspect.context import MAX_TASKS_BOUNDS_MODELS, inspect_version

    path = write_replay(tmp_path, [0.3, 0.6], questions=3, epochs=4, seed=0)
    models = ["replay/m0", "replay/m1"]
    bridge = adaptive_stopping(f"max-tasks-{next(_names)}", models=models, wait_s=600)
    started = time.monotonic()
    logs = replay_eval(
        replay_task(path, early_stopping=bridge), models, path, tmp_path / "logs", max_tasks=1
    )
    assert time.monotonic() - started < 60
    if inspect_version() < MAX_TASKS_BOUNDS_MODELS:
        assert all(log.status == "success" for log in logs), [log.error for log in logs]
        assert all(m["finished"] for m in logged(logs).values())
        return
    for log in logs:
        assert log.status == "error"
        assert "cannot start while the eval of" in log.error.message, log.error.message
        assert "max_tasks >= 2" in log.error.message
        assert not [s for s in log.samples or [] if s.scores]


def test_the_campaign_is_forecast_as_it_goes_and_the_log_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every workflow that samples forecasts the rest of its campaign (issue 47): the bridge's
    log keeps each forecast (here made in this process, so a short eval has them for sure)."""
    from adaptive_eval.forecast.forecaster import LiveForecaster
    from adaptive_eval.inspect import bridge as bridge_module

    class HereForecaster(LiveForecaster):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "inline": True})

    monkeypatch.setattr(bridge_module, "LiveForecaster", HereForecaster)
    path = write_replay(tmp_path, [0.25, 0.55, 0.85], questions=12, epochs=16, seed=1)
    meta = logged(run_bridge(path, tmp_path / "logs"))
    first = next(iter(meta.values()))
    points = first["live_forecast"]
    assert points and first["live_forecast_failed"] is None
    assert all(p["trials"]["p10"] <= p["trials"]["p50"] <= p["trials"]["p90"] for p in points)
    assert all(p["trials_used"] > 0 for p in points)
    off = logged(run_bridge(path, tmp_path / "off", live_forecast=0))
    assert "live_forecast" not in next(iter(off.values()))
    with pytest.raises(InputError, match="live_forecast must be >= 0"):
        adaptive_stopping(f"bad-{next(_names)}", live_forecast=-1)
