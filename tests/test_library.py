"""The trial library: a campaign takes the trials the library holds before sampling anything."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from helpers import NullLog, base_config, load, mimic_success, write_config, write_scenario
from helpers import ledger as read_ledger

from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import Batch
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import CampaignConfig
from adaptive_eval.control.controller import Controller
from adaptive_eval.control.library import TrialLibrary, attach
from adaptive_eval.dispatch import InlineDispatcher
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.workflows.report import report_run

SCORES = [0.25, 0.45, 0.47, 0.7]


class Spy(InlineDispatcher):
    """Counts the trials actually sent to the backend."""

    sampled = 0

    def submit(self, batches: list[Batch]) -> None:
        Spy.sampled += sum(b.size for b in batches)
        super().submit(batches)


def run(config: CampaignConfig, run_dir: Path) -> tuple[Controller, int, int]:
    """(controller, trials sampled by the backend, trials reused from the library)."""
    campaign = build_campaign(config)
    store, campaign_id, _ = open_run_dir(campaign, run_dir)
    Spy.sampled = 0
    port = attach(campaign, store, Spy(campaign.run.plans, campaign.run.offsets), campaign_id)
    try:
        controller = Controller(campaign, store, port, NullLog())
        controller.run()
        reused = int(store.get_meta("library_reused") or 0)
    finally:
        port.shutdown()
        store.close()
    return controller, Spy.sampled, reused


ledger = partial(read_ledger, columns="model, question, trial, seed, category, tokens")


@pytest.fixture()
def config_path(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    data = base_config("s.npz")
    data["library"] = "lib"
    return write_config(tmp_path / "c.yaml", data)


def test_a_second_run_samples_nothing_and_matches_the_first(
    tmp_path: Path, config_path: Path
) -> None:
    first, sampled, reused = run(load(config_path), tmp_path / "a")
    assert sampled == first.state.trials_used > 0 and reused == 0
    second, sampled, reused = run(load(config_path), tmp_path / "b")
    assert sampled == 0
    assert reused == second.state.trials_used == first.state.trials_used
    assert ledger(tmp_path / "a") == ledger(tmp_path / "b")
    assert second.decisions == first.decisions
    summary = summary_dict(report_run(build_campaign(load(config_path)), tmp_path / "b"))
    assert summary["provenance"]["library"]["reused"] == reused
    assert summary["provenance"]["library"]["sampled"] == 0
    assert (
        f"{reused} trial(s) reused from it, 0 sampled" in (tmp_path / "b" / "report.md").read_text()
    )


def test_a_larger_run_reuses_what_is_there_and_samples_only_the_rest(
    tmp_path: Path, config_path: Path
) -> None:
    run(load(config_path, ["budget.trials=300"]), tmp_path / "small")
    bigger, sampled, reused = run(load(config_path), tmp_path / "big")
    assert reused == 300
    assert sampled == bigger.state.trials_used - 300 > 0
    # Reused trials are the ones the backend would have drawn: same as a run without a library.
    plain = load(config_path, ["library=null"])
    reference, _, _ = run(plain, tmp_path / "plain")
    assert ledger(tmp_path / "big") == ledger(tmp_path / "plain")
    assert bigger.decisions == reference.decisions


def test_cells_that_would_be_drawn_differently_are_not_reused(
    tmp_path: Path, config_path: Path
) -> None:
    run(load(config_path), tmp_path / "a")
    other_seed, sampled, reused = run(load(config_path, ["seed=8"]), tmp_path / "b")
    assert reused == 0 and sampled == other_seed.state.trials_used
    library = TrialLibrary(tmp_path / "lib", build_campaign(load(config_path)), "x")
    try:
        first_cells = library.cells
    finally:
        library.close()
    # Rubric weights do not change a trial's category: the same cells.
    same = build_campaign(load(config_path, ["rubric.weights=[0, 2]"]))
    assert TrialLibrary(tmp_path / "lib3", same, "x").cells == first_cells


def test_the_library_path_is_not_part_of_the_run_identity(
    tmp_path: Path, config_path: Path
) -> None:
    campaign = build_campaign(load(config_path))
    assert (
        campaign.run.fingerprint
        == build_campaign(load(config_path, ["library=null"])).run.fingerprint
    )


@pytest.mark.slow
def test_run_command_uses_the_library(tmp_path: Path, config_path: Path) -> None:
    from adaptive_eval.command_line.cli import main

    assert main(["run", str(config_path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", str(config_path), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    first = json.loads((tmp_path / "a" / "summary.json").read_text())
    second = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert first["provenance"]["library"]["reused"] == 0
    assert second["provenance"]["library"] == {
        "path": str(tmp_path / "lib"),
        "reused": second["trials_used"],
        "sampled": 0,
        "saved_fraction": 1.0,
        "changes": [],
    }
    assert ledger(tmp_path / "a") == ledger(tmp_path / "b")


def test_a_run_names_a_model_whose_files_changed_since_the_library_saw_it(
    tmp_path: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, section 1: the run that finds a changed identity says so in one line."""
    from adaptive_eval.command_line.cli import main

    inline = ["--quiet", "--set", "execution.dispatch=inline"]
    assert main(["run", str(config_path), "--out", str(tmp_path / "a"), *inline]) == 0
    assert "trial library:" not in capsys.readouterr().err
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12, seed=5))
    assert main(["run", str(config_path), "--out", str(tmp_path / "b"), *inline]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("trial library:")]
    assert len(lines) == len(SCORES)  # one per model of the changed scenario file
    assert all("changed since the library last saw it (scenario " in x for x in lines)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["provenance"]["library"]["reused"] == 0
    assert "- Trial library: model model-0 changed" in (tmp_path / "b" / "report.md").read_text()
