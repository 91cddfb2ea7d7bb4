"""``adaptive-eval`` from a shell: commands that run a campaign run under a small watcher.

``run``, ``compare`` and ``nightly`` start Ray and keep the trial store's SQLite files open
(the ``-shm`` file is memory-mapped). Some failures end such a process with a signal no Python
code can catch: SIGBUS when the file system under a mapped file goes read-only or away, SIGKILL
from the out-of-memory killer, a crash in native code. The watcher, a parent process that only
waits, then says so in one line instead of nothing, and leaves no process behind: on Linux it is
the "child subreaper" of everything the command starts, so Ray's local processes orphaned by such
a death are re-parented to it, and it ends every process descended from it.

The command ends with its watcher: it asks the kernel for SIGTERM when the watcher dies
(``PR_SET_PDEATHSIG``), stops as on any SIGTERM (the batches recorded are kept, Ray is shut
down) and then ends what it started itself (it is a subreaper too). Before, ``kill -9`` of the
watcher left the campaign running unsupervised, re-parented to pid 1, still holding the run
folder's lock.

Signals: Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) reach the command from the terminal's process
group; the watcher ignores them. SIGTERM and SIGHUP sent to the watcher are passed on; a command
that has not ended :data:`STOP_GRACE_S` seconds later (stuck in native code, where no Python
handler runs) is killed. Every ending is one line and, for a signal, exit code 128 + its number
(:mod:`adaptive_eval.base.interrupts`). ``python -m adaptive_eval.command_line.cli`` and
:func:`adaptive_eval.command_line.cli.main` run in-process, unwatched. Standard library only.
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

from adaptive_eval.base import interrupts

WATCHED = frozenset({"run", "compare", "nightly"})
#: Set in the command's environment to the watcher's pid: the process is the watched one (no
#: second watcher), and it ends when that pid is no longer its parent.
ENV = interrupts.WATCHER_ENV
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
EXIT_BAD_INPUT = 2
#: The command's exit code for a failure (``cli.EXIT_FAILED``), and a Ray core worker's own exit.
EXIT_FAILED = 1
#: Seconds the processes left by the command get to end after SIGTERM, before SIGKILL.
GRACE_S = 3.0
#: Seconds the command gets to stop after a SIGTERM or SIGHUP passed on, before SIGKILL.
STOP_GRACE_S = 30.0
#: Longest the watcher spends ending leftovers (Ray's processes re-parented in waves).
LEFTOVERS_S = 30.0


def entry() -> None:
    """The ``adaptive-eval`` console script."""
    argv = sys.argv[1:]
    command = next((a for a in argv if not a.startswith("-")), "")
    if os.environ.get(ENV) or command not in WATCHED or not sys.platform.startswith("linux"):
        sys.exit(run_here(argv))
    sys.exit(watch(argv, command))


def run_here(argv: list[str]) -> int:
    """Run the command in this process, its stop-signal handling installed before its modules
    load (and, under a watcher, tied to the watcher's life)."""
    previous = interrupts.install()
    watcher = _follow_watcher()
    try:
        from adaptive_eval.command_line.cli import main

        return main(argv)
    except KeyboardInterrupt as stop:  # while the modules loaded, before main took over
        signum = interrupts.stopped_by(stop)
        print(interrupts.stop_line(signum), file=sys.stderr)
        return interrupts.exit_code(signum)
    finally:
        if watcher is not None and os.getppid() != watcher:
            end_leftovers()  # the watcher is gone: nobody else ends what this run started
        interrupts.restore(previous)


def _prctl(option: int, value: int) -> bool:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    return False


def _follow_watcher() -> int | None:
    """Under a watcher: SIGTERM to this process when it dies, and orphans of this process's
    descendants re-parented here. The watcher's pid, or None when not watched."""
    try:
        watcher = int(os.environ.get(ENV) or 0)
    except ValueError:
        return None
    if watcher <= 1 or not sys.platform.startswith("linux"):
        return None
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != watcher:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return watcher


def watch(argv: list[str], command: str) -> int:
    """Run ``adaptive-eval ARGV`` as a child; its exit code, or one line and 128 + the signal
    (2 when its folder is now read-only) if a signal ended it."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    env = {**os.environ, ENV: str(os.getpid())}
    started = time.time()
    bootstrap = "import sys; from adaptive_eval.command_line.supervise import run_here; "
    bootstrap += "sys.exit(run_here(sys.argv[1:]))"
    child = subprocess.Popen([sys.executable, "-c", bootstrap, *argv], env=env)
    received: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, pass_on)
    for signum in (signal.SIGINT, signal.SIGQUIT):  # the terminal sends them to the command
        signal.signal(signum, signal.SIG_IGN)
    code = _wait(child, received)
    end_leftovers()
    # A stop signal to the whole process group reaches Ray's own processes too, and the command
    # then ended now and then with exit code 1 and no line, its handler never run (most likely
    # Ray's core worker ending the process once its raylet died): the stop is the cause.
    if code >= 0 and not (received and code == EXIT_FAILED):
        return code
    _note_finished(argv, command, started)
    if received:  # the command was asked to stop; however it then ended, that is the cause
        print(interrupts.stop_line(received[0]), file=sys.stderr)
        return interrupts.exit_code(received[0])
    return _killed(-code, argv, command)


def _wait(child: subprocess.Popen[bytes], received: list[int]) -> int:
    """The child's exit status; killed once it outlives a passed-on stop signal by
    :data:`STOP_GRACE_S` (a process stuck in native code never runs its handler)."""
    deadline: float | None = None
    while True:
        try:
            return child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if received and deadline is None:
            deadline = time.monotonic() + STOP_GRACE_S
        if deadline is not None and time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                child.kill()


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process (zombies left out)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(entry.name)] = int(fields[1])
    return found


def descendants(root: int | None = None) -> list[int]:
    """Live processes descended from ``root`` (default this one): children, their children,
    ..., the orphans re-parented here included."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    frontier = [os.getpid() if root is None else root]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, []):
            found.append(child)
            frontier.append(child)
    return found


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def end_leftovers() -> None:
    """End every process descended from this one (Ray's processes after a hard death, and the
    agents they started): SIGTERM, a grace period, then SIGKILL, in passes until none is left
    (processes re-parented to this one between passes are caught by the next)."""
    give_up = time.monotonic() + LEFTOVERS_S
    sig = signal.SIGTERM
    while (left := descendants()) and time.monotonic() < give_up:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and descendants():
            _reap()
            time.sleep(0.05)
        sig = signal.SIGKILL
    _reap()


def _folder(argv: list[str]) -> Path | None:
    for flag in ("--out", "--history"):
        for index, arg in enumerate(argv):
            if arg == flag and index + 1 < len(argv):
                return Path(argv[index + 1])
            if arg.startswith(flag + "="):
                return Path(arg.split("=", 1)[1])
    return None


def _note_finished(argv: list[str], command: str, started: float) -> None:
    """A run or compare whose summary.json, written since the command started, says it
    finished: its line says there is nothing to resume, and names what the ending left
    unwritten with the command that writes it."""
    folder = _folder(argv)
    if command in ("run", "compare") and folder is not None:
        interrupts.note_finished(str(folder), started)


def _killed(signum: int, argv: list[str], command: str) -> int:
    from adaptive_eval.base.files import is_read_only

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    folder = _folder(argv)
    code = interrupts.exit_code(signum)
    if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        print(interrupts.stop_line(signum), file=sys.stderr)
        return code
    if folder is not None and folder.exists() and is_read_only(folder):
        cause, code = f"{folder} is now on a read-only file system", EXIT_BAD_INPUT
    elif signum == signal.SIGBUS:
        cause = "a memory-mapped file (the trial store's -shm) became unreadable"
    elif signum == signal.SIGKILL:
        cause = "killed from outside (the out-of-memory killer, or kill -9)"
    else:
        cause = "the process crashed"
    if interrupts.is_finished():
        line = interrupts.after_finish_line(f"the {command} process ended on {name} ({cause})")
        print(line, file=sys.stderr)
        return code
    print(
        f"adaptive-eval: failed: the {command} process ended on {name} "
        f"({cause}); every batch recorded before it is kept: {interrupts.RESUME_HINT}",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    entry()
