"""``adaptive-eval report`` of an Inspect log folder decided by the bridge: our summary.json,
report.md, report.html and compare's exit code, from the project's own loop on the logged
trials."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from adaptive_eval.base.summary_schema import Summary
from adaptive_eval.command_line.cli import main
from adaptive_eval.inspect.report import report_inspect

_spec = importlib.util.spec_from_file_location(
    "inspect_bridge_helpers", Path(__file__).with_name("test_inspect_bridge.py")
)
assert _spec is not None and _spec.loader is not None
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


def test_report_of_a_compare_log_folder(tmp_path: Path) -> None:
    path = helpers.write_replay(tmp_path, [0.3, 0.75, 0.5], questions=10, epochs=14, seed=3)
    logs = helpers.run_bridge(
        path, tmp_path / "logs", goal="compare", candidate="replay/m0", margin=0.05
    )
    meta = helpers.logged(logs)["replay/m0"]
    assert meta["comparison"]["exit_code"] == 3  # 0.3 against 0.75: a regression
    found = report_inspect(tmp_path / "logs", tmp_path / "out")
    assert found.exit_code == meta["comparison"]["exit_code"]
    for name in ("summary.json", "report.md", "report.html"):
        assert (found.run_dir / name).is_file()
    summary = Summary.model_validate(json.loads((found.run_dir / "summary.json").read_text()))
    assert summary.comparison is not None
    verdicts = {v.incumbent: v.decision for v in summary.comparison.verdicts}
    assert verdicts == meta["comparison"]["verdicts"]
    assert {row.name: row.trials for row in summary.models} == meta["trials"]
    # the command: compare's exit code for CI
    assert main(["report", str(tmp_path / "logs"), "--out", str(tmp_path / "cli")]) == 3
    assert (tmp_path / "cli" / "run" / "summary.json").is_file()


def test_report_of_a_ranking_log_folder(tmp_path: Path) -> None:
    path = helpers.write_replay(tmp_path, [0.2, 0.8], questions=8, epochs=12, seed=4)
    logs = helpers.run_bridge(path, tmp_path / "logs")
    meta = helpers.logged(logs)["replay/m0"]
    found = report_inspect(tmp_path / "logs")
    assert found.exit_code == 0
    assert found.run_dir == tmp_path / "logs" / "adaptive-eval" / "run"
    assert found.summary.comparison is None
    assert {row.name: row.trials for row in found.summary.models} == meta["trials"]
    assert "replay/m1" in (found.run_dir / "report.md").read_text()


def test_report_counts_every_run_the_logs_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report counted the campaign's 336 trials where the logs held 390 runs (an eval retried
    alone had run 54 ahead of the plan): its last line now counts every run the logs hold, and
    says how many the campaign did not use (issue 48, item 6)."""
    import dataclasses

    path = helpers.write_replay(tmp_path, [0.2, 0.8], questions=8, epochs=12, seed=4)
    logs = helpers.run_bridge(path, tmp_path / "logs")
    meta = helpers.logged(logs)["replay/m0"]
    found = report_inspect(tmp_path / "logs", tmp_path / "out")
    assert found.runs == meta["trials"] and found.unused == 0
    used = sum(meta["trials"].values())
    assert found.runs_line() == f"Inspect logs: {used} runs of 2 models; the campaign used {used}"
    capsys.readouterr()
    assert main(["report", str(tmp_path / "logs"), "--out", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == found.runs_line()
    ahead = dataclasses.replace(
        found, runs={**found.runs, "replay/m0": found.runs["replay/m0"] + 54}
    )
    assert ahead.unused == 54
    assert ahead.runs_line().startswith(
        f"Inspect logs: {used + 54} runs of 2 models; the campaign used {used}; 54 were run but "
        "not used"
    )
