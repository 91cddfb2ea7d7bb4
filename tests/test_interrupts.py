"""Issue 16, item 3: one line, no traceback, whatever ends a run. Ctrl-C twice (0.3 s apart, to
the process group) exits 130 with nothing left running; a run killed by SIGBUS (its file system
gone read-only under the store's mapped -shm file) says so in one line, and leaves no Ray
process; a store that cannot be written mid-run, or a read-only run directory, is one line
(exit 2; a full disk exit 1)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    TEST_DISPATCH,
    InlineCluster,
    assert_session_ended,
    base_config,
    mimic_success,
    one_error_line,
    slow_run_command,
    start_run,
    write_config,
    write_scenario,
)

from adaptive_eval.command_line.cli import main


def _ended(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = process.communicate(timeout=120)
    assert_session_ended(process.pid, 20)
    return process.returncode, err


@pytest.mark.slow
def test_ctrl_c_twice_exits_130_in_one_line_and_leaves_no_ray_process(tmp_path: Path) -> None:
    command, run_dir = slow_run_command(tmp_path)
    process = start_run(command, run_dir)
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(process.pid, signal.SIGINT)
    code, err = _ended(process)
    assert code == 130, err
    assert one_error_line(err) == "adaptive-eval: interrupted; run the same command again to resume"
    assert "Segmentation" not in err and "Exception ignored" not in err


@pytest.mark.slow
def test_a_run_killed_by_sigbus_says_so_in_one_line_and_leaves_no_ray_process(
    tmp_path: Path,
) -> None:
    command, run_dir = slow_run_command(tmp_path)
    process = start_run(command, run_dir)
    # The watcher's child is the run: the process SQLite's -shm mapping would kill.
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    os.kill(int(children[0]), signal.SIGBUS)
    code, err = _ended(process)
    line = one_error_line(err)
    # 128 + the signal, as for every signal (issue 22); the line names the likely cause.
    assert code == 128 + signal.SIGBUS and "SIGBUS" in line and "memory-mapped" in line
    assert "run the same command again to resume" in line


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    return write_config(tmp_path / "c.yaml", base_config("s.npz"))


def test_a_store_that_turns_read_only_mid_run_is_one_line_exit_2(
    tmp_path: Path,
    config: Path,
    no_ray: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SQLite's own read-only error on a write, mid-run (the store's connection swapped for a
    read-only one, as the file system going read-only would leave it)."""
    from adaptive_eval.store import TrialStore

    polls: list[int] = []
    original = TrialStore.__init__

    def remember(self: TrialStore, *args: Any, **kw: Any) -> None:
        original(self, *args, **kw)
        stores.append(self)

    stores: list[TrialStore] = []

    def turn_read_only(dispatcher: Any) -> None:
        polls.append(1)
        if len(polls) == 3:
            store = stores[0]
            uri = f"file:{store.path}?mode=ro"
            store.conn = sqlite3.connect(uri, uri=True, isolation_level=None)

    monkeypatch.setattr(TrialStore, "__init__", remember)
    monkeypatch.setattr(InlineCluster, "on_poll", turn_read_only)
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(tmp_path / "run"), *TEST_DISPATCH]) == 2
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert "trials.sqlite" in line and "read-only" in line


def test_a_disk_that_fills_up_mid_run_is_one_line_and_the_run_resumes(
    tmp_path: Path,
    config: Path,
    tmpfs: Any,
    no_ray: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    disk = tmpfs("4m")
    run_dir = disk / "run"
    polls: list[int] = []

    def fill_the_disk(dispatcher: Any) -> None:
        polls.append(1)
        if len(polls) == 3:
            stat = os.statvfs(disk)
            with (disk / "filler").open("wb") as handle:
                handle.write(b"\0" * (stat.f_bavail * stat.f_frsize))

    monkeypatch.setattr(InlineCluster, "on_poll", fill_the_disk)
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 1
    assert "is full" in one_error_line(capsys.readouterr().err)
    (disk / "filler").unlink()
    monkeypatch.setattr(InlineCluster, "on_poll", None)
    assert main(["run", str(config), "--out", str(run_dir), "--json", *TEST_DISPATCH]) == 0
    assert json.loads(capsys.readouterr().out)["resumed"] is True


def test_a_run_directory_on_read_only_media_is_refused_before_anything(
    tmp_path: Path, config: Path, tmpfs: Any, no_ray: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    disk = tmpfs("1m")
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    for out in (disk, disk / "new-run"):
        capsys.readouterr()
        assert main(["run", str(config), "--out", str(out), *TEST_DISPATCH]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "read-only" in err and "Traceback" not in err
    assert not no_ray, "Ray must not start"
