"""``execution.dispatch: inline`` runs the shipped loop without Ray and gives the same result.

Every CPU config in configs/ is run twice through the command line, on a local Ray cluster and
in-process (``--set execution.dispatch=inline``): summary.json must be the same but for what
describes the execution itself (elapsed time, the dispatch block, provenance, the run's id).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
#: What differs between two executions of one campaign by design.
#: (The live forecast too: when its process answers is timing, not the campaign.)
EXECUTION_FIELDS = (
    "campaign_id",
    "elapsed_s",
    "dispatch",
    "provenance",
    "resumed",
    "live_forecast",
)
#: configs/vllm-*.yaml need a vLLM engine (tests/test_vllm_backend.py runs the tiny one).
CPU_CONFIGS = sorted(
    path.name for path in (REPO / "configs").glob("*.yaml") if not path.name.startswith("vllm")
)


def _run(config: str, out: Path, *extra: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "adaptive_eval.command_line.cli"]
    if config == "compare.yaml":
        command += ["compare", str(REPO / "configs" / config), "--candidate", "LLM_10"]
    else:
        command += ["run", str(REPO / "configs" / config)]
    done = subprocess.run(
        [*command, "--out", str(out), "--quiet", *extra],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert done.returncode in (0, 3, 4), done.stderr[-2000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in EXECUTION_FIELDS}


def test_the_cpu_configs_are_listed() -> None:
    assert {"demo.yaml", "demo-width.yaml", "compare.yaml"} <= set(CPU_CONFIGS)


def test_inline_dispatch_needs_no_ray(tmp_path: Path) -> None:
    """The inline run never starts Ray: no ray.log output, no cluster in the dispatch block."""
    _run("demo.yaml", tmp_path / "inline", "--set", "execution.dispatch=inline")
    dispatch = json.loads((tmp_path / "inline" / "summary.json").read_text())["dispatch"]
    assert dispatch["batches"] > 0
    ray_log = tmp_path / "inline" / "ray.log"
    assert not ray_log.exists() or ray_log.read_text().strip() == ""


@pytest.mark.slow
@pytest.mark.parametrize("config", CPU_CONFIGS)
def test_every_config_gives_the_same_summary_with_and_without_ray(
    tmp_path: Path, config: str
) -> None:
    on_ray = _run(config, tmp_path / "ray")
    inline = _run(config, tmp_path / "inline", "--set", "execution.dispatch=inline")
    assert inline == on_ray


def test_an_unknown_dispatch_mode_is_one_line_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from adaptive_eval.command_line.cli import main

    out = tmp_path / "run"
    config = str(REPO / "configs" / "demo.yaml")
    code = main(["run", config, "--out", str(out), "--set", "execution.dispatch=bogus"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "execution.dispatch: unknown dispatch mode 'bogus' (known: " in err
    assert "inline" in err and "ray" in err and "Traceback" not in err
    assert not out.exists()


def test_each_mode_says_its_own_start_and_the_run_loop_names_none() -> None:
    """The lines and events a run gives as its workers start, as the run loop gave them when it
    branched on the mode's name (``ray``, ``inline``, any other)."""
    from types import SimpleNamespace

    from adaptive_eval.dispatch import LaunchRequest, launcher, starting

    def said(name: str, address: str | None) -> tuple[str | None, str, dict[str, Any]]:
        execution: Any = SimpleNamespace(ray_address=address)
        request = LaunchRequest([object(), object()], [0, 0], execution)
        found = starting(name, launcher(name), request)
        return found.line, found.event, found.fields

    assert said("ray", None) == (
        "starting Ray (a local cluster) and the workers; its output: ray.log\n",
        "ray_starting",
        {"address": None},
    )
    assert said("ray", "10.0.0.1:6379")[0] == (
        "starting Ray (10.0.0.1:6379) and the workers; its output: ray.log\n"
    )
    assert said("inline", None) == (None, "dispatch_start", {"mode": "inline", "workers": 2})
    assert said("test_inline", None) == (  # a mode registered as a plain function
        "starting the workers (dispatch mode 'test_inline')\n",
        "dispatch_start",
        {"mode": "test_inline", "workers": 2},
    )
    source = (REPO / "adaptive_eval" / "loop" / "runner.py").read_text()
    assert '"ray"' not in source and '"inline"' not in source
