"""``adaptive-eval`` from a shell: commands that run a campaign run under a small watcher.

``run``, ``compare`` and ``nightly`` start Ray and keep the trial store's SQLite files open
(the ``-shm`` file is memory-mapped). Some failures end such a process with a signal no Python
code can catch: SIGBUS when the file system under a mapped file goes read-only or away, SIGKILL
from the out-of-memory killer, a crash in native code. The watcher, a parent process that only
waits, then says so in one line instead of nothing, and leaves no process behind: on Linux it is
the "child subreaper" of everything the command starts, so Ray's local processes orphaned by such
a death are re-parented to it, and it ends them.

Signals: Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) reach the command from the terminal's process
group; the watcher ignores them. SIGTERM and SIGHUP sent to the watcher are passed on. Every
command installs its Ctrl-C handling (:mod:`adaptive_eval.interrupts`) before numpy and the rest
load, so even a Ctrl-C during start-up ends in one line. ``python -m adaptive_eval.cli`` and
:func:`adaptive_eval.cli.main` run in-process, unwatched. Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from adaptive_eval import interrupts

WATCHED = frozenset({"run", "compare", "nightly"})
#: Set in the command's environment: the process is the watched one (no second watcher).
ENV = "ADAPTIVE_EVAL_WATCHED"
PR_SET_CHILD_SUBREAPER = 36
EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
#: Seconds the processes left by the command get to end after SIGTERM, before SIGKILL.
GRACE_S = 3.0


def entry() -> None:
    """The ``adaptive-eval`` console script."""
    argv = sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), "")
    if os.environ.get(ENV) or command not in WATCHED or not sys.platform.startswith("linux"):
        sys.exit(run_here(argv))
    sys.exit(watch(argv, command))


def run_here(argv: list[str]) -> int:
    """Run the command in this process, its Ctrl-C handling installed before its modules load."""
    previous = interrupts.install()
    try:
        from adaptive_eval.cli import main

        return main(argv)
    except KeyboardInterrupt:  # while the modules loaded, before main took over
        print(interrupts.INTERRUPTED_LINE, file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        interrupts.restore(previous)


def _become_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def watch(argv: list[str], command: str) -> int:
    """Run ``adaptive-eval ARGV`` as a child; its exit code, or one line and 1 (2 when its
    folder is now read-only) if a signal killed it."""
    _become_subreaper()
    env = {**os.environ, ENV: "1"}
    bootstrap = "import sys; from adaptive_eval.supervise import run_here; "
    bootstrap += "sys.exit(run_here(sys.argv[1:]))"
    child = subprocess.Popen([sys.executable, "-c", bootstrap, *argv], env=env)

    def pass_on(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, pass_on)
    for signum in (signal.SIGINT, signal.SIGQUIT):  # the terminal sends them to the command
        signal.signal(signum, signal.SIG_IGN)
    code = child.wait()
    end_leftovers()
    if code >= 0:
        return code
    return _killed(-code, argv, command)


def _children() -> list[int]:
    """Live processes whose parent is this one (the orphans re-parented to it included)."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def end_leftovers() -> None:
    """End what the command left running (Ray's processes after a hard death): SIGTERM, a
    grace period, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = _children()
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and _children():
            _reap()
            time.sleep(0.05)
    _reap()


def _folder(argv: list[str]) -> Path | None:
    for flag in ("--out", "--history"):
        for index, arg in enumerate(argv):
            if arg == flag and index + 1 < len(argv):
                return Path(argv[index + 1])
            if arg.startswith(flag + "="):
                return Path(arg.split("=", 1)[1])
    return None


def _killed(signum: int, argv: list[str], command: str) -> int:
    from adaptive_eval.storage import is_read_only

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    folder = _folder(argv)
    code = EXIT_FAILED
    if signum == signal.SIGINT:
        cause, code = "interrupted", EXIT_INTERRUPTED
    elif folder is not None and folder.exists() and is_read_only(folder):
        cause, code = f"{folder} is now on a read-only file system", EXIT_BAD_INPUT
    elif signum == signal.SIGBUS:
        cause = "a memory-mapped file (the trial store's -shm) became unreadable"
    elif signum == signal.SIGKILL:
        cause = "killed from outside (the out-of-memory killer, or kill -9)"
    else:
        cause = "the process crashed"
    print(
        f"adaptive-eval: failed: the {command} process ended on {name} "
        f"({cause}); every batch recorded before it is kept: run the same command again to "
        "resume",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    entry()
