"""The ``adaptive-eval`` command line (``adaptive-eval --help`` lists every command).

Exit codes: 0 success, 2 bad input (message on stderr), 1 any other failure, 130 interrupted.
No traceback reaches the console: an unexpected error prints one line and the path of a log
file that holds the traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from adaptive_eval import interrupts
from adaptive_eval.errors import AdaptiveEvalError, InputError, printable, traceback_text

if TYPE_CHECKING:
    from adaptive_eval.campaign import Campaign

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
#: The longest error line printed (characters; the rest is counted, not shown).
MAX_LINE = 2000
#: Seconds ``validate`` waits for an answer at ``execution.ray_address``.
VALIDATE_PROBE_S = 3.0
QUIET_HELP = (
    "no progress bar, ranking or pair list: only errors, and the one-line result at the end "
    "(the headline of report.md and report.html)"
)
SET_HELP = "override a config field, e.g. --set policy.confidence=0.99"
#: Options whose value may start with "-" (a list of numbers such as ``-0.5,0,1``).
_NUMBER_LIST_OPTIONS = ("--weights", "--k")
_NUMBER_LIST = re.compile(r"^-[0-9.]")


def _parse_floats(text: str, what: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise InputError(f"{what} must be finite numbers, got {text!r}")
    return values


def _parse_ints(text: str, what: str) -> list[int]:
    values = _parse_floats(text, what)
    if any(v != int(v) for v in values):
        raise InputError(f"{what} must be whole numbers, got {text!r}")
    return [int(v) for v in values]


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


def _npz_out(text: str) -> Path:
    """The npz file an ``--out`` names (``.npz`` added as numpy would), checked before the run
    is read: not a folder, under a folder."""
    from adaptive_eval.storage import nearest_existing

    path = Path(text)
    if path.is_dir():
        raise InputError(
            f"is a folder; --out names the npz file to write, e.g. {path / 'trials.npz'}",
            source=text,
            field="--out",
        )
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    parent = nearest_existing(path.parent)
    if not parent.is_dir():
        raise InputError(f"{parent} is not a folder", source=text, field="--out")
    return path


def cmd_run(args: argparse.Namespace) -> int:
    from adaptive_eval.config import load_config
    from adaptive_eval.report import render_console
    from adaptive_eval.workflows.run import run_campaign

    config = load_config(args.config, args.set)
    summary = run_campaign(config, Path(args.out), quiet=args.quiet)
    print(_result_text(summary, args, render_console))
    return 0


def _result_text(summary: dict[str, Any], args: argparse.Namespace, full: Any) -> str:
    """What a command prints at its end: summary.json with --json, the one-line headline (the
    pages' first line) with --quiet, else the full console text ``full(summary)``."""
    from adaptive_eval.headline import headline

    if args.json:
        return json.dumps(summary, indent=2)
    return headline(summary).line if args.quiet else str(full(summary))


def cmd_validate(args: argparse.Namespace) -> int:
    from adaptive_eval.campaign import build_campaign, describe_stopping
    from adaptive_eval.cluster import check_engines, check_local_placement
    from adaptive_eval.cluster_address import address_problem
    from adaptive_eval.config import load_config
    from adaptive_eval.preflight import check_before_sampling
    from adaptive_eval.redact import scrub

    config = load_config(args.config, args.set)
    campaign = build_campaign(config)
    check_before_sampling(campaign)
    check_local_placement(campaign, planned_only=True)  # a run that could never start
    policy = config.policy
    lines = [f"campaign {config.name!r} (seed {config.seed}) is valid", ""]
    for plan, offset in zip(campaign.plans, campaign.offsets, strict=True):
        lines.append(
            f"  [{offset}..{offset + len(plan.models) - 1}] {plan.describe}; "
            f"{plan.workers} worker(s)"
        )
    lines += [
        f"  models ({campaign.num_models}): {', '.join(campaign.names)}",
        f"  questions: {campaign.num_questions}; categories C+1 = {campaign.num_categories}, "
        f"weights {[float(w) for w in campaign.weights]}",
        f"  prior: {campaign.prior_note}",
        f"  trials per question: min {policy.min_trials_per_question}, max "
        f"{int(campaign.capacity.max())}"
        + (
            " (capped by recorded trials)"
            if campaign.capacity.min() < policy.max_trials_per_question
            else ""
        ),
        f"  policy: allocation {campaign.allocator.name}; confidence {policy.confidence}; "
        f"rope {policy.rope}",
        f"  stops on: {describe_stopping(config)}",
        _score_line(campaign),
        f"  Bayes@N (reported beside the score): {policy.bayes_prior} prior",
        f"  budget: trials {config.budget.trials}, tokens {config.budget.tokens}, wall clock "
        f"{config.budget.wall_clock_s} s",
        f"  worst case: {int(campaign.capacity.sum()) * campaign.num_questions} trials",
        f"  fixed-N baseline: N = {campaign.fixed_n} -> "
        f"{campaign.num_models * campaign.num_questions * campaign.fixed_n} trials"
        + (f" ({campaign.fixed_n_note})" if campaign.fixed_n_note else ""),
    ]
    lines += [f"  warning: {config.source}: {warning}" for warning in campaign.warnings]
    try:
        check_engines(campaign)
    except InputError as error:  # valid config; `run` refuses it on this machine
        lines.append(f"  warning: {error}")
    address = config.execution.ray_address
    unreachable = address_problem(address, VALIDATE_PROBE_S) if address else None
    if unreachable is not None:  # the cluster may come up before `run`: a warning
        lines.append(f"  warning: execution.ray_address: {unreachable}; `run` would fail now")
    print(scrub("\n".join(lines)))
    return 0


def _score_line(campaign: Campaign) -> str:
    """validate's line on the score interval: the width goal and the most trials it can take."""
    from adaptive_eval.stats.intervals import trials_for_width

    design = campaign.interval_design
    num_models = campaign.num_models
    if design.half_width is None:
        return f"  score interval: {design.guarantee(num_models)}"
    span = campaign.config.rubric.span
    worst = int(
        trials_for_width(np.array((span / 2) ** 2), campaign.num_questions, design, num_models)
    )
    who = "all models at once" if design.simultaneous else "each model"
    return (
        f"  width goal: every score within +-{design.half_width:g} at "
        f"{100 * design.confidence:g}% ({who}), a repeated confidence interval (c = "
        f"{design.final_boundary(num_models):.3f} at the horizon); at most {worst} trials per "
        f"question for any model (cap {int(campaign.capacity.min())})"
    )


def cmd_report(args: argparse.Namespace) -> int:
    from adaptive_eval.config import load_config
    from adaptive_eval.report import render_console
    from adaptive_eval.workflows.report import report_run

    run_dir = Path(args.run_dir)
    config_path = Path(args.config) if args.config else run_dir / "config.yaml"
    if not config_path.exists():
        raise InputError("no config.yaml: not a run directory", source=str(run_dir))
    summary = report_run(load_config(config_path), run_dir)
    if args.html:
        from adaptive_eval.report_html import FILENAME

        print(run_dir / FILENAME)
        return 0
    if args.json:
        print(json.dumps(summary, indent=2))
    elif "comparison" in summary:  # a compare folder: its verdict, as compare printed it
        from adaptive_eval.workflows.compare import render

        print(render_console(summary) + "\n\n" + render(summary["comparison"]))
    else:
        print(render_console(summary))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from adaptive_eval.recovery import describe_recoveries, salvage
    from adaptive_eval.store import CorruptStore, StoreError, TrialStore

    run_dir = Path(args.run_dir)
    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    try:
        store = TrialStore(run_dir, readonly=True)  # SQLite's integrity check runs on open
    except CorruptStore as error:  # say what a resume would keep and sample again
        found = salvage(run_dir / TrialStore.FILENAME)
        raise CorruptStore(f"{error}. Of it, {found.describe()}") from None
    try:
        recoveries = list(store.get_meta("recoveries") or [])
        store.check_meta()
        if not store.has_chain:
            raise StoreError(
                "has no digest chain: it was recorded by a release before the chain existed; "
                "`adaptive-eval report` on it builds one (changes made before then cannot be "
                "detected)",
                source=str(run_dir),
            )
        sealed = store.verify_chain()
        store.check_applied_rounds(sealed)
        recorded, planned = store.count_trials(), len(store.rounds())
    finally:
        store.close()
    print(
        f"{run_dir}: the digest chain of {sealed} round(s) matches the {recorded} recorded "
        f"trials; {planned - sealed} round(s) still missing trials are not sealed yet"
    )
    for line in describe_recoveries(recoveries):
        print(f"{run_dir}: {line}")
    return 0


def cmd_completions(args: argparse.Namespace) -> int:
    from adaptive_eval.store import TrialStore

    run_dir = Path(args.run_dir)
    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    store = TrialStore(run_dir, readonly=True)
    try:
        models = list(store.get_meta("models") or [])
        questions = list(store.get_meta("questions") or [])
        model = None
        if args.model is not None:
            if args.model not in models:
                raise InputError(
                    f"--model {args.model!r} is not in this run (models: {', '.join(models)})",
                    source=str(run_dir),
                )
            model = models.index(args.model)
        shown = 0
        for trial in store.trials(model):
            if args.question is not None and questions[trial.question] != args.question:
                continue
            if args.trial is not None and trial.trial != args.trial:
                continue
            record = {
                "model": models[trial.model],
                "question": questions[trial.question],
                "trial": trial.trial,
                "seed": trial.seed,
                "category": trial.category,
                "answer": trial.answer,
                "reason": trial.reason,
                "tokens": trial.tokens,
                "signals": trial.signals,
                "text": trial.text,
            }
            if args.json:
                print(json.dumps(record))
            else:
                print(
                    f"--- {record['model']} / {record['question']} / trial {trial.trial} "
                    f"(seed {trial.seed}): category {trial.category}, answer "
                    f"{trial.answer!r}{' - ' + trial.reason if trial.reason else ''}"
                )
                print(trial.text if trial.text is not None else "(no text stored)")
            shown += 1
            if args.limit and shown >= args.limit:
                break
        if args.question is not None and args.question not in questions:
            raise InputError(
                f"--question {args.question!r} is not in this run ({len(questions)} questions, "
                f"e.g. {', '.join(questions[:3])})",
                source=str(run_dir),
            )
        if shown == 0 and args.trial is not None:
            raise InputError(f"no recorded trial {args.trial} matches", source=str(run_dir))
    finally:
        store.close()
    return 0


def score_tensor(
    outcomes: np.ndarray,
    names: Sequence[str],
    weights: np.ndarray,
    prior: np.ndarray | None,
    confidence: float,
    ks: Sequence[int],
) -> dict[str, Any]:
    """Bayes@N, avg@N and Pass@k of a recorded (L, M, N) tensor, and both rankings."""
    from adaptive_eval import stats

    num_trials = outcomes.shape[2]
    mu, sigma = stats.bayes(outcomes, weights, prior)
    low, high = stats.credible_interval(mu, sigma, confidence)
    avg = stats.avg_at_n(outcomes, weights)
    correct = weights[outcomes] == weights.max()
    ranks = stats.rank_with_ties(mu, sigma, stats.z_threshold(confidence))
    plain = stats.rank_no_ties(mu)
    rows = []
    for i in np.argsort(-mu, kind="stable"):
        row: dict[str, Any] = {
            "name": names[i],
            "mu": float(mu[i]),
            "sigma": float(sigma[i]),
            "ci_low": float(low[i]),
            "ci_high": float(high[i]),
            "avg@N": float(avg[i]),
            "rank": int(ranks[i]),
            "rank_no_ties": int(plain[i]),
        }
        for k in ks:
            row[f"pass@{k}"] = float(stats.pass_at_k(correct[i], k))
        rows.append(row)
    return {
        "trials_per_question": num_trials,
        "confidence": confidence,
        "prior": "uniform" if prior is None else f"R0 with {prior.shape[-1]} trials",
        "models": rows,
    }


def cmd_score(args: argparse.Namespace) -> int:
    from adaptive_eval.npzio import NpzFile, check_categories

    file = NpzFile(args.file)
    outcomes = file.get(args.key, ndim=3, kind="i").astype(np.int64)
    num_models, _, num_trials = outcomes.shape
    names = file.names("models", num_models, "model-")
    weights = np.asarray(_parse_floats(args.weights, "--weights") if args.weights else [0.0, 1.0])
    check_categories(outcomes, len(weights), file=file, name=args.key)
    if weights.max() == weights.min():
        raise InputError(f"--weights are all {weights[0]:g}: every model would score the same")
    if args.weights and outcomes.size and int(outcomes.max()) < len(weights) - 1:
        raise InputError(
            f"--weights gives {len(weights)} categories (0..{len(weights) - 1}) but "
            f"{args.key} only uses 0..{int(outcomes.max())}; give one weight per category "
            "of the data"
        )
    prior = None
    if args.prior:
        prior_file = NpzFile(args.prior)
        prior = prior_file.get(args.prior_key, ndim=(2, 3), kind="i").astype(np.int64)
        check_categories(prior, len(weights), file=prior_file, name=args.prior_key)
        if prior.shape[-2] != outcomes.shape[1]:
            raise prior_file.error(
                args.prior_key,
                f"has {prior.shape[-2]} questions, the outcomes have {outcomes.shape[1]}",
            )
    ks = _parse_ints(args.k, "--k") if args.k else [1]
    bad = [k for k in ks if not 1 <= k <= num_trials]
    if bad:
        raise InputError(f"--k {bad[0]} is outside 1..N = 1..{num_trials}")
    if not 0.5 < args.confidence < 1:
        raise InputError(f"--confidence must be in (0.5, 1), got {args.confidence}")
    result = score_tensor(outcomes, names, weights, prior, args.confidence, ks)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    head = (
        f"{'rank':>4} {'(no CI)':>7}  {'model':<24} {'mu':>7} {'sigma':>7} {'CI':>19} "
        f"{'avg@N':>7}" + "".join(f" {'pass@' + str(k):>8}" for k in ks)
    )
    print(f"Bayes@{num_trials} ({result['prior']} prior, {args.confidence:.0%} CI)\n{head}")
    for row in result["models"]:
        print(
            f"{row['rank']:>4} {row['rank_no_ties']:>7}  {row['name']:<24} {row['mu']:7.4f} "
            f"{row['sigma']:7.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}] "
            f"{row['avg@N']:7.4f}" + "".join(f" {row[f'pass@{k}']:8.4f}" for k in ks)
        )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from adaptive_eval.workflows.imports import import_files, parse_map

    out = _npz_out(args.out)
    mapping = parse_map(args.map) if args.map else None
    result = import_files(
        args.format, [Path(f) for f in args.files], mapping, args.metric, args.filter
    )
    result.save(out)
    low, high = result.trials_per_cell
    print(
        f"wrote {out}: outcomes {tuple(result.outcomes.shape)} (models x questions x "
        f"trials), models {', '.join(result.models)}; trials per cell {low}..{high}"
    )
    for note in result.notes:
        print(f"note: {note}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from adaptive_eval.workflows.export import export_run

    out = _npz_out(args.out)
    exported = export_run(Path(args.run_dir), out)
    print(
        f"wrote {out}: outcomes {exported.shape} (the first N = {exported.shape[2]} trials of "
        f"every cell; cells hold {exported.fewest}..{exported.most}); {exported.dropped} later "
        "trial(s) kept only in 'recorded' (-1 = not sampled)"
    )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from adaptive_eval.config import load_config
    from adaptive_eval.workflows.compare import render, run_compare

    config = load_config(args.config, args.set)
    summary = run_compare(
        config,
        args.candidate,
        Path(args.out),
        margin=args.margin,
        settle_all=True if args.settle_all else None,
        quiet=args.quiet,
    )
    result = summary["comparison"]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_result_text(summary, args, lambda s: render(s["comparison"])))
    code: int = result["exit_code"]
    return code


def cmd_nightly(args: argparse.Namespace) -> int:
    from adaptive_eval.config import load_config
    from adaptive_eval.workflows.nightly import run_nightly

    config = load_config(args.config, args.set)
    record = run_nightly(config, Path(args.history), night=args.night, keep=args.keep)
    print(
        f"night {record['night']}: sampled {record['sampled']} trials, reused "
        f"{record['reused']}; {len(record['alerts'])} alert(s)"
    )
    for alert in record["alerts"]:
        print(f"  ALERT {json.dumps(alert)}")
    code: int = record["exit_code"]
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="adaptive-eval", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run or resume a campaign")
    run.add_argument("config", help="campaign config (YAML)")
    run.add_argument("--out", required=True, help="run directory (resumed if it exists)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=SET_HELP,
    )
    run.add_argument("--json", action="store_true", help="print summary.json to stdout")
    run.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser("validate", help="check a config and print the plan")
    validate.add_argument("config", help="campaign config (YAML)")
    validate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    validate.set_defaults(func=cmd_validate)

    report = sub.add_parser(
        "report", help="rebuild summary.json, report.md and report.html from a run's store"
    )
    report.add_argument("run_dir", help="run folder (of run, compare or a night)")
    report.add_argument("--config", help="config (default: RUN_DIR/config.yaml)")
    report.add_argument("--json", action="store_true", help="print summary.json to stdout")
    report.add_argument(
        "--html",
        action="store_true",
        help="print the path of the rewritten report.html (plots) instead of the summary",
    )
    report.set_defaults(func=cmd_report)

    verify = sub.add_parser(
        "verify", help="check a run's store: SQLite's integrity check and the digest chain"
    )
    verify.add_argument("run_dir", help="run folder")
    verify.set_defaults(func=cmd_verify)

    completions = sub.add_parser("completions", help="print stored completions of a run")
    completions.add_argument("run_dir", help="run folder")
    completions.add_argument("--model", help="model name")
    completions.add_argument("--question", help="question id")
    completions.add_argument("--trial", type=_at_least(0), help="trial index")
    completions.add_argument("--limit", type=_at_least(0), default=20, help="at most N (0: all)")
    completions.add_argument("--json", action="store_true", help="one JSON object per line")
    completions.set_defaults(func=cmd_completions)

    score = sub.add_parser("score", help="score a recorded (L, M, N) outcome tensor offline")
    score.add_argument("file", help="npz with an (L, M, N) integer outcome array")
    score.add_argument("--key", default="outcomes", help="array name (default outcomes)")
    score.add_argument("--weights", help="comma-separated rubric weights (default 0,1)")
    score.add_argument("--prior", help="npz with prior outcomes R0, (M, D) or (L, M, D)")
    score.add_argument(
        "--prior-key", default="outcomes", help="array name in the prior npz (default outcomes)"
    )
    score.add_argument(
        "--confidence", type=float, default=0.95, help="credible-interval level (default 0.95)"
    )
    score.add_argument("--k", help="comma-separated k for Pass@k (default 1)")
    score.add_argument("--json", action="store_true", help="print the scores as JSON")
    score.set_defaults(func=cmd_score)
    imp = sub.add_parser(
        "import", help="read lm-eval-harness or inspect_ai logs into an (L, M, N) outcome npz"
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
    imp.set_defaults(func=cmd_import)

    compare = sub.add_parser(
        "compare",
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
    compare.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    compare.set_defaults(func=cmd_compare)

    nightly = sub.add_parser(
        "nightly", help="one night of a scheduled run: reuse, rank, alert (exit 3 on an alert)"
    )
    nightly.add_argument("config", help="campaign config (YAML)")
    nightly.add_argument("--history", required=True, help="history folder (library, nights)")
    nightly.add_argument("--night", help="YYYY-MM-DD (default: today, UTC)")
    nightly.add_argument(
        "--keep", type=_at_least(1), default=30, help="run folders of the last N nights"
    )
    nightly.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    nightly.set_defaults(func=cmd_nightly)

    export = sub.add_parser(
        "export", help="write a run's trials as an outcome npz (for replay and policy.prior)"
    )
    export.add_argument("run_dir", help="run folder")
    export.add_argument("--out", required=True, help="npz to write")
    export.set_defaults(func=cmd_export)
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
    from adaptive_eval.redact import scrub

    text = printable(scrub(str(message)))
    if len(text) > MAX_LINE:  # one line a person reads, whatever a value from a file holds
        text = f"{text[:MAX_LINE]}... ({len(text) - MAX_LINE:,} more characters)"
    print(f"adaptive-eval: {prefix}{text}", file=sys.stderr)


def _report_unexpected(args: argparse.Namespace, error: BaseException) -> None:
    from adaptive_eval.errorlog import write_error_log
    from adaptive_eval.redact import scrub

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
    from adaptive_eval.storage import storage_error

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


def _run_command(args: argparse.Namespace) -> int:
    try:
        code: int = args.func(args)
        return code
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


def _stop_ray() -> None:
    if "adaptive_eval.cluster" not in sys.modules:
        return  # this command never started Ray
    from adaptive_eval.cluster import stop_ray

    try:
        stop_ray()
    except KeyboardInterrupt:  # the first Ctrl-C landed here, at the very end: finish the stop
        stop_ray()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_join_number_lists(sys.argv[1:] if argv is None else argv))
    previous = interrupts.install()  # the first stop signal stops; the clean-up runs to its end
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
