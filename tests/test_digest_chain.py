"""Issue 16, item 8: a digest chain over the recorded rounds catches a silently changed trial.

Before: changing stored categories moved a model's score and flipped decisions with ``report``
exit 0. Now each complete round is sealed (in the transaction that completes it) with a digest
chained to the previous round's; ``verify``, ``report`` and a resume recompute it and refuse the
store (exit 2) naming the first bad round. A store written before the chain gets one on its
first writable open, with a note."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

from adaptive_eval.command_line.cli import main
from adaptive_eval.store import TrialStore
from adaptive_eval.store.chain import DIGEST_COLUMNS


@pytest.fixture()
def run(tmp_path: Path) -> tuple[Path, Path]:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(config), tmp_path / "run")
    return config, tmp_path / "run"


def _sql(run_dir: Path, statement: str, *args: Any) -> list[Any]:
    with sqlite3.connect(run_dir / "trials.sqlite") as conn:
        rows = conn.execute(statement, args).fetchall()
    conn.close()
    return rows


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_every_complete_round_is_sealed_with_the_documented_digest(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, run_dir = run
    sealed = _sql(run_dir, "SELECT round, digest, trials FROM digests ORDER BY round")
    rounds = _sql(run_dir, "SELECT COUNT(*) FROM rounds")[0][0]
    assert [r for r, _, _ in sealed] == list(range(rounds)) and rounds > 1
    previous = ""
    for round_index, digest, trials in sealed:  # recomputed here from the module's formula
        rows = _sql(
            run_dir,
            f"SELECT {DIGEST_COLUMNS} FROM trials WHERE round = ? ORDER BY model, question, trial",
            round_index,
        )
        text = json.dumps([list(row) for row in rows], separators=(",", ":"))
        expected = hashlib.sha256(f"{previous}\n{round_index}\n{text}".encode()).hexdigest()
        assert digest == expected and trials == len(rows)
        previous = digest
    assert main(["verify", str(run_dir)]) == 0
    assert f"the digest chain of {rounds} round(s) matches" in capsys.readouterr().out


TAMPERING = {
    "category": "UPDATE trials SET category = 1 - category WHERE (model, question, trial) IN "
    "(SELECT model, question, trial FROM trials WHERE round = 2 LIMIT 1)",
    "deleted": "DELETE FROM trials WHERE (model, question, trial) IN "
    "(SELECT model, question, trial FROM trials WHERE round = 2 LIMIT 1)",
    "added": "INSERT INTO trials(model, question, trial, round, batch_id, seed, category, "
    "recorded_at) VALUES (0, 0, 9999, 2, 1, 1, 1, 0)",
    "answer": "UPDATE trials SET answer = 'forged' WHERE (model, question, trial) IN "
    "(SELECT model, question, trial FROM trials WHERE round = 2 LIMIT 1)",
    "digest": "DELETE FROM digests WHERE round >= 2",
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_one_changed_row_is_refused_by_verify_report_and_resume_naming_its_round(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str], how: str
) -> None:
    config, run_dir = run
    _sql(run_dir, TAMPERING[how])
    for args in (
        ["verify", str(run_dir)],
        ["report", str(run_dir)],
        ["run", str(config), "--out", str(run_dir)],
    ):
        err = _refused(args, capsys)
        assert "round 2 does not match its digest" in err and "rounds 0..1 match" in err


def test_a_store_recorded_before_the_chain_gets_one_with_a_note(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, run_dir = run
    _sql(run_dir, "DROP TABLE digests")
    _sql(run_dir, "PRAGMA user_version = 1")
    assert "has no digest chain" in _refused(["verify", str(run_dir)], capsys)
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    note = capsys.readouterr().err
    assert "note:" in note and "built it from the" in note and "cannot be detected" in note
    assert main(["verify", str(run_dir)]) == 0
    store = TrialStore(run_dir, readonly=True)
    try:
        assert store.get_meta("digest_chain_built")["rounds"] > 0
    finally:
        store.close()
    # From now on a change is caught.
    _sql(run_dir, TAMPERING["category"])
    assert "round 2 does not match" in _refused(["verify", str(run_dir)], capsys)


def test_an_interrupted_round_is_sealed_when_the_resume_completes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config = load(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    with pytest.raises(KeyboardInterrupt):
        run_inline(config, tmp_path / "run", crash_after=5)
    sealed = _sql(tmp_path / "run", "SELECT COUNT(*) FROM digests")[0][0]
    planned = _sql(tmp_path / "run", "SELECT COUNT(*) FROM rounds")[0][0]
    assert sealed < planned  # a round in flight is not sealed
    assert main(["verify", str(tmp_path / "run")]) == 0
    run_inline(config, tmp_path / "run")
    assert main(["verify", str(tmp_path / "run")]) == 0
    rounds = _sql(tmp_path / "run", "SELECT COUNT(*) FROM rounds")[0][0]
    assert _sql(tmp_path / "run", "SELECT COUNT(*) FROM digests")[0][0] == rounds


# Issue 22, failures 9, 10 and 20: the metadata and the last rounds are checked too. Before, a
# garbage campaign_id passed `verify` and failed `report` and resume with a JSONDecodeError
# (exit 1), a store whose last round (trials and digest) was deleted was presented as the final
# run, and a changed round 0 was said to follow "rounds 0..-1 match".
LAST = "(SELECT MAX(round) FROM rounds)"
STORE_CASES = {
    "campaign-id-not-json": (
        "UPDATE meta SET value = 'not json {' WHERE key = 'campaign_id'",
        "meta value 'campaign_id' that is not JSON",
    ),
    "campaign-id-a-number": (
        "UPDATE meta SET value = '42' WHERE key = 'campaign_id'",
        "meta value 'campaign_id' of the wrong kind (42)",
    ),
    "campaign-id-control-characters": (
        "UPDATE meta SET value = '\"t-\\u001b[31m\"' WHERE key = 'campaign_id'",
        "meta value 'campaign_id' of the wrong kind",
    ),
    "models-not-a-list": (
        "UPDATE meta SET value = '\"a\"' WHERE key = 'models'",
        "meta value 'models' of the wrong kind",
    ),
    "events-through-not-json": (
        "UPDATE meta SET value = '[' WHERE key = 'events_through'",
        "meta value 'events_through' that is not JSON",
    ),
    "last-round-deleted": (
        f"DELETE FROM trials WHERE round = {LAST}; DELETE FROM digests WHERE round = {LAST}",
        "the run is incomplete: its decisions were committed through round",
    ),
    "last-round-and-its-plan-deleted": (
        f"DELETE FROM trials WHERE round = {LAST}; DELETE FROM digests WHERE round = {LAST}; "
        f"DELETE FROM rounds WHERE round = {LAST}",
        "the run is incomplete",
    ),
    "round-0-changed": (
        "UPDATE trials SET category = 1 - category WHERE (model, question, trial) IN "
        "(SELECT model, question, trial FROM trials WHERE round = 0 LIMIT 1)",
        "round 0 does not match its digest: a recorded value was changed after it was sealed "
        "(no earlier round)",
    ),
}


@pytest.mark.parametrize("how", sorted(STORE_CASES))
def test_tampered_metadata_and_deleted_rounds_are_refused_in_one_line(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str], how: str
) -> None:
    config, run_dir = run
    statement, expect = STORE_CASES[how]
    with sqlite3.connect(run_dir / "trials.sqlite") as conn:
        conn.executescript(statement)
    conn.close()
    for args in (
        ["verify", str(run_dir)],
        ["report", str(run_dir)],
        ["run", str(config), "--out", str(run_dir)],
    ):
        err = _refused(args, capsys)
        assert expect in err, (args[0], err)
        assert "rounds 0..-1" not in err
