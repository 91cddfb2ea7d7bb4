"""Core speed benchmarks (run by hand; figures go in docs/benchmarks.md).

    python benchmarks/bench_core.py ingest      # posterior ingest, trial outcomes per second
    python benchmarks/bench_core.py decide      # one decision step (posterior, pairs, policy)
    python benchmarks/bench_core.py replay      # replay campaign end to end through Ray + store
    python benchmarks/bench_core.py busy        # worker utilisation with 50 ms simulated batches
    python benchmarks/bench_core.py all

Each prints the median of several repetitions (and min/max) so that a noisy machine shows.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def summary(label: str, values: list[float], unit: str) -> None:
    print(
        f"{label}: median {statistics.median(values):,.4g} {unit} "
        f"(min {min(values):,.4g}, max {max(values):,.4g}, n={len(values)})"
    )


def bench_ingest(repeats: int = 7) -> None:
    from adaptive_eval.decide.state import RunState

    num_models, num_questions, num_categories = 20, 30, 8
    rng = np.random.default_rng(0)
    state = RunState(
        np.ones((num_models, num_questions, num_categories)), np.linspace(0, 1, num_categories)
    )
    for round_size in (600, 100_000):
        rates = []
        for _ in range(repeats):
            model = rng.integers(0, num_models, round_size)
            question = rng.integers(0, num_questions, round_size)
            category = rng.integers(0, num_categories, round_size)
            tokens = rng.integers(100, 30_000, round_size)
            gpu = rng.random(round_size)
            loops = max(1, 2_000_000 // round_size)
            started = time.perf_counter()
            for _ in range(loops):
                state.apply(model, question, category, tokens, gpu)
            rates.append(loops * round_size / (time.perf_counter() - started))
        summary(f"ingest L=20 M=30 C=7, rounds of {round_size} trials", rates, "trials/s")


def bench_decide(repeats: int = 200) -> None:
    from adaptive_eval.base.logs import SilentLog
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import parse_config
    from adaptive_eval.control.controller import Controller
    from adaptive_eval.loop.runner import _NoDispatch

    designs = (
        ("group_sequential", "track_and_stop"),
        ("anytime", "track_and_stop"),
        ("betting", "track_and_stop"),
        ("group_sequential", "pairwise"),
    )
    for (num_models, num_questions), (rule, allocation) in itertools.product(
        ((20, 30), (50, 500)), designs
    ):
        with tempfile.TemporaryDirectory() as tmp:
            rng = np.random.default_rng(1)
            probs = rng.dirichlet(np.ones(8), size=(num_models, num_questions))
            np.savez(Path(tmp) / "s.npz", probs=probs)
            config = parse_config(
                {
                    "name": "bench",
                    "models": [{"backend": "simulated", "path": "s.npz"}],
                    "rubric": {"weights": list(np.linspace(0, 1, 8))},
                    "policy": {"pair_rules": [rule], "allocation": allocation},
                },
                source=f"{tmp}/c.yaml",
            )
            campaign = build_campaign(config)
            from adaptive_eval.store import TrialStore

            store = TrialStore(Path(tmp), fsync="normal")
            controller = Controller(campaign, store, _NoDispatch(), SilentLog())
            counts = rng.integers(0, 30, size=(num_models, num_questions, 8))
            controller.state.counts += counts
            controller.state.trials += counts.sum(axis=2)
            controller.state.planned += counts.sum(axis=2)
            times = []
            for _ in range(repeats):
                controller.state.applied_rounds += 1  # a new round: nothing cached
                started = time.perf_counter()
                controller.decide()
                controller.core.allocate(controller.view(), controller.decisions)
                times.append((time.perf_counter() - started) * 1e3)
            store.close()
        summary(
            f"decision step L={num_models} M={num_questions} C=7 {rule}+{allocation} "
            f"(posterior, {num_models - 1} pair decisions, stop rules, allocation)",
            times,
            "ms",
        )


def run_config(data: dict, tmp: Path) -> tuple[dict, float]:
    """Run a campaign in-process through Ray; return its summary and the loop's seconds."""
    from adaptive_eval.base.logs import SilentLog
    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import parse_config
    from adaptive_eval.control.controller import Controller
    from adaptive_eval.control.run_result import RunFacts, finished_run
    from adaptive_eval.dispatch import Dispatcher
    from adaptive_eval.dispatch.cluster import init_ray
    from adaptive_eval.loop.rundir import open_run_dir
    from adaptive_eval.outputs.provenance import collect
    from adaptive_eval.outputs.summary import build_summary

    config = parse_config(data, source=str(tmp / "c.yaml"))
    campaign = build_campaign(config)
    store, campaign_id, _ = open_run_dir(campaign, tmp / "run")
    execution = config.execution
    init_ray(None, None)
    dispatcher = Dispatcher(
        campaign.run.plans,
        campaign.run.offsets,
        in_flight_per_worker=execution.in_flight_per_worker,
        max_batch_retries=0,
    )
    controller = Controller(campaign, store, dispatcher, SilentLog())
    started = time.perf_counter()
    controller.run()
    seconds = time.perf_counter() - started
    run = finished_run(controller, campaign_id, RunFacts())
    result = record(build_summary(campaign, run, collect(tmp / "run", store)))
    result["utilisation"] = dispatcher.stats.utilisation()
    dispatcher.shutdown()
    store.close()
    return result, seconds


def bench_replay(repeats: int = 5) -> None:
    rng = np.random.default_rng(2)
    outcomes = (rng.random((20, 30, 80)) < rng.random((20, 1, 1))).astype(np.int8)
    rates = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            np.savez(
                tmp / "r.npz", outcomes=outcomes, tokens=rng.integers(100, 30_000, outcomes.shape)
            )
            data = {
                "name": "bench-replay",
                "models": [{"backend": "replay", "path": "r.npz"}],
                "rubric": {"weights": [0, 1]},
                "policy": {"allocation": "uniform", "stopping": [], "round_trials": 4800},
                "execution": {"workers": 2, "batch_size": 400},
                "output": {"progress": False},
            }
            result, seconds = run_config(data, tmp)
            assert result["trials_used"] == outcomes.size
            rates.append(result["trials_used"] / seconds)
    summary(
        "replay (20, 30, 80) = 48,000 trials through Ray actors and the SQLite store",
        rates,
        "trials/s",
    )


def bench_busy(repeats: int = 3) -> None:
    from adaptive_eval.backends.base import BackendPlan  # noqa: F401  (import check)

    scenario = REPO / "configs" / "scenarios" / "llm_mimics.npz"
    fractions = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
            data["models"][0]["path"] = str(scenario)
            data["models"][0]["latency"] = {"per_batch_s": 0.05}
            data["models"][0]["workers"] = 4
            data["execution"] = {"workers": 4, "batch_size": 32, "in_flight_per_worker": 2}
            data["output"] = {"progress": False}
            result, _ = run_config(data, tmp)
            fractions.append(result["utilisation"])
    summary(
        "worker busy fraction, 4 workers, 50 ms per batch (demo campaign)",
        [100 * f for f in fractions],
        "%",
    )


BENCHES: dict[str, Callable[[], None]] = {
    "ingest": bench_ingest,
    "decide": bench_decide,
    "replay": bench_replay,
    "busy": bench_busy,
}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("which", choices=[*BENCHES, "all"])
    args = parser.parse_args()
    for name, bench in BENCHES.items():
        if args.which in (name, "all"):
            bench()
