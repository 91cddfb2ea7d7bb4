"""What every page says the same way: the score shown first, its interval, verdict texts and
exit-code meanings.

report.md, report.html, the console, compare and nightly all read a summary through these
functions, so a score, a decision or an exit code is worded once. Pure: the typed summary
(:class:`~adaptive_eval.base.summary_schema.Summary`, summary.json validated) in, strings
out; nothing here imports an output or a workflow. A nightly history's records
(``nights.jsonl``, of every version) are read as the dicts they are (:func:`score`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adaptive_eval.base.accounting import budget_short_sentence
from adaptive_eval.base.summary_schema import (
    CompareVerdict,
    Comparison,
    ForecastCheck,
    PairRow,
    Summary,
)

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
        f"Bayes@N: the paper's posterior mean under {which}; shown for reference, it does "
        "not order the ranking or decide pairs"
    )


def interval_label(summary: Summary) -> str:
    """A short column header for the score interval, e.g. ``95% interval (anytime)``."""
    info = summary.score
    level = f"{100 * float(info.confidence):g}%"
    kind = {"anytime": "anytime", "group_sequential": "repeated"}.get(info.interval, "")
    joint = ", all models" if info.simultaneous else ""
    return f"{level} interval ({kind}{joint})" if kind else f"{level} interval"


def width_goal_line(summary: Summary) -> str | None:
    """``Width goal +-h at 95% (each model): met by k of L models.``, where there is a goal."""
    info = summary.score
    goal = info.half_width
    if goal is None:
        return None
    met = sum(bool(m.width_goal_met) for m in summary.models)
    who = "all models at once" if info.simultaneous else "each model"
    return (
        f"Width goal +-{goal:g} at {100 * float(info.confidence):g}% ({who}): met by {met} "
        f"of {count(len(summary.models), 'model')}."
    )


def ranking_table(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """The ranking's header and rows as report.md and report.html show them: the score and its
    interval first, in the ranking's order; Bayes@N's posterior mean after, labelled. Its
    credible interval stays out of every table (summary.json keeps it as ``bayes_low``,
    ``bayes_high``): after adaptive stopping a "95% credible" interval covered the full-pool
    score for only 62-80% of models, and a reader takes "95%" at its word."""
    goal = summary.score.half_width
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
    ]
    rows = []
    for m in summary.models:
        met = []
        if goal is not None:
            met = ["met" if m.width_goal_met else "not met"]
        rows.append(
            [
                str(m.rank),
                str(m.rank_no_ties),
                m.name,
                f"{m.score:.4f}",
                f"[{m.score_low:.4f}, {m.score_high:.4f}]",
                *met,
                str(m.trials),
                f"{m.avg:.4f}",
                f"{m.bayes_mu:.4f}",
            ]
        )
    return header, rows


def pairs_table(
    summary: Summary, name: Callable[[str], str] = str
) -> tuple[list[str], list[list[str]]]:
    """The adjacent pairs' header and rows as report.md and report.html show them. ``name``
    writes what came from the user's files (the models' names, the rule): report.md's escaping,
    or as it is for a page that escapes every cell."""
    header = ["a", "b", "z", "decision", "rule", "boundary on z", "error budget spent", "round"]
    rows = [
        [
            name(p.a),
            name(p.b),
            f"{p.z:.3f}",
            decision_text(p),
            name(p.rule or ""),
            optional(p.boundary, ".3f"),
            optional(p.alpha_spent, ".2e"),
            optional(p.decided_at_round),
        ]
        for p in summary.pairs
    ]
    return header, rows


def comparison_table(
    comparison: Comparison, name: Callable[[str], str] = str
) -> tuple[list[str], list[list[str]]]:
    """compare's verdicts as report.md and report.html show them, one row an incumbent, z and
    its boundary from the candidate's side (:func:`candidate_side`). ``name`` writes the
    incumbent's name, as in :func:`pairs_table`."""
    header = ["incumbent", "verdict", "z", "boundary on z", "round decided", "trials (both)"]
    rows = []
    for row in comparison.verdicts:
        z, boundary = candidate_side(row)
        rows.append(
            [
                name(row.incumbent),
                decision_text(row),
                f"{z:+.3f}",
                optional(boundary, "+.3f"),
                optional(row.decided_at_round),
                str(row.trials),
            ]
        )
    return header, rows


def ranking_notes(summary: Summary) -> list[str]:
    """The sentences under the ranking that say what each column is."""
    info = summary.score
    notes = [
        "Rank: models share a rank until the pair between them is decided; order: by score.",
        f"Score: {info.statistic}.",
    ]
    if info.guarantee:
        notes.append(f"Interval: {info.guarantee}.")
    line = width_goal_line(summary)
    if line:
        notes.append(line)
    notes.append(f"{summary.bayes.description}.")
    return notes


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural where it is not one.

    >>> count(1, "model"), count(3, "model")
    ('1 model', '3 models')
    """
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def saving(value: float | None, of: str = "", *, noun: bool = False) -> str:
    """ "saved 53.7% of X", or for a run that spent more than the fixed-N run "spent 39.1% more
    than X" (never "saved -39.1%"); with ``noun`` (``of`` is what was counted, "trials")
    "spent 39.1% more trials" (never "more than trials").

    >>> saving(-0.391, "trials", noun=True), saving(0.5, "trials", noun=True)
    ('spent 39.1% more trials', 'saved 50.0% of trials')
    """
    if value is None:
        return f"saved n/a{' of ' + of if of else ''}"
    if value < 0 and noun:
        return f"spent {-100 * value:.1f}% more {of}"
    if value < 0:
        return f"spent {-100 * value:.1f}% more{' than ' + of if of else ''}"
    return f"saved {100 * value:.1f}%{' of ' + of if of else ''}"


def saved_cell(value: float | None) -> str:
    """A "saved" table cell: ``53.7%``, or ``none (39.1% more)``."""
    if value is not None and value < 0:
        return f"none ({-100 * value:.1f}% more)"
    return percent(value)


def stop_text(summary: Summary) -> str:
    """Why the run stopped, or that it has not finished (it printed "stopped on None (None)")."""
    if summary.stop_reason is None:
        return (
            "not finished (interrupted before its end; run the same command again to resume "
            "it): the state it reached"
        )
    detail = summary.stop_detail
    return f"{summary.stop_reason}" + (f" ({detail})" if detail else "")


def stop_label(summary: Summary) -> str:
    """The stop reason; on a compare page ``goal_met`` says which goal ("Stopped: goal_met"
    beside a regression read as if the candidate had met its goal)."""
    reason = str(summary.stop_reason)
    comparison = summary.comparison
    if comparison is not None and reason == "goal_met":
        return f"the gate was decided, exit {comparison.exit_code} (goal_met)"
    return reason


def name_width(summary: Summary, least: int = 24) -> int:
    """The model column's width on the console: the longest name (tables broke on long ones)."""
    return max([least, *(len(m.name) for m in summary.models)])


def optional(value: Any, spec: str = "") -> str:
    """A table cell: the value formatted with ``spec``, or empty where there is none."""
    return "" if value is None else format(value, spec)


def decision_text(pair: PairRow | CompareVerdict) -> str:
    """A pair's decision, with the rule's reason where it gave one (e.g. why it is undecided)."""
    reason = pair.reason
    return f"{pair.decision} ({reason})" if reason else str(pair.decision)


#: What compare's exit codes say (:mod:`adaptive_eval.workflows.compare`).
COMPARE_EXIT_MEANING = {0: "not worse than any incumbent", 3: "a regression", 4: "undecided"}


#: Verdicts that put the candidate below / above its incumbent.
CANDIDATE_BELOW = frozenset({"worse", "fail"})
CANDIDATE_ABOVE = frozenset({"better", "pass"})


def candidate_side(row: CompareVerdict) -> tuple[float, float | None]:
    """A verdict's z and boundary in one sign convention, the candidate's: negative where it is
    below the incumbent, the boundary signed as the side it crossed (``--margin`` showed
    z = -3.91 beside a boundary of +3.31, the two-sided test z = +4.29 for a worse candidate)."""
    z, boundary = float(row.z), row.boundary
    decision = row.decision
    if decision in CANDIDATE_BELOW:
        z = -abs(z)
        boundary = None if boundary is None else -abs(float(boundary))
    elif decision in CANDIDATE_ABOVE:
        z = abs(z)
        boundary = None if boundary is None else abs(float(boundary))
    return z, boundary


def undecided_count(summary: Summary) -> int:
    """The undecided pairs that matter: a compare run's candidate-incumbent verdicts (the
    incumbents' own pairs are not the gate's business; the page warned about them in red),
    else the ranking's adjacent pairs."""
    comparison = summary.comparison
    if comparison is not None:
        return sum(row.decision == "undecided" for row in comparison.verdicts)
    return sum(p.decision == "undecided" for p in summary.pairs)


#: Stop reasons that are a limit the user set, not the campaign's goal.
BUDGET_STOPS = {
    "trial_budget": "the trial budget",
    "token_budget": "the token budget",
    "wall_clock_budget": "the wall-clock budget",
}


def undecided_note(summary: Summary) -> str:
    """Beside "saved X%": a stop that left pairs undecided saved compute, not a settled ranking.
    Not for a gate that stopped at a regression on purpose (its exit code could not change:
    the comparisons it left are not owed), nor for a width goal (it never asked for pairs)."""
    undecided = undecided_count(summary)
    if not undecided or summary.stop_reason is None:
        return ""
    if summary.score.half_width is not None and summary.stop_reason.startswith("ci_width"):
        return ""
    comparison = summary.comparison
    if comparison is not None and comparison.exit_code == 3:
        return ""
    return f" (stopped on {summary.stop_reason} with {undecided} pair(s) undecided)"


def cut_text(summary: Summary) -> str | None:
    """For a run a budget ended: "cut by the trial budget with 9 pair(s) undecided: it used
    24.2% fewer trials than the fixed-N run, a cut, not a saving" (``None`` for any other
    stop). What a budget leaves unspent is not what the rules saved."""
    what = BUDGET_STOPS.get(str(summary.stop_reason))
    if what is None:
        return None
    undecided = undecided_count(summary)
    left = f" with {undecided} pair(s) undecided" if undecided else ""
    fraction = summary.compute_saved.trials_fraction
    used = (
        ""
        if fraction is None
        else f": it used {100 * abs(fraction):.1f}% {'fewer' if fraction >= 0 else 'more'} "
        "trials than the fixed-N run"
    )
    return f"cut by {what}{left}{used}, a cut, not a saving"


def score(model: dict[str, Any]) -> float:
    """A night's score of a model: the unbiased estimate (named ``estimate`` in records before
    the one-score summary, Bayes@N ``mu`` in records older still)."""
    return float(_first(model, "score", "estimate", "mu"))


def spread(model: dict[str, Any]) -> float:
    """The standard error of :func:`score`."""
    return float(_first(model, "score_se", "estimate_se", "sigma"))


def bayes_at_n(model: dict[str, Any]) -> tuple[float, float]:
    """A night's Bayes@N posterior mean and sd of a model (any record version)."""
    return float(_first(model, "bayes_mu", "mu")), float(_first(model, "bayes_sigma", "sigma"))


def _first(model: dict[str, Any], *keys: str) -> Any:
    return next(model[k] for k in keys if k in model)


#: How each forecast measure is named on the pages, in their order.
FORECAST_MEASURES = {
    "trials": "trials",
    "new_trials": "trials sampled beyond the evidence",
    "tokens": "tokens",
    "gpu_s": "device-s",
    "wall_s": "wall time (s)",
    "pairs_settled": "pairs settled",
}


#: The header of :func:`forecast_rows`' table.
FORECAST_HEAD = ["", "forecast: median (10-90%)", "actual", "inside"]


def forecast_rows(check: ForecastCheck) -> list[list[str]]:
    """The forecast against the run: measure, forecast median (10-90%), actual, inside."""
    rows = []
    for key, label in FORECAST_MEASURES.items():
        found = check.measures.get(key)
        if found is None:
            continue
        places = _places(found.p10, found.p90, found.actual, 1 if key in ("gpu_s", "wall_s") else 0)
        digits = f",.{places}f"
        rows.append(
            [
                label,
                f"{found.p50:{digits}} ({found.p10:{digits}} to {found.p90:{digits}})",
                f"{found.actual:{digits}}",
                "yes" if found.inside else "no",
            ]
        )
    verdict = check.verdict
    if verdict is not None:  # compare's exit code: the probability the forecast gave each
        given = verdict.probabilities.get(str(verdict.exit_code), 0.0)
        rows.append(
            [
                "compare's exit code",
                ", ".join(f"{code}: {p:.0%}" for code, p in verdict.probabilities.items()),
                str(verdict.exit_code),
                f"forecast {given:.0%}",
            ]
        )
    return rows


def _places(low: float, high: float, value: float, places: int) -> int:
    """Decimal places (from ``places``, at most 6) at which ``value`` shown beside the range
    ``low`` to ``high`` is on the side of it it is on: "0.2 (0.2 to 0.2) / 0.2 / no" read as a
    zero-width range failing to hold its own value."""
    for shown in range(places, 7):

        def at(x: float, shown: int = shown) -> float:
            return round(x, shown)

        if (value < low) == (at(value) < at(low)) and (value > high) == (at(value) > at(high)):
            return shown
    return 6


def forecast_note(check: ForecastCheck) -> str:
    """Where the forecast came from, in one sentence."""
    source = {
        "pilot": "the run's own first trials (a pilot)",
        "run": "an earlier run of the campaign",
        "library": "the trial library",
        "prior": "the config's prior alone (a prior guess)",
    }.get(check.evidence or "", str(check.evidence))
    stale = (
        ""
        if check.same_campaign
        else " It was made for another configuration of the campaign (the fingerprint differs)."
    )
    return (
        f"Forecast from {source}, {check.simulations} simulated campaigns (forecast.json); "
        f"inside: the actual value is in the forecast's 10-90% range.{stale}"
    )


#: The shares of the run's trials at which the reports show the live forecast.
LIVE_SHOWN = (0.1, 0.25, 0.5, 0.75)
#: A forecast made within this many percentage points of a share counts as made there.
LIVE_NEAR = 5.0
#: report.html draws the live forecast over the run from this many forecasts.
LIVE_PLOT_MIN = 3


def live_forecast_rows(summary: Summary) -> list[list[str]]:
    """The live forecast as the run went: for each share of :data:`LIVE_SHOWN` of the final
    trials, the forecast made nearest to it (marked where none was made within
    :data:`LIVE_NEAR` points of it), its forecast of the run's total trials against the total
    realised, and of the wall time still to go against the time the run then took. No rows
    where the run made no forecast."""
    points = summary.live_forecast or []
    final = summary.trials_used
    if not points or final <= 0:
        return []
    rows = []
    for share in LIVE_SHOWN:
        point = min(points, key=lambda p: abs(p.trials_used - share * final))
        made = 100 * point.trials_used / final
        where = f"{100 * share:.0f}%"
        if abs(made - 100 * share) > LIVE_NEAR:
            where += " (none made there: the nearest)"
        total = point.trials
        inside = "yes" if _holds(total.p10, total.p90, final) else "no"
        wall = "n/a"
        if point.wall_s_to_go is not None and summary.elapsed_s is not None:
            left = summary.elapsed_s - point.elapsed_s
            w = point.wall_s_to_go
            wall = f"{w.p50:,.0f} s ({w.p10:,.0f}-{w.p90:,.0f}); took {left:,.0f} s"
        rows.append(
            [
                where,
                f"{point.trials_used:,} ({made:.0f}%)",
                f"{total.p50:,.0f} ({total.p10:,.0f}-{total.p90:,.0f})",
                f"{final:,}",
                inside,
                wall,
            ]
        )
    return rows


def _holds(low: float, high: float, value: float) -> bool:
    """Inside a 10-90% range, a zero-width one included (percentiles of equal values can
    differ from them in the last bits)."""
    slack = 1e-9 * max(1.0, abs(value))
    return low - slack <= value <= high + slack


def live_forecast_note(summary: Summary) -> str | None:
    """What the pages say of the live forecast where they draw no figure of it: how many were
    made (fewer than :data:`LIVE_PLOT_MIN`), or that none was."""
    points = summary.live_forecast or []
    if len(points) >= LIVE_PLOT_MIN:
        return None
    if not points:
        return (
            "No live forecast was made during this run (it ended before one was ready, or "
            "output.live_forecast is 0)."
        )
    made = ", ".join(f"{p.trials_used:,} trials" for p in points)
    return (
        f"{count(len(points), 'live forecast')} made during the run (at {made}): too few to "
        "draw; the table above has them."
    )


def budget_short_text(summary: Summary) -> str | None:
    """The live forecast's warning that the trial budget leaves settleable pairs unsettled
    (its latest forecast that said so), or ``None``."""
    for point in reversed(summary.live_forecast or []):
        if point.budget_trials is not None and (point.budget_short or 0) >= 1:
            short = float(point.budget_short or 0)
            return budget_short_sentence(point.budget_trials, short, point.budget_needed)
    return None


LIVE_HEAD = [
    "share of the run",
    "forecast made at trials",
    "total trials: median (10-90%)",
    "realised",
    "inside",
    "wall time to go",
]
