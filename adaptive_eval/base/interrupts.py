"""Ctrl-C, SIGTERM and SIGHUP: the first one stops a command, later ones cannot cut its clean-up
short.

A second Ctrl-C 0.3 s after the first used to land in Ray's shutdown (at interpreter exit): it
printed Ray's traceback, could crash the process, and left Ray's processes running. With
:func:`first_signal` as the handler of SIGINT, SIGTERM and SIGHUP, the first of them raises
(``KeyboardInterrupt`` for Ctrl-C, :class:`Terminated` for the others, a subclass, so every
clean-up written for Ctrl-C runs for them too) and every later one is ignored until the process
ends. Each ends in its own line and exit code, 128 + the signal's number (SIGTERM used to end
the process silently with 143, SIGHUP as if it had crashed). Standard library only: the console
script installs it before the heavy modules load.

A run's outputs are written whole (:func:`deferred`: a stop that arrives meanwhile waits for
report.html), and a stop after a run's summary.json says it finished asks for no resume: its
line says the results are there, or names what was left unwritten and ``adaptive-eval report
DIR``, which writes it (:func:`install`'s ``run_folder``, :func:`note_finished`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

#: Set in a watched command's environment to its watcher's pid
#: (:mod:`adaptive_eval.command_line.supervise`).
WATCHER_ENV = "ADAPTIVE_EVAL_WATCHED"
#: The signals a command stops on, in one line, with the clean-up run to its end.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RESUME_HINT = "run the same command again to resume"
INTERRUPTED_LINE = f"adaptive-eval: interrupted; {RESUME_HINT}"
#: What each stop signal means to a user (the line names it).
_CAUSES = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated (SIGTERM: asked to stop by another process, a scheduler or kill)",
    signal.SIGHUP: "hung up (SIGHUP: its terminal or session closed)",
}


def exit_code(signum: int) -> int:
    """The shell's convention for a command ended by a signal: 128 + its number."""
    return 128 + signum


#: Where a finished run's outputs are, once written (:func:`mark_finished`): a stop signal
#: after it leaves nothing to resume.
_finished: list[str] = []
#: The outputs of that run a stop left unwritten (its summary.json says it finished).
_left_out: list[str] = []
#: A run's outputs, in the order they are written: summary.json first.
OUTPUTS = ("summary.json", "report.md", "report.html")
#: The folder of the one run the command writes (run, compare) and when the command started
#: (:func:`install`): a stop after its summary.json says finished is no resume.
_run_folder: list[tuple[str, float]] = []


def mark_finished(where: str, left_out: tuple[str, ...] | list[str] = ()) -> None:
    """Note that the command's run has finished and its outputs are written in ``where`` (but
    ``left_out``): a stop signal from now on says so, not "run the same command again to
    resume"."""
    _finished[:] = [where]
    _left_out[:] = list(left_out)


def is_finished() -> bool:
    """Whether :func:`mark_finished` noted the command's run as finished."""
    return bool(_finished)


def finished_outputs(folder: str, since: float) -> list[str] | None:
    """The outputs a finished run in ``folder`` has not written, when its summary.json was
    written at ``since`` (a ``time.time()``) or later and says the run finished (a stop
    reason); None when it does not (a run still sampling, or a summary of an earlier leg). An
    output older than summary.json is one of an earlier leg: not written either."""
    path = os.path.join(folder, OUTPUTS[0])
    try:
        written = os.stat(path).st_mtime
        if written < since - 1.0:  # a file system's clock and ours: a second apart at most
            return None
        with open(path, encoding="utf-8") as handle:
            summary = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("stop_reason") is None:
        return None
    left = []
    for name in OUTPUTS[1:]:
        try:
            if os.stat(os.path.join(folder, name)).st_mtime < written:
                left.append(name)
        except OSError:
            left.append(name)
    return left


def note_finished(folder: str, since: float) -> None:
    """Mark the run in ``folder`` finished (:func:`mark_finished`, with what it left unwritten)
    when its summary.json, written since ``since``, says it finished; else nothing."""
    left = finished_outputs(folder, since)
    if left is not None:
        mark_finished(folder, left)


def after_finish_line(cause: str) -> str:
    """The line of a command that ended (``cause``) after its run had finished
    (:func:`mark_finished`): nothing to resume, and what a stop left out, with the command that
    writes it."""
    where = _finished[0]
    if not _left_out:
        return (
            f"adaptive-eval: {cause} after the run had finished: its results are complete in "
            f"{where}; nothing to resume (adaptive-eval report prints them again)"
        )
    missing = " and ".join(_left_out) + (" was" if len(_left_out) == 1 else " were")
    return (
        f"adaptive-eval: {cause} after the run had finished: its results are in "
        f"{os.path.join(where, OUTPUTS[0])}, but {missing} not written; nothing to resume: "
        f"`adaptive-eval report {where}` writes them"
    )


def stop_line(signum: int) -> str:
    """The one line a command ended by stop signal ``signum`` prints."""
    if not _finished and _run_folder:  # a stop while the outputs were written (issue 48)
        note_finished(*_run_folder[0])
    if _finished:
        cause = _CAUSES.get(signal.Signals(signum), f"ended on {signal.Signals(signum).name}")
        return after_finish_line(cause)
    if signum == signal.SIGINT:
        return INTERRUPTED_LINE
    watcher = os.environ.get(WATCHER_ENV, "")
    if signum == signal.SIGTERM and watcher.isdigit() and os.getppid() != int(watcher):
        return (
            f"adaptive-eval: its watcher process (pid {watcher}, the one started from the "
            "shell) ended, so the command stopped with it; every batch recorded before it is "
            f"kept: {RESUME_HINT}"
        )
    cause = _CAUSES.get(signal.Signals(signum), f"ended on {signal.Signals(signum).name}")
    return f"adaptive-eval: {cause}; every batch recorded before it is kept: {RESUME_HINT}"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the command stops as on Ctrl-C, with its own line and exit code."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The stop signal that arrived first in this command (:func:`first_signal`), if any.
_received: list[int] = []


def stopped_by(error: KeyboardInterrupt) -> int:
    """The signal behind a ``KeyboardInterrupt``: the :class:`Terminated`'s own, else the stop
    signal that arrived (Ray's C++ layer checks signals inside ``ray.get`` and ``ray.wait`` and
    raises a plain ``KeyboardInterrupt`` in place of the handler's: a SIGTERM to the process
    group then read "interrupted", exit 130), else SIGINT."""
    if isinstance(error, Terminated):
        return error.signum
    return _received[0] if _received else int(signal.SIGINT)


def first_signal(signum: int, frame: Any) -> None:
    """Handler of the stop signals: ignore every later one, then stop the command."""
    for other in STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    _received[:] = [signum]
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


#: The signals :func:`install` took over (and :func:`reclaim` takes back).
_installed: set[int] = set()


def install(run_folder: str | None = None, started: float | None = None) -> dict[int, Any] | None:
    """Make :func:`first_signal` the handler of the stop signals; returns the handlers it
    replaced (None off the main thread). A signal the caller ignores stays ignored (a caller
    that ignores Ctrl-C keeps ignoring it). ``run_folder``: the folder of the one run the
    command writes (run, compare), whose summary.json, once written (since ``started``, a
    ``time.time()``; default now) and finished, makes a stop no resume."""
    _finished.clear()  # a new command: nothing of it has finished
    _left_out.clear()
    _received.clear()
    since = time.time() if started is None else started
    _run_folder[:] = [(run_folder, since)] if run_folder else []
    if threading.current_thread() is not threading.main_thread():
        return None
    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is signal.SIG_IGN:
            continue
        previous[signum] = handler
        signal.signal(signum, first_signal)
        _installed.add(signum)
    return previous


def reclaim() -> None:
    """Take the stop signals back from a library that replaced their handlers (``ray.init``
    makes SIGTERM ``sys.exit(15)``: the run then ended silently with exit code 15)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _installed:
        if signal.getsignal(signum) not in (first_signal, signal.SIG_IGN):
            signal.signal(signum, first_signal)


def restore(previous: dict[int, Any] | None) -> None:
    """Put back the handlers :func:`install` replaced, unless a stop signal came: then they
    stay ignored to the end of the process (a late copy would otherwise kill it at exit)."""
    if not previous:
        return
    _installed.difference_update(previous)
    if any(signal.getsignal(signum) is signal.SIG_IGN for signum in previous):
        return
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """The stop signals ignored for the block (clean-up that must run to its end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """The block runs to its end: a stop signal that arrives meanwhile is held (later ones are
    ignored, as ever) and acted on when the block ends, as :func:`first_signal` acts on it.
    For writing a finished run's outputs: a SIGTERM between summary.json and report.html
    left report.html unwritten, and said "run the same command again to resume". Only the
    signals this module handles are held (a process that never called :func:`install` keeps
    its own handling)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)

    previous = {
        signum: signal.signal(signum, hold)
        for signum in STOP_SIGNALS
        if signal.getsignal(signum) is first_signal
    }
    try:
        yield
    finally:
        if not held:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if held:
        first_signal(held[0], None)
