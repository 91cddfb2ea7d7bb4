"""The ``adaptive-eval`` command line's parser: every command, its options and their help
(``adaptive-eval --help``). :mod:`adaptive_eval.command_line.cli` runs what it parses."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from adaptive_eval.base.errors import printable
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
#: What the exit codes mean (``--help`` ends with it).
EXIT_CODES = (
    "Exit codes: 0 success, 2 bad input (message on stderr), 1 any other failure; compare: 3 a\n"
    "regression, 4 undecided; nightly: 3 an alert; 128 + N when signal N ended the command (130\n"
    "Ctrl-C, 143 SIGTERM, 129 SIGHUP).\n"
    "No traceback reaches the console: an unexpected error prints one line and the path of a log\n"
    "file that holds the traceback.\n"
)
QUIET_HELP = (
    "no progress bar, ranking or pair list: only errors, and the one-line result at the end "
    "(the headline of report.md and report.html)"
)
SET_HELP = (
    "override a config field, e.g. --set policy.confidence=0.99 (a path is relative to the "
    "config file, as in the config itself)"
)


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
    parser.description = f"Commands:\n{commands}\n\n{EXIT_CODES}"
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("adaptive-eval")
    except PackageNotFoundError:
        return "unknown"
