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
    assert "2 prior trials per question from export.npz" in campaign.decision.prior_note


def test_export_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x.npz")]) == 2


# -- issue 48, item 11: an export says how its trials were sampled --------------------------------
def test_score_of_an_export_gives_the_runs_own_anytime_interval(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``score`` of an exported adaptive run gave a fixed-sample normal interval, about 1.8x
    narrower than the run's own anytime interval, though every interval shown is to hold
    however the campaign stopped. An export's trials were sampled by the campaign: its score
    gets the run's own interval; a dense tensor keeps the normal one, labelled fixed-N only."""
    import json

    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.workflows.report import report_run

    summary = record(report_run(build_campaign(load(tmp_path / "c.yaml")), run_dir))
    assert summary["score"]["interval"] == "anytime"
    out = tmp_path / "export.npz"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["score", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sampling"] == "adaptive" and result["interval"] == "anytime"
    assert "anytime-valid" in result["intervals"]
    assert "however the campaign stopped" in result["intervals"]
    got = {row["name"]: row for row in result["models"]}
    for model in summary["models"]:
        row = got[model["name"]]
        assert row["score_low"] == pytest.approx(model["score_low"], abs=1e-12)
        assert row["score_high"] == pytest.approx(model["score_high"], abs=1e-12)
        normal = 2 * 1.96 * row["score_se"]  # what score gave before
        assert row["score_high"] - row["score_low"] > 1.3 * normal
    assert main(["score", str(out)]) == 0
    text = capsys.readouterr().out
    low, high = summary["models"][0]["score_low"], summary["models"][0]["score_high"]
    assert f"[{low:.4f}, {high:.4f}]" in text.splitlines()[2]
    assert text.splitlines()[-1].startswith("interval: the 95% anytime-valid confidence sequence")
    # A tensor of fixed N (no 'recorded'): the normal interval, said to be valid for it only.
    with np.load(out) as data:
        np.savez(tmp_path / "dense.npz", outcomes=data["outcomes"], models=data["models"])
    assert main(["score", str(tmp_path / "dense.npz"), "--json"]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert dense["sampling"] == "fixed" and dense["interval"] == "normal"
    assert "valid for a fixed N only" in dense["intervals"]
    for row in dense["models"]:
        half = (row["score_high"] - row["score_low"]) / 2
        assert half == pytest.approx(1.96 * row["score_se"], rel=1e-3) or row["score_low"] == 0
    assert main(["score", str(tmp_path / "dense.npz")]) == 0
    assert "valid for a fixed N only" in capsys.readouterr().out.splitlines()[-1]


def test_every_eval_ever_records_say_the_trials_were_sampled_adaptively(
    run_dir: Path, tmp_path: Path
) -> None:
    """The aggregate record keeps its fields and adds how its trials were sampled, beside the
    interval that holds however the campaign stopped."""
    import json

    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.workflows.report import report_run

    summary = record(report_run(build_campaign(load(tmp_path / "c.yaml")), run_dir))
    by_name = {m["name"]: m for m in summary["models"]}
    out = tmp_path / "eee"
    assert main(["export", str(run_dir), "--format", "eee", "--out", str(out)]) == 0
    records = sorted(out.glob("data/*/*/*/*.json"))
    assert len(records) == len(SCORES)
    for path in records:
        (result,) = json.loads(path.read_text())["evaluation_results"]
        details = result["score_details"]["details"]
        assert details["sampling"] == "adaptive" and details["interval"] == "anytime"
        assert details["interval_confidence"] == "0.95"
        assert "covers the truth less often" in details["sampling_description"]
        assert details["stop_reason"] == summary["stop_reason"]  # the fields it had, kept
        interval = result["score_details"]["uncertainty"]["confidence_interval"]
        model = by_name[json.loads(path.read_text())["model_info"]["name"]]
        assert (interval["lower"], interval["upper"]) == (model["score_low"], model["score_high"])
