"""adaptive-eval export: a run's trials as the outcome npz that replay and policy.prior read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.store import TrialStore

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(path), tmp_path / "run")
    return tmp_path / "run"


def _ledger(run_dir: Path) -> dict[tuple[int, int, int], tuple[int, int]]:
    store = TrialStore(run_dir, readonly=True)
    try:
        a = store.trial_arrays()
    finally:
        store.close()
    return {
        (m, q, t): (c, k)
        for m, q, t, c, k in zip(
            a.model.tolist(),
            a.question.tolist(),
            a.trial.tolist(),
            a.category.tolist(),
            a.tokens.tolist(),
            strict=True,
        )
    }


def test_export_truncates_to_the_common_n_and_keeps_everything_in_recorded(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export.npz"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    ledger = _ledger(run_dir)
    with np.load(out) as data:
        outcomes, recorded, trials, tokens = (
            data["outcomes"],
            data["recorded"],
            data["trials"],
            data["tokens"],
        )
        names, questions = list(data["models"]), list(data["questions"])
    store = TrialStore(run_dir, readonly=True)
    try:
        assert names == store.get_meta("models") and questions == store.get_meta("questions")
    finally:
        store.close()
    per_cell = np.zeros(trials.shape, dtype=int)
    for m, q, _ in ledger:
        per_cell[m, q] += 1
    assert trials.tolist() == per_cell.tolist()
    assert per_cell.min() < per_cell.max(), "an adaptive run gives cells different counts"
    assert outcomes.shape[2] == per_cell.min()
    for (m, q, t), (category, token_count) in ledger.items():
        assert recorded[m, q, t] == category
        if t < outcomes.shape[2]:
            assert outcomes[m, q, t] == category and tokens[m, q, t] == token_count
    assert int((recorded >= 0).sum()) == len(ledger)
    assert f"all {len(ledger)} trials in 'recorded'" in capsys.readouterr().out


def test_exported_npz_feeds_replay_and_the_prior(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.npz"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    with np.load(out) as data:
        outcomes = data["outcomes"]
    replay = {
        "name": "again",
        "models": [{"backend": "replay", "path": str(out)}],
        "rubric": {"weights": [0, 1]},
        "policy": {"min_trials_per_question": 2, "round_trials": 16},
        "execution": {"workers": 1, "batch_size": 16},
        "output": {"progress": False, "fsync": "normal"},
    }
    run_inline(load(write_config(tmp_path / "replay.yaml", replay)), tmp_path / "replayed")
    for (m, q, t), (category, _) in _ledger(tmp_path / "replayed").items():
        assert outcomes[m, q, t] == category
    with_prior = base_config("s.npz")
    with_prior["policy"]["prior"] = {"path": str(out), "max_trials": 2}
    campaign = build_campaign(load(write_config(tmp_path / "prior.yaml", with_prior)))
    assert "2 prior trials per question from export.npz" in campaign.prior_note


def test_export_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x.npz")]) == 2
