"""The one line a page (and ``--quiet``) leads with: what the run decided.

A compare page used to open with "Stopped: max_trials ... saved -39.1%" and give its verdict
(exit 3) further down; a nightly run's pages never mentioned its alert; a plain run's page had
no one-line answer at all. :func:`headline` reads a summary (``summary.json`` as the typed
:class:`~adaptive_eval.base.summary_schema.Summary`) and returns its headline, a typed value,
in this order of precedence:

- a run that has not finished: say so first (what follows is the state so far);
- compare's verdict: the exit code, its meaning, and the candidate against each incumbent;
- a nightly alert: each alert of the night (or that there was none, before the ranking);
- a width goal: met for every model or not, and the compute saved;
- the ranking: how many rank groups the decisions settled, who is first, the pairs decided
  and undecided, and the compute saved (counting only the trials this run sampled where a
  trial library supplied the rest).

A ranking or width run that a budget (``budget.trials``, ``tokens``, ``wall_clock_s``) ended
says so before its saving.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from adaptive_eval.base.summary_schema import (
    CompareVerdict,
    Comparison,
    CostOutsideForecast,
    Nightly,
    RankingFlip,
    ScoreDrop,
    Summary,
)
from adaptive_eval.outputs.presentation import BUDGET_STOPS, budget_short_text, count, saving


class Kind(enum.Enum):
    UNFINISHED = "Not finished"
    VERDICT = "Verdict"
    WIDTH = "Width goal"
    ALERT = "Alert"
    RANKING = "Ranking"


class Tone(enum.Enum):
    """How a page colours the headline."""

    GOOD = "good"
    WARNING = "warning"
    BAD = "bad"


@dataclass(frozen=True)
class Headline:
    kind: Kind
    tone: Tone
    text: str
    details: tuple[str, ...] = ()  # one line per comparison or alert, under the headline

    @property
    def line(self) -> str:
        """The headline as one line of text (``--quiet`` prints it)."""
        return f"{self.kind.value}: {self.text}"


#: How a compare verdict reads from the candidate's side.
VERDICT_WORDS = {
    "worse": "worse than",
    "fail": "worse by more than the margin than",
    "better": "better than",
    "equivalent": "equivalent to",
    "pass": "within the margin of",
    "undecided": "undecided against",
}


#: The order a verdict's parts are told in: the gate's failures first.
VERDICT_ORDER = ("fail", "worse", "undecided", "pass", "equivalent", "better")


def _budget(summary: Summary) -> str:
    """``"; stopped by the trial budget (3000 trials used of 3000)"`` for a run
    a budget ended, else ``""``: its saving is what the budget left unspent, not what the rules
    saved (a run cut off at 3,000 trials with nothing decided read "saved 88.6%")."""
    what = BUDGET_STOPS.get(str(summary.stop_reason))
    if what is None:
        return ""
    detail = summary.stop_detail
    return f"; stopped by {what}" + (f" ({detail})" if detail else "")


def _width(summary: Summary) -> Headline:
    """A width-goal campaign's headline: the goal met or not (it gave the ranking's line,
    "5 pairs still undecided", which the goal never asked about)."""
    info = summary.score
    models = summary.models
    met = sum(bool(m.width_goal_met) for m in models)
    who = "all models at once" if info.simultaneous else "each model"
    saved, counted = saved_fraction(summary)
    level = f"{100 * float(info.confidence or summary.confidence or 0):g}%"
    goal = f"+-{info.half_width:g} at {level} ({who})"
    verdict = (
        f"met for {'the' if len(models) == 1 else 'all'} {count(len(models), 'model')}"
        if met == len(models)
        else f"met for {met} of {count(len(models), 'model')}, not met for {len(models) - met}"
    )
    budget = _budget(summary)
    # After "Width goal: " (it read "Width goal: goal +-0.02 ...").
    text = f"{goal} {verdict}{budget}; {saving(saved, baseline_text(summary))}, {counted}"
    good = met == len(models) and not budget
    return Headline(Kind.WIDTH, Tone.GOOD if good else Tone.WARNING, text)


def trials_text(row: CompareVerdict) -> str:
    """A verdict's trials, saying which figure is which: ``decided at round 8 with 2,700 trials
    of the two models (6,810 by the end of the run)`` (the end-of-run total was printed as if
    it were the decision's)."""
    decided, at = row.decided_at_round, row.trials_at_decision
    total = f"{row.trials:,} trials of the two models"
    if decided is None:
        return f"{total} by the end of the run"
    if at is None or at == row.trials:
        return f"decided at round {decided}; {total}"
    return (
        f"decided at round {decided} with {at:,} trials of the two models "
        f"({row.trials:,} by the end of the run)"
    )


def saved_fraction(summary: Summary) -> tuple[float | None, str]:
    """The trials saved against the fixed-N run, and what it counts: only the trials this run
    sampled where a trial library supplied the rest (reused trials cost nothing now)."""
    library = summary.provenance.library
    if library is not None and library.reused and library.saved_fraction is not None:
        return float(library.saved_fraction), (
            f"counting only the {library.sampled:,} trials this run sampled "
            f"({library.reused:,} reused from the trial library)"
        )
    return summary.compute_saved.trials_fraction, f"{summary.trials_used:,} trials used"


def baseline_text(summary: Summary) -> str:
    """``the fixed-N run's 26,400 trials (N = 80)``, and why N is the cap where it is."""
    base = summary.baseline
    text = f"the fixed-N run's {base.trials or 0:,} trials (N = {base.fixed_n}"
    note = base.note
    return text + (f"; {note})" if note else ")")


def _ranking(summary: Summary) -> Headline:
    models = summary.models
    pairs = summary.pairs
    groups = len({m.rank for m in models})
    first = [m.name for m in models if m.rank == 1]
    decided = sum(p.decision != "undecided" for p in pairs)
    undecided = len(pairs) - decided
    futile = sum(p.futile for p in pairs if p.decision == "undecided")
    saved, counted = saved_fraction(summary)
    lead = (
        f"{first[0]} first"
        if len(first) == 1
        else f"{', '.join(first[:3])}{' ...' if len(first) > 3 else ''} share first place"
    )
    text = (
        f"{count(len(models), 'model')} in {groups} rank group(s), {lead}; {decided} of "
        f"{len(pairs)} "
        "adjacent pairs decided"
        + (
            f", {undecided} undecided"
            + (f" ({futile} could not be settled by the cap)" if futile else "")
            if undecided
            else ""
        )
        + _budget(summary)
        + f"; {saving(saved, baseline_text(summary))}, {counted}"
    )
    warn = undecided or _budget(summary)
    return Headline(Kind.RANKING, Tone.WARNING if warn else Tone.GOOD, text)


def _verdict(comparison: Comparison) -> Headline:
    code = comparison.exit_code
    by_decision: dict[str, list[str]] = {}
    for row in comparison.verdicts:
        by_decision.setdefault(row.decision, []).append(row.incumbent)
    # What decided the exit code first: a regression before an undecided pair before a pass
    # ("undecided against LLM_9; worse than LLM_11" buried the regression).
    order = list(VERDICT_ORDER) + [d for d in by_decision if d not in VERDICT_ORDER]
    parts = [
        f"{VERDICT_WORDS.get(decision, decision)} {', '.join(by_decision[decision])}"
        for decision in order
        if decision in by_decision
    ]
    text = f"exit {code}, {comparison.meaning or ''}: {comparison.candidate} is " + "; ".join(parts)
    details = []
    for row in comparison.verdicts:
        details.append(f"vs {row.incumbent}: {row.decision} ({trials_text(row)})")
    if comparison.stopped:
        details.append(f"sampling stopped: {comparison.stopped}")
    tone = Tone.GOOD if code == 0 else Tone.BAD if code == 3 else Tone.WARNING
    return Headline(Kind.VERDICT, tone, text, tuple(details))


def alert_text(alert: ScoreDrop | RankingFlip | CostOutsideForecast) -> str:
    """One nightly alert as a sentence."""
    if isinstance(alert, ScoreDrop):
        return (
            f"{alert.model}'s score dropped {alert.before:.4f} -> {alert.now:.4f} "
            f"(z = {alert.z:.2f}, decided by {alert.rule})"
        )
    if isinstance(alert, CostOutsideForecast):  # worded as nightly's own alert lines
        side = "above" if alert.actual > alert.high else "below"
        return (
            f"{alert.measure}: {alert.actual:,.0f}, {side} the forecast's 90% range "
            f"{alert.low:,.0f} to {alert.high:,.0f}"
        )
    pair = " and ".join(alert.pair)
    return (
        f"the settled order of {pair} flipped: {alert.before} was ranked above, now {alert.now} is"
    )


def _alert(nightly: Nightly) -> Headline | None:
    alerts = nightly.alerts
    if not alerts:
        return None
    text = f"night {nightly.night}, exit 3: {len(alerts)} alert(s): " + alert_text(alerts[0])
    if len(alerts) > 1:
        text += f"; and {len(alerts) - 1} more"
    return Headline(Kind.ALERT, Tone.BAD, text, tuple(alert_text(a) for a in alerts))


def markdown_lines(summary: Summary) -> list[str]:
    """The headline for report.md: bold label, text, then one bullet per detail."""
    from adaptive_eval.base import markdown as md

    found = headline(summary)
    return [
        f"**{found.kind.value}:** {md.text(found.text)}",
        "",
        *(f"- {md.text(detail)}" for detail in found.details),
        *([""] if found.details else []),
    ]


def headline(summary: Summary) -> Headline:
    """The summary's headline (see the module docstring for the order), with the live
    forecast's warning that the trial budget leaves settleable pairs unsettled as a detail."""
    found = _headline(summary)
    short = budget_short_text(summary)
    if short is None or found.kind is Kind.UNFINISHED:
        return found
    return Headline(found.kind, found.tone, found.text, (*found.details, f"forecast: {short}"))


def _headline(summary: Summary) -> Headline:
    if summary.stop_reason is None:
        return Headline(
            Kind.UNFINISHED,
            Tone.WARNING,
            "the run stopped before its end (interrupted or killed); run the same command "
            "again to resume it. What follows is the state it reached.",
        )
    comparison = summary.comparison
    if comparison is not None:
        return _verdict(comparison)
    nightly = summary.nightly
    if nightly is not None:
        alert = _alert(nightly)
        if alert is not None:
            return alert
        ranking = _ranking(summary)
        return Headline(
            ranking.kind, ranking.tone, f"night {nightly.night}, no alert; {ranking.text}"
        )
    if summary.score.half_width is not None:
        return _width(summary)
    return _ranking(summary)


__all__ = [
    "Headline",
    "Kind",
    "Tone",
    "alert_text",
    "baseline_text",
    "headline",
    "markdown_lines",
    "saved_fraction",
    "trials_text",
]
