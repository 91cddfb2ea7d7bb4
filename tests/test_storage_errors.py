"""Issue 16, item 2: an intact store is never called damaged. Readers open it read-only (or
immutable where the folder cannot be written), and a failure names its real cause: read-only
media, a full disk, a -wal file deleted during a run."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import CLI_MODULE, TEST_DISPATCH, InlineCluster

from adaptive_eval.command_line.cli import main
from adaptive_eval.store import TrialStore

#: Words of the advice given for a damaged store; never for an intact one.
DAMAGE_WORDS = ("damaged", "restore", "afresh", "recover", "not a readable")


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not any(word in err for word in DAMAGE_WORDS), err
    return err


def _count(run_dir: Path) -> int:
    store = TrialStore(run_dir, readonly=True)
    try:
        return store.count_trials()
    finally:
        store.close()


def _read_only_copy(built: Path, tmpfs: Any, how: str) -> Path:
    """The finished run copied onto a tmpfs that is then made read-only (remounted, or seen
    through a read-only bind mount)."""
    disk = tmpfs("8m")
    shutil.copytree(built, disk / "run")
    if how == "remount":
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        return disk / "run"
    view = disk.parent / f"{disk.name}-view"
    view.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(disk), str(view)], check=True)
    tmpfs_views.append(view)
    return view / "run"


tmpfs_views: list[Path] = []


@pytest.fixture(autouse=True)
def _unmount_views() -> Any:
    yield
    while tmpfs_views:
        subprocess.run(["umount", "-l", str(tmpfs_views.pop())], check=False)


@pytest.mark.parametrize("how", ["remount", "bind"])
def test_a_run_on_read_only_media_is_read_and_never_called_damaged(
    finished_run: tuple[Path, Path],
    tmpfs: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    config_path, built = finished_run
    run_dir = _read_only_copy(built, tmpfs, how)
    capsys.readouterr()
    assert main(["completions", str(run_dir), "--limit", "2", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    out = tmp_path / "archived.npz"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    with np.load(out) as data:
        assert int((data["recorded"] >= 0).sum()) == _count(run_dir)
    capsys.readouterr()
    # Writers are refused as the user's input (exit 2), naming the cause.
    assert main(["report", str(run_dir)]) == 2
    assert "read-only" in _one_line(capsys.readouterr().err)
    assert main(["run", str(config_path), "--out", str(run_dir)]) == 2
    assert "read-only" in _one_line(capsys.readouterr().err)


def test_trials_left_in_a_wal_on_read_only_media_are_named(
    finished_run: tuple[Path, Path], tmpfs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder archived while a writer held trials in its -wal: SQLite cannot read them
    read-only, and says so without calling the store damaged."""
    _, built = finished_run
    writer = sqlite3.connect(built / "trials.sqlite", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO meta(key, value) VALUES ('archived', 'true')")
    disk = tmpfs("8m")
    shutil.copytree(built, disk / "run")
    writer.close()
    assert (disk / "run" / "trials.sqlite-wal").stat().st_size > 0
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    capsys.readouterr()
    assert main(["completions", str(disk / "run")]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "-wal" in err and "copy the run folder to a writable disk" in err and "intact" in err


def test_a_full_disk_at_open_is_named_and_readers_still_read(
    finished_run: tuple[Path, Path],
    tmpfs: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, built = finished_run
    disk = tmpfs("2m")
    run_dir = disk / "run"
    shutil.copytree(built, run_dir)
    stat = os.statvfs(disk)
    with (disk / "filler").open("wb") as handle:  # no room left, not even for the -shm file
        handle.write(b"\0" * (stat.f_bavail * stat.f_frsize))
    assert os.statvfs(disk).f_bavail == 0
    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 1
    assert "the disk holding it is full" in _one_line(capsys.readouterr().err)
    assert main(["completions", str(run_dir), "--limit", "1"]) == 0
    assert main(["export", str(run_dir), "--out", str(tmp_path / "x.npz")]) == 0
    (disk / "filler").unlink()
    assert main(["report", str(run_dir)]) == 0


def test_a_wal_deleted_mid_run_loses_nothing_and_readers_say_why(
    tmp_path: Path, no_ray: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The -wal file deleted while the run writes: a reader started then is told what
    happened (not "damaged"); the run saves its trials, starts a new -wal, and finishes."""
    from helpers import base_config, mimic_success, write_config, write_scenario

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_dir = tmp_path / "run"
    polls: list[int] = []
    readers: list[subprocess.CompletedProcess[str]] = []

    def delete_the_wal(dispatcher: Any) -> None:
        polls.append(1)
        if len(polls) == 4:
            (run_dir / "trials.sqlite-wal").unlink()
            readers.append(
                subprocess.run(
                    [
                        *CLI_MODULE,
                        "completions",
                        str(run_dir),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )

    monkeypatch.setattr(InlineCluster, "on_poll", delete_the_wal)
    assert main(["run", str(config), "--out", str(run_dir), "--json", *TEST_DISPATCH]) == 0
    assert len(polls) > 4, polls
    reader = readers[0]
    assert reader.returncode == 1
    assert "-wal file was deleted while a run was writing" in _one_line(reader.stderr)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    assert [e["event"] for e in events].count("wal_recreated") == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert _count(run_dir) == summary["trials_used"] > 0
    store = TrialStore(run_dir, readonly=True)  # passes SQLite's check and ours
    store.close()
    assert main(["report", str(run_dir)]) == 0
