"""Issue 40, section 5: nightly numbers that misled. A past night re-run after ``--keep``
pruned its predecessor overwrote the night's alerting record with a clean one and exited 0; a
checkpoint restored to one the library knew was said to be "sampled anew, none reused" when
every trial was reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load
from test_nightly import _checkpoint, _setup, inline

from adaptive_eval.base.errors import InputError
from adaptive_eval.workflows.nightly import run_nightly


@pytest.mark.slow  # three nights, 4 s
def test_a_past_night_whose_predecessor_was_pruned_is_refused_not_overwritten(
    tmp_path: Path,
) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(load(path), history, night="2026-07-01", keep=1, runner=inline)
    _checkpoint(tmp_path, 0.3)  # a regression: night 07-02 alerts
    alerting = run_nightly(load(path), history, night="2026-07-02", keep=1, runner=inline)
    assert alerting["exit_code"] == 3
    assert not (history / "runs" / "2026-07-01").exists()  # pruned by --keep 1
    before = (history / "nights.jsonl").read_text()
    with pytest.raises(InputError, match=r"follows night 2026-07-01, whose run folder was pruned"):
        run_nightly(load(path), history, night="2026-07-02", keep=1, runner=inline)
    assert (history / "nights.jsonl").read_text() == before  # the alerting record is kept
    records = [json.loads(line) for line in before.splitlines()]
    assert records[-1]["exit_code"] == 3


@pytest.mark.slow  # three nights, 4 s
def test_a_checkpoint_restored_to_one_the_library_knows_is_said_to_be_reused(
    tmp_path: Path,
) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(load(path), history, night="2026-08-01", runner=inline)
    _checkpoint(tmp_path, 0.3)
    changed = run_nightly(load(path), history, night="2026-08-02", runner=inline)
    assert any(
        "ckpt" in line and "sampled anew, none reused" in line for line in changed["changed"]
    )
    _checkpoint(tmp_path, 0.7)  # restored: the library holds its trials from 08-01
    restored = run_nightly(load(path), history, night="2026-08-03", runner=inline)
    (line,) = [line for line in restored["changed"] if "ckpt" in line]
    assert "none reused" not in line and "which are reused" in line
    assert restored["sampled"] < restored["trials_used"]
