"""Issue 22, vLLM items 4 and 5: Ray's environment is set before Ray reads it, and the
niceness warning is given only where the user can act on it, with the remedy that works."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import CLI, base_config, mimic_success, write_config, write_scenario

from adaptive_eval.dispatch.pool import NICENESS_HINT, niceness_note

DEDUP = textwrap.dedent(
    """
    import builtins, os, sys
    os.environ.pop("RAY_DEDUP_LOGS", None)
    from adaptive_eval.dispatch import cluster
    real = builtins.__import__
    seen = []

    def spy(name, *args, **kwargs):
        if name == "ray" and "ray" not in sys.modules and not seen:
            seen.append(os.environ.get("RAY_DEDUP_LOGS"))
        return real(name, *args, **kwargs)

    builtins.__import__ = spy
    try:
        cluster.init_ray("127.0.0.1:1", None, attempts=1)  # refused at once: no cluster
    except Exception:
        pass
    import ray._private.ray_constants as constants
    print(seen[0], constants.RAY_DEDUP_LOGS)
    """
)


def test_log_deduplication_is_off_before_ray_is_imported() -> None:
    """dispatch.py set RAY_DEDUP_LOGS=0 after ``import ray``, which had read it already: the
    workers' lines still came folded ("[repeated 4x across cluster]")."""
    done = subprocess.run(
        [sys.executable, "-c", DEDUP], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"]


def test_a_cluster_someone_else_started_gets_the_node_remedy() -> None:
    level, message = niceness_note({"w": 15}, local_cluster=False, driver=0)
    assert level == "warning" and message == NICENESS_HINT.format(nice=15)


def test_a_local_cluster_started_from_a_niced_shell_is_no_warning() -> None:
    """Started at nice 10, the run's own cluster ran its workers at nice 10 and was told to
    "start the cluster's nodes with RAY_worker_niceness=0": nodes it never started."""
    level, message = niceness_note({"w": 10}, local_cluster=True, driver=10)
    assert level == "info" and "RAY_worker_niceness" not in message
    assert "as this command does" in message
    level, message = niceness_note({"w": 15}, local_cluster=True, driver=0)
    assert level == "warning" and "RAY_worker_niceness" not in message


@pytest.mark.slow
def test_a_run_started_at_nice_10_says_nothing_about_niceness(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6], questions=6))
    data = base_config("s.npz", max_trials_per_question=8)
    data["execution"] = {"workers": 1, "batch_size": 16, "num_cpus": 2}
    config = write_config(tmp_path / "c.yaml", data)
    done = subprocess.run(
        ["nice", "-n", "10", str(CLI), "run", str(config), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "niceness" not in done.stderr and "RAY_worker_niceness" not in done.stderr
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert '"workers_niced"' in events and "as this command does" in events  # logged, not shown
