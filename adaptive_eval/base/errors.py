"""Errors that carry enough context to be shown to a user as they are."""

from __future__ import annotations

from collections.abc import Sequence


class AdaptiveEvalError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(AdaptiveEvalError):
    """Bad user input: a config, a data file or a run directory.

    The message names the file, the field and the offending value; the CLI prints it to stderr
    and exits with status 2.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message  # without the source and field
        where = ": ".join(part for part in (source, field) if part)
        super().__init__(f"{where}: {message}" if where else message)


class BackendError(AdaptiveEvalError):
    """A backend failed to produce a batch; the batch is re-dispatched, never silently dropped."""


class ExhaustedError(BackendError):
    """A replayed cell was asked for more trials than were recorded."""


class ClusterError(AdaptiveEvalError):
    """The Ray cluster could not be started or reached."""


def first_few(items: Sequence[str], most: int = 3) -> str:
    """``items`` for a one-line message: the first ``most``, then how many more.

    >>> first_few(["a", "b", "c", "d", "e"])
    'a, b, c and 2 more'
    """
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def printable(text: str) -> str:
    """``text`` with control characters (ANSI escapes, newlines) written as escapes, so that a
    name or value from a file cannot move the cursor, recolour or clear a terminal.

    >>> printable("red\\x1b[31m name\\n")
    'red\\\\x1b[31m name\\\\n'
    """
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    r""":func:`printable` line by line: a completion's lines stay lines, but no byte of it can
    drive the terminal (ESC, BEL, a carriage return that overwrites the line).

    >>> print(printable_lines("a\x1b[2J\nb\x07"))
    a\x1b[2J
    b\x07
    """
    return "\n".join(printable(line) for line in text.split("\n"))


def traceback_text(error: BaseException) -> str:
    """The traceback of ``error``, for a log file."""
    import traceback

    return "".join(traceback.format_exception(error))
