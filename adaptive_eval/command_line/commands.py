"""What each ``adaptive-eval`` command does once its arguments are parsed: one function per
command, each handing its work to a workflow and printing the result.

:mod:`adaptive_eval.command_line.cli` parses the command line and turns every failure into one
line and an exit code; heavy modules are imported inside each command, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval.base.errors import InputError

if TYPE_CHECKING:
    from adaptive_eval.base.summary_schema import Summary
    from adaptive_eval.campaign.campaign import Campaign
    from adaptive_eval.config.settings import BudgetSettings


#: Seconds ``validate`` waits for an answer at ``execution.ray_address``.
VALIDATE_PROBE_S = 3.0


def cmd_run(args: argparse.Namespace) -> int:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.outputs.report import render_console
    from adaptive_eval.workflows.run import run_campaign

    campaign = build_campaign(load_config(args.config, args.set))
    summary = run_campaign(campaign, Path(args.out), quiet=args.quiet)
    _mark_finished(summary, args.out)
    print(_result_text(summary, args, render_console))
    library = summary.provenance.library
    if not args.json and library is not None:  # a model the library knew otherwise: a line each
        for line in library.changes:
            print(f"trial library: {line}", file=sys.stderr)
    return 0


def _mark_finished(summary: Summary, out: str) -> None:
    """A finished run's outputs are written: a stop signal from now on says so instead of
    asking for a resume (it exited 143 with "run the same command again to resume")."""
    from adaptive_eval.base import interrupts

    if summary.stop_reason is not None:
        interrupts.mark_finished(out)


def _result_text(summary: Summary, args: argparse.Namespace, full: Callable[[Summary], str]) -> str:
    """What a command prints at its end: summary.json with --json, the one-line headline (the
    pages' first line) with --quiet, else the full console text ``full(summary)``."""
    from adaptive_eval.base.summary_schema import json_text
    from adaptive_eval.outputs.headline import headline

    if args.json:
        return json_text(summary)
    return headline(summary).line if args.quiet else full(summary)


def cmd_validate(args: argparse.Namespace) -> int:
    from adaptive_eval.base.ray_address import address_problem
    from adaptive_eval.base.redact import scrub
    from adaptive_eval.campaign.build import build_campaign, describe_stopping
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.dispatch.cluster import check_engines, check_local_placement
    from adaptive_eval.dispatch.preflight import check_before_sampling
    from adaptive_eval.workflows.forecast import short_forecast

    config = load_config(args.config, args.set)
    campaign = build_campaign(config)
    check_before_sampling(campaign)
    check_local_placement(campaign, planned_only=True)  # a run that could never start
    settings = campaign.run.settings
    policy = settings.policy
    lines = [f"campaign {settings.name!r} (seed {settings.seed}) is valid", ""]
    for plan, offset in zip(campaign.run.plans, campaign.run.offsets, strict=True):
        lines.append(
            f"  [{offset}..{offset + len(plan.models) - 1}] {plan.describe}; "
            f"{plan.workers} worker(s)"
        )
    lines += [
        f"  models ({campaign.num_models}): {', '.join(campaign.names)}",
        f"  questions: {campaign.num_questions}; categories C+1 = {campaign.num_categories}, "
        f"weights {[float(w) for w in campaign.decision.weights]}",
        f"  prior: {campaign.decision.prior_note}",
        f"  trials per question: min {policy.min_trials_per_question}, max "
        f"{int(campaign.decision.capacity.max())}"
        + (
            " (capped by recorded trials)"
            if campaign.decision.capacity.min() < policy.max_trials_per_question
            else ""
        ),
        f"  policy: allocation {campaign.decision.allocator.name}; confidence {policy.confidence}; "
        f"rope {policy.rope}",
        f"  stops on: {_stopping_text(config, describe_stopping(config))}",
        _score_line(campaign),
        f"  Bayes@N (reported beside the score): {policy.bayes_prior} prior",
        f"  budget: {_budget_text(settings.budget)}",
        *_library_lines(settings.library),
        f"  worst case: {int(campaign.decision.capacity.sum()) * campaign.num_questions} trials",
        f"  fixed-N baseline: N = {campaign.run.fixed_n} -> "
        f"{campaign.num_models * campaign.num_questions * campaign.run.fixed_n} trials"
        + (f" ({campaign.run.fixed_n_note})" if campaign.run.fixed_n_note else ""),
    ]
    lines += short_forecast(campaign)
    lines += [f"  warning: {settings.source}: {warning}" for warning in campaign.run.warnings]
    try:
        check_engines(campaign)
    except InputError as error:  # valid config; `run` refuses it on this machine
        lines.append(f"  warning: {error}")
    address = settings.execution.ray_address
    unreachable = address_problem(address, VALIDATE_PROBE_S) if address else None
    if address is not None and address.strip().removeprefix("ray://") == "auto":
        unreachable = _auto_address_problem()
    if unreachable is not None:  # the cluster may come up before `run`: a warning
        lines.append(f"  warning: execution.ray_address: {unreachable}; `run` would fail now")
    print(scrub("\n".join(lines)))
    return 0


def _rule_text(ref: Any) -> str:
    """A stopping rule as written, its parameters and nested rules included."""
    from adaptive_eval.config.schema import PluginSpec

    if isinstance(ref, str):
        return ref
    if isinstance(ref, dict):
        ref = PluginSpec.model_validate(ref)
    if not isinstance(ref, PluginSpec):
        return str(ref)
    params = ref.params()
    nested = params.pop("rules", None)
    inner = [f"{k}={v}" for k, v in params.items()]
    if isinstance(nested, list):
        inner += [_rule_text(r) for r in nested]
    return f"{ref.name}({', '.join(inner)})" if inner else ref.name


def _stopping_text(config: Any, described: str) -> str:
    """validate's "stops on": every rule with its parameters ("all_of" alone said nothing)."""
    stopping = config.policy.stopping
    if not stopping:
        return described
    rules = "; or ".join(_rule_text(ref) for ref in stopping)
    budget = described.split("; and the budget", 1)
    return rules + (f"; and the budget{budget[1]}" if len(budget) > 1 else "")


def _budget_text(budget: BudgetSettings) -> str:
    """The limits set, or that there are none ("trials None, tokens None" said nothing)."""
    limits = [
        f"{name} {value:,}" if isinstance(value, int) else f"{name} {value:g} s"
        for name, value in (
            ("trials", budget.trials),
            ("tokens", budget.tokens),
            ("wall clock", budget.wall_clock_s),
        )
        if value is not None
    ]
    return ", ".join(limits) if limits else "none (the stopping rules and the cap decide)"


def _library_lines(named: Path | None) -> list[str]:
    """Where the trial library is and whether it exists (a missing folder was silent)."""
    from adaptive_eval.store.library import library_path

    if named is None:
        return []
    path = library_path(named)
    if path.exists():
        return [f"  trial library: {path} (exists; its cells are reused before sampling)"]
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    made = f"; creates {len(missing)} folder(s) from {missing[-1]}" if missing else ""
    return [f"  trial library: {path} (new: created by the run{made})"]


def _auto_address_problem() -> str | None:
    """``ray_address: auto`` finds a cluster started on this machine (``ray start``) through
    ``RAY_ADDRESS`` or Ray's address file; with neither, ``run`` fails after Ray's wait."""
    import os
    import tempfile

    from adaptive_eval.base.ray_address import address_problem

    found = os.environ.get("RAY_ADDRESS")
    if not found:
        tmp = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
        marker = Path(tmp) / "ray" / "ray_current_cluster"
        try:
            found = marker.read_text().strip()
        except OSError:
            return (
                "auto finds no Ray cluster started on this machine (no RAY_ADDRESS, no "
                f"{marker}); start one with `ray start --head`, or leave ray_address out "
                "for a local one"
            )
    if found.strip().removeprefix("ray://") == "auto":
        return None
    problem = address_problem(found, VALIDATE_PROBE_S)
    return None if problem is None else f"auto resolves to {found}: {problem}"


def _score_line(campaign: Campaign) -> str:
    """validate's line on the score interval: the width goal and the most trials it can take."""
    from adaptive_eval.stats.intervals import trials_for_width

    design = campaign.decision.interval_design
    num_models = campaign.num_models
    if design.half_width is None:
        return f"  score interval: {design.guarantee(num_models)}"
    span = campaign.run.settings.rubric_span
    worst = int(
        trials_for_width(np.array((span / 2) ** 2), campaign.num_questions, design, num_models)
    )
    who = "all models at once" if design.simultaneous else "each model"
    return (
        f"  width goal: every score within +-{design.half_width:g} at "
        f"{100 * design.confidence:g}% ({who}), a repeated confidence interval (c = "
        f"{design.final_boundary(num_models):.3f} at the horizon); at most {worst} trials per "
        f"question for any model (cap {int(campaign.decision.capacity.min())})"
    )


def cmd_report(args: argparse.Namespace) -> int:
    from adaptive_eval.base.summary_schema import json_text
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.outputs.report import render_console
    from adaptive_eval.workflows.report import report_run

    run_dir = Path(args.run_dir)
    config_path = Path(args.config) if args.config else run_dir / "config.yaml"
    found = None
    if not config_path.exists() and args.config is None:
        from adaptive_eval.inspect.report import is_inspect_folder, report_inspect

        if is_inspect_folder(run_dir):  # Inspect logs decided by adaptive_eval.inspect
            found = report_inspect(run_dir, Path(args.out) if args.out else None)
            summary, run_dir = found.summary, found.run_dir
    if found is None:
        if not config_path.exists():
            raise InputError("no config.yaml: not a run directory", source=str(run_dir))
        summary = report_run(build_campaign(load_config(config_path)), run_dir)
    code = found.exit_code if found is not None else 0  # compare's, for Inspect logs
    if args.html:
        from adaptive_eval.outputs.report_html import FILENAME

        print(run_dir / FILENAME)
        return code
    if args.json:
        print(json_text(summary))
    elif summary.comparison is not None:  # a compare folder: its verdict, as compare printed it
        from adaptive_eval.workflows.compare import render

        print(render_console(summary) + "\n\n" + render(summary.comparison))
    else:
        print(render_console(summary))
    if found is not None and not args.json:
        print(found.runs_line())  # every run the Inspect logs hold against the trials used
    return code


def cmd_verify(args: argparse.Namespace) -> int:
    from adaptive_eval.store import CorruptStore, StoreError, TrialStore
    from adaptive_eval.store.recovery import describe_recoveries, salvage

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
    from adaptive_eval.workflows.completions import show_completions

    return show_completions(
        Path(args.run_dir), args.model, args.question, args.trial, args.limit, args.json
    )


def cmd_score(args: argparse.Namespace) -> int:
    from adaptive_eval.workflows.score import render_score, score_npz

    weights = parse_floats(args.weights, "--weights") if args.weights is not None else None
    ks = parse_ints(args.k, "--k") if args.k is not None else [1]
    result = score_npz(
        Path(args.file),
        key=args.key,
        weights=weights,
        prior_path=Path(args.prior) if args.prior else None,
        prior_key=args.prior_key,
        confidence=args.confidence,
        ks=ks,
        first_n=args.first_n,
    )
    print(json.dumps(result, indent=2) if args.json else render_score(result, ks))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from adaptive_eval.workflows.imports import import_files, parse_map

    out = npz_out(args.out)
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

    if args.format == "eee":
        from adaptive_eval.workflows.eee import export_eee

        written = export_eee(Path(args.run_dir), Path(args.out))
        print(
            f"wrote {len(written)} Every Eval Ever record(s) under {Path(args.out) / 'data'} "
            "(each model's unbiased score over every recorded trial, and one instance line per "
            "trial beside it)"
        )
        return 0
    out = npz_out(args.out)
    exported = export_run(Path(args.run_dir), out)
    print(
        f"wrote {out}: outcomes {exported.shape} (the first N = {exported.shape[2]} trials of "
        f"every cell; cells hold {exported.fewest}..{exported.most}); all "
        f"{exported.recorded} trials in 'recorded' (-1 = not sampled), which `adaptive-eval "
        f"score` scores (--first-n: only the first N; replay reads 'outcomes')"
    )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from adaptive_eval.base.summary_schema import json_text
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.workflows.compare import render, run_compare

    summary = run_compare(
        build_campaign(load_config(args.config, args.set)),
        args.candidate,
        Path(args.out),
        margin=args.margin,
        settle_all=True if args.settle_all else None,
        quiet=args.quiet,
    )
    _mark_finished(summary, args.out)
    result = summary.comparison
    assert result is not None  # a compare run always judges its candidate
    if args.json:
        print(json_text(result))
    else:
        print(_result_text(summary, args, lambda _: render(result)))
    return result.exit_code


def cmd_forecast(args: argparse.Namespace) -> int:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.forecast.pilot import AUTO_START
    from adaptive_eval.workflows.forecast import ForecastRequest, render, run_forecast

    config = load_config(args.config, args.set)
    out = None if args.out is None else Path(args.out)
    auto = args.pilot == "auto"
    request = ForecastRequest(
        from_dir=None if args.from_dir is None else Path(args.from_dir),
        pilot=AUTO_START if auto else args.pilot,
        auto=auto,
        out=out,
        simulations=args.simulations,
        seed=args.seed,
        candidate=args.candidate,
        margin=args.margin,
    )
    found = run_forecast(build_campaign(config), request, quiet=args.quiet)
    print(json.dumps(found.record(), indent=2) if args.json else render(found, out))
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.workflows.nightly import alert_text, run_nightly

    campaign = build_campaign(load_config(args.config, args.set))
    print(f"nightly: running {args.config} with the history in {args.history}", flush=True)
    record = run_nightly(
        campaign,
        Path(args.history),
        night=args.night,
        keep=args.keep,
        flip_alerts=args.flip_alerts,
        quiet=False,
    )
    print(
        f"night {record['night']}: sampled {record['sampled']} trials, reused "
        f"{record['reused']}; {len(record['alerts'])} alert(s)"
    )
    for line in record.get("changed") or []:
        print(f"  {line}")
    for alert in record["alerts"]:
        print(f"  ALERT: {alert_text(alert)}")
    for item in record.get("news") or []:
        print(f"  news: {alert_text(item)}")
    code: int = record["exit_code"]
    return code


def parse_floats(text: str, what: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise InputError(f"{what} must be finite numbers, got {text!r}")
    return values


def parse_ints(text: str, what: str) -> list[int]:
    values = parse_floats(text, what)
    if any(v != int(v) for v in values):
        raise InputError(f"{what} must be whole numbers, got {text!r}")
    return [int(v) for v in values]


def npz_out(text: str) -> Path:
    """The npz file an ``--out`` names (``.npz`` added as numpy would), checked before the run
    is read: not a folder, under a folder."""
    from adaptive_eval.base.files import nearest_existing

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
