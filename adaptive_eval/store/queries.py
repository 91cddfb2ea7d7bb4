"""Read-only questions the outputs ask of a run's store: per-cell spans, chunked columns, what
servers reported serving.

Kept apart from the ledger (:mod:`.ledger`), which writes: these are the queries of ``export``,
``report.html`` and the provenance block, each answering with arrays or typed rows so that no
caller outside :mod:`adaptive_eval.store` holds a cursor or writes SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from adaptive_eval.store.file import StoreFile

#: Rows fetched from SQLite at a time by :meth:`TrialQueries.trial_chunks` (a few MB of tuples).
CHUNK_ROWS = 1 << 16


@dataclass(frozen=True)
class CellSpans:
    """Per (model, question) cell with recorded trials, in no particular order: how many, and
    the smallest and largest trial index."""

    model: np.ndarray
    question: np.ndarray
    count: np.ndarray
    first: np.ndarray
    last: np.ndarray


class ServedReport(NamedTuple):
    """One distinct report of what an OpenAI-compatible server served a model's trials with."""

    model: int
    served: str
    fingerprint: str | None  # the response's ``system_fingerprint``, where it gave a true one


class TrialQueries(StoreFile):
    """The store's read-only queries for its outputs; :class:`TrialStore
    <adaptive_eval.store.ledger.TrialStore>` inherits them."""

    def cell_spans(self) -> CellSpans:
        """Each cell's trial count and first and last trial index (int64 arrays, one entry per
        cell that has recorded trials)."""
        cursor = self.conn.execute(
            "SELECT model, question, COUNT(*), MIN(trial), MAX(trial) FROM trials "
            "GROUP BY model, question"
        )
        # Chunked: a run of a million cells never holds a million row tuples at once.
        parts = [np.empty((0, 5), dtype=np.int64)]
        while rows := cursor.fetchmany(CHUNK_ROWS):
            parts.append(np.asarray(rows, dtype=np.int64).reshape(-1, 5))
        table = np.concatenate(parts)
        return CellSpans(
            model=table[:, 0],
            question=table[:, 1],
            count=table[:, 2],
            first=table[:, 3],
            last=table[:, 4],
        )

    def cell_trials(self, model: int, question: int) -> np.ndarray:
        """The trial indices one cell has recorded, ascending (int64)."""
        rows = self.conn.execute(
            "SELECT trial FROM trials WHERE model = ? AND question = ? ORDER BY trial",
            (model, question),
        ).fetchall()
        return np.asarray([trial for (trial,) in rows], dtype=np.int64)

    def trial_width(self) -> int:
        """One more than the largest trial index recorded in any cell (0 when none is)."""
        (width,) = self.conn.execute("SELECT COALESCE(MAX(trial), -1) + 1 FROM trials").fetchone()
        return int(width)

    def count_unknown_tokens(self, below: int) -> int:
        """How many trials with an index below ``below`` have no recorded token count."""
        (unknown,) = self.conn.execute(
            "SELECT COUNT(*) FROM trials WHERE trial < ? AND tokens IS NULL", (below,)
        ).fetchone()
        return int(unknown)

    def trial_chunks(
        self, column: Literal["category", "tokens"], below: int | None = None
    ) -> Iterator[np.ndarray]:
        """Every recorded trial (those with an index below ``below``, where given) as int64
        arrays of rows (model, question, trial, ``column``), :data:`CHUNK_ROWS` rows at a time,
        so memory stays flat however many trials the run holds."""
        # The column is one of two fixed names (a Literal), never text from outside.
        query = f"SELECT model, question, trial, {column} FROM trials"
        args: tuple[int, ...] = ()
        if below is not None:
            query += " WHERE trial < ?"
            args = (below,)
        cursor = self.conn.execute(query, args)
        while rows := cursor.fetchmany(CHUNK_ROWS):
            yield np.asarray(rows, dtype=np.int64)

    def served_reports(self, limit: int = 100) -> list[ServedReport]:
        """The distinct (model index, served model, system fingerprint) that OpenAI-compatible
        servers reported in the trials' signals, at most ``limit`` of them; an empty list
        where the store cannot answer (SQLite without its JSON functions, an unreadable
        table). Rows whose model is not an integer are left out."""
        try:
            rows = self.conn.execute(
                "SELECT DISTINCT model, json_extract(signals, '$.served_model'), "
                "json_extract(signals, '$.system_fingerprint') FROM completions "
                "WHERE json_valid(signals) AND json_extract(signals, '$.served_model') IS NOT NULL "
                "LIMIT ?",
                (limit,),
            ).fetchall()
        except sqlite3.Error:
            return []
        return [
            ServedReport(model, str(served), str(fingerprint) if fingerprint else None)
            for model, served, fingerprint in rows
            if isinstance(model, int)
        ]


__all__ = ["CHUNK_ROWS", "CellSpans", "ServedReport", "TrialQueries"]
