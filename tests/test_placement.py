"""Issue 15, item 1: workers a cluster can never place fail fast (exit 2), never hang."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, mimic_success, write_config, write_scenario

from adaptive_eval.base.errors import InputError
from adaptive_eval.command_line.cli import main
from adaptive_eval.dispatch import cluster
from adaptive_eval.dispatch.cluster import WorkerRequest, check_placement

#: The issue's config: three simulated entries, 2 workers each at 0.5 CPU = 3 CPUs.
ENTRIES = 3


def _three_entries(tmp_path: Path, **execution: Any) -> Path:
    for index in range(ENTRIES):
        write_scenario(
            tmp_path / f"s{index}.npz", mimic_success([0.4 + 0.1 * index]), names=[f"m{index}"]
        )
    data = base_config("s0.npz")
    data["models"] = [
        {"backend": "simulated", "path": f"s{i}.npz", "workers": 2} for i in range(ENTRIES)
    ]
    data["execution"] = {"workers": 2, "batch_size": 16, **execution}
    return write_config(tmp_path / "three.yaml", data)


def test_check_placement_names_the_cpus_needed_and_available() -> None:
    requests = [WorkerRequest(f"models[{i}] (simulated)", 2, {"CPU": 0.5}) for i in range(3)]
    with pytest.raises(InputError, match=r"need 3 CPUs .* has 2,") as caught:
        check_placement(requests, {"CPU": 2.0})
    assert "\n" not in str(caught.value)
    check_placement(requests, {"CPU": 3.0})  # exactly enough: placed


def test_check_placement_checks_the_largest_node() -> None:
    requests = [WorkerRequest("models[0] (vllm)", 1, {"GPU": 2.0})]
    with pytest.raises(InputError, match=r"largest node .* has 1"):
        check_placement(requests, {"GPU": 2.0}, {"GPU": 1.0})


def test_validate_and_run_refuse_a_config_a_local_cluster_cannot_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As from the command line: no Ray in this process yet (another test may have left one).
    monkeypatch.setattr(cluster, "ray_running", lambda: False)
    config = _three_entries(tmp_path, num_cpus=2)
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "three.yaml" in err and "need 3 CPUs" in err and "has 2" in err
    started = time.monotonic()
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert time.monotonic() - started < 20
    assert "need 3 CPUs" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.slow
def test_run_on_a_running_two_cpu_cluster_fails_within_bounded_time(
    tmp_path: Path, ray_local: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's hang: Ray already up with 2 CPUs (the fixture), 3 CPUs of workers asked."""
    config = _three_entries(tmp_path)
    started = time.monotonic()
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert "need 3 CPUs" in err and "has 2" in err
