"""Issue 40, section 5: nightly numbers that misled. A past night re-run after ``--keep``
pruned its predecessor overwrote the night's alerting record with a clean one and exited 0; a
checkpoint restored to one the library knew was said to be "sampled anew, none reused" when
every trial was reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import load
from test_nightly import _checkpoint, _setup, inline

from adaptive_eval.base import markdown as md
from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.workflows.nightly import alert_text, run_nightly


@pytest.mark.slow  # three nights, 4 s
def test_a_past_night_whose_predecessor_was_pruned_is_refused_not_overwritten(
    tmp_path: Path,
) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-07-01", keep=1, runner=inline)
    _checkpoint(tmp_path, 0.3)  # a regression: night 07-02 alerts
    alerting = run_nightly(
        build_campaign(load(path)), history, night="2026-07-02", keep=1, runner=inline
    )
    assert alerting["exit_code"] == 3
    assert not (history / "runs" / "2026-07-01").exists()  # pruned by --keep 1
    before = (history / "nights.jsonl").read_text()
    with pytest.raises(InputError, match=r"follows night 2026-07-01, whose run folder was pruned"):
        run_nightly(build_campaign(load(path)), history, night="2026-07-02", keep=1, runner=inline)
    assert (history / "nights.jsonl").read_text() == before  # the alerting record is kept
    records = [json.loads(line) for line in before.splitlines()]
    assert records[-1]["exit_code"] == 3


@pytest.mark.slow  # three nights, 4 s
def test_a_checkpoint_restored_to_one_the_library_knows_is_said_to_be_reused(
    tmp_path: Path,
) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-08-01", runner=inline)
    _checkpoint(tmp_path, 0.3)
    changed = run_nightly(build_campaign(load(path)), history, night="2026-08-02", runner=inline)
    assert any(
        "ckpt" in line and "sampled anew, none reused" in line for line in changed["changed"]
    )
    _checkpoint(tmp_path, 0.7)  # restored: the library holds its trials from 08-01
    restored = run_nightly(build_campaign(load(path)), history, night="2026-08-03", runner=inline)
    (line,) = [line for line in restored["changed"] if "ckpt" in line]
    assert "none reused" not in line and "which are reused" in line
    assert restored["sampled"] < restored["trials_used"]


def _betting(path: Path) -> Path:
    """The nightly config with a ``betting`` rule that takes last night's run as its prior."""
    data = yaml.safe_load(path.read_text())
    data["policy"]["pair_rules"] = [{"name": "betting", "futility": 0.0}]
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow  # three nights, 4 s
def test_a_night_whose_summary_holds_a_nan_is_passed_over_as_the_prior(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48, item 5: one past night whose summary.json held a NaN score made every later
    night fail ("unexpected error", after sampling had begun) until the file was mended by hand.
    Now the betting rule bets on the last night that can be a prior, and one warning names the
    damaged file and the way out (``adaptive-eval report`` rewrites it from the night's store)."""
    path = _betting(_setup(tmp_path))
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-09-01", runner=inline)
    run_nightly(build_campaign(load(path)), history, night="2026-09-02", runner=inline)
    damaged = history / "runs" / "2026-09-02" / "summary.json"
    document = json.loads(damaged.read_text())
    document["models"][0]["score"] = float("nan")
    damaged.write_text(json.dumps(document))
    capsys.readouterr()
    third = run_nightly(build_campaign(load(path)), history, night="2026-09-03", runner=inline)
    assert third["prior"] == str((history / "runs" / "2026-09-01").resolve())
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "prior" in line]
    assert "night 2026-09-02 cannot be tonight's prior" in warning
    assert str(damaged.resolve()) in warning and "score nan is not a finite number" in warning
    assert "night 2026-09-01's scores" in warning
    assert f"adaptive-eval report {history / 'runs' / '2026-09-02'}" in warning
    # The way out works: the night's summary.json is rewritten from its store, and is a prior.
    assert main(["report", str(history / "runs" / "2026-09-02")]) == 0
    assert "NaN" not in damaged.read_text()
    fourth = run_nightly(build_campaign(load(path)), history, night="2026-09-04", runner=inline)
    assert fourth["prior"] == str((history / "runs" / "2026-09-03").resolve())


@pytest.mark.slow  # two nights, 3 s
def test_summary_md_lists_each_alert_in_words(tmp_path: Path) -> None:
    """Issue 48, item 14: summary.md gave a night's alerts only as a count; their words were in
    the night's alert.md, which ``--keep`` deletes with the night's folder."""
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-10-01", keep=1, runner=inline)
    _checkpoint(tmp_path, 0.3)  # a regression: night 10-02 alerts
    alerting = run_nightly(
        build_campaign(load(path)), history, night="2026-10-02", keep=1, runner=inline
    )
    assert alerting["exit_code"] == 3 and alerting["alerts"]
    text = (history / "summary.md").read_text()
    section = text.split("## 2026-10-02", 1)[1].split("## ", 1)[0]
    for alert in alerting["alerts"]:
        assert f"- **Alert:** {alert_text(alert, md.text)}" in section
    assert "**Alert:** ckpt score dropped" in section
    assert "**Alert:**" not in text.split("## 2026-10-01", 1)[1]  # a night without one


@pytest.mark.slow  # two nights, 3 s
def test_a_last_night_that_cannot_be_read_is_refused_before_sampling(tmp_path: Path) -> None:
    """Tonight is compared with last night: a summary.json that is not one was refused only
    after tonight's trials were sampled. Now before, naming the file and the way out."""
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-11-01", runner=inline)
    damaged = history / "runs" / "2026-11-01" / "summary.json"
    damaged.write_text("{not json")
    with pytest.raises(InputError, match="cannot be read as JSON") as info:
        run_nightly(build_campaign(load(path)), history, night="2026-11-02", runner=inline)
    assert info.value.source == str(damaged)
    assert f"`adaptive-eval report {damaged.parent}` rewrites" in str(info.value)
    assert not (history / "runs" / "2026-11-02").exists()  # nothing sampled
    assert main(["report", str(damaged.parent)]) == 0
    assert (
        run_nightly(build_campaign(load(path)), history, night="2026-11-02", runner=inline)[
            "exit_code"
        ]
        == 0
    )
