"""The house's import contract (issue 21): every module in a layer, nothing imports a layer
above its own, no import cycle; the largest module on a run's path stays near 500 lines."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("check_layers", ROOT / "scripts" / "check_layers.py")
assert spec is not None and spec.loader is not None
check_layers = importlib.util.module_from_spec(spec)
sys.modules["check_layers"] = check_layers
spec.loader.exec_module(check_layers)

#: The modules a run passes through, from the command line to the store.
RUN_PATH = (
    "adaptive_eval/command_line/cli.py",
    "adaptive_eval/command_line/commands.py",
    "adaptive_eval/workflows/run.py",
    "adaptive_eval/loop/runner.py",
    "adaptive_eval/loop/rundir.py",
    "adaptive_eval/dispatch/cluster.py",
    "adaptive_eval/campaign/build.py",
    "adaptive_eval/control/controller.py",
    "adaptive_eval/decide/state.py",
    "adaptive_eval/dispatch/pool.py",
    "adaptive_eval/dispatch/actors.py",
    "adaptive_eval/backends/simulated.py",
    "adaptive_eval/backends/generation.py",
    "adaptive_eval/backends/generation_worker.py",
    "adaptive_eval/store/file.py",
    "adaptive_eval/store/ledger.py",
    "adaptive_eval/outputs/summary.py",
    "adaptive_eval/outputs/report.py",
)


def test_the_package_keeps_its_layers_and_has_no_cycle() -> None:
    assert check_layers.check() == []


def test_an_import_up_a_layer_or_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert check_layers.cycles(graph) == [["a", "b", "c", "a"]]
    low = check_layers.layer_of("adaptive_eval.stats.posterior")
    high = check_layers.layer_of("adaptive_eval.workflows.run")
    assert low is not None and high is not None and low < high
    assert check_layers.layer_of("adaptive_eval.nowhere") is None


def test_the_run_path_has_no_module_far_over_500_lines() -> None:
    sizes = {path: len((ROOT / path).read_text().splitlines()) for path in RUN_PATH}
    assert max(sizes.values()) <= 520, sizes
