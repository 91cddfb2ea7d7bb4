"""Outputs of a run: ``summary.json`` (the contract other tools read) and ``report.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval import markdown as md
from adaptive_eval import stats
from adaptive_eval.accounting import Savings
from adaptive_eval.headline import markdown_lines as headline_markdown
from adaptive_eval.stats.intervals import IntervalDesign, ScoreIntervals
from adaptive_eval.storage import atomic_write
from adaptive_eval.types import PairDecision, Stop

if TYPE_CHECKING:
    from adaptive_eval.store import TrialStore


def summarize(
    *,
    name: str,
    campaign_id: str,
    names: tuple[str, ...],
    trials: np.ndarray,
    weighted_mean: np.ndarray,
    confidence: float,
    decisions: tuple[PairDecision, ...],
    stop: Stop | None,
    savings: Savings,
    prior_note: str,
    score_se: np.ndarray,
    intervals: ScoreIntervals,
    design: IntervalDesign,
    bayes_mu: np.ndarray,
    bayes_sigma: np.ndarray,
    bayes_prior: str = "empirical",
    extra: dict[str, Any] | None = None,
    weight_range: tuple[float, float] = (0.0, 1.0),
    decision_rules: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary document. ``trials`` is (L, M); ``weighted_mean`` is each model's avg@n.

    One score leads: ``score``, the unbiased estimate the decisions use (the mean of
    per-question means, :mod:`adaptive_eval.stats.sequential`), with its interval under
    ``design`` (``intervals``: ``score_low``, ``score_high``; valid under the campaign's
    stopping, see :mod:`adaptive_eval.stats.intervals`). Models are listed in its order. The
    paper's Bayes@N posterior mean and credible interval (clipped to the weight range) follow
    under ``bayes_*`` names, labelled for what they are. ``rank`` is dense over the final pair
    decisions: a resolved pair steps down a rank, an equivalent or undecided one shares it.
    """
    lo_w, hi_w = weight_range
    score = intervals.estimate
    b_low, b_high = (
        np.clip(x, lo_w, hi_w) for x in stats.credible_interval(bayes_mu, bayes_sigma, confidence)
    )
    order = np.argsort(-score, kind="stable")
    ranks = _decision_ranks(order, decisions)
    plain = {int(m): k + 1 for k, m in enumerate(order)}
    goal = design.half_width
    models = []
    for i in order:
        row: dict[str, Any] = {
            "name": names[i],
            "rank": ranks[int(i)],
            "rank_no_ties": plain[int(i)],
            "score": float(score[i]),
            "score_se": float(score_se[i]),
            "score_low": float(np.clip(intervals.low[i], lo_w, hi_w)),
            "score_high": float(np.clip(intervals.high[i], lo_w, hi_w)),
        }
        if goal is not None:
            row["width_goal_met"] = bool(intervals.half_width[i] <= goal + 1e-12)
        row |= {
            "trials": int(trials[i].sum()),
            "trials_per_question_min": int(trials[i].min()),
            "trials_per_question_max": int(trials[i].max()),
            "avg": float(weighted_mean[i]),
            "bayes_mu": float(bayes_mu[i]),
            "bayes_sigma": float(bayes_sigma[i]),
            "bayes_low": float(b_low[i]),
            "bayes_high": float(b_high[i]),
        }
        models.append(row)
    pairs = [
        {
            "a": names[d.a],
            "b": names[d.b],
            "z": float(d.z),
            "decision": d.verdict.value,
            "rule": d.rule,
            "boundary": None if d.boundary is None else float(d.boundary),
            "alpha_spent": None if d.alpha is None else float(d.alpha),
            "decided_at_round": d.look,
            "futile": d.futile,
            "reason": d.reason,
            "trials_needed_per_question": d.projected,
        }
        for d in decisions
    ]
    baseline = {
        "fixed_n": savings.fixed_n,
        "trials": savings.baseline_trials,
        "tokens": savings.baseline_tokens,
        "gpu_s": savings.baseline_gpu_s,
    }
    num_models = len(names)
    return {
        "name": name,
        "campaign_id": campaign_id,
        "stop_reason": None if stop is None else stop.reason.value,
        "stop_detail": None if stop is None else stop.detail,
        "confidence": confidence,
        "prior": prior_note,
        "score": {
            "statistic": SCORE_STATISTIC,
            "interval": design.kind,
            "confidence": design.confidence,
            "simultaneous": design.simultaneous,
            "half_width": goal,
            "boundary_at_horizon": design.final_boundary(num_models),
            "guarantee": design.guarantee(num_models),
            "width_goal_met": None if goal is None else all(m["width_goal_met"] for m in models),
        },
        "bayes": {"prior": bayes_prior, "description": bayes_description(bayes_prior)},
        "trials_used": savings.trials_used,
        "tokens_used": savings.tokens_used,
        "gpu_s_used": savings.gpu_s_used,
        "baseline": baseline,
        "compute_saved": {
            "trials_fraction": savings.trials_fraction,
            "tokens_fraction": savings.tokens_fraction,
            "gpu_fraction": savings.gpu_fraction,
        },
        "decision_rules": decision_rules or {},
        "models": models,
        "pairs": pairs,
        **(extra or {}),
    }


#: What the leading score is, for every page that shows it.
SCORE_STATISTIC = (
    "the mean over questions of each question's observed mean score: unbiased however many "
    "trials each question got; it orders the ranking and decides the pairs"
)


def bayes_description(prior: str) -> str:
    """What the Bayes@N column is, under the campaign's ``policy.bayes_prior``."""
    which = (
        "an empirical-Bayes Dirichlet prior per model (centred on its pooled outcomes, "
        "strength fitted to its questions)"
        if prior == "empirical"
        else "the paper's uniform prior (biased toward the prior mean where questions got "
        "few trials)"
    )
    return (
        f"Bayes@N: the paper's posterior mean and credible interval under {which}; shown for "
        "reference, it does not order the ranking or decide pairs"
    )


def interval_label(summary: dict[str, Any]) -> str:
    """A short column header for the score interval, e.g. ``95% interval (anytime)``."""
    info = summary.get("score") or {}
    confidence = info.get("confidence", summary.get("confidence"))
    if confidence is None:
        return "interval"
    level = f"{100 * float(confidence):g}%"
    kind = {"anytime": "anytime", "group_sequential": "repeated"}.get(str(info.get("interval")), "")
    joint = ", all models" if info.get("simultaneous") else ""
    return f"{level} interval ({kind}{joint})" if kind else f"{level} interval"


def width_goal_line(summary: dict[str, Any]) -> str | None:
    """``Width goal +-h at 95% (each model): met by k of L models.``, where there is a goal."""
    info = summary.get("score") or {}
    goal = info.get("half_width")
    if goal is None:
        return None
    met = sum(bool(m.get("width_goal_met")) for m in summary["models"])
    who = "all models at once" if info.get("simultaneous") else "each model"
    return (
        f"Width goal +-{goal:g} at {100 * float(info['confidence']):g}% ({who}): met by {met} "
        f"of {len(summary['models'])} models."
    )


def ranking_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The ranking's header and rows as report.md and report.html show them: the score and its
    interval first, in the ranking's order; Bayes@N after, labelled."""
    level = f"{100 * float(summary['confidence']):g}%"
    goal = (summary.get("score") or {}).get("half_width")
    header = [
        "rank",
        "order",
        "model",
        "score",
        interval_label(summary),
        *(["width goal"] if goal is not None else []),
        "trials",
        "avg",
        "Bayes@N",
        f"Bayes@N {level} credible",
    ]
    rows = []
    for m in summary["models"]:
        met = []
        if goal is not None:
            met = ["met" if m.get("width_goal_met") else "not met"]
        rows.append(
            [
                str(m["rank"]),
                str(m["rank_no_ties"]),
                m["name"],
                f"{m['score']:.4f}",
                f"[{m['score_low']:.4f}, {m['score_high']:.4f}]",
                *met,
                str(m["trials"]),
                f"{m['avg']:.4f}",
                f"{m['bayes_mu']:.4f}",
                f"[{m['bayes_low']:.4f}, {m['bayes_high']:.4f}]",
            ]
        )
    return header, rows


def ranking_notes(summary: dict[str, Any]) -> list[str]:
    """The sentences under the ranking that say what each column is."""
    info = summary.get("score") or {}
    notes = [
        "Rank: models share a rank until the pair between them is decided; order: by score.",
        f"Score: {info.get('statistic', SCORE_STATISTIC)}.",
    ]
    if info.get("guarantee"):
        notes.append(f"Interval: {info['guarantee']}.")
    line = width_goal_line(summary)
    if line:
        notes.append(line)
    bayes = summary.get("bayes") or {}
    notes.append(f"{bayes.get('description', bayes_description('uniform'))}.")
    return notes


def _decision_ranks(order: np.ndarray, decisions: tuple[PairDecision, ...]) -> dict[int, int]:
    """Dense ranks down ``order``: only a resolved adjacent pair starts a new rank."""
    resolved = {frozenset((d.a, d.b)) for d in decisions if d.verdict.value in ("a>b", "b>a")}
    ranks: dict[int, int] = {}
    rank = 1
    for k, model in enumerate(order):
        if k and frozenset((int(order[k - 1]), int(model))) in resolved:
            rank += 1
        ranks[int(model)] = rank
    return ranks


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def render_markdown(summary: dict[str, Any]) -> str:
    saved = summary["compute_saved"]
    base = summary["baseline"]
    lines = [
        f"# Campaign {md.code(summary['name'])}",
        "",
        *headline_markdown(summary),  # the verdict, alert or ranking in one line
        f"Stopped: **{summary['stop_reason']}** ({md.text(summary['stop_detail'])}).  ",
        f"Ranking confidence {summary['confidence']}; prior: {md.text(summary['prior'])}.",
        "",
        *_decision_lines(summary.get("decision_rules") or {}),
        "## Ranking",
        "",
    ]
    header, rows = ranking_table(summary)
    lines += [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if h == "model" else "---:" for h in header) + "|",
        *("| " + " | ".join(md.text(cell) for cell in row) + " |" for row in rows),
        "",
        *(f"{note}  " for note in ranking_notes(summary)),
    ]
    comparison = summary.get("comparison")
    if comparison is not None:  # compare settles only the candidate's pairs: show those
        lines += ["", *comparison_lines(comparison)]
    else:
        lines += [
            "",
            "## Adjacent pairs",
            "",
            "| a | b | z | decision | rule | boundary on z | error budget spent | round |",
            "|---|---|---:|---|---|---:|---:|---:|",
        ]
    for p in summary["pairs"] if comparison is None else []:
        lines.append(
            f"| {md.text(p['a'])} | {md.text(p['b'])} | {p['z']:.3f} | {decision_text(p)} | "
            f"{md.text(p['rule'] or '')} | "
            f"{optional(p.get('boundary'), '.3f')} | {optional(p.get('alpha_spent'), '.2e')} | "
            f"{optional(p.get('decided_at_round'))} |"
        )
    tokens = summary["tokens_used"]
    gpu = summary["gpu_s_used"]

    def estimate_of(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f} (est.)"

    lines += [
        "",
        "## Compute",
        "",
        "| | used | fixed-N baseline | saved |",
        "|---|---:|---:|---:|",
        f"| trials | {summary['trials_used']} | {base['trials']} (N = {base['fixed_n']}"
        + (f"; {md.text(base['note'])}" if base.get("note") else "")
        + ") | "
        f"{_pct(saved['trials_fraction'])}{_undecided_note(summary)} |",
        f"| tokens | {'n/a' if tokens is None else tokens} | {estimate_of(base['tokens'], 0)} | "
        f"{_pct(saved['tokens_fraction'])} |",
        f"| GPU-s | {'n/a' if gpu is None else f'{gpu:.1f}'} | {estimate_of(base['gpu_s'], 1)} | "
        f"{_pct(saved['gpu_fraction'])} |",
        "",
    ]
    prefetch = (summary.get("dispatch") or {}).get("prefetch")
    if prefetch and base["trials"]:
        spent = summary["trials_used"] + prefetch["unused"]
        lines += [
            f"Speculative prefetch: {prefetch['sent']} trials sent ahead of the plans, "
            f"{prefetch['used']} of them recorded when a round planned them, "
            f"{prefetch['unused']} never used (generated or in flight at the stop); "
            f"counting those, trials saved: {_pct(1 - spent / base['trials'])}.",
            "",
        ]
    if summary.get("provenance"):
        from adaptive_eval.provenance import markdown

        lines += markdown(summary["provenance"], md.text, md.code)
    return "\n".join(lines)


def optional(value: Any, spec: str = "") -> str:
    """A table cell: the value formatted with ``spec``, or empty where there is none."""
    return "" if value is None else format(value, spec)


def decision_text(pair: dict[str, Any]) -> str:
    """A pair's decision, with the rule's reason where it gave one (e.g. why it is undecided)."""
    reason = pair.get("reason")
    return f"{pair['decision']} ({reason})" if reason else str(pair["decision"])


#: What compare's exit codes say (:mod:`adaptive_eval.compare`).
COMPARE_EXIT_MEANING = {0: "not worse than any incumbent", 3: "a regression", 4: "undecided"}


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    """compare's verdict for report.md: the candidate, each incumbent's verdict, the exit code."""
    margin = comparison.get("margin")
    code = comparison["exit_code"]
    test = (
        f"non-inferiority with margin {margin} (pass: not worse than the incumbent by more "
        "than the margin; fail: worse by more)"
        if margin is not None
        else "better / worse / equivalent by the campaign's pair rules"
    )
    lines = [
        "## Comparison",
        "",
        f"Candidate **{md.text(comparison['candidate'])}** against {len(comparison['verdicts'])} "
        f"incumbent(s); test: {test}.  ",
        f"Exit code **{code}**: {comparison.get('meaning') or COMPARE_EXIT_MEANING.get(code, '')}.",
        "",
        "| incumbent | verdict | z | boundary on z | round decided | trials (both) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in comparison["verdicts"]:
        lines.append(
            f"| {md.text(row['incumbent'])} | {decision_text(row)} | {row['z']:.3f} | "
            f"{optional(row.get('boundary'), '.3f')} | {optional(row.get('decided_at_round'))} | "
            f"{row['trials']} |"
        )
    return [*lines, ""]


def _decision_lines(rules: dict[str, Any]) -> list[str]:
    """The decision rules' guarantee (and a warning where there is none), for report.md."""
    if not rules:
        return []
    lines = [
        "## Decisions",
        "",
        f"Rules: {md.text(', '.join(rules.get('rules', [])))}; error control: "
        f"**{rules.get('error_control')}** (error budget per adjacent pair "
        f"{rules.get('pair_alpha', 0):.2e}). {rules.get('statistic', '')}  ",
        f"Prior in the test: {rules.get('prior_in_test', '')}",
        "",
    ]
    if rules.get("warning"):
        lines += [f"> **Warning:** {rules['warning']}", ""]
    return lines


def _undecided_note(summary: dict[str, Any]) -> str:
    """Beside "saved X%": a stop that left pairs undecided saved compute, not a settled ranking."""
    undecided = sum(p["decision"] == "undecided" for p in summary["pairs"])
    if not undecided or summary["stop_reason"] is None:
        return ""
    return f" (stopped on {summary['stop_reason']} with {undecided} pair(s) undecided)"


def render_console(summary: dict[str, Any]) -> str:
    """A compact human summary for the terminal."""
    saved = summary["compute_saved"]
    interval = interval_label(summary)
    out = [
        f"campaign {summary['name']}: stopped on {summary['stop_reason']} "
        f"({summary['stop_detail']})",
        "",
        f"{'rank':>4}  {'model':<24} {'score':>7} {interval:>26} {'trials':>7} {'Bayes@N':>8}",
    ]
    for m in summary["models"]:
        bounds = f"[{m['score_low']:.4f}, {m['score_high']:.4f}]"
        out.append(
            f"{m['rank']:>4}  {m['name']:<24} {m['score']:7.4f} {bounds:>26} {m['trials']:>7} "
            f"{m['bayes_mu']:8.4f}"
        )
    out += [
        "rank: models share a rank until their pair is decided; score: the unbiased estimate "
        "(it orders the table);",
        "Bayes@N: the paper's posterior mean, for reference"
        + (
            " (empirical-Bayes prior)"
            if (summary.get("bayes") or {}).get("prior") == "empirical"
            else " (uniform prior)"
        ),
    ]
    line = width_goal_line(summary)
    if line:
        out.append(line)
    out.append("")
    for p in summary["pairs"]:
        out.append(f"  {p['a']} vs {p['b']}: {decision_text(p)} (z = {p['z']:.2f})")
    warning = (summary.get("decision_rules") or {}).get("warning")
    if warning:
        out += ["", f"warning: {warning}"]
    out += [
        "",
        f"trials used {summary['trials_used']} vs fixed N = "
        f"{summary['baseline']['fixed_n']}"
        + (f" ({summary['baseline']['note']})" if summary["baseline"].get("note") else "")
        + f": {summary['baseline']['trials']} "
        f"-> saved {_pct(saved['trials_fraction'])} of trials"
        + (
            f", {_pct(saved['tokens_fraction'])} of tokens"
            if saved["tokens_fraction"] is not None
            else ""
        )
        + _undecided_note(summary),
    ]
    return "\n".join(out)


def write_outputs(
    run_dir: Path,
    summary: dict[str, Any],
    store: TrialStore | None = None,
    history: list[dict[str, Any]] | None = None,
) -> None:
    """summary.json, report.md and report.html; adds the run's provenance to ``summary``.
    ``store``: the run's store where the caller holds it open; ``history``: a nightly run's
    nights, for report.html's history plot."""
    from adaptive_eval.provenance import collect
    from adaptive_eval.report_html import write_html

    summary["provenance"] = collect(run_dir, store)
    library = summary["provenance"].get("library")
    if library is not None and summary["baseline"]["trials"]:
        # Compute saved counting only what this run sampled (reused trials cost nothing now).
        library["saved_fraction"] = 1 - library["sampled"] / summary["baseline"]["trials"]
    atomic_write(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write(run_dir / "report.md", render_markdown(summary))
    write_html(run_dir, summary, summary["provenance"], history=history, store=store)
