"""Calibration of the forecast (``adaptive-eval forecast --pilot K``) against the runs it forecasts.

    python benchmarks/forecast.py --out runs/bench-forecast                 # quick: 20 + 5 reps

docs/forecast.md's table (about 35 minutes on 2 loaded cores)::

    python benchmarks/forecast.py --out runs/bench-forecast --simulations 30 --no-scale \
        --real-replicates 0 --only "demo,gaps" --replicates 100
    python benchmarks/forecast.py --out runs/bench-forecast --simulations 30 --no-scale \
        --real-replicates 0 --only "near-ties,categorical" --replicates 50
    python benchmarks/forecast.py --out runs/bench-forecast --simulations 20 --no-scale \
        --replicates 0 --only replay --real-replicates 8
    python benchmarks/forecast.py --out runs/bench-forecast --replicates 0 --real-replicates 0

The suite's other ten campaigns (docs/forecast.md, "The whole suite"; about 30 minutes)::

    python benchmarks/forecast.py --out runs/bench-forecast --whole-suite --no-scale \
        --only "tie (2,gap =,gap 0.,sparse,checkpoint,mimics,20 models" --replicates 100 \
        --simulations 20 --real-replicates 0

Each replicate of a campaign is one pilot-then-run, seeded:

1. An outcome tape (L, M, N) is fixed: drawn from the scenario's true probabilities (simulated
   campaigns, with a token count per trial drawn as the ``simulated`` backend does: a gamma-like
   spread of shape 4 around the scenario's ``tokens_mean``), or each cell's recorded outcomes of
   a real file in a seeded shuffled order (replays; these files have no token counts).
2. The pilot is the tape's first ``--pilot`` trials of every cell: the
   :class:`~adaptive_eval.forecast.evidence.Evidence` (``replayed=True``) the forecast is given,
   for the campaign built with ``policy.min_trials_per_question = K`` and no budget.
3. The realised run is the same campaign
   (:func:`~adaptive_eval.forecast.paths.simulate_campaign`) served the tape in order (its
   first K trials per cell are the pilot's).

Reported per campaign: the share of replicates whose realised trials, pairs settled and tokens
fall inside the forecast's 10-90% range (targets: 70-90% for trials, at least 80% for pairs
settled), the share below the range and above it, the mean ratio of the forecast median to the
realised trials, and the median wall time of one forecast (one process with ``--jobs`` > 1,
whose replicates run side by side). Also timed: one forecast of a synthetic L = 50, M = 500
binary campaign (cap 80, pilot K, ``--scale-simulations``) on ``--processes`` processes
(the last command above: only that).

``--verdict N``: instead, the calibration of compare's verdict forecast (``forecast --candidate
NAME [--margin X]``): N seeded compare campaigns (one candidate, two incumbents, 30 binary
questions of shared difficulty, cap ``--cap``), the candidate's true score better than the
stronger incumbent by 0.08 ("better"), equal to it ("tie"), below it by the margin ("at the
margin"; the rope without ``--verdict-margin``) or by 0.10 ("worse"), in turn. Per campaign, from
a pilot of ``--pilot`` trials per question, the forecast's probability of each exit code
(0 / 3 / 4) against the exit code of the realised compare run served the same tape; with
``--verdict-budget B``, also the probability within a trial budget B against the realised run
with that budget. Reported: the Brier score (summed over the three codes) against the naive
forecast that gives every campaign the realised base rates, and a reliability table (forecast
probability bins against the realised frequency), in ``OUT/verdict.json`` and
``OUT/verdict.md``::

    python benchmarks/forecast.py --out runs/bv/margin --verdict 200 --verdict-margin 0.05 \
        --verdict-budget 2000                                                   # 1.7 min
    python benchmarks/forecast.py --out runs/bv/plain --verdict 200 --verdict-budget 2000

Campaigns: the demo (``configs/demo.yaml``, its scenario with ``tokens_mean``), campaigns of
``benchmarks/sequential.py``'s suite written as simulated-backend scenarios (30 questions, cap
``--cap``, a per-cell ``tokens_mean``), and replays of every ``*.npz`` under ``--real`` (capped
at their N). Each invocation merges its rows into ``OUT/forecast.json`` (by campaign name) and
rewrites ``OUT/forecast.md``, so campaigns can be run with different replicate counts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from itertools import pairwise
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import compare_campaign, exit_code
from adaptive_eval.config.schema import CampaignConfig, load_config
from adaptive_eval.config.settings import BudgetSettings
from adaptive_eval.control.pilot import PilotCore
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.campaign import Forecast, forecast
from adaptive_eval.forecast.evidence import Evidence
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.pilot import AUTO_START, next_target
from adaptive_eval.forecast.simulate import (
    Truth,
    recorded_costing,
    replay_sampler,
    run_core,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# benchmarks/sequential.py's scenario builders (imported by name, not followed by mypy).
_sequential = importlib.import_module("sequential")
suite: Callable[[int], dict[str, Truth]] = _sequential.suite
matched: Callable[[np.random.Generator, float, int, float], np.ndarray] = _sequential.matched
shuffled: Callable[[np.ndarray, np.random.Generator], np.ndarray] = _sequential.shuffled

DEMO = REPO / "configs" / "demo.yaml"
REAL = REPO.parent / "shared" / "data" / "real"
NO_BUDGET = BudgetSettings(None, None, None)
#: The forecast's predictive (``--predictive``): set in main, inherited by forked workers.
PREDICTIVE = "resolved"
#: The suite campaigns run (benchmarks/sequential.py's names) and their short names here.
SUITE = {
    "12 models, gaps 3x rope": "suite: 12 models, gaps 3x rope",
    "8 models, near-ties": "suite: 8 models, near-ties",
    "categorical rubric (5 models)": "suite: categorical rubric (5 models)",
}
#: The ``simulated`` backend's token spread: gamma-like of this shape (Wilson-Hilferty cube).
TOKEN_SHAPE = 4.0
#: The policy of every campaign here but the demo (the demo's own policy).
POLICY = {
    "confidence": 0.95,
    "error_control": "ranking",
    "rope": 0.02,
    "allocation": "track_and_stop",
}


@dataclass(frozen=True)
class Case:
    """One campaign: its config (built with ``min_trials_per_question`` = the pilot) and where
    its outcome tape comes from (``probs`` to draw from, or recorded ``outcomes`` to shuffle)."""

    name: str
    kind: str  # simulated | replay
    config: str
    data: str  # the scenario (probs, tokens_mean) or the recorded file (outcomes)
    seed: int
    #: The config the forecast is built from where it is not ``config`` (the equal-costs
    #: ablation of a cost-aware campaign).
    forecast_config: str | None = None


@cache
def _config(path: str, pilot: int) -> CampaignConfig:
    return load_config(path, [f"policy.min_trials_per_question={pilot}"])


@cache
def _arrays(case: Case) -> tuple[np.ndarray, np.ndarray | None]:
    """(probs (L, M, K), tokens_mean (L, M) or None) of a scenario, or (outcomes, None)."""
    with np.load(case.data) as data:
        if case.kind == "replay":
            return np.asarray(data["outcomes"], dtype=np.int64), None
        tokens = np.asarray(data["tokens_mean"], np.float64) if "tokens_mean" in data else None
        return np.asarray(data["probs"], dtype=np.float64), tokens


def draw_tokens(mean: np.ndarray, depth: int, rng: np.random.Generator) -> np.ndarray:
    """(L, M, depth) completion lengths drawn as the ``simulated`` backend draws them."""
    normal = rng.standard_normal((*mean.shape, depth))
    cube = (1 - 1 / (9 * TOKEN_SHAPE) + normal * math.sqrt(1 / (9 * TOKEN_SHAPE))) ** 3
    return np.asarray(np.maximum(1, np.rint(mean[..., None] * cube)), dtype=np.int64)


def pilot_evidence(
    tape: np.ndarray, tokens: np.ndarray | None, pilot: int | np.ndarray
) -> Evidence:
    """The tape's first ``pilot`` trials of every cell (a number, or (L, M) per cell), as a
    pilot records them."""
    num_models, num_questions = tape.shape[:2]
    depth = np.broadcast_to(np.asarray(pilot), (num_models, num_questions))
    m, q, t = np.indices((num_models, num_questions, int(depth.max()))).reshape(3, -1)
    kept = t < depth[m, q]
    m, q, t = m[kept], q[kept], t[kept]
    costs = np.full(m.shape, -1) if tokens is None else tokens[m, q, t]
    return Evidence.from_trials(
        (num_models, num_questions),
        m,
        q,
        t,
        tape[m, q, t],
        costs,
        np.zeros(m.shape),
        replayed=True,
        source="pilot",
        detail=f"benchmark pilot of {int(depth.sum())} trials",
    )


class _PilotOnTape(PilotCore):
    """The pilot's core as :func:`run_core` drives it (it asks for the limits too)."""

    def __init__(self, core: Any, trials: int) -> None:
        super().__init__(core, trials)
        self.limits = core.limits


def auto_pilot(
    campaign: Campaign, tape: np.ndarray, tokens: np.ndarray | None, seed: int
) -> tuple[Evidence, Any, RunState, int]:
    """``forecast --pilot auto`` on a tape: the pilot of AUTO_START, then on through the
    campaign's own rounds while :func:`next_target` asks for more. Returns the pilot's evidence,
    the campaign's core and state there (the run continues them), and how many looks it took."""
    core = campaign.decision.decision_core()
    state = RunState(campaign.decision.prior, campaign.decision.weights)
    pilot = _PilotOnTape(core, AUTO_START)
    k = campaign.num_categories
    truth = Truth(np.full((*tape.shape[:2], k), 1 / k), campaign.decision.weights)
    costing = None if tokens is None else recorded_costing(tokens)
    args = (
        campaign.decision.view_settings(),
        truth,
        np.random.default_rng(0),
        replay_sampler(tape, k),
    )
    run_core(pilot, state, *args, costing=costing)  # type: ignore[arg-type]
    looks = 1
    while True:
        look = next_target(campaign.decision, core, state, seed)
        if look.target is None:
            break
        pilot.extend(look.target)
        run_core(pilot, state, *args, costing=costing, decided=True)  # type: ignore[arg-type]
        looks += 1
    return pilot_evidence(tape, tokens, state.trials), core, state, looks


def run_replicate(task: tuple[Case, int, int, int | str, int | None]) -> dict[str, Any]:
    """Replicate ``rep`` of ``case``: forecast from the pilot, then the realised run."""
    case, rep, simulations, asked, processes = task
    pilot = AUTO_START if asked == "auto" else int(asked)
    config = _config(case.config, pilot)
    campaign = build_campaign(_config(case.forecast_config or case.config, pilot))
    cap = campaign.decision.policy.max_trials_per_question
    rng = np.random.default_rng([case.seed, rep])
    arrays, tokens_mean = _arrays(case)
    tokens = None
    if case.kind == "replay":
        tape = shuffled(arrays, rng)[:, :, :cap]
        success = tape.mean(axis=2)
        probs = np.stack([1 - success, success], axis=2)  # unused: the tape is served
    else:
        probs = arrays
        draws = rng.random((*probs.shape[:2], cap))
        tape = (draws[..., None] > probs.cumsum(axis=2)[:, :, None, :]).sum(axis=3)
        if tokens_mean is not None:
            tokens = draw_tokens(tokens_mean, cap, rng)
    grown = None
    if asked == "auto":
        grown = auto_pilot(build_campaign(config), tape, tokens, rep)
        evidence = grown[0]
    else:
        evidence = pilot_evidence(tape, tokens, pilot)
    started = time.perf_counter()
    found = forecast(
        campaign,
        evidence,
        NO_BUDGET,
        simulations=simulations,
        seed=rep,
        processes=processes,
        predictive="spacing" if asked == "auto" else PREDICTIVE,  # as forecast --pilot auto
    )
    seconds = time.perf_counter() - started
    real: Any
    if grown is not None:  # the run continues the pilot's rounds (it reuses them)
        _, core, state, _ = grown
        real = run_core(
            core,
            state,
            campaign.decision.view_settings(),
            Truth(probs, campaign.decision.weights),
            rng,
            replay_sampler(tape, campaign.num_categories),
            costing=None if tokens is None else recorded_costing(tokens),
            decided=True,
        )
    else:
        real = simulate_campaign(
            build_campaign(config).decision,
            Truth(probs, campaign.decision.weights),
            rng,
            replay_sampler(tape, campaign.num_categories),
            costing=None if tokens is None else recorded_costing(tokens),
        )
    settled = sum(d.settled for d in real.decisions)
    real_tokens = None
    if tokens is not None:
        used = np.arange(tape.shape[2]) < real.trials[..., None]
        real_tokens = int((tokens * used).sum())
    return {
        "replicate": rep,
        "pilot_trials": evidence.trials,
        "pilot_looks": None if grown is None else grown[3],
        "resolved": None if found.resolution is None else found.resolution.resolved,
        "seconds": seconds,
        "forecast": _ranges(found),
        "stops": found.stops,
        "realised": {"trials": real.total_trials, "settled": settled, "tokens": real_tokens},
        "realised_stop": None if real.stop is None else real.stop.reason.value,
    }


def _ranges(found: Forecast) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trials": found.trials.record(),
        "settled": found.settled.record(),
        "tokens": None if found.tokens is None else found.tokens.record(),
    }
    return out


def _where(value: float | None, rng: dict[str, float] | None) -> int | None:
    """-1 below the 10-90% range, 0 inside, 1 above; None if unknown."""
    if value is None or rng is None:
        return None
    return -1 if value < rng["p10"] else (1 if value > rng["p90"] else 0)


def summarise(
    case: Case, results: list[dict[str, Any]], simulations: int, pilot: int | str
) -> dict[str, Any]:
    """One campaign's calibration row."""
    row: dict[str, Any] = {
        "campaign": case.name,
        "kind": case.kind,
        "replicates": len(results),
        "simulations": simulations,
        "pilot": pilot,
    }
    for quantity in ("trials", "settled", "tokens"):
        places = [
            _where(r["realised"][quantity], r["forecast"][quantity])
            for r in results
            if r["realised"][quantity] is not None and r["forecast"][quantity] is not None
        ]
        known = [p for p in places if p is not None]
        row[f"{quantity}_inside"] = float(np.mean([p == 0 for p in known])) if known else None
        row[f"{quantity}_below"] = float(np.mean([p < 0 for p in known])) if known else None
        row[f"{quantity}_above"] = float(np.mean([p > 0 for p in known])) if known else None
    ratios = [r["forecast"]["trials"]["p50"] / max(r["realised"]["trials"], 1) for r in results]
    row["trials_ratio"] = float(np.mean(ratios))
    row["trials_realised"] = float(np.mean([r["realised"]["trials"] for r in results]))
    row["trials_forecast_p50"] = float(np.mean([r["forecast"]["trials"]["p50"] for r in results]))
    row["trials_range_width"] = float(
        np.mean(
            [
                (r["forecast"]["trials"]["p90"] - r["forecast"]["trials"]["p10"])
                / max(r["forecast"]["trials"]["p50"], 1)
                for r in results
            ]
        )
    )
    row["settled_realised"] = float(np.mean([r["realised"]["settled"] for r in results]))
    row["settled_forecast_p50"] = float(np.mean([r["forecast"]["settled"]["p50"] for r in results]))
    tokens = [r for r in results if r["realised"]["tokens"] and r["forecast"]["tokens"]]
    row["tokens_ratio"] = (
        float(np.mean([r["forecast"]["tokens"]["p50"] / r["realised"]["tokens"] for r in tokens]))
        if tokens
        else None
    )
    row["seconds_median"] = float(statistics.median(r["seconds"] for r in results))
    row["within_20"] = float(np.mean([abs(ratio - 1) <= 0.2 for ratio in ratios]))
    row["pilot_share"] = float(
        np.mean([r["pilot_trials"] / max(r["realised"]["trials"], 1) for r in results])
    )
    row["resolved_share"] = float(np.mean([bool(r["resolved"]) for r in results]))
    row["results"] = results
    return row


def run_case(
    case: Case, reps: int, simulations: int, pilot: int | str, jobs: int, processes: int | None
) -> dict[str, Any]:
    started = time.perf_counter()
    if jobs > 1:
        tasks = [(case, rep, simulations, pilot, 1) for rep in range(reps)]
        with ProcessPoolExecutor(jobs, mp_context=get_context("fork")) as pool:
            results = list(pool.map(run_replicate, tasks))
    else:
        results = [run_replicate((case, rep, simulations, pilot, processes)) for rep in range(reps)]
    row = summarise(case, results, simulations, pilot)
    row["jobs"] = jobs
    row["seconds_total"] = time.perf_counter() - started
    print(_line(row), flush=True)
    return row


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['campaign']:<44} reps {row['replicates']:>4} "
        f"trials in {_pct(row['trials_inside']):>4} "
        f"(below {_pct(row['trials_below'])}, above {_pct(row['trials_above'])}) "
        f"settled in {_pct(row['settled_inside']):>4} tokens in {_pct(row['tokens_inside']):>4} "
        f"p50/real {row['trials_ratio']:.2f} s/forecast {row['seconds_median']:.1f} "
        f"({row['seconds_total']:.0f}s)"
    )


def markdown(rows: list[dict[str, Any]], scale: dict[str, Any] | None) -> str:
    """The calibration table (docs/forecast.md quotes it)."""
    lines = [
        "| campaign | L x M, cap | replicates x simulations | trials inside (below / above) "
        "| settled inside (below / above) | tokens inside | forecast p50 / realised trials "
        "| s per forecast |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        shape = row.get("shape", "")
        lines.append(
            f"| {row['campaign']} | {shape} | {row['replicates']} x {row['simulations']} | "
            f"{_pct(row['trials_inside'])} ({_pct(row['trials_below'])} / "
            f"{_pct(row['trials_above'])}) | {_pct(row['settled_inside'])} "
            f"({_pct(row['settled_below'])} / {_pct(row['settled_above'])}) | "
            f"{_pct(row['tokens_inside'])} | {row['trials_ratio']:.2f} | "
            f"{row['seconds_median']:.1f} |"
        )
    if scale is not None:
        lines += [
            "",
            f"Scale: one forecast of L = {scale['models']}, M = {scale['questions']} (cap "
            f"{scale['cap']}, pilot {scale['pilot']}, {scale['simulations']} simulations, "
            f"{scale['processes']} processes): {scale['seconds']:.1f} s.",
        ]
    return "\n".join(lines) + "\n"


# --- compare's verdict -------------------------------------------------------------------------

#: The candidate's true score minus the stronger incumbent's, per kind of campaign (``None``:
#: minus the margin, or the rope without one).
VERDICT_KINDS: dict[str, float | None] = {
    "better": 0.08,
    "tie": 0.0,
    "at the margin": None,
    "worse": -0.10,
}
#: compare's exit codes (adaptive_eval.outputs.presentation.COMPARE_EXIT_MEANING).
EXIT_CODES = (0, 3, 4)
#: Reliability bins of a forecast probability (the last one closed).
BINS = (0.0, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0)


@dataclass(frozen=True)
class VerdictTask:
    index: int
    config: str  # the compare campaign's config (simulated backend)
    scenario: str
    kind: str
    delta: float
    simulations: int
    pilot: int
    margin: float | None
    budget: int | None


def shared_difficulty(rng: np.random.Generator, scores: list[float], questions: int) -> np.ndarray:
    """(L, M) success probabilities: ``expit(d_q + s_i)`` with each question's difficulty
    ``d_q ~ N(0, 1.2)`` shared by the models and ``s_i`` fitted so model i's mean is its score
    (the models' per-question outcomes correlate, as real checkpoints' do)."""
    from scipy.optimize import brentq
    from scipy.special import expit

    difficulty = rng.normal(0.0, 1.2, questions)
    rows = []
    for score in scores:
        shift = brentq(lambda x, t=score: expit(difficulty + x).mean() - t, -20, 20, xtol=1e-12)
        rows.append(np.clip(expit(difficulty + shift), 0.005, 0.995))
    return np.asarray(rows, dtype=np.float64)


def verdict_tasks(
    folder: Path,
    count: int,
    simulations: int,
    pilot: int,
    cap: int,
    questions: int,
    margin: float | None,
    budget: int | None,
) -> list[VerdictTask]:
    """``count`` compare campaigns, the kinds in turn, each a scenario and config."""
    tasks = []
    kinds = list(VERDICT_KINDS)
    for index in range(count):
        kind = kinds[index % len(kinds)]
        rng = np.random.default_rng([70, index])
        strong = float(rng.uniform(0.45, 0.7))
        delta = VERDICT_KINDS[kind]
        if delta is None:
            delta = -(margin if margin is not None else POLICY["rope"])  # type: ignore[operator]
        scores = [strong + delta, strong, strong - 0.1]  # candidate, incumbents
        success = shared_difficulty(rng, scores, questions)
        probs = np.stack([1 - success, success], axis=2)
        scenario = folder / f"verdict{index}.npz"
        np.savez(scenario, probs=probs, models=np.array(["cand", "inc-a", "inc-b"]))
        data = {
            "name": f"verdict{index}",
            "seed": index,
            "models": [{"backend": "simulated", "path": str(scenario)}],
            "rubric": {"weights": [0, 1]},
            "policy": {**POLICY, "min_trials_per_question": 2, "max_trials_per_question": cap},
        }
        config = _write_config(folder / f"verdict{index}.yaml", data)
        tasks.append(
            VerdictTask(
                index, config, str(scenario), kind, delta, simulations, pilot, margin, budget
            )
        )
    return tasks


def run_verdict(task: VerdictTask) -> dict[str, Any]:
    """One compare campaign: the verdict forecast from its pilot, and the realised run(s)."""
    config = _config(task.config, task.pilot)
    campaign, judge = compare_campaign(build_campaign(config), "cand", task.margin)
    cap = campaign.decision.policy.max_trials_per_question
    with np.load(task.scenario) as data:
        probs = np.asarray(data["probs"], dtype=np.float64)
    rng = np.random.default_rng([71, task.index])
    draws = rng.random((*probs.shape[:2], cap))
    tape = (draws[..., None] > probs.cumsum(axis=2)[:, :, None, :]).sum(axis=3)
    evidence = pilot_evidence(tape, None, task.pilot)
    budget = BudgetSettings(task.budget, None, None)
    started = time.perf_counter()
    found = forecast(
        campaign,
        evidence,
        budget,
        simulations=task.simulations,
        seed=task.index,
        processes=1,
        judge=judge,
    )
    seconds = time.perf_counter() - started
    assert found.verdict is not None

    def realised(trial_budget: int | None) -> dict[str, Any]:
        steered = config
        if trial_budget is not None:
            steered = load_config(
                task.config,
                [
                    f"policy.min_trials_per_question={task.pilot}",
                    f"budget.trials={trial_budget}",
                ],
            )
        fresh, own_judge = compare_campaign(build_campaign(steered), "cand", task.margin)
        real = simulate_campaign(
            fresh.decision,
            Truth(probs, campaign.decision.weights),
            np.random.default_rng(0),
            replay_sampler(tape, campaign.num_categories),
        )
        decided = [v.decision for v in own_judge(real.decisions)]
        return {
            "exit_code": exit_code(decided),
            "decisions": decided,
            "trials": real.total_trials,
        }

    verdict = found.verdict
    return {
        "index": task.index,
        "kind": task.kind,
        "delta": task.delta,
        "seconds": seconds,
        "forecast": {str(code): verdict.at_cap[code] for code in EXIT_CODES},
        "forecast_in_budget": None
        if verdict.in_budget is None
        else {str(code): verdict.in_budget[code] for code in EXIT_CODES},
        "realised": realised(None),
        "realised_in_budget": None if task.budget is None else realised(task.budget),
    }


def brier(forecasts: list[dict[str, float]], outcomes: list[int]) -> float:
    """Mean over campaigns of sum_k (p_k - [k realised])^2 (0 best, 2 worst)."""
    return float(
        np.mean(
            [
                sum((f[str(k)] - (k == o)) ** 2 for k in EXIT_CODES)
                for f, o in zip(forecasts, outcomes, strict=True)
            ]
        )
    )


def reliability(forecasts: list[dict[str, float]], outcomes: list[int]) -> list[dict[str, Any]]:
    """Per probability bin and exit code: campaigns, mean forecast, realised frequency."""
    rows = []
    for low, high in pairwise(BINS):
        row: dict[str, Any] = {"low": low, "high": high}
        for code in EXIT_CODES:
            inside = [
                (f[str(code)], o == code)
                for f, o in zip(forecasts, outcomes, strict=True)
                if low <= f[str(code)] < high or (high == 1.0 and f[str(code)] == 1.0)
            ]
            row[str(code)] = {
                "n": len(inside),
                "forecast": float(np.mean([p for p, _ in inside])) if inside else None,
                "realised": float(np.mean([hit for _, hit in inside])) if inside else None,
            }
        rows.append(row)
    return rows


def verdict_summary(results: list[dict[str, Any]], budgeted: bool) -> dict[str, Any]:
    """Brier scores (forecast and base rate), reliability, and a row per kind."""
    key, real = (
        ("forecast_in_budget", "realised_in_budget") if budgeted else ("forecast", "realised")
    )
    forecasts = [r[key] for r in results]
    outcomes = [r[real]["exit_code"] for r in results]
    base = {str(k): float(np.mean([o == k for o in outcomes])) for k in EXIT_CODES}
    found = brier(forecasts, outcomes)
    naive = brier([base] * len(outcomes), outcomes)
    kinds = []
    for kind in VERDICT_KINDS:
        mine = [i for i, r in enumerate(results) if r["kind"] == kind]
        if not mine:
            continue
        kinds.append(
            {
                "kind": kind,
                "campaigns": len(mine),
                "forecast": {
                    str(k): float(np.mean([forecasts[i][str(k)] for i in mine])) for k in EXIT_CODES
                },
                "realised": {
                    str(k): float(np.mean([outcomes[i] == k for i in mine])) for k in EXIT_CODES
                },
                "brier": brier([forecasts[i] for i in mine], [outcomes[i] for i in mine]),
                "brier_base_rate": brier([base] * len(mine), [outcomes[i] for i in mine]),
            }
        )
    return {
        "campaigns": len(results),
        "base_rate": base,
        "brier": found,
        "brier_base_rate": naive,
        "skill": 1 - found / naive if naive > 0 else None,
        "kinds": kinds,
        "reliability": reliability(forecasts, outcomes),
    }


def verdict_markdown(record: dict[str, Any]) -> str:
    """Brier scores, the per-kind table and the reliability table (docs/forecast.md)."""
    lines = []
    for label, found in (
        ("at the cap", record["at_cap"]),
        ("within the budget", record["in_budget"]),
    ):
        if found is None:
            continue
        base = ", ".join(f"exit {k} {100 * v:.0f}%" for k, v in found["base_rate"].items())
        lines += [
            f"**{label}** ({found['campaigns']} campaigns; realised base rates: {base}): Brier "
            f"{found['brier']:.3f} against {found['brier_base_rate']:.3f} for the base rates "
            f"(skill {found['skill']:.2f}).",
            "",
            "| candidate | campaigns | forecast P(0 / 3 / 4) | realised 0 / 3 / 4 | Brier "
            "| Brier, base rates |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in found["kinds"]:
            shares = " / ".join(f"{100 * row['forecast'][str(k)]:.0f}%" for k in EXIT_CODES)
            real = " / ".join(f"{100 * row['realised'][str(k)]:.0f}%" for k in EXIT_CODES)
            lines.append(
                f"| {row['kind']} | {row['campaigns']} | {shares} | {real} | "
                f"{row['brier']:.3f} | {row['brier_base_rate']:.3f} |"
            )
        lines += [
            "",
            "| forecast probability | exit 0: n, mean forecast, realised | exit 3 | exit 4 |",
            "|---|---:|---:|---:|",
        ]
        for row in found["reliability"]:
            cells = []
            for k in EXIT_CODES:
                cell = row[str(k)]
                cells.append(
                    "-"
                    if not cell["n"]
                    else f"{cell['n']}, {cell['forecast']:.2f}, {cell['realised']:.2f}"
                )
            close = "]" if row["high"] == 1.0 else ")"
            lines.append(
                f"| [{row['low']:.2f}, {row['high']:.2f}{close} | " + " | ".join(cells) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def verdict_main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-verdict-") as tmp:
        tasks = verdict_tasks(
            Path(tmp),
            args.verdict,
            args.simulations,
            args.pilot,
            args.cap,
            args.questions,
            args.verdict_margin,
            args.verdict_budget,
        )
        results = []
        with ProcessPoolExecutor(max(1, args.jobs), mp_context=get_context("fork")) as pool:
            for result in pool.map(run_verdict, tasks):
                results.append(result)
                shares = "/".join(f"{result['forecast'][str(k)]:.2f}" for k in EXIT_CODES)
                print(
                    f"# {result['index']:>4} {result['kind']:<14} P(0/3/4) {shares} realised "
                    f"{result['realised']['exit_code']} ({result['seconds']:.1f} s)",
                    flush=True,
                )
    record = {
        "campaigns": args.verdict,
        "simulations": args.simulations,
        "pilot": args.pilot,
        "cap": args.cap,
        "questions": args.questions,
        "margin": args.verdict_margin,
        "budget": args.verdict_budget,
        "seconds_total": time.perf_counter() - started,
        "seconds_median": float(statistics.median(r["seconds"] for r in results)),
        "at_cap": verdict_summary(results, budgeted=False),
        "in_budget": verdict_summary(results, budgeted=True) if args.verdict_budget else None,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verdict.json").write_text(json.dumps(record, indent=2) + "\n")
    text = verdict_markdown(record)
    (args.out / "verdict.md").write_text(text)
    print()
    print(text)
    print(
        f"{args.verdict} campaigns x {args.simulations} simulations in "
        f"{record['seconds_total']:.0f} s (median forecast {record['seconds_median']:.1f} s)"
    )


# --- campaigns ---------------------------------------------------------------------------------


def _write_config(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _simulated_config(
    folder: Path, name: str, probs: np.ndarray, weights: list[float], cap: int, tokens: np.ndarray
) -> tuple[str, str]:
    """A simulated-backend scenario and its config, in ``folder``."""
    stem = "".join(ch if ch.isalnum() else "_" for ch in name)
    scenario = folder / f"{stem}.npz"
    names = np.array([f"m{i}" for i in range(probs.shape[0])])
    np.savez(scenario, probs=probs, models=names, tokens_mean=tokens)
    data = {
        "name": stem,
        "seed": 0,
        "models": [{"backend": "simulated", "path": str(scenario)}],
        "rubric": {"weights": weights},
        "policy": {**POLICY, "min_trials_per_question": 2, "max_trials_per_question": cap},
    }
    return _write_config(folder / f"{stem}.yaml", data), str(scenario)


def token_means(shape: tuple[int, int], seed: int) -> np.ndarray:
    """(L, M) mean completion lengths: a per-model level (300..3000) times a per-question
    lognormal factor (sigma 0.5)."""
    rng = np.random.default_rng(seed)
    level = np.exp(rng.uniform(np.log(300), np.log(3000), shape[0]))
    return np.asarray(level[:, None] * np.exp(rng.normal(0, 0.5, shape)), dtype=np.float64)


def demo_case(folder: Path) -> Case:
    """configs/demo.yaml with its scenario path made absolute."""
    data = yaml.safe_load(DEMO.read_text())
    scenario = (DEMO.parent / data["models"][0]["path"]).resolve()
    data["models"][0]["path"] = str(scenario)
    config = _write_config(folder / "demo.yaml", data)
    return Case("demo (configs/demo.yaml)", "simulated", config, str(scenario), 1)


def suite_cases(folder: Path, questions: int, cap: int, others: bool = False) -> list[Case]:
    """The campaigns of ``SUITE``; ``others``: instead the rest of benchmarks/sequential.py's
    suite, numbered after ``SUITE``'s (whose seeds stay as they were)."""
    truths = suite(questions)
    labels = {name: f"suite: {name}" for name in truths if name not in SUITE} if others else SUITE
    first = len(SUITE) if others else 0
    cases = []
    for index, (name, label) in enumerate(labels.items(), start=first):
        truth = truths[name]
        tokens = token_means(truth.shape[:2], 100 + index)
        config, scenario = _simulated_config(
            folder, label, truth.probs, [float(w) for w in truth.weights], cap, tokens
        )
        cases.append(Case(label, "simulated", config, scenario, 10 + index))
    return cases


def cost_aware_cases(folder: Path, cases: list[Case], equal_costs: bool) -> list[Case]:
    """The simulated ``cases`` with ``track_and_stop(cost=tokens)``: each model's trials
    weighed by its mean completion length (the suite's models differ up to tenfold).
    ``equal_costs``: forecast them as if every trial cost the same (what the forecast did before
    it priced its simulated rounds), against the same cost-aware realised runs."""
    out = []
    for case in cases:
        if case.kind != "simulated":
            continue
        data = yaml.safe_load(Path(case.config).read_text())
        stem = Path(case.config).stem
        data["policy"]["allocation"] = {"name": "track_and_stop", "cost": "tokens"}
        config = _write_config(folder / f"{stem}-tokens.yaml", data)
        name = f"cost-aware: {case.name.removeprefix('suite: ')}"
        plain = None
        if equal_costs:
            data["policy"]["allocation"] = {"name": "track_and_stop", "cost": "trials"}
            plain = _write_config(folder / f"{stem}-trials.yaml", data)
            name += " [forecast at equal costs]"
        out.append(replace(case, name=name, config=config, forecast_config=plain))
    return out


def replay_cases(folder: Path, real: Path) -> list[Case]:
    cases = []
    for index, path in enumerate(sorted(real.glob("*.npz"))):
        with np.load(path) as data:
            depth = int(data["outcomes"].shape[2])
        data_ = {
            "name": path.stem,
            "seed": 0,
            "models": [{"backend": "replay", "path": str(path), "key": "outcomes"}],
            "rubric": {"weights": [0, 1]},
            "policy": {**POLICY, "min_trials_per_question": 2, "max_trials_per_question": depth},
        }
        config = _write_config(folder / f"{path.stem}.yaml", data_)
        cases.append(Case(f"replay: {path.stem}", "replay", config, str(path), 20 + index))
    return cases


def scale_case(folder: Path, models: int, questions: int, cap: int) -> Case:
    """A synthetic binary campaign: scores spread 0.2..0.8, per-question Beta (kappa 4)."""
    rng = np.random.default_rng(50)
    success = np.stack([matched(rng, t, questions, 4.0) for t in np.linspace(0.2, 0.8, models)])
    probs = np.stack([1 - success, success], axis=2)
    tokens = token_means((models, questions), 50)
    config, scenario = _simulated_config(
        folder, f"scale {models}x{questions}", probs, [0.0, 1.0], cap, tokens
    )
    return Case(f"scale: L={models}, M={questions}", "simulated", config, scenario, 50)


def chosen(
    cases: list[Case], only: str | None, replicates: int, real_replicates: int
) -> list[tuple[Case, int]]:
    """The cases whose name holds one of ``only``'s comma-separated words (all without it),
    each with its replicates (``real_replicates`` for a replay), those with none left out."""
    wanted = only.split(",") if only else [""]
    picked = [c for c in cases if any(w in c.name for w in wanted)]
    counted = [(c, real_replicates if c.kind == "replay" else replicates) for c in picked]
    return [(c, reps) for c, reps in counted if reps > 0]


def _shape(case: Case, pilot: int | str) -> str:
    campaign = build_campaign(_config(case.config, AUTO_START if pilot == "auto" else int(pilot)))
    cap = campaign.decision.policy.max_trials_per_question
    return f"{campaign.num_models} x {campaign.num_questions}, {cap}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicates", type=int, default=20, help="per simulated campaign")
    parser.add_argument("--real-replicates", type=int, default=5, help="per real replay")
    parser.add_argument("--simulations", type=int, default=40, help="per forecast")
    parser.add_argument(
        "--pilot",
        type=lambda text: text if text == "auto" else int(text),
        default=4,
        help="pilot trials per question, or auto (forecast --pilot auto)",
    )
    parser.add_argument("--questions", type=int, default=30, help="suite campaigns' questions")
    parser.add_argument("--cap", type=int, default=100, help="suite campaigns' cap")
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="replicates run side by side, each forecast on one process (1: one at a time, "
        "each forecast on --processes)",
    )
    parser.add_argument(
        "--processes", type=int, default=None, help="a forecast's processes (default: the CPUs)"
    )
    parser.add_argument(
        "--only", default=None, help="campaigns whose name contains one of these (a,b)"
    )
    parser.add_argument("--real", type=Path, default=REAL, help="folder of real outcome files")
    parser.add_argument(
        "--equal-costs",
        action="store_true",
        help="forecast the cost-aware campaigns as if every trial cost the same (an ablation)",
    )
    parser.add_argument(
        "--whole-suite",
        action="store_true",
        help="also the other campaigns of benchmarks/sequential.py's suite (at --cap)",
    )
    parser.add_argument("--no-scale", action="store_true", help="skip the L x M timing")
    parser.add_argument("--scale-models", type=int, default=50)
    parser.add_argument("--scale-questions", type=int, default=500)
    parser.add_argument("--scale-simulations", type=int, default=40)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-forecast")
    parser.add_argument(
        "--predictive",
        choices=("spacing", "cells", "resolved"),
        default="resolved",
        help="the forecast's truths: each cell's posterior (the default) or tilted to the "
        "deconvolved spacing prior (measured, not adopted: docs/forecast.md)",
    )
    parser.add_argument(
        "--verdict",
        type=int,
        default=0,
        help="instead: calibrate compare's verdict forecast over this many compare campaigns",
    )
    parser.add_argument(
        "--verdict-margin",
        type=float,
        default=None,
        help="the compare campaigns' non-inferiority margin (default: none, the pair rules)",
    )
    parser.add_argument(
        "--verdict-budget", type=int, default=None, help="also a trial budget's verdict"
    )
    args = parser.parse_args()
    global PREDICTIVE
    PREDICTIVE = args.predictive
    if args.verdict > 0:
        verdict_main(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "forecast.json"
    saved: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    rows: dict[str, dict[str, Any]] = {row["campaign"]: row for row in saved.get("rows", [])}
    scale: dict[str, Any] | None = saved.get("scale")

    def save() -> None:
        record = {"rows": list(rows.values()), "scale": scale}
        store.write_text(json.dumps(record, indent=2) + "\n")
        (args.out / "forecast.md").write_text(markdown(list(rows.values()), scale))

    with tempfile.TemporaryDirectory(prefix="bench-forecast-") as tmp:
        folder = Path(tmp)
        cases = [demo_case(folder), *suite_cases(folder, args.questions, args.cap)]
        cases += cost_aware_cases(folder, cases, args.equal_costs)
        if args.whole_suite:
            cases += suite_cases(folder, args.questions, args.cap, others=True)
        if args.real.is_dir():
            cases += replay_cases(folder, args.real)
        else:
            print(f"# no real outcome files at {args.real}: replays skipped", flush=True)
        for case, reps in chosen(cases, args.only, args.replicates, args.real_replicates):
            print(f"# {case.name}: {reps} replicates", flush=True)
            row = run_case(case, reps, args.simulations, args.pilot, args.jobs, args.processes)
            row["shape"] = _shape(case, args.pilot)
            rows[case.name] = row
            save()
        if not args.no_scale:
            case = scale_case(folder, args.scale_models, args.scale_questions, min(80, args.cap))
            result = run_replicate((case, 0, args.scale_simulations, args.pilot, args.processes))
            scale = {
                "models": args.scale_models,
                "questions": args.scale_questions,
                "cap": min(80, args.cap),
                "pilot": args.pilot,
                "simulations": args.scale_simulations,
                "processes": args.processes or "default (the CPUs, at most 8)",
                **result,
            }
            print(
                f"# scale L={args.scale_models}, M={args.scale_questions}: one forecast "
                f"{result['seconds']:.1f} s; realised {result['realised']}, forecast "
                f"{result['forecast']['trials']}",
                flush=True,
            )
            save()
    print()
    print(markdown(list(rows.values()), scale))


if __name__ == "__main__":
    main()
