"""Outputs of a run: ``summary.json`` (the contract other tools read) and ``report.md``.

:func:`write_outputs` writes the typed, validated
:class:`~adaptive_eval.base.summary_schema.Summary` as summary.json and renders every page from
it (attribute access: a field the model lacks fails mypy, not a reader)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptive_eval.base import markdown as md
from adaptive_eval.base.files import atomic_write
from adaptive_eval.base.summary_schema import (
    Comparison,
    DecisionRules,
    PluginRecord,
    Summary,
    json_text,
)
from adaptive_eval.outputs.headline import markdown_lines as headline_markdown
from adaptive_eval.outputs.presentation import (
    COMPARE_EXIT_MEANING,
    FORECAST_HEAD,
    LIVE_HEAD,
    budget_short_text,
    comparison_table,
    cut_text,
    decision_text,
    forecast_note,
    forecast_rows,
    interval_label,
    live_forecast_rows,
    name_width,
    pairs_table,
    ranking_notes,
    ranking_table,
    saved_cell,
    saving,
    stop_label,
    stop_text,
    undecided_note,
    width_goal_line,
)

if TYPE_CHECKING:
    from adaptive_eval.store import TrialStore


def render_markdown(summary: Summary) -> str:
    saved = summary.compute_saved
    base = summary.baseline
    lines = [
        f"# Campaign {md.code(summary.name)}",
        "",
        *headline_markdown(summary),  # the verdict, alert or ranking in one line
        # An unfinished run: the headline says so (once: it was said twice).
        *(
            [f"Stopped: **{md.text(stop_label(summary))}** ({md.text(summary.stop_detail)}).  "]
            if summary.stop_reason is not None
            else []
        ),
        f"Ranking confidence {summary.confidence}; prior: {md.text(summary.prior)}.",
        "",
        *_decision_lines(summary.decision_rules),
        "## Ranking",
        "",
    ]
    header, rows = ranking_table(summary)
    lines += [
        *_table_lines(
            header,
            [[md.text(cell) for cell in row] for row in rows],
            "|" + "|".join("---" if h == "model" else "---:" for h in header) + "|",
        ),
        "",
        *(f"{note}  " for note in ranking_notes(summary)),
    ]
    comparison = summary.comparison
    if comparison is not None:  # compare settles only the candidate's pairs: show those
        lines += ["", *comparison_lines(comparison)]
    else:
        lines += [
            "",
            "## Adjacent pairs",
            "",
            *_table_lines(*pairs_table(summary, md.text), "|---|---|---:|---|---|---:|---:|---:|"),
        ]
    tokens = summary.tokens_used
    gpu = summary.gpu_s_used

    def estimate_of(value: float | None, digits: int) -> str:
        return "n/a" if value is None else f"{value:.{digits}f} (est.)"

    def saved_of(value: float | None) -> str:
        # An interrupted run has saved nothing yet: it printed "saved 78.8%" mid-run.
        return saved_cell(value) if summary.stop_reason is not None else "not finished"

    lines += [
        "",
        "## Compute",
        "",
        "| | used | fixed-N baseline | saved |",
        "|---|---:|---:|---:|",
        f"| trials | {summary.trials_used} | {base.trials} (N = {base.fixed_n}"
        + (f"; {md.text(base.note)}" if base.note else "")
        + ") | "
        f"{saved_of(saved.trials_fraction)}"
        + (" (a budget's cut, not a saving)" if cut_text(summary) else undecided_note(summary))
        + " |",
        f"| tokens | {'n/a' if tokens is None else tokens} | {estimate_of(base.tokens, 0)} | "
        f"{saved_of(saved.tokens_fraction)} |",
        f"| device-s | {'n/a' if gpu is None else f'{gpu:.1f}'} | "
        f"{estimate_of(base.gpu_s, 1)} | {saved_of(saved.gpu_fraction)} |",
        "",
        "device-s: the seconds of the devices that ran the engines (GPU-seconds on GPUs, the "
        "engine's seconds on CPU).",
        "",
    ]
    if summary.forecast is not None:
        lines += [
            "## Forecast against actual",
            "",
            *_table_lines(FORECAST_HEAD, forecast_rows(summary.forecast), "|---|---:|---:|---|"),
            "",
            forecast_note(summary.forecast),
            "",
        ]
    live_rows = live_forecast_rows(summary)
    if live_rows:
        lines += [
            "## Live forecast over the run",
            "",
            *_table_lines(LIVE_HEAD, live_rows, "|---|---|---:|---:|---|---|"),
            "",
            *[f"Budget: {md.text(text)}." for text in [budget_short_text(summary)] if text],
            "",
        ]
    # Speculative prefetch was removed; a run recorded before keeps its counts in the block.
    recorded = {} if summary.dispatch is None else summary.dispatch.model_extra or {}
    prefetch = recorded.get("prefetch")
    if prefetch and base.trials:
        spent = summary.trials_used + prefetch["unused"]
        lines += [
            f"Speculative prefetch: {prefetch['sent']} trials sent ahead of the plans, "
            f"{prefetch['used']} of them recorded when a round planned them, "
            f"{prefetch['unused']} never used (generated or in flight at the stop); "
            f"counting those, {saving(1 - spent / base.trials, 'the trials')}.",
            "",
        ]
    from adaptive_eval.outputs.provenance import markdown

    lines += markdown(summary.provenance, md.text, md.code)
    return "\n".join(lines)


def comparison_lines(comparison: Comparison) -> list[str]:
    """compare's verdict for report.md: the candidate, each incumbent's verdict, the exit code."""
    margin = comparison.margin
    code = comparison.exit_code
    test = (
        f"non-inferiority with margin {margin} (pass: not worse than the incumbent by more "
        "than the margin; fail: worse by more)"
        if margin is not None
        else "better / worse / equivalent by the campaign's pair rules"
    )
    lines = [
        "## Comparison",
        "",
        f"Candidate **{md.text(comparison.candidate)}** against {len(comparison.verdicts)} "
        f"incumbent(s); test: {test}.  ",
        f"Exit code **{code}**: {comparison.meaning or COMPARE_EXIT_MEANING.get(code, '')}.",
        "",
        *_table_lines(*comparison_table(comparison, md.text), "|---|---|---:|---:|---:|---:|"),
    ]
    lines += ["", "z from the candidate's side: negative where it is below the incumbent."]
    return [*lines, ""]


def _table_lines(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """A markdown table: ``header`` (a blank cell written ``| |``), the ``align`` row (e.g.
    ``|---|---:|``) and ``rows``, their cells as given (escaped by the caller)."""
    head = "|" + "|".join(f" {cell} " if cell else " " for cell in header) + "|"
    return [head, align, *("| " + " | ".join(row) + " |" for row in rows)]


def _decision_lines(rules: DecisionRules) -> list[str]:
    """The decision rules' guarantee (and a warning where there is none), for report.md."""
    if not rules.model_fields_set:  # an empty block: a summary that recorded no rules
        return []
    lines = [
        "## Decisions",
        "",
        f"Rules: {md.text(', '.join(rules.rules))}; error control: "
        f"**{rules.error_control}** (error budget per adjacent pair "
        f"{rules.pair_alpha or 0:.2e}). {rules.statistic or ''}  ",
        f"Prior in the test: {rules.prior_in_test or ''}",
        "",
    ]
    if rules.plugins:
        lines += [
            "Built with (every parameter, defaults included): "
            + "; ".join(md.text(plugin_text(p)) for p in rules.plugins),
            "",
        ]
    if rules.warning:
        lines += [f"> **Warning:** {rules.warning}", ""]
    return lines


def plugin_text(plugin: PluginRecord) -> str:
    """``pair rule group_sequential(looks=8, ...)``: a plug-in and its parameters."""
    params = ", ".join(f"{key}={value}" for key, value in plugin.params.items())
    return f"{plugin.kind} {plugin.name}({params})"


def render_console(summary: Summary) -> str:
    """A compact human summary for the terminal."""
    saved = summary.compute_saved
    base = summary.baseline
    interval = interval_label(summary)
    width = name_width(summary)
    finished = summary.stop_reason is not None
    out = [
        f"campaign {summary.name}: "
        + (f"stopped on {stop_text(summary)}" if finished else stop_text(summary)),
        "",
        f"{'rank':>4}  {'model':<{width}} {'score':>7} {interval:>26} {'trials':>7} {'Bayes@N':>8}",
    ]
    for m in summary.models:
        bounds = f"[{m.score_low:.4f}, {m.score_high:.4f}]"
        out.append(
            f"{m.rank:>4}  {m.name:<{width}} {m.score:7.4f} {bounds:>26} "
            f"{m.trials:>7} {m.bayes_mu:8.4f}"
        )
    out += [
        "rank: models share a rank until their pair is decided; score: the unbiased estimate "
        "(it orders the table);",
        "Bayes@N: the paper's posterior mean, for reference"
        + (
            " (empirical-Bayes prior)" if summary.bayes.prior == "empirical" else " (uniform prior)"
        ),
    ]
    line = width_goal_line(summary)
    if line:
        out.append(line)
    out.append("")
    for p in summary.pairs:
        out.append(f"  {p.a} vs {p.b}: {decision_text(p)} (z = {p.z:.2f})")
    warning = summary.decision_rules.warning
    if warning:
        out += ["", f"warning: {warning}"]
    cut = cut_text(summary)
    outcome = (
        "not finished: no saving yet"
        if not finished
        else cut
        if cut is not None
        else f"{saving(saved.trials_fraction, 'trials', noun=True)}"
        + (
            f", {saving(saved.tokens_fraction, 'tokens', noun=True)[6:]}"
            if saved.tokens_fraction is not None and saved.tokens_fraction >= 0
            else ""
        )
        + undecided_note(summary)
    )
    out += [
        "",
        f"trials used {summary.trials_used} vs fixed N = {base.fixed_n}"
        + (f" ({base.note})" if base.note else "")
        + f": {base.trials} -> {outcome}",
    ]
    return "\n".join(out)


def write_outputs(
    run_dir: Path,
    summary: Summary,
    store: TrialStore | None = None,
    history: list[dict[str, Any]] | None = None,
) -> None:
    """summary.json, report.md and report.html, all from the one validated ``summary``.
    ``store``: the run's store where the caller holds it open (report.html's per-round charts);
    ``history``: a nightly run's nights, for report.html's history plot."""
    from adaptive_eval.outputs.report_html import write_html

    atomic_write(run_dir / "summary.json", json_text(summary) + "\n")
    atomic_write(run_dir / "report.md", render_markdown(summary))
    write_html(run_dir, summary, history=history, store=store)
