"""Issue 22, failure 1: a damaged store is salvaged, never thrown away whole.

Truncating ``trials.sqlite-wal`` during a run left a store that failed SQLite's integrity check
for good, and every resume refused it. Now a resume keeps the rounds whose digests verify,
samples the rest again (trials are functions of their seeds) and ends with the very trials of
an undamaged run; ``verify`` says what a resume would keep, and afterwards what was lost.

The damage here is made deterministic: the last leaf page of the ``trials_by_round`` index
(the rows of the last rounds, in round order) is overwritten with zeros, as a checkpoint of
lost WAL frames does.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TEST_DISPATCH,
    base_config,
    ledger,
    load,
    mimic_success,
    run_inline,
    write_config,
    write_scenario,
)

from adaptive_eval.command_line.cli import main

PAGE = 4096


def _last_index_leaf(store: Path) -> int:
    """The page of the round index holding its largest keys (the last rounds)."""
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT pageno, path FROM dbstat WHERE name = 'trials_by_round' AND pagetype = 'leaf'"
        ).fetchall()
    finally:
        conn.close()
    return int(max(rows, key=lambda row: row[1])[0])


def _zero_page(store: Path, page: int) -> None:
    with store.open("r+b") as handle:
        handle.seek((page - 1) * PAGE)
        handle.write(b"\0" * PAGE)


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config, an undamaged finished run, the same run with its store damaged)."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    data = base_config("s.npz", max_trials_per_question=60, round_trials=48)
    config = write_config(tmp_path / "c.yaml", data)
    clean, damaged = tmp_path / "clean", tmp_path / "damaged"
    run_inline(load(config), clean)
    run_inline(load(config), damaged)
    store = damaged / "trials.sqlite"
    _zero_page(store, _last_index_leaf(store))
    return config, clean, damaged


def test_a_damaged_store_is_salvaged_on_resume_to_the_very_same_trials(
    runs: tuple[Path, Path, Path], no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config, clean, damaged = runs
    capsys.readouterr()
    assert main(["verify", str(damaged)]) == 2  # damaged: what a resume would keep
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "fails SQLite's integrity check" in line
    assert "verify against their digests" in line and "is sampled again" in line
    kept = int(line.split("rounds 0..")[1].split(" ")[0]) + 1
    total = len({row[6] for row in ledger(clean)})
    assert 0 < kept < total  # some rounds kept, some lost

    assert main(["run", str(config), "--out", str(damaged), *TEST_DISPATCH]) == 0
    err = capsys.readouterr().err
    assert "store_recovered" in err and f"rounds 0..{kept - 1}" in err
    assert ledger(damaged) == ledger(clean)  # the lost rounds were sampled again, identically
    assert list(damaged.glob("trials.sqlite.damaged-*"))  # the damaged file is kept

    assert main(["verify", str(damaged)]) == 0
    out = capsys.readouterr().out
    assert "recovered on" in out and f"rounds 0..{kept - 1} kept" in out
    assert f"round {kept} on sampled again" in out


def test_report_refuses_a_damaged_store_and_says_a_resume_salvages_it(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, damaged = runs
    capsys.readouterr()
    assert main(["report", str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keeps every round whose digest still verifies" in err
    assert not list(damaged.glob("trials.sqlite.damaged-*"))  # report changes nothing
