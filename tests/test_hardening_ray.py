"""Issue 8, item 7 on a real Ray cluster: batch failures (with their error text), worker deaths
and restarts reach events.jsonl as they happen, and ``report`` keeps the run's dispatch figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import base_config, mimic_success, write_scenario

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import parse_config
from adaptive_eval.inputs.datasets import ARITH20, load_dataset
from adaptive_eval.workflows.run import run_campaign

ANSWERS = {q.problem: q.answer for q in load_dataset(ARITH20).questions}


@pytest.mark.slow
def test_failures_deaths_and_restarts_are_logged_as_they_happen(
    tmp_path: Path, ray_local: None
) -> None:
    data = {
        "name": "diag",
        "seed": 3,
        "models": [
            {
                "backend": "openai",
                "name": "srv",
                "workers": 1,
                "options": {
                    "base_url": "",
                    "max_retries": 0,
                    "backoff": 0.001,
                    "timeout_s": 5,
                    "test_crash_once": str(tmp_path / "crash.marker"),
                },
            }
        ],
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20), "limit": 3},
        "sampling": {"max_tokens": 32},
        "policy": {"min_trials_per_question": 2, "max_trials_per_question": 2, "round_trials": 6},
        # One batch at a time in the worker: with two, the second batch's first request can
        # reach the server (and use up its scripted 500) in the moment before the crashing
        # thread's os._exit lands, and then no batch fails with the 500.
        "execution": {
            "workers": 1,
            "batch_size": 8,
            "max_batch_retries": 3,
            "in_flight_per_worker": 1,
        },
        "output": {"progress": False, "fsync": "normal"},
    }
    run_dir = tmp_path / "run"
    # The first request after the crash fails with HTTP 500 and no request-level retry.
    with FlakyServer(script=[500], answers=ANSWERS) as server:
        data["models"][0]["options"]["base_url"] = server.url
        summary = summary_dict(
            run_campaign(build_campaign(parse_config(data)), run_dir, quiet=True)
        )
    assert summary["trials_used"] == 6
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    by_kind: dict[str, list[dict]] = {}
    for event in events:
        by_kind.setdefault(event["event"], []).append(event)
    assert [e["worker"] for e in by_kind["worker_died"]] == ["openai-0-0"]
    assert by_kind["worker_restarted"][0]["worker"] == "openai-0-0"
    failed = by_kind["batch_failed"]
    assert len(failed) == summary["dispatch"]["failed_batches"] == 2
    assert all(e["retry"] for e in failed)
    assert any("worker died" in e["error"] for e in failed)
    assert any("500" in e["error"] for e in failed)
    # Each diagnostic precedes the end of the run: it was written when it happened.
    done = next(i for i, e in enumerate(events) if e["event"] == "campaign_done")
    assert all(events.index(e) < done for e in failed)
    # report rebuilds summary.json without losing what only the run knew.
    assert main(["report", str(run_dir), "--json"]) == 0
    rebuilt = json.loads((run_dir / "summary.json").read_text())
    assert rebuilt["dispatch"] == summary["dispatch"] and rebuilt["resumed"] is False


def test_local_cluster_runs_its_workers_at_normal_priority(tmp_path: Path, ray_local: None) -> None:
    """Ray starts workers at nice 15; the local cluster we start runs them at the niceness it
    was started with, 0 from a plain shell (the engines' step loops must not yield to every
    other process), so no ``workers_niced`` warning. Under an inherited nice value (a CI box
    that nices its jobs, ``nice -n 10 make test``) the workers run at that value, as the
    command does: an informational event, never the warning (issue 48, item 9). The warning
    itself, on a cluster started without ``RAY_worker_niceness=0``: test_multinode."""
    import ray

    from adaptive_eval.dispatch.actors import WorkerActor

    inherited = os.getpriority(os.PRIO_PROCESS, 0)  # the shared cluster's raylet's, and ours
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=4))
    data = base_config(str(tmp_path / "s.npz"), max_trials_per_question=4)
    run_dir = tmp_path / "run"
    run_campaign(build_campaign(parse_config(data)), run_dir, quiet=True)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    assert "campaign_done" in [e["event"] for e in events]
    niced = [e for e in events if e["event"] == "workers_niced"]
    if inherited == 0:
        assert niced == []
    else:
        (note,) = niced
        assert note["level"] == "info" and "as this command does" in note["message"]
        assert set(note["workers"].values()) == {inherited}
    actor = ray.remote(WorkerActor).options(num_cpus=0).remote(lambda: None, "probe")
    try:
        assert ray.get(actor.host_facts.remote())["niceness"] == inherited
    finally:
        ray.kill(actor)


def test_a_run_in_a_process_already_connected_to_ray_says_it_uses_that_cluster(
    tmp_path: Path, ray_local: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook that called ``ray.init()`` runs its campaigns on that session; a campaign
    whose ``execution.ray_address`` names another cluster used to run there without a word."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=4))
    data = base_config(str(tmp_path / "s.npz"), max_trials_per_question=4)
    unreachable = "127.0.0.1:1"  # the run would fail if it were tried
    run_dir = tmp_path / "run"
    run_campaign(build_campaign(parse_config(data)), run_dir / "local")
    data["execution"]["ray_address"] = unreachable
    run_campaign(build_campaign(parse_config(data)), run_dir / "named")
    err = capsys.readouterr().err
    said = "this process is already connected to Ray: the campaign runs on that cluster, not on"
    assert err.count(said) == 1 and f"execution.ray_address {unreachable}" in err
    for name, expected in (("local", []), ("named", [unreachable])):
        events = [json.loads(line) for line in (run_dir / name / "events.jsonl").open()]
        warned = [e for e in events if e["event"] == "ray_already_connected"]
        assert [e["ray_address"] for e in warned] == expected
        assert warned == [] or warned[0]["level"] == "warning"
        assert "campaign_done" in [e["event"] for e in events]
