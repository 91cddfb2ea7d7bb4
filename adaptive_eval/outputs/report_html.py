"""``report.html``: one self-contained page with the run's plots (inline SVG, no scripts).

One concept, kept whole (~660 lines): one page and its figures.

Figures, each a ``<figure id=...>`` so tests and people can find them:

- ``forest``: the ranking, the unbiased estimate (what decisions use) with its interval per
  model, Bayes@N's posterior mean beside it, the groups the decisions settled shaded;
- ``trials``: trials per model in rank order, beside the fixed-N baseline's per-model count;
- ``heatmap``: trials per (model, question), models in rank order, questions by trials;
- ``pairs``: z of every adjacent pair (compare: of every candidate-incumbent pair) against its
  own boundary (the one it was tested against), coloured by decision;
- ``compute``: trials recorded after each round against the fixed-N baseline, with the
  rounds on which a pair was decided marked;
- ``history`` (nightly runs): each model's score over the nights, nights with an alert shaded.

Everything is read from ``summary`` (summary.json as the typed
:class:`~adaptive_eval.base.summary_schema.Summary`) and the run folder's store, so
``adaptive-eval report DIR`` draws the same page for any run. Plots are matplotlib (Agg
backend) written as SVG with text kept as text.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive_eval.base.files import atomic_write
from adaptive_eval.base.summary_schema import (
    CompareVerdict,
    Comparison,
    DecisionRules,
    ModelRow,
    PairRow,
    Summary,
)
from adaptive_eval.outputs.headline import baseline_text, headline, saved_fraction
from adaptive_eval.outputs.presentation import (
    COMPARE_EXIT_MEANING,
    FORECAST_HEAD,
    LIVE_HEAD,
    LIVE_PLOT_MIN,
    budget_short_text,
    comparison_table,
    cut_text,
    forecast_note,
    forecast_rows,
    interval_label,
    live_forecast_note,
    live_forecast_rows,
    pairs_table,
    ranking_notes,
    ranking_table,
    saving,
    stop_label,
    undecided_count,
    undecided_note,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from adaptive_eval.store import TrialStore

FILENAME = "report.html"
DECISION_COLOURS = {
    "a>b": "#2b8a3e",
    "b>a": "#2b8a3e",
    "equivalent": "#1971c2",
    "undecided": "#e8590c",
    "better": "#2b8a3e",
    "pass": "#2b8a3e",
    "worse": "#c92a2a",
    "fail": "#c92a2a",
}


@dataclass(frozen=True)
class RunData:
    """What the plots need from the store: per-cell trial counts and the run's rounds."""

    models: list[str]
    questions: list[str]
    trials: np.ndarray  # (L, M) trials recorded per cell
    per_round: np.ndarray  # (R,) trials recorded in each round

    @classmethod
    def load(cls, run_dir: Path, opened: TrialStore | None = None) -> RunData:
        from adaptive_eval.store import reading

        with reading(run_dir, opened) as store:
            models = [str(m) for m in store.get_meta("models") or []]
            questions = [str(q) for q in store.get_meta("questions") or []]
            trials = np.zeros((len(models), len(questions)), dtype=np.int64)
            spans = store.cell_spans()
            trials[spans.model, spans.question] = spans.count
            counted = store.trials_per_round()
            per_round = np.zeros(max(counted, default=-1) + 1, dtype=np.int64)
            for round_index, count in counted.items():
                per_round[round_index] = count
        return cls(models, questions, trials, per_round)


#: The page's width in points (its ``max-width``, 1100 px at 96 px an inch): every figure is
#: drawn exactly this wide, so the page (``figure svg { width: 100% }``) shows it at the size it
#: was drawn. Figures of their own widths were stretched or shrunk to the page: a narrow one's
#: text grew, a wide one's legend fell under :data:`MIN_FONT` (sizes varied 1.9x between them).
PAGE_PT = 1100 * 72 / 96


def _svg(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    # Widen or narrow the figure until the SVG drawn (labels and a legend outside the axes
    # included, white margins cropped) is the page's width: a secant search, as the drawing
    # grows by less than the figure (labels keep their size, margins are cropped).
    last: tuple[float, float] | None = None
    for _ in range(6):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", bbox_inches="tight")
        found = re.search(r'<svg[^>]*? width="([0-9.]+)pt"', buffer.getvalue())
        drawn = float(found.group(1)) if found else PAGE_PT
        # Never wider than the page (it would be shrunk, and its text under MIN_FONT); a few
        # points narrower is stretched by at most 1.5%.
        if PAGE_PT - 12 <= drawn <= PAGE_PT:
            break
        width, height = fig.get_size_inches()
        slope = 72.0  # points drawn per inch of figure, until two drawings tell
        if last is not None and width != last[0] and drawn != last[1]:
            slope = max(7.2, (drawn - last[1]) / (width - last[0]))
        last = (width, drawn)
        fig.set_size_inches(max(2.0, width + (PAGE_PT - 4 - drawn) / slope), height)
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure(width: float, height: float) -> tuple[Figure, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    # Labels are names from the user's files: "$\frac" must be drawn as typed, not parsed as
    # math text (which failed the whole page after the campaign had run).
    plt.rcParams["text.parse_math"] = False
    plt.rcParams["font.size"] = 10
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


#: The smallest text on a plot, in points (ticks and legends were 7 px).
MIN_FONT = 9


def plural(count: int, noun: str) -> str:
    """``1 pair``, ``2 pairs`` (a legend said "1 pairs")."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def rank_groups(models: Sequence[ModelRow]) -> list[list[int]]:
    """Runs of models (indices into ``models``, best first) sharing a decided rank."""
    groups: list[list[int]] = []
    for index, model in enumerate(models):
        if groups and models[groups[-1][0]].rank == model.rank:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def forest_plot(summary: Summary) -> str:
    models = summary.models  # best first, by the estimate
    fig, ax = _figure(9, 0.35 * len(models) + 1.4)
    y = np.arange(len(models))[::-1]
    estimate = np.array([m.score for m in models])
    low = np.array([m.score_low for m in models])
    high = np.array([m.score_high for m in models])
    for shade, group in enumerate(rank_groups(models)):
        if shade % 2 == 0:
            band = ax.axhspan(y[group[-1]] - 0.5, y[group[0]] + 0.5, color="#e9ecef", zorder=0)
            band.set_gid(f"settled-group-{shade}")
    # One (2, L) array: a list of two arrays made matplotlib convert an array to a scalar (a
    # NumPy DeprecationWarning in every report); an interval that does not reach the score
    # (all trials wrong: the score is 0 and its interval clipped to the weights) has no bar on
    # that side, where a negative length failed the whole page.
    spans = np.clip(np.vstack([estimate - low, high - estimate]), 0.0, None)
    bars = ax.errorbar(
        estimate,
        y,
        xerr=spans,
        fmt="o",
        color="#1c7ed6",
        capsize=3,
        label=f"score (it orders the ranking), {interval_label(summary)}",
    )
    bars.lines[0].set_gid("score")
    (bayes,) = ax.plot(
        [m.bayes_mu for m in models],
        y,
        "x",
        color="#868e96",
        label="Bayes@N posterior mean (reference)",
    )
    bayes.set_gid("bayes-at-n")
    ax.set_yticks(y, [f"{m.rank}. {m.name}" for m in models])
    ax.set_xlabel(
        "score and its interval; shaded bands alternate between the groups the decisions "
        "settled (same rank)"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=MIN_FONT)
    return _svg(fig)


def _in_rank_order(summary: Summary, data: RunData) -> list[int]:
    """Rows of ``data`` in the summary's ranking order (best first)."""
    row = {name: i for i, name in enumerate(data.models)}
    return [row[m.name] for m in summary.models if m.name in row]


def trials_plot(summary: Summary, data: RunData) -> str:
    order = _in_rank_order(summary, data)
    fig, ax = _figure(9, 0.35 * len(order) + 1.2)
    totals = data.trials[order].sum(axis=1)
    y = np.arange(len(order))[::-1]
    ax.barh(y, totals, color="#74c0fc")
    fixed_n = summary.baseline.fixed_n
    baseline = (fixed_n or 0) * len(data.questions)
    ax.axvline(
        baseline,
        color="#495057",
        linestyle="--",
        # The line is at the model's trials, not at N: say both ("fixed N = 80" sat at 2,400).
        label=f"fixed-N run: {fixed_n} per question = {baseline:,} per model",
    )
    ax.set_yticks(y, [data.models[i] for i in order])
    ax.set_xlabel("trials per model (rank order, best first)")
    ax.legend(loc="lower right")
    return _svg(fig)


#: At most this many question labels under the heatmap; the rest are left unlabelled.
HEATMAP_LABELS = 30


def heatmap_plot(summary: Summary, data: RunData) -> str:
    import matplotlib.pyplot as plt

    order = _in_rank_order(summary, data)
    trials = data.trials[order]
    columns = np.argsort(-trials.sum(axis=0), kind="stable")  # most-sampled questions first
    # Wider for many questions (as many cells as the page shows); also the cheaper to draw.
    fig, ax = _figure(max(9, min(14, 2 + 0.12 * len(columns))), 0.3 * len(order) + 1.8)
    # The colour scale starts at 0 trials (it started at the fewest, so 8 looked like none).
    image = ax.imshow(
        trials[:, columns],
        aspect="auto",
        cmap="viridis",
        interpolation="nearest",
        vmin=0,
        vmax=max(1, int(trials.max())),
    )
    ax.set_yticks(np.arange(len(order)), [data.models[i] for i in order])
    step = max(1, -(-len(columns) // HEATMAP_LABELS))
    ticks = np.arange(0, len(columns), step)
    ax.set_xticks(
        ticks, [data.questions[columns[t]] for t in ticks], rotation=90, fontsize=MIN_FONT
    )
    ax.set_xlabel(
        f"question ({len(data.questions)}, most-sampled first"
        + (f"; every {step}th labelled" if step > 1 else "")
        + ")"
    )
    plt.colorbar(image, ax=ax, label="trials")
    return _svg(fig)


@dataclass(frozen=True)
class PairShown:
    """One bar of the pairs figure: an adjacent pair, or compare's candidate and an incumbent."""

    label: str
    z: float
    boundary: float | None
    boundary_at_cap: float | None
    decision: str


def pair_rows(summary: Summary) -> list[PairShown]:
    """The pairs the page shows: compare's (candidate, incumbent) verdicts, else the adjacent
    pairs of the ranking."""
    comparison = summary.comparison
    shown: list[tuple[str, str, PairRow | CompareVerdict]] = (
        [(comparison.candidate, row.incumbent, row) for row in comparison.verdicts]
        if comparison is not None
        else [(p.a, p.b, p) for p in summary.pairs]
    )
    return [
        PairShown(
            label=f"{a} vs {b} ({row.decision})",
            z=row.z,
            boundary=row.boundary,
            boundary_at_cap=row.boundary_at_cap,
            decision=row.decision,
        )
        for a, b, row in shown
    ]


def pairs_plot(summary: Summary) -> str:
    pairs = pair_rows(summary)
    fig, ax = _figure(9, 0.4 * max(1, len(pairs)) + 1.2)
    y = np.arange(len(pairs))[::-1]
    drawn = ax.barh(
        y,
        [abs(p.z) for p in pairs],
        color=[DECISION_COLOURS.get(p.decision, "#868e96") for p in pairs],
    )
    for index, bar in enumerate(drawn.patches):
        bar.set_gid(f"pair-{index}")
    bounded = [(index, p.boundary) for index, p in enumerate(pairs) if p.boundary is not None]
    # An undecided pair is read against the boundary it would have to cross at the cap.
    open_marks = [
        (index, p.boundary_at_cap)
        for index, p in enumerate(pairs)
        if p.boundary is None and p.boundary_at_cap is not None
    ]
    kinds = (
        (bounded, {"linewidth": 2.5}, "the boundary it was decided against"),
        (
            open_marks,
            {"linewidth": 2.0, "linestyle": (0, (2, 1))},
            "undecided: the boundary to cross at the cap",
        ),
    )
    for marks, style, label in kinds:
        for count, (index, boundary) in enumerate(marks):
            (mark,) = ax.plot(
                [boundary, boundary],
                [y[index] - 0.45, y[index] + 0.45],
                color="#212529",
                label=label if count == 0 else None,
                **style,
            )
            mark.set_gid(f"boundary-{index}")
    ax.set_yticks(y, [p.label for p in pairs])
    ax.set_xlabel("|z| of the pair against its boundary (solid: decided; dashed: at the cap)")
    if bounded or open_marks:  # beside the axes: inside, it covered bars and their marks
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=MIN_FONT)
    return _svg(fig)


def decided_rounds(summary: Summary) -> list[int]:
    """The round each decided pair of the summary was decided in (one entry per pair: compare's
    verdicts, else the adjacent pairs), in order. Rounds count from 1: round r is decided
    once r rounds are applied."""
    comparison = summary.comparison
    rows: Sequence[PairRow | CompareVerdict] = (
        comparison.verdicts if comparison is not None else summary.pairs
    )
    return sorted(
        row.decided_at_round
        for row in rows
        if row.decision != "undecided" and row.decided_at_round is not None
    )


def compute_plot(summary: Summary, data: RunData) -> str:
    fig, ax = _figure(7, 3.2)
    cumulative = np.cumsum(data.per_round)
    rounds = np.arange(1, len(cumulative) + 1)
    library = summary.provenance.library
    recorded = "trials recorded"
    if library is not None and library.reused:  # a night that sampled nothing: no climb
        recorded += (
            f" ({library.reused:,} reused from the trial library, {library.sampled:,} sampled)"
        )
    ax.step(rounds, cumulative, where="post", color="#1c7ed6", label=recorded)
    base = summary.baseline
    fixed = "fixed-N run"
    if base.fixed_n and base.trials and summary.models:
        per_model = base.trials // len(summary.models)
        fixed += f": {base.fixed_n} per question = {per_model:,} per model"
    ax.axhline(base.trials, color="#495057", linestyle="--", label=fixed)
    # One dot per decided pair of the summary (the decision events logged a pair each time it
    # became adjacent again: 6 dots for the demo's 5 decided pairs), at its own round.
    decided = [r for r in decided_rounds(summary) if 1 <= r <= len(cumulative)]
    if decided:
        dots = ax.plot(
            decided,
            cumulative[[r - 1 for r in decided]],
            "o",
            color="#2b8a3e",
            alpha=0.8,
            label=f"a pair decided ({plural(len(decided), 'pair')})",
        )
        dots[0].set_gid("pairs-decided")
    ax.set_xlabel("round")
    ax.set_ylabel("trials")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig)


def forecast_plot(summary: Summary) -> str:
    """The forecast's budget-decision curve (median and 10-90% band of pairs settled against a
    trial budget) and where the run ended."""
    check = summary.forecast
    assert check is not None
    fig, ax = _figure(7, 3.2)
    budgets = np.asarray([p.trials for p in check.curve], dtype=np.float64)
    if len(budgets):
        low = [p.p10 for p in check.curve]
        high = [p.p90 for p in check.curve]
        ax.fill_between(
            budgets, low, high, step="post", color="#a5d8ff", alpha=0.6, label="forecast 10-90%"
        )
        ax.step(
            budgets,
            [p.p50 for p in check.curve],
            where="post",
            color="#1c7ed6",
            label="forecast median",
        )
    settled = check.measures.get("pairs_settled")
    if settled is not None:
        dot = ax.plot(
            [summary.trials_used], [settled.actual], "o", color="#c92a2a", label="this run"
        )
        dot[0].set_gid("forecast-actual")
    ax.set_xscale("log")
    ax.set_xlabel("trial budget")
    ax.set_ylabel("pairs settled")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _svg(fig)


def live_forecast_plot(summary: Summary) -> str:
    """The live forecast of the run's total trials after each round (median and 10-90%
    band) against the total the run reached."""
    points = summary.live_forecast or []
    fig, ax = _figure(7, 3.2)
    made = np.asarray([p.trials_used for p in points], dtype=np.float64)
    ax.fill_between(
        made,
        [p.trials.p10 for p in points],
        [p.trials.p90 for p in points],
        color="#a5d8ff",
        alpha=0.6,
        label="forecast 10-90%",
    )
    ax.plot(made, [p.trials.p50 for p in points], color="#1c7ed6", label="forecast median")
    line = ax.axhline(summary.trials_used, color="#c92a2a", label="realised")
    line.set_gid("live-forecast-realised")
    ax.set_xlabel("trials recorded when the forecast was made")
    ax.set_ylabel("the run's total trials")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=MIN_FONT)
    return _svg(fig)


def history_plot(history: list[dict[str, Any]], confidence: float) -> str:
    """Each model's estimate over the nights (``nights.jsonl`` records), with its interval."""
    from scipy.stats import norm

    from adaptive_eval.outputs.presentation import score, spread

    half = float(norm.ppf((1 + confidence) / 2))
    fig, ax = _figure(7, 3.6)
    nights = [record["night"] for record in history]
    names = sorted({m["name"] for record in history for m in record["ranking"]})
    for name in names:
        points = [
            (i, score(m), spread(m))
            for i, record in enumerate(history)
            for m in record["ranking"]
            if m["name"] == name
        ]
        x = [p[0] for p in points]
        mu = np.array([p[1] for p in points])
        sigma = np.array([p[2] for p in points])
        ax.errorbar(x, mu, yerr=half * sigma, marker="o", capsize=2, label=name)
    alerts = [i for i, record in enumerate(history) if record.get("alerts")]
    for i in alerts:
        ax.axvline(i, color="#c92a2a", alpha=0.3, linewidth=6)
    ax.set_xticks(range(len(nights)), nights, rotation=45, ha="right", fontsize=MIN_FONT)
    ax.set_ylabel("estimate (what decisions use)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=MIN_FONT)
    return _svg(fig)


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #212529; }
table { border-collapse: collapse; margin: 1rem 0; }
td, th { border: 1px solid #dee2e6; padding: 0.25rem 0.6rem; text-align: right; }
td:nth-child(3), th:nth-child(3) { text-align: left; }
figure { margin: 1.5rem 0; } figure svg { width: 100%; height: auto; }
.note { color: #c92a2a; font-weight: 600; }
.headline { font-size: 1.15rem; padding: 0.5rem 0.8rem; border-left: 6px solid #868e96; }
.headline.tone-good { border-color: #2b8a3e; } .headline.tone-warning { border-color: #e8590c; }
.headline.tone-bad { border-color: #c92a2a; background: #fff5f5; }
.legend { color: #495057; font-size: 0.9em; }
.warning { color: #c92a2a; font-weight: 600; border-left: 4px solid #c92a2a; padding-left: 0.5em; }
"""


def _inline_code(text: str) -> str:
    """Markdown's `code` spans as <code>, everything else escaped (no raw backticks)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: plain text
        return html.escape(text)
    return "".join(
        f"<code>{html.escape(part)}</code>" if index % 2 else html.escape(part)
        for index, part in enumerate(parts)
    )


def _comparison_html(comparison: Comparison | None) -> list[str]:
    """compare's verdict: the candidate, each incumbent's verdict and the exit code."""
    if comparison is None:
        return []
    code = comparison.exit_code
    margin = comparison.margin
    test = (
        f"non-inferiority, margin {margin}"
        if margin is not None
        else "better / worse / equivalent by the pair rules"
    )
    header, rows = comparison_table(comparison)
    meaning = comparison.meaning or COMPARE_EXIT_MEANING.get(code, "")
    return [
        "<h2>Comparison</h2>",
        f"<p id='comparison'>Candidate <b>{html.escape(comparison.candidate)}</b> "
        f"against {len(rows)} incumbent(s) ({html.escape(test)}): <b>exit code {code}</b>, "
        f"{html.escape(meaning)}.</p>",
        _table(header, rows),
    ]


def _headline_html(summary: Summary) -> list[str]:
    """The page's first line: compare's verdict, the nightly alert, or the ranking."""
    found = headline(summary)
    out = [
        # tone-*: the page's .warning (bold red) is for warnings, not a headline's tone.
        f"<p id='headline' class='headline tone-{found.tone.value}'><b>"
        f"{html.escape(found.kind.value)}:</b> {html.escape(found.text)}</p>"
    ]
    if found.details:
        items = "".join(f"<li>{html.escape(detail)}</li>" for detail in found.details)
        out.append(f"<ul id='headline-details'>{items}</ul>")
    return out


def _live_forecast_html(summary: Summary) -> list[str]:
    rows = live_forecast_rows(summary)
    if not rows:
        return []
    out = ["<h2>Live forecast over the run</h2>", _table(LIVE_HEAD, rows)]
    short = budget_short_text(summary)
    if short is not None:
        out.append(f"<p id='budget-short' class='note'>Budget: {html.escape(short)}.</p>")
    note = live_forecast_note(summary)
    if note is not None:
        out.append(f"<p id='live-forecast-note' class='note'>{html.escape(note)}</p>")
    return out


def _forecast_html(summary: Summary) -> list[str]:
    if summary.forecast is None:
        return []
    table = _table(FORECAST_HEAD, forecast_rows(summary.forecast))
    note = html.escape(forecast_note(summary.forecast))
    return ["<h2>Forecast against actual</h2>", table, f"<p class='note'>{note}</p>"]


def _decision_html(rules: DecisionRules) -> list[str]:
    """The decision rules, their guarantee and (for a rule without one) the warning."""
    if not rules.model_fields_set:  # an empty block: a summary that recorded no rules
        return []
    out = [
        f"<p id='decisions'>Decision rules: {html.escape(', '.join(rules.rules))}; "
        f"error control: <b>{html.escape(str(rules.error_control))}</b> (error budget "
        f"per adjacent pair {rules.pair_alpha or 0:.2e}). "
        f"{html.escape(rules.statistic or '')}</p>"
    ]
    if rules.warning:
        out.append(
            f"<p id='decision-warning' class='warning'>Warning: {html.escape(rules.warning)}</p>"
        )
    return out


def render(summary: Summary, data: RunData, history: list[dict[str, Any]] | None = None) -> str:
    """The page; ``history``: a nightly run's ``nights.jsonl`` records (their own format)."""
    # Reused library trials cost nothing now: the saving counts what this run sampled.
    compared = summary.comparison is not None
    saved, counted = saved_fraction(summary)
    # An interrupted run has saved nothing yet (it showed the saving so far as if final).
    finished = summary.stop_reason is not None
    cut = cut_text(summary)
    saved_text = (
        "not finished: no saving yet" if not finished else saving(saved) if cut is None else cut
    )
    # Warned about where report.md is (never a width goal's pairs it did not ask about).
    undecided = undecided_count(summary) if undecided_note(summary) and cut is None else 0
    ranking = _table(*ranking_table(summary))
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in ranking_notes(summary))
    pairs = _table(*pairs_table(summary))
    figures = [
        ("forest", "Ranking: estimates and their intervals", forest_plot(summary)),
        ("trials", "Trials per model", trials_plot(summary, data)),
        ("heatmap", "Trials per model and question", heatmap_plot(summary, data)),
        (
            "pairs",
            "Candidate against incumbents" if compared else "Adjacent pairs",
            pairs_plot(summary),
        ),
        ("compute", "Compute used over the run", compute_plot(summary, data)),
    ]
    if summary.forecast is not None:
        figures.append(
            ("forecast", "Forecast: pairs settled against the trial budget", forecast_plot(summary))
        )
    if len(summary.live_forecast or []) >= LIVE_PLOT_MIN:
        figures.append(
            ("live-forecast", "Live forecast of the run's trials", live_forecast_plot(summary))
        )
    if history:
        figures.append(
            (
                "history",
                "Nightly history (nights with an alert shaded)",
                history_plot(history, summary.confidence),
            )
        )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Campaign {html.escape(summary.name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Campaign <code>{html.escape(summary.name)}</code></h1>",
        *_headline_html(summary),
        (
            f"<p id='stop'>Stopped: <b>{html.escape(stop_label(summary))}</b> "
            f"({html.escape(str(summary.stop_detail))}). Prior: "
            f"{html.escape(summary.prior)}.</p>"
            if summary.stop_reason is not None
            else f"<p id='stop'>Prior: {html.escape(summary.prior)}.</p>"  # headline: unfinished
        ),
        f"<p id='saved'>Trials used {summary.trials_used:,} against "
        f"{html.escape(baseline_text(summary))}: {saved_text}"
        # What the saving counts, where it is not simply the trials just named.
        + ("" if counted.endswith(" trials used") else f", {html.escape(counted)}")
        + "."
        + (
            f" <span class='note'>{undecided} pair(s) still undecided at the stop: the saving "
            "is not a settled ranking's.</span>"
            if undecided
            else ""
        )
        + "</p>",
        *_decision_html(summary.decision_rules),
        *_comparison_html(summary.comparison),
        "<h2>Ranking</h2>",
        ranking,
        f"<ul id='ranking-notes' class='legend'>{notes}</ul>",
        *([] if compared else ["<h2>Adjacent pairs</h2>", pairs]),
        *_forecast_html(summary),
        *_live_forecast_html(summary),
    ]
    for ident, title, svg in figures:
        parts.append(
            f"<figure id='{ident}'><figcaption><h2>{html.escape(title)}</h2></figcaption>"
            f"{svg}</figure>"
        )
    from adaptive_eval.outputs.provenance import markdown

    items = "".join(
        f"<li>{_inline_code(line[2:])}</li>"
        for line in markdown(summary.provenance)
        if line.startswith("- ")
    )
    parts.append(f"<h2>Provenance</h2><ul id='provenance'>{items}</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(
    run_dir: Path,
    summary: Summary,
    history: list[dict[str, Any]] | None = None,
    store: TrialStore | None = None,
) -> Path:
    """Write ``run_dir/report.html`` (with the nightly ``history`` when given); its path.
    ``store``: the run's store where the caller holds it open."""
    path = run_dir / FILENAME
    atomic_write(path, render(summary, RunData.load(run_dir, store), history))
    return path
