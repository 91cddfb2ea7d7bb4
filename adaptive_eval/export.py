"""``adaptive-eval export DIR --out X.npz``: a run's recorded trials as an outcome npz.

The npz is the format ``replay``, ``policy.prior`` and ``adaptive-eval score`` read:

- ``outcomes`` (L, M, N) int16 categories. That format is dense (every cell holds N trials, no
  marker of absence; replay refuses negative categories), while an adaptive run gives cells
  different counts. So ``outcomes`` keeps the first N trials of every cell, N being the
  smallest count of consecutive trials (0, 1, ...) any cell has: trial i of a cell is the trial
  drawn with that cell's i-th seed, so the truncated tensor is exactly what a fixed-N run with
  the same seeds would have drawn.
- ``tokens`` (L, M, N): completion tokens of those trials, when every one of them is known.
- ``models`` (L,), ``questions`` (M,): names, as in the run.
- ``recorded`` (L, M, N_max) int16: every recorded trial, ``-1`` where a trial was not sampled
  (not readable by replay on purpose; for other tools), and ``trials`` (L, M): the count per
  cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.errors import InputError
from adaptive_eval.storage import atomic_output

ABSENT = -1


@dataclass(frozen=True)
class Exported:
    outcomes: np.ndarray
    recorded: np.ndarray
    trials: np.ndarray
    tokens: np.ndarray | None
    models: list[str]
    questions: list[str]

    @property
    def dropped(self) -> int:
        """Recorded trials that are not in ``outcomes`` (beyond the common N)."""
        return int(self.trials.sum()) - int(self.outcomes.size)


def export_run(run_dir: Path) -> Exported:
    from adaptive_eval.store import TrialStore

    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    store = TrialStore(run_dir, readonly=True)
    try:
        models = [str(m) for m in store.get_meta("models") or []]
        questions = [str(q) for q in store.get_meta("questions") or []]
        arrays = store.trial_arrays()
    finally:
        store.close()
    if not models or len(arrays.model) == 0:
        raise InputError("holds no recorded trials", source=str(run_dir))
    width = int(arrays.trial.max()) + 1
    recorded = np.full((len(models), len(questions), width), ABSENT, dtype=np.int16)
    recorded[arrays.model, arrays.question, arrays.trial] = arrays.category
    tokens_all = np.full(recorded.shape, ABSENT, dtype=np.int64)
    tokens_all[arrays.model, arrays.question, arrays.trial] = arrays.tokens
    trials = (recorded != ABSENT).sum(axis=2)
    # Consecutive trials from 0 in each cell: a gap (an unfinished round) ends the prefix.
    present = recorded != ABSENT
    prefix = np.where(present.all(axis=2), width, np.argmin(present, axis=2))
    common = int(prefix.min())
    if common == 0:
        empty = np.argwhere(prefix == 0)[0]
        raise InputError(
            f"{models[empty[0]]} on {questions[empty[1]]} has no trial 0, so no common N >= 1; "
            "export a run in which every model answered every question",
            source=str(run_dir),
        )
    tokens = tokens_all[:, :, :common]
    return Exported(
        outcomes=recorded[:, :, :common].copy(),
        recorded=recorded,
        trials=trials,
        tokens=None if (tokens < 0).any() else tokens,
        models=models,
        questions=questions,
    )


def save(exported: Exported, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {
        "outcomes": exported.outcomes,
        "recorded": exported.recorded,
        "trials": exported.trials,
        "models": np.array(exported.models),
        "questions": np.array(exported.questions),
    }
    if exported.tokens is not None:
        arrays["tokens"] = exported.tokens
    with atomic_output(path, "wb") as handle:
        np.savez_compressed(handle, **arrays)
