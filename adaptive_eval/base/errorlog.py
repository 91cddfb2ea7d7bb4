"""Where an unexpected error's traceback goes: never a shared, predictable place.

The run directory's ``error.log`` when there is a run directory this user can write; otherwise a
new file in this user's private state folder (``$XDG_STATE_HOME/adaptive-eval``, default
``~/.local/state/adaptive-eval``), created with mode 0700 and checked to be a real folder owned
by this user. Files are opened with ``O_NOFOLLOW``: a symbolic link planted where the log goes
is refused, never written through. (Before: ``$TMPDIR/adaptive-eval/``, a fixed folder any
local user could create first, with a link in it.)
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from pathlib import Path

LOG_NAME = "error.log"


def state_dir() -> Path:
    """This user's private adaptive-eval folder (0700, owned by this user), created if needed.

    Falls back to a new private temporary folder (random name) when the home folder cannot be
    used, or the folder found there is not a private one of this user.
    """
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    folder = Path(base) / "adaptive-eval"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{folder} is not a folder of this user")
        if info.st_mode & 0o077:
            folder.chmod(0o700)
        return folder
    except OSError:
        return Path(tempfile.mkdtemp(prefix="adaptive-eval-"))


def _open_new(path: Path) -> int:
    """A descriptor for appending to ``path``, never through a symbolic link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o600)


def write_error_log(run_dir: str | None, header: str, text: str) -> Path:
    """Append ``header`` and ``text`` to the run's error.log (or a new file in the state
    folder); returns the file written. Raises OSError when neither can be written."""
    candidates = []
    if run_dir and Path(run_dir).is_dir() and not Path(run_dir).is_symlink():
        candidates.append(Path(run_dir) / LOG_NAME)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    candidates.append(state_dir() / f"error-{stamp}-{os.getpid()}.log")
    last: OSError | None = None
    for path in candidates:
        try:
            with os.fdopen(_open_new(path), "a", encoding="utf-8") as handle:
                handle.write(header + "\n" + text)
        except OSError as error:  # a read-only or full run folder: the state folder next
            last = error
            continue
        return path
    assert last is not None
    raise last


__all__ = ["state_dir", "write_error_log"]
