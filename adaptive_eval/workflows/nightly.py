"""``adaptive-eval nightly CONFIG --history DIR``: one night of a scheduled evaluation.

Layout of the history folder::

    DIR/library.sqlite         the trial library (unless the config names its own ``library:``)
    DIR/nights.jsonl           one line per night: its ranking, trials sampled and reused, alerts
    DIR/runs/<night>/          that night's run folder (report.html, summary.json, ...)
    DIR/runs/<night>/posterior.npz   per-model posterior counts, for the next night's checks
    DIR/runs/<night>/alert.json, alert.md   written when the night raised an alert
    DIR/summary.md             the recent nights' rankings and alerts, newest first

Each night re-uses the library, so only what is new is sampled: new checkpoints (a model any
byte of whose folder changed, or whose engine version, dtype or quantisation changed, has new
library cells, and the night names it in one line), new questions (a changed dataset), cells
below what the campaign's rules want. A night then checks itself against the previous night:

- ``score_drop``: a model (by name) whose score went down, decided by the campaign's own
  decision core (:meth:`~adaptive_eval.decide.core.DecisionCore.decide_round`, its pair rules, from
  a fresh state) on a two-model view: last night's posterior of the model against tonight's.
  Scores are the unbiased estimate the rules decide on (Bayes@N is kept beside it: it moves with
  the trials a night drew);
- ``ranking_flip``: a pair settled one way last night and the other way tonight. A flip is
  ``down`` when the model that was ahead lost more score than the other gained, ``up`` when the
  model behind rose past it (a recovered checkpoint). ``flip_alerts`` (``--flip-alerts``) says
  which flips alert: ``down`` (default), ``any`` or ``none``; the others are kept as ``news``
  in the night's record (printed, in summary.md), never an exit 3.

- ``cost_outside_forecast``: before it samples, each night forecasts its own cost from the
  library (:mod:`adaptive_eval.workflows.forecast`, the night folder's ``forecast.json``); the
  trials it then sampled above the forecast's 90% range (its 95th percentile) alert, so a night
  that suddenly costs far more (a model whose answers changed, a grader that now rejects
  everything) is caught; a night below the range (a cheaper night: good news) is a line of
  news, exit 0. A night with no library yet forecasts from the prior and does not alert on it.

A night re-run for a past date (``--night 2026-11-02`` after 11-05) is compared with the night
before it and slotted into the history in date order.

Any alert makes the exit code 3 and writes ``alert.json`` and ``alert.md`` in the night's folder.
``--keep N`` keeps the run folders of the last N nights (history lines and the library stay).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from adaptive_eval.base import markdown as md
from adaptive_eval.base import summary_schema
from adaptive_eval.base.errors import AdaptiveEvalError, InputError, first_few
from adaptive_eval.base.files import atomic_output, atomic_write, foreign_entries
from adaptive_eval.base.summary_schema import ModelRow, Nightly, Summary
from adaptive_eval.base.types import Verdict
from adaptive_eval.campaign.build import with_rule_prior
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checks import plugin_spec
from adaptive_eval.config.schema import PluginSpec
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import CoreState
from adaptive_eval.decide.state import RunState, ViewSettings
from adaptive_eval.dispatch.preflight import check_before_sampling
from adaptive_eval.inputs import bounded
from adaptive_eval.outputs.presentation import bayes_at_n, score, spread
from adaptive_eval.outputs.report import write_outputs
from adaptive_eval.store import RunLock, TrialStore
from adaptive_eval.workflows.forecast import ForecastRequest, run_forecast
from adaptive_eval.workflows.run import run_campaign

EXIT_ALERT = 3
#: What a nightly history folder holds (see the module docstring).
HISTORY_FILES = ("library.sqlite", "nights.jsonl", "summary.md", "runs", "error.log")
Runner = Callable[[Campaign, Path], Summary]


def _night(value: str | None) -> str:
    """``--night``: a calendar date as YYYY-MM-DD (it names the night's folder and orders the
    nights), default today in UTC."""
    if value is None:
        return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    try:
        parsed = _dt.date.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.isoformat() != value:
        raise InputError(f"--night must be a date as YYYY-MM-DD, got {value!r}")
    return value


def save_posterior(campaign: Campaign, run_dir: Path) -> None:
    """Prior + recorded counts per (model, question, category), and trials per cell."""
    store = TrialStore(run_dir, readonly=True)
    try:
        arrays = store.trial_arrays()
    finally:
        store.close()
    counts = np.zeros(campaign.decision.prior.shape, dtype=np.int64)
    np.add.at(counts, (arrays.model, arrays.question, arrays.category), 1)
    with atomic_output(run_dir / "posterior.npz", "wb") as handle:
        np.savez_compressed(
            handle,
            names=np.array(campaign.names),
            questions=np.array(campaign.question_ids),
            prior=campaign.decision.prior,
            counts=counts,
            weights=campaign.decision.weights,
        )


def _load_posterior(run_dir: Path) -> dict[str, np.ndarray] | None:
    path = run_dir / "posterior.npz"
    if not path.exists():
        return None
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _two_model_view(
    campaign: Campaign, before: dict[str, np.ndarray], i: int, now: dict[str, np.ndarray], j: int
) -> CampaignView:
    """Last night's and tonight's posterior of one model as a two-model campaign view (with
    the unbiased decision statistic the pair rules use)."""
    prior = np.stack([before["prior"][i], now["prior"][j]])
    counts = np.stack([before["counts"][i], now["counts"][j]]).astype(np.int64)
    trials = counts.sum(axis=2)
    decision = campaign.decision
    state = RunState(prior, decision.weights, bayes_prior=decision.policy.bayes_prior)
    state.add_plan(trials)
    state.apply_counts(counts)
    name = str(now["names"][j])
    policy = campaign.decision.policy
    settings = ViewSettings(
        (f"{name} (last night)", f"{name} (tonight)"),
        np.full(2, int(trials.max())),
        policy.confidence,
        policy.min_trials_per_question,
        policy.rope,
        policy.error_control,
        futility=0.0,  # one look: nothing to give up on
    )
    return settings.view(state)


def score_drops(
    campaign: Campaign, before: dict[str, np.ndarray], now: dict[str, np.ndarray]
) -> list[dict[str, Any]]:
    """Models whose score tonight is settled below last night's, by the campaign's pair rules."""
    alerts: list[dict[str, Any]] = []
    if list(before["questions"]) != list(now["questions"]):
        return alerts  # another question set: scores are not comparable model by model
    earlier = {str(n): i for i, n in enumerate(before["names"])}
    core = campaign.decision.decision_core()
    for j, raw in enumerate(now["names"]):
        name = str(raw)
        if name not in earlier:
            continue
        view = _two_model_view(campaign, before, earlier[name], now, j)
        # One look per comparison through the campaign's own decision core, from a fresh
        # state: the same pair rules that rank the night.
        (decision,) = core.decide_round(view, CoreState()).decisions
        if decision.verdict in (Verdict.A_GT_B, Verdict.B_GT_A):
            winner = decision.a if decision.verdict is Verdict.A_GT_B else decision.b
            if winner == 0:
                # The unbiased estimate, what the rule decided on: Bayes@N moves with the
                # number of trials a night drew, not only with the model.
                alerts.append(
                    {
                        "kind": "score_drop",
                        "model": name,
                        "before": float(view.theta[0]),
                        "now": float(view.theta[1]),
                        "bayes_before": float(view.mu[0]),
                        "bayes_now": float(view.mu[1]),
                        "z": float(decision.z),
                        "rule": decision.rule,
                    }
                )
    return alerts


#: Which ranking flips alert (``--flip-alerts``).
FLIP_ALERTS = ("down", "any", "none")


def alert_text(alert: dict[str, Any], text: Callable[[object], str] = str) -> str:
    """One line for an alert or a news item (console, alert.md, summary.md)."""
    if alert["kind"] == "score_drop":
        return (
            f"{text(alert['model'])} score dropped: estimate {alert['before']:.4f} -> "
            f"{alert['now']:.4f} (z = {alert['z']:.2f}, rule {alert['rule']})"
        )
    if alert["kind"] == "cost_outside_forecast":
        side = "above" if alert["actual"] > alert["high"] else "below"
        return (
            f"{alert['measure']}: {alert['actual']:,.0f}, {side} the forecast's 90% range "
            f"{alert['low']:,.0f} to {alert['high']:,.0f}"
        )
    moved = " (moved up)" if alert.get("direction") == "up" else ""
    return (
        f"ranking flip {text(' vs '.join(alert['pair']))}: {text(alert['before'])} was ahead, "
        f"now {text(alert['now'])}{moved}"
    )


def _flip_direction(
    flip: dict[str, Any], before: Sequence[ModelRow], now: Sequence[ModelRow]
) -> str:
    """``down`` when the model that was ahead lost more score than the other gained."""
    old = {m.name: m.score for m in before}
    new = {m.name: m.score for m in now}
    ahead, behind = flip["before"], flip["now"]
    fell = old[ahead] - new[ahead]
    rose = new[behind] - old[behind]
    return "down" if fell >= rose else "up"


def ranking_flips(before: Sequence[ModelRow], now: Sequence[ModelRow]) -> list[dict[str, Any]]:
    """Pairs settled one way last night and the other way tonight (the nights' model rows),
    over every pair of models both nights ranked, not only the adjacent ones: a model settled
    above another (a lower decided rank) and tonight settled below it is a flip, however far
    apart they are (a model that fell two places raised only ``score_drop`` when only adjacent
    pairs were compared)."""
    old = {m.name: m.rank for m in before}
    new = {m.name: m.rank for m in now}
    names = sorted(old.keys() & new.keys())
    flips = []
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            was = old[first] - old[second]
            is_now = new[first] - new[second]
            if was and is_now and (was > 0) != (is_now > 0):
                above = first if was < 0 else second
                flip = {
                    "kind": "ranking_flip",
                    "pair": [first, second],
                    "before": above,
                    "now": second if above == first else first,
                }
                flips.append({**flip, "direction": _flip_direction(flip, before, now)})
    return flips


def last_night_prior(campaign: Campaign, previous: list[Path]) -> tuple[Campaign, str | None]:
    """``campaign`` with last night's run as the prior of each ``betting`` pair rule that
    names none (its bets lean on last night's scores, a changed candidate's included; none of its
    trials count as tonight's), and that run's folder (None: no rule took it, or no night
    before tonight can be its prior).

    "Last night" is the newest finished night whose summary.json can be tonight's prior, checked
    as a configured prior is (readable, finite scores, in the rubric's range, sharing a model
    with tonight's campaign): a night that cannot (a damaged file, such as a
    NaN score) is passed over with one warning naming it and the way out, and the night before
    it is tried. A damaged night used to fail every later night until its file was mended by
    hand (issue 48); a prior only chooses the bets, never the guarantee, so an older night's is
    as sound, if less sharp."""
    refs = campaign.run.identity["config"]["policy"].get("pair_rules") or []
    taking = []
    for index, ref in enumerate(refs):
        name, params = plugin_spec(ref if isinstance(ref, str) else PluginSpec(**ref))
        if name == "betting" and "prior" not in params and "scores" not in params:
            taking.append(index)
    if not taking:
        return campaign, None
    passed: list[tuple[Path, str]] = []
    for night in reversed(previous):
        if not (night / "summary.json").exists():
            continue  # a night that did not finish
        last = night.resolve()  # the config's relative paths are its folder's, not ours
        try:
            betting = with_rule_prior(campaign, taking, last)
        except InputError as error:
            passed.append((night, error.message))
            continue
        _warn_passed_over(passed, f"night {night.name}'s scores")
        return betting, str(last)
    _warn_passed_over(passed, "no prior (as on a first night)")
    return campaign, None


def _warn_passed_over(passed: list[tuple[Path, str]], instead: str) -> None:
    """One line on stderr for the nights :func:`last_night_prior` passed over (none: silent)."""
    if not passed:
        return
    nights = [night.name for night, _ in passed]
    newest, why = passed[0]
    which = f"night {nights[0]}" if len(nights) == 1 else f"nights {first_few(nights)}"
    print(
        f"nightly: {which} cannot be tonight's prior ({why}); the betting rule bets on "
        f"{instead} tonight. `adaptive-eval report {newest}` rewrites a damaged summary.json "
        "from the night's store",
        file=sys.stderr,
    )


#: What a night's record keeps of each model row of its summary, in this order.
RANKING_FIELDS = (
    "name",
    "rank",
    "score",
    "score_se",
    "score_low",
    "score_high",
    "bayes_mu",
    "bayes_sigma",
    "trials",
)


def _night_record(
    night: str,
    summary: Summary,
    alerts: list[dict[str, Any]],
    news: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    library = summary.provenance.library
    return {
        "night": night,
        "campaign_id": summary.campaign_id,
        "stop_reason": summary.stop_reason,
        "trials_used": summary.trials_used,
        "sampled": summary.trials_used if library is None else library.sampled,
        "reused": 0 if library is None else library.reused,
        # Models whose identity (weights, engine, ...) changed since the library last saw them.
        "changed": [] if library is None else list(library.changes),
        "ranking": [{k: getattr(m, k) for k in RANKING_FIELDS} for m in summary.models],
        "alerts": alerts,
        "news": list(news or []),
    }


#: The most of a past night's summary.json read (one of hundreds of models is a few MB).
MAX_SUMMARY_BYTES = 64 << 20


def read_past_summary(run_dir: Path) -> Summary:
    """A past night's summary.json, of any version, upgraded and validated; one that does not
    read (not a regular file, too large, nested too deep, not JSON, ...) is an error naming the
    file."""
    path = run_dir / "summary.json"
    data = bounded.read_bytes(path, limit=MAX_SUMMARY_BYTES, what="summary.json")
    try:
        document = json.loads(data.decode("utf-8"))
    except RecursionError:  # json's decoder recurses: a file nested thousands deep
        raise InputError("cannot be read as JSON: nested too deep", source=str(path)) from None
    except ValueError as error:  # not UTF-8, or not JSON
        raise InputError(f"cannot be read as JSON: {error}", source=str(path)) from None
    if not isinstance(document, dict):
        raise InputError("is not a summary.json (not a JSON object)", source=str(path))
    try:
        return summary_schema.read_summary(document)
    except ValidationError as error:
        where = error.errors()[0]
        field = ".".join(str(part) for part in where["loc"])
        raise InputError(f"{field}: {where['msg']}", source=str(path)) from None
    except ValueError as error:  # a version this adaptive-eval does not read
        raise InputError(str(error), source=str(path)) from None


#: Simulated campaigns of a night's forecast (fewer than ``forecast``'s default: it runs before
#: every night; the 90% range it alerts on is wide enough at this count).
NIGHT_SIMULATIONS = 30


def night_forecast(campaign: Campaign, run_dir: Path) -> dict[str, Any] | None:
    """Tonight's forecast from the library (written to the night's ``forecast.json``), as the
    night's record keeps it; ``None`` where the night cannot be forecast (a resumed night)."""
    if (run_dir / TrialStore.FILENAME).exists():
        return None  # a night re-run over its own trials: its forecast was made before
    try:
        request = ForecastRequest(out=run_dir, simulations=NIGHT_SIMULATIONS)
        found = run_forecast(campaign, request)
    except (AdaptiveEvalError, OSError) as error:
        # The night's samples matter more than its forecast: it goes on without one.
        print(f"nightly: no forecast tonight ({error}); sampling goes on", file=sys.stderr)
        return None
    return {
        "evidence": found.evidence.source,
        "new_trials": found.new_trials.record(),
        "new_trials_90": list(found.new_trials_90),
        "pairs_settled": found.settled.record(),
    }


def cost_alert(forecast: dict[str, Any], sampled: int) -> dict[str, Any] | None:
    """The note of a night whose sampled trials left its forecast's 90% range (never on a
    prior guess): above it an alert, below it news (see :func:`cost_is_alert`)."""
    if forecast["evidence"] == "prior":
        return None
    low, high = forecast["new_trials_90"]
    if low <= sampled <= high:
        return None
    return {
        "kind": "cost_outside_forecast",
        "measure": "trials sampled",
        "low": float(low),
        "high": float(high),
        "actual": float(sampled),
    }


def cost_is_alert(note: dict[str, Any]) -> bool:
    """A night that cost more than its forecast's 90% range alerts; one that cost less is
    news (good news must not fail the CronJob)."""
    return bool(note["actual"] > note["high"])


def _alert_markdown(record: dict[str, Any]) -> str:
    lines = [f"# Nightly alert {record['night']}", ""]
    for alert in record["alerts"]:
        if alert["kind"] == "score_drop":
            lines.append(
                f"- **{md.text(alert['model'])}**{alert_text(alert)[len(alert['model']) :]}"
            )
        else:
            lines.append(f"- {alert_text(alert, md.text)}")
    return "\n".join(lines) + "\n"


def _summary_markdown(records: list[dict[str, Any]]) -> str:
    lines = ["# Nightly history", ""]
    for record in reversed(records[-14:]):
        flag = f" - **{len(record['alerts'])} alert(s)**" if record["alerts"] else ""
        lines += [
            f"## {record['night']}{flag}",
            "",
            f"Sampled {record['sampled']} trials, reused {record['reused']}; stopped on "
            f"{record['stop_reason']}.",
            "",
            # The alerts' own words: alert.md holds them too, but --keep prunes its folder.
            *[f"- **Alert:** {alert_text(item, md.text)}" for item in record["alerts"]],
            *[f"- {md.text(line)}" for line in record.get("changed") or []],
            *[f"- News: {alert_text(item, md.text)}" for item in record.get("news") or []],
            *([""] if record["alerts"] or record.get("changed") or record.get("news") else []),
            "| rank | model | score | se | Bayes@N | Bayes@N sd | trials |",
            "|---:|---|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {m['rank']} | {md.text(m['name'])} | {score(m):.4f} | {spread(m):.4f} | "
            + " | ".join(f"{x:.4f}" for x in bayes_at_n(m))
            + f" | {m['trials']} |"
            for m in record["ranking"]
        ]
        lines.append("")
    return "\n".join(lines)


def _write_night_outputs(
    run_dir: Path,
    summary: Summary,
    night: str,
    alerts: list[dict[str, Any]],
    records: list[dict[str, Any]],
) -> None:
    """The night's summary.json, report.md and report.html again, now with the night and its
    alerts (the run wrote them before the night was compared with the last one: its pages never
    mentioned an alert); kept in the store, so ``adaptive-eval report`` keeps them too."""

    nightly = Nightly.model_validate(
        {"night": night, "alerts": alerts, "exit_code": EXIT_ALERT if alerts else 0}
    )
    with RunLock(run_dir):
        store = TrialStore(run_dir)
        try:
            store.set_meta(nightly=summary_schema.record(nightly))
            tonight = summary.model_copy(update={"nightly": nightly})
            write_outputs(run_dir, tonight, store, history=records)
        finally:
            store.close()


def _check_predecessor(history: Path, runs: Path, tonight: str) -> None:
    """Refuse to re-run a past night whose predecessor ``--keep`` pruned: with its run folder
    gone it was compared with no earlier night, found nothing, exited 0 and overwrote the
    night's alerting record with a clean one (a failed night turned green in CI)."""
    lines = history / "nights.jsonl"
    if not lines.exists():
        return
    nights = []
    for line in lines.read_text().splitlines():
        try:
            nights.append(str(json.loads(line)["night"]))
        except (ValueError, KeyError, TypeError):
            continue
    earlier = [n for n in nights if n < tonight]
    if earlier and not (runs / max(earlier) / "summary.json").exists():
        raise InputError(
            f"night {tonight} follows night {max(earlier)}, whose run folder was pruned (--keep): "
            "it cannot be compared with it, and its record in nights.jsonl would be replaced by "
            "one that never was; re-run only nights whose previous night is kept",
            source=str(history),
            field="--night",
        )


def run_nightly(
    campaign: Campaign,
    history: Path,
    *,
    night: str | None = None,
    keep: int = 30,
    runner: Runner | None = None,
    flip_alerts: str = "down",
    quiet: bool = True,
) -> dict[str, Any]:
    """Run one night; returns its history record (``alerts`` empty when all is well)."""
    if keep < 1:
        raise InputError(f"--keep must be >= 1, got {keep}")
    if flip_alerts not in FLIP_ALERTS:
        raise InputError(
            f"--flip-alerts must be one of {', '.join(FLIP_ALERTS)}, got {flip_alerts!r}"
        )
    tonight = _night(night)
    # Without a library of its own the history keeps one: each night reuses the last's trials.
    if campaign.run.settings.library is None:
        campaign = campaign.with_library((history / "library.sqlite").resolve())
    check_before_sampling(campaign)
    if history.exists() and not history.is_dir():
        raise InputError("exists and is not a folder", source=str(history), field="--history")
    if history.is_dir():
        foreign = foreign_entries(history, HISTORY_FILES)
        if foreign:
            raise InputError(
                f"holds files that are not a nightly history's ({', '.join(foreign[:3])}); "
                "give a new or empty folder",
                source=str(history),
                field="--history",
            )
    history.mkdir(parents=True, exist_ok=True)
    runs = history / "runs"
    previous = sorted(p for p in runs.glob("*") if p.is_dir() and p.name < tonight)
    _check_predecessor(history, runs, tonight)
    # The night tonight is compared with, read before anything is sampled: one that cannot be
    # read is refused now, not after the night's trials are spent.
    compared = previous[-1] if previous and (previous[-1] / "summary.json").exists() else None
    try:
        last = None if compared is None else read_past_summary(compared)
    except InputError as error:
        raise InputError(
            f"{error.message}; tonight is compared with that night: `adaptive-eval report "
            f"{compared}` rewrites its summary.json from the night's store",
            source=error.source,
            field=error.field,
        ) from None
    tonight_campaign, prior = last_night_prior(campaign, previous)
    if runner is None:

        def runner(tonight: Campaign, folder: Path) -> Summary:
            return run_campaign(tonight, folder, quiet=quiet)

    run_dir = runs / tonight
    forecast = night_forecast(tonight_campaign, run_dir)
    summary = runner(tonight_campaign, run_dir)
    # Read as the nights before it are: summary.json's values, validated.
    tonight_summary = summary_schema.validate(summary_schema.record(summary))
    save_posterior(campaign, run_dir)
    alerts: list[dict[str, Any]] = []
    news: list[dict[str, Any]] = []
    if compared is not None and last is not None:
        before = _load_posterior(compared)
        now = _load_posterior(run_dir)
        if before is not None and now is not None:
            alerts += score_drops(campaign, before, now)
        for flip in ranking_flips(last.models, tonight_summary.models):
            alerting = flip_alerts == "any" or (
                flip_alerts == "down" and flip["direction"] == "down"
            )
            (alerts if alerting else news).append(flip)
    record = _night_record(tonight, tonight_summary, alerts, news)
    if prior is not None:
        record["prior"] = prior
    if forecast is not None:
        record["forecast"] = forecast
        note = cost_alert(forecast, record["sampled"])
        if note is not None:
            (alerts if cost_is_alert(note) else record["news"]).append(note)
    record["exit_code"] = EXIT_ALERT if alerts else 0
    if alerts:
        atomic_write(run_dir / "alert.json", json.dumps(record, indent=2) + "\n")
        atomic_write(run_dir / "alert.md", _alert_markdown(record))
    lines = history / "nights.jsonl"
    records = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
    # In date order: a past night re-run takes its place, not the newest one's.
    records = sorted(
        [r for r in records if r["night"] != tonight] + [record], key=lambda r: str(r["night"])
    )
    atomic_write(lines, "".join(json.dumps(r) + "\n" for r in records))
    atomic_write(history / "summary.md", _summary_markdown(records))
    _write_night_outputs(run_dir, summary, tonight, alerts, records)
    for old in sorted(p for p in runs.glob("*") if p.is_dir())[:-keep]:
        shutil.rmtree(old)
    return record


__all__ = ["EXIT_ALERT", "FLIP_ALERTS", "alert_text", "ranking_flips", "run_nightly", "score_drops"]
