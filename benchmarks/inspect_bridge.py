"""The Inspect bridge against the project's own loop, and its overhead (docs/inspect.md).

    python benchmarks/inspect_bridge.py --real /work/shared/data/real/noises_highk_aime2025.npz \\
        --models 6
    python benchmarks/inspect_bridge.py --synthetic --models 10 --samples 500 --epochs 4

``--real``: ``--models`` models spread over the file's ranking are evaluated by Inspect
(``replay/<model>``: the recorded outcome of each (sample, epoch), ``epochs`` = the file's N)
under ``adaptive_stopping``; the same recorded trials then go through ``adaptive-eval run``
(``run_campaign``, inline dispatch) on the campaign config the bridge built. Printed: the pairs
each decided, the trials per model, whether they agree, and a wrong call against the file's
whole-pool gold (``correct_total / count_total``).
``--synthetic``: Bernoulli models on ``--samples`` samples; the bridge's own time per sample
(its two calls, waits for a round boundary excluded; the decision core's rounds included).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from inspect_ai import eval as inspect_eval

from adaptive_eval.config import load_config
from adaptive_eval.inspect import adaptive_stopping
from adaptive_eval.inspect.campaign import CampaignSpec, Goal, build
from adaptive_eval.inspect.replay import replay_task
from adaptive_eval.workflows.run import run_campaign


def pick_models(path: Path, count: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    with np.load(path) as data:
        outcomes = np.asarray(data["outcomes"])
        names = [str(m) for m in data["models"]]
        gold = (data["correct_total"] / data["count_total"]).mean(axis=1)
    order = np.argsort(gold)
    live = [int(i) for i in order if gold[i] > 0.05]  # models that solve something
    chosen = [live[round(k * (len(live) - 1) / (count - 1))] for k in range(count)]
    return outcomes[chosen], [names[i] for i in chosen], gold[chosen]


def write(folder: Path, outcomes: np.ndarray, names: list[str]) -> Path:
    path = folder / "replay.npz"
    np.savez(
        path,
        outcomes=outcomes,
        models=np.array(names),
        questions=np.array([f"q{i}" for i in range(outcomes.shape[1])]),
    )
    return path


def through_inspect(path: Path, models: list[str], log_dir: Path, name: str) -> dict[str, Any]:
    bridge = adaptive_stopping(name, models=models)
    started = time.perf_counter()
    logs = inspect_eval(
        replay_task(path, early_stopping=bridge),
        model=models,
        model_args={"path": str(path)},
        display="none",
        log_dir=str(log_dir),
        max_samples=64,
        log_samples=False,
    )
    wall = time.perf_counter() - started
    bad = [log.error for log in logs if log.status != "success"]
    if bad:
        raise SystemExit(f"eval failed: {bad[0]}")
    meta = dict(logs[0].results.early_stopping.metadata)
    runs = sum(meta["trials"].values())
    meta["wall_s"] = wall
    meta["bridge_s"] = bridge.overhead_s
    meta["bridge_ms_per_sample"] = 1e3 * bridge.overhead_s / max(runs, 1)
    return meta


def run_own(path: Path, meta: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``adaptive-eval run`` on the same replay, with the bridge's campaign config."""
    with np.load(path) as data:
        outcomes = np.asarray(data["outcomes"])
    spec = CampaignSpec(
        "own",
        tuple(meta["models"]),
        tuple(f"q{i}" for i in range(outcomes.shape[1])),
        outcomes.shape[2],
        tuple(meta["weights"]),
        meta["policy"],
        Goal(),
    )
    config = load_config(spec.write(folder / "campaign", outcomes))
    campaign, _ = build(config, Goal())
    summary = run_campaign(config, folder / "run", quiet=True, campaign=campaign)
    return {
        "decisions": sorted(
            (p.a, p.b, str(p.decision)) for p in summary.pairs if p.decision != "undecided"
        ),
        "trials": {row.name: row.trials for row in summary.models},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path)
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="inspect-bridge-"))
    if args.real is not None:
        outcomes, names, gold = pick_models(args.real, args.models)
    else:
        rng = np.random.default_rng(args.seed)
        scores = np.linspace(0.3, 0.7, args.models)
        shape = (args.models, args.samples, args.epochs)
        outcomes = (rng.random(shape) < scores[:, None, None]).astype(np.int8)
        names, gold = [f"m{i}" for i in range(args.models)], scores
    path = write(folder, outcomes, names)
    models = [f"replay/{n}" for n in names]
    meta = through_inspect(path, models, folder / "logs", f"bench-{args.seed}")
    fixed = outcomes.shape[1] * outcomes.shape[2] * len(names)
    runs = sum(meta["trials"].values())
    print(f"models {len(names)} x samples {outcomes.shape[1]} x epochs {outcomes.shape[2]}")
    print(
        f"inspect: wall {meta['wall_s']:.1f} s, trials {runs:,} of {fixed:,} "
        f"({1 - runs / fixed:.1%} saved), rounds {meta['rounds']}, stop {meta['stop']}"
    )
    print(
        f"bridge time {meta['bridge_s']:.2f} s = {meta['bridge_ms_per_sample']:.3f} ms per sample"
    )
    settled = sorted(
        (d["a"], d["b"], d["verdict"]) for d in meta["decisions"] if d["verdict"] != "undecided"
    )
    index = {m: i for i, m in enumerate(models)}
    wrong = [
        (a, b)
        for a, b, verdict in settled
        if verdict in ("a>b", "b>a") and (gold[index[a]] > gold[index[b]]) != (verdict == "a>b")
    ]
    print(f"inspect decided {len(settled)} pair(s), wrong against gold: {len(wrong)}")
    if args.real is None:
        return
    own = run_own(path, meta, folder / "own")
    print(f"adaptive-eval run decided {len(own['decisions'])} pair(s)")
    print("same pairs decided:", own["decisions"] == settled)
    print("same trials per model:", own["trials"] == meta["trials"])
    for model in models:
        print(f"  {model}: inspect {meta['trials'][model]:,}  run {own['trials'][model]:,}")


if __name__ == "__main__":
    main()
