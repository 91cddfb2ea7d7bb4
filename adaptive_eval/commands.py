"""What each ``adaptive-eval`` command does once its arguments are parsed: one function per
command, each handing its work to a workflow and printing the result.

:mod:`adaptive_eval.cli` parses the command line and turns every failure into one line and an
exit code; heavy modules are imported inside each command, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval.errors import InputError

if TYPE_CHECKING:
    from adaptive_eval.campaign import Campaign


#: Seconds ``validate`` waits for an answer at ``execution.ray_address``.
VALIDATE_PROBE_S = 3.0


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


#: ``score --json``'s version (2: the unbiased score leads; Bayes@N as ``bayes_*`` with the old
#: ``mu``, ``sigma``, ``ci_low``, ``ci_high`` kept beside it; ``trials`` says which were scored).
SCORE_SCHEMA_VERSION = 2


def score_tensor(
    outcomes: np.ndarray,
    names: Sequence[str],
    weights: np.ndarray,
    prior: np.ndarray | None,
    confidence: float,
    ks: Sequence[int],
    *,
    dense: np.ndarray | None = None,
    which: str = "all trials",
) -> dict[str, Any]:
    """The unbiased score of a recorded (L, M, N) tensor first, then avg@N, Bayes@N and
    Pass@k. ``outcomes`` may be ragged (``-1`` where a trial was not sampled, as export's
    ``recorded``): every recorded trial counts. Pass@k needs the same N in every cell: it is
    computed on ``dense`` (default ``outcomes``).

    The score is the mean over questions of each question's observed mean (what a campaign's
    summary leads with, and ranks by); its rank groups are the models whose scores are within
    ``z_{(1+c)/2}`` standard errors of each other. Bayes@N (uniform prior, or ``prior``)
    follows for reference, with its credible interval under ``ci_low``, ``ci_high`` in the JSON
    only.
    """
    from adaptive_eval import stats
    from adaptive_eval.stats.sequential import empirical_estimate

    num_categories = len(weights)
    counts = np.zeros((*outcomes.shape[:2], num_categories), dtype=np.int64)
    for k in range(num_categories):
        counts[..., k] = (outcomes == k).sum(axis=2)
    n0 = stats.prior_counts(None, outcomes.shape[1], num_categories)
    if prior is not None:
        n0 = stats.counts_from_outcomes(prior, num_categories).astype(np.float64) + 1.0
    nu = counts + n0
    score, score_se = empirical_estimate(counts, nu, weights)
    mu, sigma = stats.posterior_moments(nu, weights)
    low, high = stats.credible_interval(mu, sigma, confidence)
    trials = counts.sum(axis=2)
    avg = (counts @ weights).sum(axis=1) / np.maximum(trials.sum(axis=1), 1)
    dense = outcomes if dense is None else dense
    correct = weights[np.clip(dense, 0, None)] == weights.max()
    ranks = stats.rank_with_ties(score, score_se, stats.z_threshold(confidence))
    plain = stats.rank_no_ties(score)
    rows = []
    for i in np.argsort(-score, kind="stable"):
        row: dict[str, Any] = {
            "name": names[i],
            "rank": int(ranks[i]),
            "rank_no_ties": int(plain[i]),
            "score": float(score[i]),
            "score_se": float(score_se[i]),
            "trials": int(trials[i].sum()),
            "avg@N": float(avg[i]),
            "bayes_mu": float(mu[i]),
            "bayes_sigma": float(sigma[i]),
            "mu": float(mu[i]),
            "sigma": float(sigma[i]),
            "ci_low": float(low[i]),
            "ci_high": float(high[i]),
        }
        for k in ks:
            row[f"pass@{k}"] = float(stats.pass_at_k(correct[i], k))
        rows.append(row)
    return {
        "schema_version": SCORE_SCHEMA_VERSION,
        "trials": which,
        "trials_per_question": int(dense.shape[2]),
        "confidence": confidence,
        "statistic": "score: the mean over questions of each question's observed mean "
        "(unbiased); rank groups: scores within z_(1+c)/2 standard errors share a rank",
        "prior": "uniform" if prior is None else f"R0 with {prior.shape[-1]} trials",
        "models": rows,
    }


def cmd_score(args: argparse.Namespace) -> int:
    from adaptive_eval.npzio import NpzFile, check_categories

    file = NpzFile(args.file)
    outcomes = file.get(args.key, ndim=3, kind="i").astype(np.int64)
    num_models, _, num_trials = outcomes.shape
    names = file.names("models", num_models, "model-")
    if args.weights is not None:
        weights = np.asarray(parse_floats(args.weights, "--weights"))
    else:
        weights = np.asarray([0.0, 1.0])
    check_categories(outcomes, len(weights), file=file, name=args.key)
    if len(weights) < 2 or weights.max() == weights.min():
        raise InputError(
            f"--weights {args.weights!r}: give at least two different weights (every model "
            "would score the same)"
        )
    scored = outcomes
    which = f"all trials ({args.key!r}, N = {num_trials} in every cell)"
    if args.key == "outcomes" and file.has("recorded") and not args.first_n:
        # An export: 'outcomes' is the dense prefix; 'recorded' holds every trial (-1: none).
        scored = file.get("recorded", ndim=3, kind="i").astype(np.int64)
        if scored.shape[:2] != outcomes.shape[:2] or scored.shape[2] < num_trials:
            raise file.error(
                "recorded", f"shape {scored.shape} does not extend outcomes {outcomes.shape}"
            )
        if scored.size and (int(scored.min()) < -1 or int(scored.max()) >= len(weights)):
            raise file.error(
                "recorded", f"holds values outside -1..{len(weights) - 1} (-1: not sampled)"
            )
        which = "all recorded trials ('recorded', ragged)"
    elif file.has("recorded") and args.key == "outcomes":
        which = f"the first N = {num_trials} trials of every cell ('outcomes', --first-n)"
    if args.weights and outcomes.size and int(scored.max()) < len(weights) - 1:
        raise InputError(
            f"--weights gives {len(weights)} categories (0..{len(weights) - 1}) but "
            f"{args.key} only uses 0..{int(scored.max())}; give one weight per category "
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
        if prior.ndim == 3 and prior.shape[0] != num_models:
            raise prior_file.error(
                args.prior_key, f"has {prior.shape[0]} models, the outcomes have {num_models}"
            )
    ks = parse_ints(args.k, "--k") if args.k is not None else [1]
    bad = [k for k in ks if not 1 <= k <= num_trials]
    if bad:
        raise InputError(f"--k {bad[0]} is outside 1..N = 1..{num_trials}")
    if not 0.5 < args.confidence < 1:
        raise InputError(f"--confidence must be in (0.5, 1), got {args.confidence}")
    result = score_tensor(
        scored, names, weights, prior, args.confidence, ks, dense=outcomes, which=which
    )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    width = max(24, *(len(name) for name in names))
    head = (
        f"{'rank':>4} {'(no ties)':>9}  {'model':<{width}} {'score':>7} {'se':>7} "
        f"{'trials':>7} {'avg':>7} {'Bayes@N':>8}" + "".join(f" {'pass@' + str(k):>8}" for k in ks)
    )
    print(
        f"score of {which}: the mean over questions of each question's observed mean "
        f"(unbiased); models within z = {stats_z(args.confidence):.2f} se share a rank; "
        f"Bayes@N ({result['prior']} prior) for reference; pass@k over the first N = "
        f"{num_trials}\n{head}"
    )
    for row in result["models"]:
        print(
            f"{row['rank']:>4} {row['rank_no_ties']:>9}  {row['name']:<{width}} "
            f"{row['score']:7.4f} {row['score_se']:7.4f} {row['trials']:>7} "
            f"{row['avg@N']:7.4f} {row['bayes_mu']:8.4f}"
            + "".join(f" {row[f'pass@{k}']:8.4f}" for k in ks)
        )
    return 0


def stats_z(confidence: float) -> float:
    from adaptive_eval import stats

    return float(stats.z_threshold(confidence))


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
    for line in record.get("changed") or []:
        print(f"  {line}")
    for alert in record["alerts"]:
        print(f"  ALERT {json.dumps(alert)}")
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
