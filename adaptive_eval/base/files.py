"""Files on disk: outputs written atomically, and what a failed write or open really means.

Every final artifact (summary.json, report.md, report.html, the run's config.yaml, the nightly
history and alerts, exported and imported npz files) is written by :func:`atomic_output`: into a
temporary file in the same folder, flushed and fsync'ed, then renamed over the old file. A full
disk, a read-only file system or a crash mid-write leaves the previous file whole; no reader
ever sees half a file.

:func:`storage_error` turns an ``OSError`` or an ``sqlite3.Error`` into a one-line error that
names the real cause (disk full, read-only file system, permission) from the error code and the
state of the file system, never a guess that the data is damaged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any

from adaptive_eval.base.errors import AdaptiveEvalError, InputError

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_READ_ONLY = frozenset({errno.EROFS})
_DENIED = frozenset({errno.EACCES, errno.EPERM})
#: The path itself is wrong: the user's input (exit 2).
_BAD_PATH = frozenset({errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ENOENT, errno.ELOOP})


class DiskFull(AdaptiveEvalError):
    """No space left on the disk (or quota) a file is written to (exit 1)."""


class ReadOnlyStorage(InputError):
    """The folder given is on a read-only file system, or not writable by this user (exit 2)."""


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (what statvfs and access can be asked about,
    and what decides whether ``path`` can be created)."""
    path = Path(path).absolute()
    while path != path.parent:
        try:
            if path.exists():
                break
        except OSError:  # a name too long, a symlink loop: ask its parent
            pass
        path = path.parent
    return path


def free_bytes(path: Path) -> int | None:
    """Bytes this user may still write on the file system holding ``path`` (None: unknown)."""
    try:
        stat = os.statvfs(nearest_existing(path))
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def is_read_only(path: Path) -> bool:
    """Whether the file system holding ``path`` is mounted read-only, or its folder is not
    writable by this user."""
    where = nearest_existing(path)
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    folder = where if where.is_dir() else where.parent
    return not os.access(folder, os.W_OK)


def _size(count: int | None) -> str:
    if count is None:
        return "an unknown amount"
    if count < 1 << 20:
        return f"{count / 1024:.0f} KB"
    return f"{count / (1 << 20):.0f} MB"


def storage_error(error: OSError | sqlite3.Error, path: Path, doing: str) -> AdaptiveEvalError:
    """The one-line error for ``error`` raised while ``doing`` something to ``path``.

    The cause comes from the error code where there is one (``errno``, SQLite's error name) and
    otherwise from the file system itself: a full disk or a read-only mount is named as such.
    """
    code = error.errno if isinstance(error, OSError) else None
    name = getattr(error, "sqlite_errorname", "") or ""
    # SQLite reports a failed write as a bare I/O error: the file system says whether it was full.
    if code in _FULL or name.startswith("SQLITE_FULL") or (code is None and free_bytes(path) == 0):
        return DiskFull(
            f"{path}: cannot {doing}: the disk holding it is full ({_size(free_bytes(path))} "
            "free); free some space and run the same command again"
        )
    if code in _READ_ONLY or name.startswith("SQLITE_READONLY") or is_read_only(path):
        return ReadOnlyStorage(
            f"cannot {doing}: it is on a read-only file system (or its folder is not "
            "writable); use a writable folder, or make this one writable",
            source=str(path),
        )
    if code in _DENIED:
        return ReadOnlyStorage(f"cannot {doing}: permission denied", source=str(path))
    if isinstance(error, OSError) and code in _BAD_PATH:
        return InputError(f"cannot {doing}: {error.strerror}", source=str(path))
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return AdaptiveEvalError(f"{path}: cannot {doing}: {reason}")


def _umask() -> int:
    """This process's umask, read without changing it (other threads may create files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable; file systems that cannot fsync a folder are left as they are."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_output(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file handle whose content replaces ``path`` only once it is written whole.

    ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``. On any error the temporary file is removed
    and the old ``path`` (if any) is left as it was; an ``OSError`` becomes
    :func:`storage_error`'s one-line error.
    """
    path = Path(path)
    what = f"write {path.name}" + (" (the previous one is kept)" if path.exists() else "")
    try:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise storage_error(error, path, what) from error
    try:
        with open(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            # mkstemp makes the file private; an output gets the old file's mode, or the usual.
            keep = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
            os.fchmod(handle.fileno(), keep)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise storage_error(error, path, what) from error
        raise
    _fsync_folder(path.parent)


def foreign_entries(folder: Path, known: Collection[str]) -> list[str]:
    """Names in ``folder`` that are not among ``known`` (the files a command writes there),
    their SQLite companions (``-wal``), temporary files (``.NAME.*.tmp``) or kept copies
    (``NAME.damaged-*``); sorted. A command given a folder of someone else's files refuses
    it instead of mixing its own files in."""
    out = []
    for entry in folder.iterdir():
        name = entry.name.removeprefix(".")
        if not any(name == k or name.startswith((f"{k}.", f"{k}-")) for k in known):
            out.append(entry.name + ("/" if entry.is_dir() else ""))
    return sorted(out)


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, "wb" if isinstance(data, bytes) else "w") as handle:
        handle.write(data)


__all__ = [
    "DiskFull",
    "ReadOnlyStorage",
    "atomic_output",
    "atomic_write",
    "foreign_entries",
    "free_bytes",
    "is_read_only",
    "nearest_existing",
    "storage_error",
]
