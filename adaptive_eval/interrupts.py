"""Ctrl-C: the first one stops a command, later ones cannot cut its clean-up short.

A second Ctrl-C 0.3 s after the first used to land in Ray's shutdown (at interpreter exit): it
printed Ray's traceback, could crash the process, and left Ray's processes running. With
:func:`first_interrupt` as the SIGINT handler, the first Ctrl-C raises ``KeyboardInterrupt``
and every later one is ignored until the process ends. Standard library only: the console
script installs it before the heavy modules load.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

INTERRUPTED_LINE = "adaptive-eval: interrupted; run the same command again to resume"


def first_interrupt(signum: int, frame: Any) -> None:
    """SIGINT handler: ignore every later SIGINT, then stop the command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def install() -> object | None:
    """Make :func:`first_interrupt` the SIGINT handler; returns the handler it replaced (None
    off the main thread, or where SIGINT was ignored: a caller that ignores Ctrl-C keeps
    ignoring it)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        return None
    signal.signal(signal.SIGINT, first_interrupt)
    return previous


def restore(previous: object | None) -> None:
    """Put back the handler :func:`install` replaced, unless a Ctrl-C came: then SIGINT stays
    ignored to the end of the process (a late copy would otherwise kill it at exit)."""
    if previous is None or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """SIGINT ignored for the block (clean-up that must run to its end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
