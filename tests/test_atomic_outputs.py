"""Issue 16, item 1: every output is written whole or not at all. A full disk during ``report``
keeps the previous summary.json, report.md and report.html (before: invalid JSON and 0-byte
reports), both with an injected ENOSPC and on a real, full tmpfs."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from adaptive_eval.base.files import atomic_write
from adaptive_eval.command_line.cli import main

OUTPUTS = ("summary.json", "report.md", "report.html")


class _DiskFillsUp(io.RawIOBase):
    """A writable file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, handle: Any, room: int) -> None:
        self.handle, self.room = handle, room

    def write(self, data: Any) -> int:
        chunk = bytes(data) if not isinstance(data, str) else data.encode()
        if len(chunk) > self.room:
            self.handle.write(chunk[: self.room] if isinstance(data, bytes) else data[: self.room])
            self.handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(chunk)
        return int(self.handle.write(data))

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return int(self.handle.fileno())

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        if not self.closed:
            super().close()  # flushes first
            self.handle.close()


def _outputs(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in OUTPUTS}


def _assert_whole(run_dir: Path) -> None:
    json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "report.md").read_text().startswith("# Campaign")
    assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("room", [0, 100, 4000])
def test_an_injected_full_disk_keeps_every_previous_output(
    finished_run: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    room: int,
) -> None:
    _, run_dir = finished_run
    before = _outputs(run_dir)
    real_open = builtins.open

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        handle = real_open(file, mode, *args, **kw)
        name = str(getattr(handle, "name", file))
        is_output = any(out in name for out in OUTPUTS) or isinstance(file, int)
        if is_output and any(flag in mode for flag in "wa+"):
            return _DiskFillsUp(handle, room)
        return handle

    # Both names: pathlib writes through io.open, the atomic helper through open.
    monkeypatch.setattr(builtins, "open", full_disk_open)
    monkeypatch.setattr(io, "open", full_disk_open)
    capsys.readouterr()
    code = main(["report", str(run_dir)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "full" in err and "previous one is kept" in err
    failed = next(name for name in OUTPUTS if f"cannot write {name}" in err)
    # The output that hit the full disk is the previous one, byte for byte; those written
    # before it are new and whole.
    assert _outputs(run_dir)[failed] == before[failed]
    _assert_whole(run_dir)


def test_a_real_full_disk_keeps_the_outputs_and_the_store(
    finished_run: tuple[Path, Path], tmpfs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, built = finished_run
    disk = tmpfs("4m")
    run_dir = disk / "run"
    shutil.copytree(built, run_dir)
    assert main(["report", str(run_dir)]) == 0
    before = _outputs(run_dir)
    # Room for the store's -shm (32 KB) and -wal, the two small outputs and half the page.
    room = 48 * 1024 + len(before["summary.json"]) + len(before["report.md"])
    room += len(before["report.html"]) // 2
    stat = os.statvfs(disk)
    filler = stat.f_bavail * stat.f_frsize - room
    with (disk / "filler").open("wb") as handle:
        handle.truncate(0)
        handle.write(b"\0" * filler)
    capsys.readouterr()
    code = main(["report", str(run_dir)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "the disk holding it is full" in err
    _assert_whole(run_dir)
    assert _outputs(run_dir)["report.html"] == before["report.html"]
    (disk / "filler").unlink()
    assert main(["report", str(run_dir)]) == 0
    _assert_whole(run_dir)


def test_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write(target, "new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o640
