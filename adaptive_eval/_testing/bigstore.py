"""A run directory with many recorded trials, written straight into its store (no Ray).

For the memory benchmark (``benchmarks/memory.py``) and the test that ``report`` and resume read
a store in bounded memory. The campaign is a real simulated one (its fingerprint matches), and
every round's plan and trials are consistent, so ``adaptive-eval report`` reads it like a run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import load_config
from adaptive_eval.loop.rundir import open_run_dir


def write_big_run(
    folder: Path,
    *,
    models: int = 8,
    questions: int = 500,
    per_cell_per_round: int = 10,
    rounds: int = 50,
    seed: int = 0,
) -> Path:
    """Write ``models * questions * per_cell_per_round * rounds`` trials; returns the run dir.

    The config is ``folder/config.yaml``, the run directory ``folder/run``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    success = rng.uniform(0.2, 0.8, size=(models, questions))
    np.savez(
        folder / "scenario.npz",
        probs=np.stack([1 - success, success], axis=2),
        tokens_mean=np.full(success.shape, 100.0),
    )
    per_question = per_cell_per_round * rounds
    data = {
        "name": "big",
        "seed": seed,
        "models": [{"backend": "simulated", "path": "scenario.npz"}],
        "rubric": {"weights": [0, 1]},
        "policy": {"max_trials_per_question": per_question, "round_trials": 256},
        "baseline": {"fixed_n": per_question},
        "output": {"progress": False, "fsync": "normal"},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    campaign = build_campaign(load_config(folder / "config.yaml"))
    run_dir = folder / "run"
    store, _, _ = open_run_dir(campaign, run_dir)
    try:
        plan = np.full((models, questions), per_cell_per_round, dtype=np.int64)
        cells = [(m, q) for m in range(models) for q in range(questions)]
        batch_id = 0
        for round_index in range(rounds):
            store.add_round(round_index, plan)
            first = round_index * per_cell_per_round
            categories = rng.random((models, questions, per_cell_per_round)) < success[..., None]
            rows = [
                (
                    m,
                    q,
                    first + k,
                    round_index,
                    batch_id + m,
                    (m * questions + q) * per_question + first + k,
                    int(categories[m, q, k]),
                    100,
                    1.0,
                )
                for m, q in cells
                for k in range(per_cell_per_round)
            ]
            batch_id += models
            store.load_trials(rows)
        store.set_meta(events_through=rounds - 1, finished=True, elapsed_s=1.0)
        store.build_chain()  # load_trials, unlike record_many, seals no round
    finally:
        store.close()
    return run_dir


__all__ = ["write_big_run"]
