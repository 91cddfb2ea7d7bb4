"""The ``adaptive-eval`` command line (``adaptive-eval --help`` lists every command; the parser
is :mod:`adaptive_eval.command_line.parser`).

Exit codes: 0 success, 2 bad input (message on stderr), 1 any other failure; compare: 3 a
regression, 4 undecided; nightly: 3 an alert; 128 + N when signal N ended the command (130
Ctrl-C, 143 SIGTERM, 129 SIGHUP).
No traceback reaches the console: an unexpected error prints one line and the path of a log
file that holds the traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from adaptive_eval.base import interrupts
from adaptive_eval.base.errors import AdaptiveEvalError, InputError, printable, traceback_text
from adaptive_eval.command_line.parser import EXIT_BAD_INPUT, build_parser

EXIT_FAILED = 1
#: The longest error line printed (characters; the rest is counted, not shown).
MAX_LINE = 2000
#: Options whose value may start with "-" (a list of numbers such as ``-0.5,0,1``).
_NUMBER_LIST_OPTIONS = ("--weights", "--k")
_NUMBER_LIST = re.compile(r"^-[0-9.]")


def _join_number_lists(argv: Sequence[str]) -> list[str]:
    """``--weights -0.5,0,1`` -> ``--weights=-0.5,0,1``: argparse reads "-0.5,..." as an option."""
    out: list[str] = []
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in _NUMBER_LIST_OPTIONS and index + 1 < len(args):
            value = args[index + 1]
            if _NUMBER_LIST.match(value):
                out.append(f"{arg}={value}")
                index += 2
                continue
        out.append(arg)
        index += 1
    return out


def _run_dir(args: argparse.Namespace) -> str | None:
    """The run (or history) folder the command works in, if it has one."""
    found = getattr(args, "out", None) or getattr(args, "run_dir", None)
    return found or getattr(args, "history", None)


def _say(prefix: str, message: object) -> None:
    """One line on stderr: credentials redacted, control characters (ANSI escapes) shown as
    escapes, never sent raw."""
    from adaptive_eval.base.redact import scrub

    text = printable(scrub(str(message)))
    if len(text) > MAX_LINE:  # one line a person reads, whatever a value from a file holds
        text = f"{text[:MAX_LINE]}... ({len(text) - MAX_LINE:,} more characters)"
    print(f"adaptive-eval: {prefix}{text}", file=sys.stderr)


def _report_unexpected(args: argparse.Namespace, error: BaseException) -> None:
    from adaptive_eval.base.errorlog import write_error_log
    from adaptive_eval.base.redact import scrub

    summary = scrub(f"{type(error).__name__}: {error}").splitlines()[0][:300]
    header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} adaptive-eval " + scrub(
        " ".join(sys.argv[1:])
    )
    try:
        path = write_error_log(_run_dir(args), header, scrub(traceback_text(error)))
        where = f"; the traceback is in {path}"
    except OSError as log_error:
        where = f" (and the traceback could not be saved: {log_error.strerror})"
    _say("unexpected error: ", f"{summary}{where}")


def _storage_failure(error: OSError | sqlite3.Error, args: argparse.Namespace) -> int | None:
    """Exit code after naming a storage failure (full disk, read-only file system) in one
    line; None when ``error`` is not one (it is then an unexpected error)."""
    from adaptive_eval.base.files import storage_error

    run_dir = _run_dir(args)
    name = getattr(error, "filename", None) if isinstance(error, OSError) else None
    path = Path(name or (Path(run_dir) / "trials.sqlite" if run_dir else "."))
    failure = storage_error(error, path, f"write {path.name}")
    if type(failure) is AdaptiveEvalError:  # no cause found: not a storage failure
        return None
    return _fail(failure)


def _fail(error: AdaptiveEvalError) -> int:
    if isinstance(error, InputError):
        _say("error: ", error)
        return EXIT_BAD_INPUT
    _say("failed: ", error)
    return EXIT_FAILED


#: Arguments that name files or folders, checked before any command reads them.
PATH_ARGUMENTS = (
    "config",
    "run_dir",
    "out",
    "from_dir",
    "history",
    "file",
    "files",
    "prior",
    "candidate",
)


def check_path_arguments(args: argparse.Namespace) -> None:
    """A path no file system can hold (a component over 255 bytes, a path over 4,096) or one
    holding a NUL is one line naming the option, not a traceback."""
    for name in PATH_ARGUMENTS:
        if name == "candidate" or not hasattr(args, name):
            continue
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str):
                continue
            option = name if name in ("config", "run_dir", "file", "files") else f"--{name}"
            shown = repr(value) if len(value) <= 60 else repr(value[:60]) + "..."
            if "\0" in value:
                raise InputError(f"{shown} holds a NUL character", field=option)
            encoded = os.fsencode(value)
            longest = max((len(part) for part in encoded.split(b"/")), default=0)
            if longest > 255 or len(encoded) > 4096:
                raise InputError(
                    f"{shown} ({len(value):,} characters) is longer than a file system allows "
                    "(255 bytes a name, 4,096 a path)",
                    field=option,
                )
            if os.path.islink(value) and not os.path.exists(value):
                # A link in a loop, or to nothing: --out gave rc 1 "File exists" from mkdir.
                try:
                    os.stat(value)
                    reason = "it leads nowhere"
                except OSError as error:
                    reason = error.strerror or "it leads nowhere"
                raise InputError(
                    f"{shown} is a symbolic link that cannot be followed ({reason}); give a "
                    "folder or file, or a link to one",
                    field=option,
                )


def _run_command(args: argparse.Namespace) -> int:
    try:
        check_path_arguments(args)
        code: int = args.func(args)
        return code
    except BrokenPipeError:  # `adaptive-eval score X | head`: the reader has what it wanted
        _quiet_stdout()
        return 0
    except AdaptiveEvalError as error:
        return _fail(error)
    except (OSError, sqlite3.Error) as error:
        code_or_none = _storage_failure(error, args)
        if code_or_none is not None:
            return code_or_none
        _report_unexpected(args, error)
        return EXIT_FAILED
    except Exception as error:  # the last line of defence: one line, traceback to a file
        _report_unexpected(args, error)
        return EXIT_FAILED


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of a closed pipe does
    not print "Exception ignored ... BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _stop_ray() -> None:
    if "adaptive_eval.dispatch.cluster" not in sys.modules:
        return  # this command never started Ray
    from adaptive_eval.dispatch.cluster import stop_ray

    try:
        stop_ray()
    except KeyboardInterrupt:  # the first Ctrl-C landed here, at the very end: finish the stop
        stop_ray()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_join_number_lists(sys.argv[1:] if argv is None else argv))
    previous = interrupts.install(args.out if args.command in ("run", "compare") else None)
    try:
        return _run_command(args)
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP: one line, 128 + the signal
        signum = interrupts.stopped_by(stop)
        print(interrupts.stop_line(signum), file=sys.stderr)
        return interrupts.exit_code(signum)
    finally:
        _stop_ray()
        interrupts.restore(previous)


if __name__ == "__main__":
    sys.exit(main())
