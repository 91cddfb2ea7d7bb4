"""Calibration of the live forecast (the forecast of the rest of a run, made after each round):
once a share of the final trials is in, is its median within 20% of the run's total, and does
its 10-90% range hold the total?

    python benchmarks/live_forecast.py --out runs/bench-live --replicates 50 --cap 400
    python benchmarks/live_forecast.py --overhead 3    # wall time, live forecast on vs off
    python benchmarks/live_forecast.py --speed 3       # CPU seconds of one forecast at round 1

Per replicate of a campaign (the cases of ``benchmarks/forecast.py``: the demo, the suite of
``benchmarks/sequential.py`` written as simulated scenarios at ``--cap``, and replays of every
real file), seeded:

1. An outcome tape is fixed (drawn from the scenario, or each cell's recorded outcomes shuffled).
2. The realised run is the campaign (default policy of the case, no pilot) served the tape in
   order: :func:`~adaptive_eval.forecast.simulate.run_core`, the controller's loop.
3. The same run again (it is deterministic given the tape), stopped at the first round whose
   trials reach each share of ``--at`` (default 0.25 and 0.5) of the realised total: the
   controller's core and state there are the snapshot the live forecast gets
   (:func:`~adaptive_eval.forecast.live.forecast_rest`, ``--simulations`` continuations).

Reported per campaign and share: the share of replicates whose realised total is inside the
forecast's 10-90% range (target 70-90%), the share whose forecast median is within 20% of it
(target >= 80%), and the median |p50 / realised - 1|. The live forecast runs in a background
process in a real run; here in this one, timed (``s per forecast``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.config.schema import load_config
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import RoundDecision
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.live import Snapshot, forecast_rest
from adaptive_eval.forecast.simulate import Truth, recorded_costing, replay_sampler, run_core

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
_forecast = importlib.import_module("forecast")
Case = _forecast.Case
demo_case: Callable[[Path], Any] = _forecast.demo_case
suite_cases: Callable[..., list[Any]] = _forecast.suite_cases
replay_cases: Callable[[Path, Path], list[Any]] = _forecast.replay_cases
arrays_of: Callable[[Any], tuple[np.ndarray, np.ndarray | None]] = _forecast._arrays
draw_tokens: Callable[..., np.ndarray] = _forecast.draw_tokens
shuffled: Callable[[np.ndarray, np.random.Generator], np.ndarray] = _forecast.shuffled
REAL: Path = _forecast.REAL
chosen: Callable[..., list[tuple[Any, int]]] = _forecast.chosen


#: The live forecast's predictive (``--predictive``), inherited by forked workers.
PREDICTIVE = "spacing"


class _Reached(Exception):
    """Stops a replayed run at the round a snapshot is taken."""


def _tape(case: Any, cap: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    arrays, tokens_mean = arrays_of(case)
    if case.kind == "replay":
        return shuffled(arrays, rng)[:, :, :cap], None
    draws = rng.random((*arrays.shape[:2], cap))
    tape = (draws[..., None] > arrays.cumsum(axis=2)[:, :, None, :]).sum(axis=3)
    return tape, None if tokens_mean is None else draw_tokens(tokens_mean, cap, rng)


def _truth(case: Any, tape: np.ndarray) -> np.ndarray | None:
    """The case's true (L, M, K) category probabilities (a replay's: its cells' frequencies
    over the whole shuffled file, the truth its runs are draws of), or None."""
    arrays, _ = arrays_of(case)
    if case.kind != "replay":
        return np.asarray(arrays, dtype=np.float64)
    k = int(arrays.max()) + 1
    found: np.ndarray = (arrays[..., None] == np.arange(max(k, 2))).mean(axis=2)
    return found


def _run(
    campaign: Campaign,
    tape: np.ndarray,
    tokens: np.ndarray | None,
    stop_at: int | None,
) -> tuple[RunState, Any]:
    """The campaign served ``tape``; with ``stop_at``, halted after the first round whose trials
    reach it (the state and core there)."""
    state = RunState(
        campaign.decision.prior,
        campaign.decision.weights,
        bayes_prior=campaign.decision.policy.bayes_prior,
    )
    core = campaign.decision.decision_core()

    def watch(view: CampaignView, outcome: RoundDecision) -> None:
        if stop_at is not None and view.trials_used >= stop_at:
            raise _Reached

    truth = Truth(
        np.full((*tape.shape[:2], campaign.num_categories), 1 / campaign.num_categories),
        campaign.decision.weights,
    )
    with contextlib.suppress(_Reached):
        run_core(
            core,
            state,
            campaign.decision.view_settings(),
            truth,
            np.random.default_rng(0),
            replay_sampler(tape, campaign.num_categories),
            watch,
            None if tokens is None else recorded_costing(tokens),
        )
    return state, core


def run_replicate(task: tuple[Any, int, int, tuple[float, ...]]) -> dict[str, Any]:
    case, rep, simulations, shares = task
    campaign = build_campaign(load_config(case.config))
    cap = campaign.decision.policy.max_trials_per_question
    rng = np.random.default_rng([case.seed, rep, 3])
    tape, tokens = _tape(case, cap, rng)
    final_state, _ = _run(campaign, tape, tokens, None)
    final = final_state.trials_used
    out: dict[str, Any] = {"replicate": rep, "realised": final, "at": {}}
    for share in shares:
        state, core = _run(
            build_campaign(load_config(case.config)), tape, tokens, int(share * final)
        )
        if core.stop is not None or state.trials_used >= final:
            out["at"][str(share)] = None  # the run ended in that round: nothing left to forecast
            continue
        snapshot = Snapshot.of(core, state, seed=rep, simulations=simulations)
        started = time.perf_counter()
        found = forecast_rest(campaign.decision, snapshot, PREDICTIVE)
        out["at"][str(share)] = {
            "trials_used": state.trials_used,
            "trials": found.trials.record(),
            "ratio": found.trials.p50 / final,
            "seconds": time.perf_counter() - started,
        }
        truth = _truth(case, tape)
        if truth is not None:  # the oracle: the true category probabilities, no predictive
            known = forecast_rest(campaign.decision, snapshot, truths=[truth] * simulations)
            out["at"][str(share)]["oracle"] = known.trials.record()
    return out


def summarise(
    name: str, results: list[dict[str, Any]], shares: tuple[float, ...]
) -> dict[str, Any]:
    row: dict[str, Any] = {"campaign": name, "replicates": len(results), "by_share": {}}
    for share in shares:
        made = [(r["realised"], r["at"][str(share)]) for r in results if r["at"].get(str(share))]
        if not made:
            continue
        inside = [f["trials"]["p10"] <= real <= f["trials"]["p90"] for real, f in made]
        errors = [abs(f["trials"]["p50"] / real - 1) for real, f in made]
        row["by_share"][str(share)] = {
            "forecasts": len(made),
            "inside": float(np.mean(inside)),
            "within_20": float(np.mean([e <= 0.2 for e in errors])),
            "median_error": float(np.median(errors)),
            "median_ratio": float(np.median([f["trials"]["p50"] / real for real, f in made])),
            "seconds": float(statistics.median(f["seconds"] for _, f in made)),
        }
        oracle = [(real, f["oracle"]) for real, f in made if "oracle" in f]
        if oracle:
            row["by_share"][str(share)]["oracle_within_20"] = float(
                np.mean([abs(o["p50"] / real - 1) <= 0.2 for real, o in oracle])
            )
            row["by_share"][str(share)]["oracle_inside"] = float(
                np.mean([o["p10"] <= real <= o["p90"] for real, o in oracle])
            )
    row["realised_mean"] = float(np.mean([r["realised"] for r in results]))
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| campaign | made at | forecasts | total inside 10-90% | p50 within 20% "
        "| median abs(p50/real - 1) | median p50/real | s per forecast | oracle: within 20%, "
        "inside |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        for share, found in row["by_share"].items():
            oracle = (
                f"{found['oracle_within_20']:.0%}, {found['oracle_inside']:.0%}"
                if "oracle_within_20" in found
                else "-"
            )
            lines.append(
                f"| {row['campaign']} | {float(share):.0%} | {found['forecasts']} | "
                f"{found['inside']:.0%} | {found['within_20']:.0%} | {found['median_error']:.3f} | "
                f"{found['median_ratio']:.2f} | {found['seconds']:.2f} | {oracle} |"
            )
    return "\n".join(lines) + "\n"


def overhead(
    runs: int, models: int, questions: int, folder: Path, per_trial_s: float = 0.0
) -> dict[str, Any]:
    """Wall time of ``runs`` paired runs of a synthetic L x M campaign (cap 80, inline
    dispatch; ``per_trial_s``: emulated GPU time per trial), the live forecast on (its default)
    and off, in turn: the median ratio on/off, and the live forecasts the on-runs made."""
    import subprocess

    case = _forecast.scale_case(folder, models, questions, 80)
    if per_trial_s:
        import yaml

        data = yaml.safe_load(Path(case.config).read_text())
        data["models"][0]["latency"] = {"per_trial_s": per_trial_s}
        Path(case.config).write_text(yaml.safe_dump(data, sort_keys=False))
    cli = str(Path(sys.executable).parent / "adaptive-eval")
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    made = []
    for run in range(runs):
        for mode, value in (("on", 20), ("off", 0)):
            out = folder / f"run-{mode}-{run}"
            started = time.perf_counter()
            subprocess.run(
                [
                    cli,
                    "run",
                    case.config,
                    "--out",
                    str(out),
                    "--quiet",
                    "--set",
                    "execution.dispatch=inline",
                    "--set",
                    f"output.live_forecast={value}",
                ],
                check=True,
            )
            seconds[mode].append(time.perf_counter() - started)
            if mode == "on":
                summary = json.loads((out / "summary.json").read_text())
                made.append(len(summary.get("live_forecast") or []))
    ratios = [a / b for a, b in zip(seconds["on"], seconds["off"], strict=True)]
    return {
        "models": models,
        "questions": questions,
        "per_trial_s": per_trial_s,
        "seconds": seconds,
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
        "live_forecasts_made": made,
    }


def speed(repeats: int, folder: Path) -> dict[str, Any]:
    """CPU seconds of one forecast (``LIVE_SIMULATIONS`` continuations) at round 1 of the
    12-model suite campaign (30 questions, cap 400) and of a 50 x 500 campaign (cap 80), with
    the boundary tables built first (the forecast process builds them while it waits)."""
    from adaptive_eval.forecast.live import LIVE_SIMULATIONS
    from policies.batched import batched_pair_rule

    twelve = next(c for c in suite_cases(folder, 30, 400) if "12 models" in c.name)
    found: dict[str, Any] = {}
    for name, case in (
        ("12 x 30", twelve),
        ("50 x 500", _forecast.scale_case(folder, 50, 500, 80)),
    ):
        campaign = build_campaign(load_config(case.config))
        cap = campaign.decision.policy.max_trials_per_question
        tape, tokens = _tape(case, cap, np.random.default_rng([case.seed, 0, 3]))
        state, core = _run(campaign, tape, tokens, 1)  # halted after round 1
        settings = campaign.decision.view_settings()
        for rule in campaign.decision.pair_rules:
            batched = batched_pair_rule(rule, campaign.decision.capacity)
            if batched is not None:
                list(batched.warm(settings.confidence, settings.error_control))
        snapshot = Snapshot.of(core, state, simulations=LIVE_SIMULATIONS)
        seconds = []
        for _ in range(repeats):
            started = time.process_time()
            forecast_rest(campaign.decision, snapshot)
            seconds.append(time.process_time() - started)
        found[name] = {"round_1_trials": state.trials_used, "cpu_s": seconds}
        print(f"{name}: {', '.join(f'{x:.2f}' for x in seconds)} s", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--real-replicates", type=int, default=5)
    parser.add_argument("--simulations", type=int, default=20)
    parser.add_argument("--cap", type=int, default=400, help="the suite campaigns' cap")
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--at", default="0.25,0.5", help="shares of the realised trials")
    parser.add_argument("--only", default=None, help="campaigns whose name contains one of these")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE.parent / "runs" / "bench-live")
    parser.add_argument("--predictive", choices=("spacing", "cells"), default="spacing")
    parser.add_argument(
        "--overhead",
        type=int,
        default=0,
        help="instead: this many paired runs of an L = 50, M = 500 campaign, live forecast on "
        "and off (inline dispatch), timed",
    )
    parser.add_argument(
        "--per-trial-s",
        type=float,
        default=0.0,
        help="with --overhead: emulated GPU time per trial (latency.per_trial_s)",
    )
    parser.add_argument(
        "--speed",
        type=int,
        default=0,
        help="instead: CPU seconds of one forecast at round 1, this many times (12 x 30, 50 x 500)",
    )
    args = parser.parse_args()
    if args.speed:
        with tempfile.TemporaryDirectory(prefix="bench-live-speed-") as tmp:
            print(json.dumps(speed(args.speed, Path(tmp)), indent=2))
        return
    if args.overhead:
        with tempfile.TemporaryDirectory(prefix="bench-live-overhead-") as tmp:
            found = overhead(args.overhead, 50, 500, Path(tmp), args.per_trial_s)
        print(json.dumps(found, indent=2))
        return
    global PREDICTIVE
    PREDICTIVE = args.predictive
    shares = tuple(float(s) for s in args.at.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "live.json"
    saved = json.loads(store.read_text()) if store.exists() else {"rows": []}
    rows = {row["campaign"]: row for row in saved["rows"]}
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        folder = Path(tmp)
        cases = [demo_case(folder), *suite_cases(folder, args.questions, args.cap)]
        cases += suite_cases(folder, args.questions, args.cap, others=True)
        cases += replay_cases(folder, REAL) if REAL.is_dir() else []
        for case, reps in chosen(cases, args.only, args.replicates, args.real_replicates):
            tasks = [(case, rep, args.simulations, shares) for rep in range(reps)]
            started = time.perf_counter()
            if args.jobs > 1:
                with ProcessPoolExecutor(args.jobs, mp_context=get_context("fork")) as pool:
                    results = list(pool.map(run_replicate, tasks))
            else:
                results = [run_replicate(t) for t in tasks]
            row = summarise(case.name, results, shares)
            row["seconds_total"] = time.perf_counter() - started
            rows[case.name] = row
            print(markdown([row]).splitlines()[-1], f"({row['seconds_total']:.0f} s)", flush=True)
            store.write_text(json.dumps({"rows": list(rows.values())}, indent=2) + "\n")
            (args.out / "live.md").write_text(markdown(list(rows.values())))
    print()
    print(markdown(list(rows.values())))


if __name__ == "__main__":
    main()
