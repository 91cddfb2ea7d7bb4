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

Memory does not grow with the trials: the store is read in chunks (in its primary-key order),
the dense arrays are filled as memory maps in a temporary folder beside the output, and each is
streamed into the npz's zip member by member (peak RSS: ``benchmarks/memory.py --export``). The
npz itself is written atomically (:func:`adaptive_eval.base.files.atomic_output`).
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.files import atomic_output
from adaptive_eval.store import TrialStore

ABSENT = -1


@dataclass(frozen=True)
class Exported:
    """What was written: the ``outcomes`` shape and the per-cell counts' range."""

    shape: tuple[int, int, int]
    fewest: int  # trials in the emptiest cell
    most: int
    recorded: int  # every trial of the run

    @property
    def dropped(self) -> int:
        """Recorded trials that are not in ``outcomes`` (beyond the common N)."""
        return self.recorded - int(np.prod(self.shape))


def _counts(store: TrialStore, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Trials per cell, and each cell's count of consecutive trials from 0 (its prefix)."""
    counts = np.zeros(shape, dtype=np.int64)
    prefix = np.zeros(shape, dtype=np.int64)
    spans = store.cell_spans()
    counts[spans.model, spans.question] = spans.count
    whole = (spans.first == 0) & (spans.last == spans.count - 1)
    prefix[spans.model[whole], spans.question[whole]] = spans.count[whole]
    for m, q in zip(spans.model[~whole], spans.question[~whole], strict=True):
        # An unfinished round: the prefix ends at the first missing trial.
        trials = store.cell_trials(int(m), int(q))
        gaps = np.flatnonzero(trials != np.arange(len(trials)))
        prefix[m, q] = gaps[0] if len(gaps) else len(trials)
    return counts, prefix


def export_run(run_dir: Path, out: Path) -> Exported:
    """Write the run's trials to ``out`` (an npz); what was written."""
    if not (run_dir / TrialStore.FILENAME).exists():
        raise InputError("no trials.sqlite: not a run directory", source=str(run_dir))
    store = TrialStore(run_dir, readonly=True)
    try:
        return _export(store, run_dir, out)
    finally:
        store.close()


def _export(store: TrialStore, run_dir: Path, out: Path) -> Exported:
    models = [str(m) for m in store.get_meta("models") or []]
    questions = [str(q) for q in store.get_meta("questions") or []]
    width = store.trial_width()
    if not models or not width:
        raise InputError("holds no recorded trials", source=str(run_dir))
    counts, prefix = _counts(store, (len(models), len(questions)))
    common = int(prefix.min())
    if common == 0:
        empty = np.argwhere(prefix == 0)[0]
        raise InputError(
            f"{models[empty[0]]} on {questions[empty[1]]} has no trial 0, so no common N >= 1; "
            "export a run in which every model answered every question",
            source=str(run_dir),
        )
    unknown = store.count_unknown_tokens(common)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as scratch:
        shape = (len(models), len(questions))
        # numpy < 2.4 ships these two functions untyped (vLLM's CPU build pins numpy 2.3).
        recorded = np.lib.format.open_memmap(  # type: ignore[no-untyped-call]
            Path(scratch) / "recorded.npy", "w+", np.int16, (*shape, int(width))
        )
        recorded[:] = ABSENT
        for rows in store.trial_chunks("category"):
            recorded[rows[:, 0], rows[:, 1], rows[:, 2]] = rows[:, 3]
        tokens = None
        if not unknown:
            tokens = np.lib.format.open_memmap(  # type: ignore[no-untyped-call]
                Path(scratch) / "tokens.npy", "w+", np.int64, (*shape, common)
            )
            for rows in store.trial_chunks("tokens", below=common):
                tokens[rows[:, 0], rows[:, 1], rows[:, 2]] = rows[:, 3]
        arrays: dict[str, Any] = {
            "outcomes": recorded[:, :, :common],
            "recorded": recorded,
            "trials": counts,
            "models": np.array(models),
            "questions": np.array(questions),
        }
        if tokens is not None:
            arrays["tokens"] = tokens
        _write_npz(out, arrays)
        del arrays, recorded, tokens  # unmap before the folder goes
    return Exported(
        shape=(len(models), len(questions), common),
        fewest=int(counts.min()),
        most=int(counts.max()),
        recorded=int(counts.sum()),
    )


def _write_npz(path: Path, arrays: dict[str, Any]) -> None:
    """``np.savez_compressed``, one member at a time: numpy writes an array into a zip member
    in buffered chunks, so a memory-mapped array is never read into memory whole."""
    with (
        atomic_output(path, "wb") as handle,
        zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive,
    ):
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(  # type: ignore[no-untyped-call]
                    member, np.asanyarray(array), allow_pickle=False
                )


__all__ = ["Exported", "export_run"]
