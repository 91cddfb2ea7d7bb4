"""Issue 40, section 5 (smaller items): a symbolic link that loops, given as ``--out``, was
rc 1 "File exists"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import TEST_DISPATCH, base_config, mimic_success, write_config, write_scenario

from adaptive_eval.command_line.cli import main


@pytest.mark.parametrize("target", ["loop", "missing/folder"])
def test_an_out_link_that_cannot_be_followed_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=6))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    os.symlink(tmp_path / target, tmp_path / "loop")
    code = main(["run", str(config), "--out", str(tmp_path / "loop"), *TEST_DISPATCH])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--out" in err and "symbolic link that cannot be followed" in err
    assert len(err.strip().splitlines()) == 1


def test_a_library_key_without_a_value_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``library:`` with no value silently meant no library."""
    import yaml

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=6))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    config.write_text(config.read_text() + "library:\n")
    assert main(["validate", str(config)]) == 0
    assert "warning" in capsys.readouterr().out.split("library has no value")[0][-200:]
    run_dir = tmp_path / "run"
    assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
    assert "library has no value, so no trial library is used" in capsys.readouterr().err
    # The run's own copy leaves the key out: resuming from it is not warned about.
    assert "library" not in yaml.safe_load((run_dir / "config.yaml").read_text())
    assert main(["validate", str(run_dir / "config.yaml")]) == 0
    assert "library has no value" not in capsys.readouterr().out


def test_a_finished_folder_is_not_told_that_sampling_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.2, 0.8], questions=4))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_dir = tmp_path / "run"
    assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
    err = capsys.readouterr().err
    assert "holds the finished campaign: nothing is left to sample" in err
    assert "sampling continues" not in err
    # Extended (a higher cap): it does continue, and says so.
    extend = ["--set", "policy.max_trials_per_question=400"]
    assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH, *extend]) == 0
    err = capsys.readouterr().err
    assert "sampling continues where it stopped" in err and "finished campaign" not in err
