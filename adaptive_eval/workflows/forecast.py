"""``adaptive-eval forecast CONFIG``: what the campaign will settle and cost, before it samples.

Evidence, in this order of preference (:mod:`adaptive_eval.forecast.campaign` says how it is
used):

- ``--from RUN_DIR``: the trials of a previous run (or night) of the same campaign: same models,
  dataset, sampling, grader and rubric categories (the identities the trial library keys on;
  the policy, budget and seed may differ). Given the run's own folder (``--out``), the forecast
  is of the rest of that run, its recorded trials served first.
- the trial library the config names, whose trials the run will reuse;
- ``--pilot K``: the run's first ``K`` trials per question of every model, sampled now into the
  run folder ``--out`` (:mod:`adaptive_eval.control.pilot`); ``pilot.json`` there raises
  ``policy.min_trials_per_question`` to ``K`` for the rest of the run, so ``run`` on the folder
  reuses every pilot trial;
- with none, the config's own prior, said plainly to be a prior guess.

The forecast is written to ``--out``'s ``forecast.json`` (when given): the run that follows in
that folder reports forecast against actual.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.files import atomic_write
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import Judge, compare_campaign
from adaptive_eval.control.controller import Controller
from adaptive_eval.control.library import library_trials
from adaptive_eval.control.pilot import MIN_PILOT, Grow
from adaptive_eval.decide.core import DecisionCore
from adaptive_eval.forecast.campaign import (
    Forecast,
    Range,
    VerdictForecast,
    default_simulations,
    forecast,
)
from adaptive_eval.forecast.evidence import Evidence, wall_model
from adaptive_eval.forecast.pilot import Growth, next_target
from adaptive_eval.loop.rundir import check_out_folder, differences, identity_changes
from adaptive_eval.outputs.presentation import COMPARE_EXIT_MEANING
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.run import (
    FORECAST_FILE,
    PILOT_FILE,
    pilot_trials,
    sample,
    with_recorded_pilot,
)

#: Identity sections that make two runs the same campaign for evidence: the cells' trials.
SAME_TRIALS = ("config.models[", "config.dataset", "config.sampling", "config.grader", "files")
#: Differences in how a config lists its models, not in the models (names are compared alone).
NOT_THE_MODEL = re.compile(r"config\.models\[\d+\]\.(select|name)\b")


@dataclass(frozen=True)
class ForecastRequest:
    """What ``forecast`` was asked."""

    from_dir: Path | None = None
    pilot: int | None = None
    out: Path | None = None
    #: ``--pilot auto``: the pilot starts at ``pilot`` and grows through the campaign's own
    #: rounds until it tells the models' gaps apart (:mod:`adaptive_eval.forecast.pilot`).
    auto: bool = False
    simulations: int | None = None  # None: default_simulations of the campaign's size
    seed: int = 0
    #: Forecast ``compare --candidate`` (its pairs: the candidate against each incumbent).
    candidate: str | None = None
    margin: float | None = None

    def __post_init__(self) -> None:
        if self.pilot is not None and self.out is None:
            raise InputError(
                "--pilot samples into the run folder: give --out DIR (then `run` there reuses it)",
                field="--pilot",
            )
        if self.pilot is not None and self.from_dir is not None:
            raise InputError(
                "--pilot and --from are two sources of evidence; give one", field="--from"
            )
        if self.margin is not None and self.candidate is None:
            raise InputError("--margin is compare's: give --candidate NAME too", field="--margin")


def run_forecast(
    built: Campaign,
    request: ForecastRequest,
    *,
    console: IO[str] | None = None,
    quiet: bool = True,
) -> Forecast:
    """Gather the evidence for the campaign ``built`` (sampling a pilot if asked), forecast,
    write ``forecast.json``."""
    pilot = request.pilot
    if pilot is not None:
        built = _with_pilot(built, pilot)
    elif request.out is not None:
        built = with_recorded_pilot(built, request.out)
    campaign = _steered(built, request)[0]
    if pilot is not None:
        assert request.out is not None
        grow = _growth(campaign, request.seed) if request.auto else None
        _sample_pilot(campaign, request.out, pilot, console, quiet, grow)
    evidence = gather_evidence(campaign, request)
    unbudgeted, judge = _steered(built.without_budget(), request)
    found = forecast(
        unbudgeted,
        evidence,
        campaign.run.settings.budget,
        simulations=request.simulations
        or default_simulations(campaign.num_models * campaign.num_questions),
        seed=request.seed,
        candidate=request.candidate,
        judge=judge,
        meanings=COMPARE_EXIT_MEANING,
        # An automatic pilot grew to measure the models' spacing: draw from it (12 evenly
        # spread models, docs/forecast.md: 88% of realised totals inside against 38% with
        # cell draws where it had not quite resolved it).
        predictive="spacing" if request.auto else "resolved",
    )
    found = replace(found, gpu=_on_gpu(campaign))
    if request.out is not None:
        check_out_folder(request.out)
        request.out.mkdir(parents=True, exist_ok=True)
        # The budget is not part of a campaign's identity: the unbudgeted campaign the paths
        # ran has the run's own fingerprint, which forecast.json carries.
        atomic_write(request.out / FORECAST_FILE, json.dumps(found.record(), indent=2) + "\n")
    return found


def _on_gpu(campaign: Campaign) -> bool:
    """Whether any of the campaign's workers asks for a GPU."""
    return any(float(plan.actor_options.get("num_gpus", 0) or 0) > 0 for plan in campaign.run.plans)


def _steered(campaign: Campaign, request: ForecastRequest) -> tuple[Campaign, Judge | None]:
    """The campaign ``run`` (or ``compare --candidate``) would execute, and compare's judge."""
    if request.candidate is None:
        return campaign, None
    return compare_campaign(campaign, request.candidate, request.margin)


def _with_pilot(campaign: Campaign, pilot: int) -> Campaign:
    """``campaign`` with its first ``pilot`` trials per question sampled before any decision
    (refused where a pilot could estimate nothing or exceeds the cap)."""
    if pilot < MIN_PILOT:
        raise InputError(
            f"a pilot of {pilot} trial(s) per question estimates nothing; give at least "
            f"{MIN_PILOT}",
            source="--pilot",
        )
    cap = campaign.decision.limits.max_trials_per_question
    if pilot > cap:
        raise InputError(
            f"a pilot of {pilot} trials per question exceeds policy.max_trials_per_question={cap}",
            source="--pilot",
        )
    return campaign.with_min_trials(pilot)


def _sample_pilot(
    campaign: Campaign,
    run_dir: Path,
    pilot: int,
    console: IO[str] | None,
    quiet: bool,
    grow: Grow | None = None,
) -> None:
    cost = pilot * campaign.num_models * campaign.num_questions
    budget = campaign.run.settings.budget.trials
    if budget is not None and budget < cost:
        raise InputError(
            f"budget.trials={budget} is below the pilot's own cost: {pilot} trials per question "
            f"x {campaign.num_questions} questions x {campaign.num_models} models = {cost}",
            source=campaign.run.settings.source,
            field="budget.trials",
        )
    trials = campaign.decision.policy.min_trials_per_question  # K, or the config's if larger
    earlier = pilot_trials(run_dir) if run_dir.exists() else None
    if earlier is not None and earlier != trials and _holds_run(run_dir):
        raise InputError(
            f"holds a pilot of {earlier} trials per question; give that --pilot, or a new --out",
            source=str(run_dir),
        )
    check_out_folder(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Recorded before any trial: a pilot killed midway resumes as the same campaign, and a
    # forecast of an earlier campaign in the folder cannot be read as this one's.
    atomic_write(run_dir / PILOT_FILE, json.dumps({"trials_per_question": trials}) + "\n")
    (run_dir / FORECAST_FILE).unlink(missing_ok=True)
    sample(campaign, run_dir, console=console, quiet=quiet, pilot=pilot, grow=grow)


def _growth(campaign: Campaign, seed: int) -> Grow:
    """``--pilot auto``'s question after each stretch of the pilot: sample on, and to what?"""

    def grow(controller: Controller) -> Growth:
        core = controller.core
        inner = getattr(core, "core", core)  # the pilot's core wraps the campaign's
        assert isinstance(inner, DecisionCore)
        return next_target(campaign.decision, inner, controller.state, seed)

    return grow


def gather_evidence(campaign: Campaign, request: ForecastRequest) -> Evidence:
    """The best evidence available for ``campaign`` (see the module's docstring)."""
    shape = (campaign.num_models, campaign.num_questions)
    own = request.out if request.out is not None and _holds_run(request.out) else None
    if request.from_dir is not None:
        same = own is not None and request.from_dir.resolve() == own.resolve()
        if own is not None and not same:
            raise InputError(
                "holds a run already: its own trials are this forecast's evidence; give "
                "--from the same folder, or a new --out",
                source=str(own),
                field="--out",
            )
        return evidence_from_run(campaign, request.from_dir, replayed=same)
    if own is not None:
        return evidence_from_run(campaign, own, replayed=True)
    held = library_trials(campaign, campaign.decision.policy.max_trials_per_question)
    if held:
        columns = np.asarray(held, dtype=np.float64).T
        ints = columns[:5].astype(np.int64)
        return Evidence.from_trials(
            shape,
            ints[0],
            ints[1],
            ints[2],
            ints[3],
            ints[4],
            columns[5],
            replayed=True,
            source="library",
            detail=f"{len(held)} trials of the trial library {campaign.run.settings.library}",
        )
    return Evidence.none(
        shape,
        "no evidence (no --from, --pilot or trial library): a prior guess from the config's "
        "prior, uniform on every question; run a pilot for a forecast worth planning on",
    )


def _holds_run(folder: Path) -> bool:
    return (folder / TrialStore.FILENAME).exists()


def evidence_from_run(campaign: Campaign, run_dir: Path, *, replayed: bool) -> Evidence:
    """The trials recorded in ``run_dir``, mapped onto ``campaign``'s models and questions;
    refused, naming the difference, when that run is another campaign."""
    if not _holds_run(run_dir):
        raise InputError("holds no recorded run (no trials.sqlite)", source=str(run_dir))
    store = TrialStore(run_dir)
    try:
        identity = store.get_meta("identity") or {}
        names = list(store.get_meta("models") or [])
        questions = list(store.get_meta("questions") or [])
        elapsed = store.get_meta("elapsed_s")
        first_round = store.get_meta("first_round")
        first_result = store.get_meta("first_result")
        arrays = store.trial_arrays()
    finally:
        store.close()
    _check_same_campaign(campaign, run_dir, identity, names, questions)
    if replayed:  # the rest of that very run: it must be this campaign, as `run` requires
        changes = identity_changes(identity, campaign.run.identity)
        if changes:
            raise InputError(
                "holds a different campaign's run; its rest cannot be forecast with this "
                f"config. Changed: {'; '.join(changes[:4])}",
                source=str(run_dir),
            )
    if len(arrays.trial) == 0:
        raise InputError(
            "holds no recorded trial yet: nothing to forecast from (run a pilot: --pilot K)",
            source=str(run_dir),
            field="--from",
        )
    model_index = np.asarray([campaign.names.index(n) for n in names], dtype=np.int64)
    question_index = np.asarray([campaign.question_ids.index(q) for q in questions], dtype=np.int64)
    model = model_index[arrays.model] if len(arrays.model) else arrays.model
    question = question_index[arrays.question] if len(arrays.question) else arrays.question
    startup, rate = wall_model(
        float(elapsed) if elapsed else None,
        len(arrays.trial),
        first_round if isinstance(first_round, dict) else None,
        first_result if isinstance(first_result, dict) else None,
    )
    what = "the run's own recorded trials" if replayed else "an earlier run of this campaign"
    return Evidence.from_trials(
        (campaign.num_models, campaign.num_questions),
        model,
        question,
        arrays.trial,
        arrays.category,
        arrays.tokens,
        arrays.gpu_s,
        replayed=replayed,
        source="pilot" if replayed else "run",
        detail=f"{len(arrays.trial)} trials in {run_dir} ({what})",
        elapsed_s=float(elapsed) if elapsed else None,
        startup_s=startup,
        seconds_per_trial=rate,
    )


def _check_same_campaign(
    campaign: Campaign,
    run_dir: Path,
    identity: dict[str, Any],
    names: list[str],
    questions: list[str],
) -> None:
    missing = [n for n in campaign.names if n not in names]
    extra = [n for n in names if n not in campaign.names]
    problems = []
    if missing or extra:
        problems.append(f"models: it ran {_few(names)}, this campaign has {_few(campaign.names)}")
    if sorted(questions) != sorted(campaign.question_ids):
        problems.append(
            f"questions: it has {len(questions)}, this campaign {campaign.num_questions} "
            "(another dataset or limit)"
        )
    stored_categories = len(identity.get("config", {}).get("rubric", {}).get("weights", []))
    if stored_categories and stored_categories != campaign.num_categories:
        problems.append(
            f"rubric categories: {stored_categories} there, {campaign.num_categories} here"
        )
    for change in differences(identity, campaign.run.identity):
        # Which entry lists a model, and in what order, is not the model (the library's
        # cells drop them too).
        if change.startswith(SAME_TRIALS) and not NOT_THE_MODEL.match(change):
            problems.append(change)
    if problems:
        raise InputError(
            "is another campaign's run, not evidence for this one: "
            + "; ".join(problems[:4])
            + (f"; and {len(problems) - 4} more" if len(problems) > 4 else ""),
            source=str(run_dir),
            field="--from",
        )


def _few(names: Any) -> str:
    names = list(names)
    shown = ", ".join(names[:4])
    return f"{len(names)} ({shown}{', ...' if len(names) > 4 else ''})"


#: validate's short forecast: the largest campaign it forecasts (cells: models x questions), and
#: how many campaigns it simulates (validate answers in seconds).
VALIDATE_CELLS = 2_000
VALIDATE_SIMULATIONS = 10


def short_forecast(campaign: Campaign) -> list[str]:
    """validate's forecast in two lines, from the library or the prior (never a pilot)."""
    hint = "`adaptive-eval forecast CONFIG --pilot 4 --out DIR` for ranges worth planning on"
    cells = campaign.num_models * campaign.num_questions
    if cells > VALIDATE_CELLS:
        return [f"  forecast: {cells:,} cells are more than validate simulates; run {hint}"]
    evidence = gather_evidence(campaign, ForecastRequest())
    if evidence.source == "prior":  # a prior guess is not worth validate's seconds
        return [f"  forecast: no recorded trial of these models yet; run {hint}"]
    found = forecast(
        campaign.without_budget(),
        evidence,
        campaign.run.settings.budget,
        simulations=VALIDATE_SIMULATIONS,
        processes=1,
    )
    return [
        f"  forecast (from {evidence.trials:,} library trials; {found.simulations} "
        "simulations): trials "
        f"{range_text(found.trials)}; pairs settled {found.settled.p50:.0f} of "
        f"{found.num_pairs} (10-90%: {found.settled.p10:.0f} to {found.settled.p90:.0f})",
        f"    run {hint}",
    ]


# -- what the forecast says ---------------------------------------------------------------------


def _amount(value: float, unit: str) -> str:
    if unit == "s":
        if value >= 7200:
            return f"{value / 3600:.1f} h"
        if value >= 120:
            return f"{value / 60:.0f} min"
        return f"{value:.{0 if value >= 10 else 1 if value >= 1 else 2}f} s"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value:,.0f}"


def range_text(found: Range, unit: str = "") -> str:
    return (
        f"{_amount(found.p50, unit)} (10-90%: {_amount(found.p10, unit)} to "
        f"{_amount(found.p90, unit)})"
    )


def render(found: Forecast, out: Path | None = None) -> str:
    """The forecast as the console shows it."""
    record = found.record()
    lines = [
        f"forecast for {found.campaign}, from {found.evidence.detail}; "
        f"{found.simulations} simulated campaigns:",
        f"  trials:        {range_text(found.trials)}",
    ]
    if found.evidence.replayed and found.evidence.trials:
        lines.append(f"    of which already recorded: {found.evidence.trials:,}")
    for label, value, unit in (
        ("tokens", found.tokens, ""),
        ("GPU-seconds", found.gpu_s, "s"),
        ("wall time", found.wall_s, "s"),
    ):
        if label == "GPU-seconds" and value is not None and found.gpu is False:
            # vLLM on CPU: its device-seconds are the engines' CPU seconds ("GPU-seconds: 0 s").
            lines.append(
                f"  {'device-s:':<14} {range_text(value, unit)} (no GPU: the engines' seconds "
                "on CPU)"
            )
        elif value is not None:
            lines.append(f"  {label + ':':<14} {range_text(value, unit)}")
    lines.append(
        f"  pairs settled: {found.settled.p50:.0f} of {found.num_pairs} "
        f"(10-90%: {found.settled.p10:.0f} to {found.settled.p90:.0f})"
    )
    if found.widths_met is not None:
        lines.append(
            f"  width goals met: {found.widths_met.p50:.0f} of {found.num_models} models "
            f"(10-90%: {found.widths_met.p10:.0f} to {found.widths_met.p90:.0f})"
        )
    budget = {k: v for k, v in record["budget"].items() if v is not None}
    if budget:
        shown = ", ".join(f"{k} {v:g}" for k, v in budget.items())
        lines.append(f"  under the budget ({shown}); stops: {_stops(found)}")
    else:
        lines.append(f"  stops: {_stops(found)}")
    if found.verdict is not None:
        lines += verdict_lines(found.verdict)
    if found.pairs:
        lines.append("  pairs most likely settled (probability by the cap; trials/question):")
        for pair in found.pairs[:8]:
            where = (
                ""
                if pair.trials_per_question is None
                else f"; ~{pair.trials_per_question.p50:.0f} per question"
            )
            budget_part = (
                ""
                if pair.settled_in_budget is None
                else f", {pair.settled_in_budget:.0%} in the budget"
            )
            lines.append(f"    {pair.a} vs {pair.b}: {pair.settled:.0%}{budget_part}{where}")
    codes = "" if found.verdict is None else "/".join(str(c) for c in found.verdict.at_cap)
    lines.append(
        "  budget -> pairs settled (median, 10-90%"
        + (f"; probability of exit {codes}" if codes else "")
        + "):"
    )
    for point in found.curve:
        shares = ""
        if codes and point.exit_codes is not None:
            shares = "; " + "/".join(f"{p:.0%}" for p in point.exit_codes.values())
        lines.append(
            f"    {point.trials:>12,} trials: {point.settled.p50:.0f} "
            f"({point.settled.p10:.0f}-{point.settled.p90:.0f}){shares}"
        )
    for line in found.degenerate:
        lines.append(f"  evidence: {line}")
    if found.resolution is not None:
        lines.append(f"  resolution: {found.resolution.text()}")
    elif found.score_sd is not None and found.score_sd > 0 and not found.degenerate:
        lines.append(
            f"  the evidence measures each score to +-{1.96 * found.score_sd:.3f} (95%): gaps "
            f"between models under about {2.8 * found.score_sd:.3f} are not resolved by it, "
            "and the pairs-settled forecast is loosest there (a larger pilot sharpens it; "
            "docs/forecast.md)"
        )
    for note in found.unknown:
        lines.append(f"  not forecast: {note}")
    if found.evidence.source == "prior":
        lines.append("  this is a PRIOR GUESS: no trial of these models informs it")
    if out is not None:
        lines.append(f"  written to {out / FORECAST_FILE}")
    return "\n".join(lines)


def verdict_lines(verdict: VerdictForecast) -> list[str]:
    """compare's verdict: the probability of each exit code, and per incumbent of each
    decision."""
    budgeted = verdict.in_budget is not None
    test = "" if verdict.margin is None else f" (non-inferiority, margin {verdict.margin:g})"
    where = "at the cap, and within the budget" if budgeted else "at the cap"
    lines = [f"  compare's exit code{test}, probability {where}:"]
    for code, probability in verdict.at_cap.items():
        within = (
            ""
            if verdict.in_budget is None
            else f"; {verdict.in_budget.get(code, 0.0):.0%} within the budget"
        )
        meaning = verdict.meanings.get(code, "")
        lines.append(f"    exit {code} ({meaning}): {probability:.0%}{within}")
    lines.append(f"  the candidate against each incumbent ({where}):")
    for row in verdict.incumbents:
        shares = ", ".join(f"{side} {p:.0%}" for side, p in _by_share(row.at_cap))
        if row.in_budget is not None:
            shares += "; within the budget " + ", ".join(
                f"{side} {p:.0%}" for side, p in _by_share(row.in_budget)
            )
        lines.append(f"    vs {row.incumbent}: {shares}")
    return lines


def _by_share(shares: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(shares.items(), key=lambda kv: -kv[1])


def _stops(found: Forecast) -> str:
    total = max(1, found.simulations)
    return ", ".join(
        f"{reason} {count / total:.0%}"
        for reason, count in sorted(found.stops.items(), key=lambda kv: -kv[1])
    )
