"""The live forecast as a user meets it: ``adaptive-eval run`` (and ``compare`` for the gate's
family) with emulated GPU time, read back from each run's ``events.jsonl`` and
``summary.json``.

    python benchmarks/live_forecast_runs.py --out runs/bench-live-runs --runs 20 --seconds 130
    python benchmarks/live_forecast_runs.py --only "12 models" --runs 20 --load 1   # loaded

Per family (the demo, the campaigns of ``benchmarks/live_forecast.py``, each real outcome file
of ``../shared/data/real`` as a simulated scenario of its cells' recorded frequencies), each
run is the shipped command on a config whose simulated backend takes ``latency.per_trial_s``
so that a run lasts about ``--seconds`` (inline dispatch: trials one batch at a time), seeded
``seed: run``. ``--parallel`` runs go side by side; ``--load N`` adds N busy processes (a
second campaign's worth of work) beside them.

Per run: the final trials; every ``live_forecast`` event (made at ``trials_used``, its 10-50-90%
total); when the first round was applied (``first_round``) and the first forecast came. Per
family and share q of the final trials (10, 25, 50, 75%): the share of runs with a forecast made
within ``[q, q + 10%)`` (fresh there), and the forecast a user sees at q (the latest made by
then): its p50 within 20% of the final, its 10-90% range holding the final.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
_forecast = importlib.import_module("forecast")
CLI = str(Path(sys.executable).with_name("adaptive-eval"))
SHARES = (0.1, 0.25, 0.5, 0.75)
#: The gate's family is run through ``compare`` with this candidate.
GATE = {"suite: checkpoint vs 2 incumbents": "m0"}


def families(folder: Path, cap: int, questions: int) -> list[Any]:
    """The cases, each a simulated scenario (real files as their cells' frequencies)."""
    cases = [_forecast.demo_case(folder), *_forecast.suite_cases(folder, questions, cap)]
    cases += _forecast.suite_cases(folder, questions, cap, others=True)
    real = _forecast.REAL
    for path in sorted(real.glob("*.npz")) if real.is_dir() else []:
        with np.load(path) as data:
            outcomes = np.asarray(data["outcomes"], dtype=np.int64)
        success = outcomes.mean(axis=2)
        probs = np.stack([1 - success, success], axis=2)
        tokens = _forecast.token_means(success.shape, 77)
        config, scenario = _forecast._simulated_config(
            folder, f"real {path.stem}", probs, [0.0, 1.0], outcomes.shape[2], tokens
        )
        cases.append(_forecast.Case(f"real: {path.stem}", "simulated", config, scenario, 30))
    return cases


def typical_trials(config: str, runs: int = 2) -> float:
    """The campaign's mean total over a few seeded runs in this process (no latency)."""
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config
    from adaptive_eval.forecast.paths import simulate_campaign
    from adaptive_eval.forecast.simulate import Truth

    totals = []
    for seed in range(runs):
        campaign = build_campaign(load_config(config))
        with np.load(_scenario(config)) as data:
            probs = np.asarray(data["probs"], dtype=np.float64)
        result = simulate_campaign(
            campaign.decision,
            Truth(probs, campaign.decision.weights),
            np.random.default_rng([seed, 99]),
        )
        totals.append(result.total_trials)
    return float(np.mean(totals))


def _scenario(config: str) -> str:
    data = yaml.safe_load(Path(config).read_text())
    path = Path(data["models"][0]["path"])
    return str(path if path.is_absolute() else Path(config).parent / path)


def with_latency(config: str, per_trial_s: float, seed: int, out: Path) -> Path:
    data = yaml.safe_load(Path(config).read_text())
    for entry in data["models"]:  # the cases' scenario paths are absolute
        entry["latency"] = {"per_trial_s": per_trial_s}
    data["seed"] = seed
    data.setdefault("execution", {})["dispatch"] = "inline"
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_run(task: tuple[str, str, float, int, Path]) -> dict[str, Any]:
    """One shipped command to its end, and what its events and summary say."""
    family, config, per_trial_s, seed, folder = task
    folder.mkdir(parents=True, exist_ok=True)
    path = with_latency(config, per_trial_s, seed, folder)
    run_dir = folder / "run"
    command = [CLI, "run", str(path), "--out", str(run_dir), "--quiet"]
    if family in GATE:
        command = [CLI, "compare", str(path), "--candidate", GATE[family], "--out", str(run_dir)]
        command.append("--quiet")
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    first_round = next((e for e in events if e["event"] == "first_round"), None)
    points = [
        {
            "trials_used": e["trials_used"],
            "elapsed_s": e["elapsed_s"],
            "trials": e["trials"],
            "seconds": e["seconds"],
            "simulations": e["simulations"],
        }
        for e in events
        if e["event"] == "live_forecast"
    ]
    return {
        "family": family,
        "seed": seed,
        "rc": done.returncode,
        "wall_s": wall,
        "final": summary["trials_used"],
        "first_round_s": None if first_round is None else first_round["elapsed_s"],
        "failed": sum(e["event"] == "live_forecast_failed" for e in events),
        "points": points,
    }


def judge(run: dict[str, Any]) -> dict[str, Any]:
    """Per share: fresh there, and the forecast seen there within 20% and holding the final."""
    final = run["final"]
    out: dict[str, Any] = {}
    for share in SHARES:
        made = [p for p in run["points"] if p["trials_used"] <= share * final]
        fresh = any(
            share * final <= p["trials_used"] < (share + 0.1) * final for p in run["points"]
        )
        seen = made[-1] if made else None
        out[str(share)] = {
            "fresh": fresh,
            # The measure: some forecast made at or after this share of the final.
            "after": any(p["trials_used"] >= share * final for p in run["points"]),
            "seen": seen is not None,
            "within_20": seen is not None and abs(seen["trials"]["p50"] / final - 1) <= 0.2,
            "inside": seen is not None
            and seen["trials"]["p10"] - 1e-9 <= final <= seen["trials"]["p90"] + 1e-9,
            "age": None if seen is None else share - seen["trials_used"] / final,
        }
    first = run["points"][0] if run["points"] else None
    out["first_after_s"] = (
        None
        if first is None or run["first_round_s"] is None
        else first["elapsed_s"] - run["first_round_s"]
    )
    return out


def summarise(family: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    judged = [judge(run) for run in runs]
    row: dict[str, Any] = {"family": family, "runs": len(runs)}
    for share in SHARES:
        at = [j[str(share)] for j in judged]
        row[f"fresh_{share}"] = float(np.mean([a["fresh"] for a in at]))
        row[f"after_{share}"] = float(np.mean([a["after"] for a in at]))
        row[f"within_{share}"] = float(np.mean([a["within_20"] for a in at]))
        row[f"inside_{share}"] = float(np.mean([a["inside"] for a in at]))
    firsts = [j["first_after_s"] for j in judged if j["first_after_s"] is not None]
    row["first_after_s_median"] = statistics.median(firsts) if firsts else None
    row["forecasts_median"] = statistics.median(len(r["points"]) for r in runs)
    row["wall_s_median"] = statistics.median(r["wall_s"] for r in runs)
    row["failed_runs"] = sum(r["failed"] > 0 for r in runs)
    row["bad_rc"] = sum(r["rc"] not in (0, 3, 4) for r in runs)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| family | runs (side by side) | run (median s) | forecasts (median) | first forecast "
        "after round 1 (median s) | a forecast at or after 10/25/50/75% | fresh there (within "
        "10 points) | seen at 25%: p50 within 20% | seen at 25%: range holds the final | at 50%: "
        "within 20%, holds |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|---|",
    ]
    for r in rows:
        after = "/".join(f"{100 * r[f'after_{s}']:.0f}" for s in SHARES)
        fresh = "/".join(f"{100 * r[f'fresh_{s}']:.0f}" for s in SHARES)
        first = "n/a" if r["first_after_s_median"] is None else f"{r['first_after_s_median']:.1f}"
        side = f" ({r['parallel']})" if r.get("parallel") else ""
        lines.append(
            f"| {r['family']} | {r['runs']}{side} | {r['wall_s_median']:.0f} | "
            f"{r['forecasts_median']:.0f} | {first} | {after}% | {fresh}% | "
            f"{100 * r['within_0.25']:.0f}% | "
            f"{100 * r['inside_0.25']:.0f}% | {100 * r['within_0.5']:.0f}%, "
            f"{100 * r['inside_0.5']:.0f}% |"
        )
    return "\n".join(lines) + "\n"


def resummarised(files: list[str]) -> list[dict[str, Any]]:
    """Each family's row judged again from the runs the files hold, one row per family and
    number of runs side by side (a later file's runs of both replace an earlier's)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for named in files:
        path, _, parallel = named.partition("@")
        saved = json.loads(Path(path).read_text())
        recorded = {row["family"]: row for row in saved["rows"]}
        for family in dict.fromkeys(run["family"] for run in saved["runs"]):
            row = summarise(family, [r for r in saved["runs"] if r["family"] == family])
            row["parallel"] = recorded.get(family, {}).get("parallel") or int(parallel or 0)
            rows.pop((family, row["parallel"]), None)
            rows[(family, row["parallel"])] = row
    return list(rows.values())


def busy() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy (the load beside the runs)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per family")
    parser.add_argument("--seconds", type=float, default=130.0, help="a run's target wall time")
    parser.add_argument("--parallel", type=int, default=6, help="runs side by side")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--cap", type=int, default=400)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--only", default=None, help="families whose name holds one of these")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-live-runs")
    parser.add_argument(
        "--summarise",
        nargs="+",
        metavar="RUNS_JSON[@PARALLEL]",
        help="instead: the table of runs already made (each file's runs.json, with the number "
        "of runs it had side by side where the file does not say)",
    )
    args = parser.parse_args()
    if args.summarise:
        print(markdown(resummarised(args.summarise)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "runs.json"
    saved = json.loads(store.read_text()) if store.exists() else {"rows": [], "runs": []}
    rows = {row["family"]: row for row in saved["rows"]}
    kept = [run for run in saved["runs"]]
    load = [busy() for _ in range(args.load)]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-live-runs-") as tmp:
            folder = Path(tmp)
            wanted = args.only.split(",") if args.only else [""]
            for case in families(folder, args.cap, args.questions):
                if not any(word in case.name for word in wanted):
                    continue
                per_trial = args.seconds / typical_trials(case.config)
                tasks = [
                    (case.name, case.config, per_trial, seed, folder / f"{len(kept)}-{seed}")
                    for seed in range(args.runs)
                ]
                started = time.monotonic()
                with ThreadPoolExecutor(args.parallel) as pool:
                    runs = list(pool.map(one_run, tasks))
                kept = [r for r in kept if r["family"] != case.name] + runs
                rows[case.name] = summarise(case.name, runs)
                rows[case.name]["per_trial_s"] = per_trial
                rows[case.name]["load"] = args.load
                rows[case.name]["parallel"] = args.parallel
                print(
                    markdown([rows[case.name]]).splitlines()[-1],
                    f"({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
                store.write_text(json.dumps({"rows": list(rows.values()), "runs": kept}) + "\n")
                (args.out / "runs.md").write_text(markdown(list(rows.values())))
    finally:
        for process in load:
            process.kill()
    print()
    print(markdown(list(rows.values())))


if __name__ == "__main__":
    main()
