"""The ``adaptive-eval`` command line (``adaptive-eval --help`` lists every command).

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from adaptive_eval.base import interrupts
from adaptive_eval.base.errors import AdaptiveEvalError, InputError, printable, traceback_text
from adaptive_eval.command_line.commands import (
    cmd_compare,
    cmd_completions,
    cmd_export,
    cmd_forecast,
    cmd_import,
    cmd_nightly,
    cmd_report,
    cmd_run,
    cmd_score,
    cmd_validate,
    cmd_verify,
)

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
#: The longest error line printed (characters; the rest is counted, not shown).
MAX_LINE = 2000
QUIET_HELP = (
    "no progress bar, ranking or pair list: only errors, and the one-line result at the end "
    "(the headline of report.md and report.html)"
)
SET_HELP = (
    "override a config field, e.g. --set policy.confidence=0.99 (a path is relative to the "
    "config file, as in the config itself)"
)
#: Options whose value may start with "-" (a list of numbers such as ``-0.5,0,1``).
_NUMBER_LIST_OPTIONS = ("--weights", "--k")
_NUMBER_LIST = re.compile(r"^-[0-9.]")


class _StoreOnce(argparse._StoreAction):
    """An option that takes one value refuses a second (``--candidate a --candidate b`` used
    to take the last silently)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given: set[str] = vars(namespace).setdefault("_options_given", set())
        if option_string is not None and self.dest in given:
            parser.error(
                f"{option_string} given twice ({getattr(namespace, self.dest)!r}, then "
                f"{values!r}); give it once"
            )
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (no usage block), exit code 2, and an option given
    twice refused (:class:`_StoreOnce`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_BAD_INPUT, f"adaptive-eval: error: {printable(message)} (see {self.prog} --help)\n"
        )


def _pilot(text: str) -> int | str:
    """``--pilot``: a whole number of trials per question, or ``auto``."""
    return "auto" if text.strip().lower() == "auto" else _at_least(1)(text)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _config_options(command: argparse.ArgumentParser, *, json_help: str | None = None) -> None:
    """The options of a command that reads a campaign config: ``--set``, and where it runs the
    campaign (``json_help`` says what ``--json`` prints) ``--json`` and ``--quiet``."""
    command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    if json_help is not None:
        command.add_argument("--json", action="store_true", help=json_help)
        command.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="adaptive-eval", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        """The subcommand ``name``, run by ``func``; ``help`` is its line in ``--help``."""
        subcommand = sub.add_parser(name, help=help)
        subcommand.set_defaults(func=func)
        return subcommand

    run = command("run", cmd_run, help="run or resume a campaign")
    run.add_argument("config", help="campaign config (YAML)")
    run.add_argument("--out", required=True, help="run directory (resumed if it exists)")
    _config_options(run, json_help="print summary.json to stdout")

    validate = command("validate", cmd_validate, help="check a config and print the plan")
    validate.add_argument("config", help="campaign config (YAML)")
    _config_options(validate)

    forecast = command(
        "forecast",
        cmd_forecast,
        help="forecast trials, tokens, GPU time and the pairs a campaign will settle, before "
        "it samples",
    )
    forecast.add_argument("config", help="campaign config (YAML)")
    forecast.add_argument(
        "--from",
        dest="from_dir",
        metavar="RUN_DIR",
        help="evidence: a previous run (or night) of the same campaign",
    )
    forecast.add_argument(
        "--pilot",
        type=_pilot,
        metavar="K|auto",
        help="evidence: sample K trials per question of every model into --out first (the "
        "run's own first trials: `run` on that folder reuses them); auto: 4, then on through "
        "the campaign's own rounds until the evidence tells the models' gaps apart or the "
        "pilot has cost 15%% of the forecast",
    )
    forecast.add_argument(
        "--out", help="the run folder: forecast.json is written there (required with --pilot)"
    )
    forecast.add_argument(
        "--simulations",
        type=_at_least(10),
        help="simulated campaigns (default 40, 20 above 5,000 model x question cells; more: "
        "tighter percentiles, slower)",
    )
    forecast.add_argument("--seed", type=int, default=0, help="seed of the simulations")
    forecast.add_argument(
        "--candidate", help="forecast `compare --candidate NAME`: its pairs against each incumbent"
    )
    forecast.add_argument("--margin", type=float, help="compare's non-inferiority margin")
    _config_options(forecast, json_help="print forecast.json to stdout")

    report = command(
        "report",
        cmd_report,
        help="rebuild summary.json, report.md and report.html from a run's store",
    )
    report.add_argument("run_dir", help="run folder (of run, compare or a night)")
    report.add_argument("--config", help="config (default: RUN_DIR/config.yaml)")
    report.add_argument(
        "--out",
        help="for a folder of Inspect logs (adaptive_eval.inspect): where the outputs go "
        "(default: RUN_DIR/adaptive-eval); exits with compare's code for a candidate",
    )
    report.add_argument("--json", action="store_true", help="print summary.json to stdout")
    report.add_argument(
        "--html",
        action="store_true",
        help="print the path of the rewritten report.html (plots) instead of the summary",
    )

    verify = command(
        "verify",
        cmd_verify,
        help="check a run's store: SQLite's integrity check and the digest chain",
    )
    verify.add_argument("run_dir", help="run folder")

    completions = command("completions", cmd_completions, help="print stored completions of a run")
    completions.add_argument("run_dir", help="run folder")
    completions.add_argument("--model", help="model name")
    completions.add_argument("--question", help="question id")
    completions.add_argument("--trial", type=_at_least(0), help="trial index")
    completions.add_argument("--limit", type=_at_least(0), default=20, help="at most N (0: all)")
    completions.add_argument("--json", action="store_true", help="one JSON object per line")

    score = command("score", cmd_score, help="score a recorded (L, M, N) outcome tensor offline")
    score.add_argument("file", help="npz with an (L, M, N) integer outcome array")
    score.add_argument("--key", default="outcomes", help="array name (default outcomes)")
    score.add_argument("--weights", help="comma-separated rubric weights (default 0,1)")
    score.add_argument("--prior", help="npz with prior outcomes R0, (M, D) or (L, M, D)")
    score.add_argument(
        "--prior-key", default="outcomes", help="array name in the prior npz (default outcomes)"
    )
    score.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="level of the rank groups (and of Bayes@N's interval in --json; default 0.95)",
    )
    score.add_argument("--k", help="comma-separated k for Pass@k (default 1)")
    score.add_argument(
        "--first-n",
        action="store_true",
        help="an export: score only the first N trials of every cell ('outcomes'), not every "
        "recorded trial ('recorded')",
    )
    score.add_argument("--json", action="store_true", help="print the scores as JSON")
    imp = command(
        "import",
        cmd_import,
        help="read lm-eval-harness or inspect_ai logs into an (L, M, N) outcome npz",
    )
    imp.add_argument(
        "--format",
        required=True,
        choices=["lm-eval", "inspect"],
        help="the harness that wrote them",
    )
    imp.add_argument("files", nargs="+", help="samples_*.jsonl files or .eval/.json logs")
    imp.add_argument("--out", required=True, help="npz to write (replay / prior / score input)")
    imp.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="VALUE=CATEGORY",
        help="score value -> category (default: 1/C -> 1, 0/I -> 0), e.g. --map P=1",
    )
    imp.add_argument(
        "--metric", help="lm-eval metric key (default exact_match, acc, ...) or inspect scorer"
    )
    imp.add_argument(
        "--filter",
        metavar="NAME",
        help="lm-eval filter whose scores to read when the files hold several (lm-eval writes "
        "one line per document and filter, e.g. gsm8k's strict-match and flexible-extract)",
    )

    compare = command(
        "compare",
        cmd_compare,
        help="place a candidate among the incumbents (exit 0 not worse, 3 worse, 4 undecided)",
    )
    compare.add_argument("config", help="campaign config listing candidate and incumbents")
    compare.add_argument("--candidate", required=True, help="the model to place")
    compare.add_argument(
        "--margin",
        type=float,
        help="non-inferiority margin: pass (exit 0) once the candidate is shown not worse than "
        "every incumbent by more than this, fail (exit 3) once shown worse by more than this "
        "against one (default: compare.margin in the config, else better/worse/equivalent)",
    )
    compare.add_argument(
        "--settle-all",
        action="store_true",
        help="keep sampling until every comparison is settled (or the cap), even after a "
        "regression has fixed the exit code at 3 (default: stop there; compare.settle_all)",
    )
    compare.add_argument("--out", required=True, help="run directory (resumed if it exists)")
    _config_options(compare, json_help="print the comparison as JSON")

    nightly = command(
        "nightly",
        cmd_nightly,
        help="one night of a scheduled run: reuse, rank, alert (exit 3 on an alert)",
    )
    nightly.add_argument("config", help="campaign config (YAML)")
    nightly.add_argument("--history", required=True, help="history folder (library, nights)")
    nightly.add_argument("--night", help="YYYY-MM-DD (default: today, UTC)")
    nightly.add_argument(
        "--keep", type=_at_least(1), default=30, help="run folders of the last N nights"
    )
    nightly.add_argument(
        "--flip-alerts",
        choices=("down", "any", "none"),
        default="down",
        help="which ranking flips alert (exit 3): down (default: a model that was ahead fell "
        "behind), any, or none; the others are printed as news",
    )
    _config_options(nightly)

    export = command(
        "export",
        cmd_export,
        help="write a run's trials as an outcome npz (for replay and policy.prior)",
    )
    export.add_argument("run_dir", help="run folder")
    export.add_argument(
        "--out", required=True, help="npz to write (--format eee: the folder to write into)"
    )
    export.add_argument(
        "--format",
        choices=("npz", "eee"),
        default="npz",
        help="npz: the outcome tensor replay and score read (default); eee: Every Eval Ever "
        "aggregate and instance records (schema 0.3.0)",
    )
    commands = "\n".join(
        f"  {action.dest:<12} {action.help}"
        for action in sub._choices_actions  # the subcommands with their help, in order
    )
    parser.description = f"Commands:\n{commands}\n\n" + (__doc__ or "").split("\n", 2)[2]
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("adaptive-eval")
    except PackageNotFoundError:
        return "unknown"


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
