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
npz itself is written atomically (:func:`adaptive_eval.storage.atomic_output`).
"""

from __future__ import annotations

import sqlite3
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.errors import InputError
from adaptive_eval.storage import atomic_output
from adaptive_eval.store import TrialStore

ABSENT = -1
#: Rows fetched from SQLite at a time (a few MB of Python tuples).
CHUNK_ROWS = 1 << 16


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


def _chunks(conn: sqlite3.Connection, query: str, args: tuple[Any, ...] = ()) -> Any:
    cursor = conn.execute(query, args)
    while rows := cursor.fetchmany(CHUNK_ROWS):
        yield np.asarray(rows, dtype=np.int64)


def _counts(conn: sqlite3.Connection, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Trials per cell, and each cell's count of consecutive trials from 0 (its prefix)."""
    counts = np.zeros(shape, dtype=np.int64)
    prefix = np.zeros(shape, dtype=np.int64)
    gapped = []
    for m, q, n, first, last in conn.execute(
        "SELECT model, question, COUNT(*), MIN(trial), MAX(trial) FROM trials "
        "GROUP BY model, question"
    ):
        counts[m, q] = n
        if first == 0 and last == n - 1:
            prefix[m, q] = n
        else:
            gapped.append((m, q))
    for m, q in gapped:  # an unfinished round: the prefix ends at the first missing trial
        expected = 0
        for (trial,) in conn.execute(
            "SELECT trial FROM trials WHERE model = ? AND question = ? ORDER BY trial", (m, q)
        ):
            if trial != expected:
                break
            expected += 1
        prefix[m, q] = expected
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
    conn = store.conn
    (width,) = conn.execute("SELECT COALESCE(MAX(trial), -1) + 1 FROM trials").fetchone()
    if not models or not width:
        raise InputError("holds no recorded trials", source=str(run_dir))
    counts, prefix = _counts(conn, (len(models), len(questions)))
    common = int(prefix.min())
    if common == 0:
        empty = np.argwhere(prefix == 0)[0]
        raise InputError(
            f"{models[empty[0]]} on {questions[empty[1]]} has no trial 0, so no common N >= 1; "
            "export a run in which every model answered every question",
            source=str(run_dir),
        )
    (unknown,) = conn.execute(
        "SELECT COUNT(*) FROM trials WHERE trial < ? AND tokens IS NULL", (common,)
    ).fetchone()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".export-") as scratch:
        shape = (len(models), len(questions))
        # numpy < 2.4 ships these two functions untyped (vLLM's CPU build pins numpy 2.3).
        recorded = np.lib.format.open_memmap(  # type: ignore[no-untyped-call]
            Path(scratch) / "recorded.npy", "w+", np.int16, (*shape, int(width))
        )
        recorded[:] = ABSENT
        for rows in _chunks(conn, "SELECT model, question, trial, category FROM trials"):
            recorded[rows[:, 0], rows[:, 1], rows[:, 2]] = rows[:, 3]
        tokens = None
        if not unknown:
            tokens = np.lib.format.open_memmap(  # type: ignore[no-untyped-call]
                Path(scratch) / "tokens.npy", "w+", np.int64, (*shape, common)
            )
            query = "SELECT model, question, trial, tokens FROM trials WHERE trial < ?"
            for rows in _chunks(conn, query, (common,)):
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
