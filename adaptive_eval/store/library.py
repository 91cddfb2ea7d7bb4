"""The trial library's SQLite file: cells, their reusable trials, and each model name's last
identity.

What a cell is and when a trial is reused is :mod:`adaptive_eval.control.library`'s business; this
module only keeps the rows, so that the library's SQL lives with the rest of the project's.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from adaptive_eval.base.types import Trial

FILENAME = "library.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (cell TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
    cell TEXT NOT NULL, trial INTEGER NOT NULL, seed INTEGER NOT NULL, category INTEGER NOT NULL,
    tokens INTEGER, prompt_tokens INTEGER, gpu_s REAL, answer TEXT, reason TEXT,
    origin TEXT NOT NULL, added_at REAL NOT NULL,
    PRIMARY KEY (cell, trial)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY, identity TEXT NOT NULL,
    seen_at REAL NOT NULL);
"""
#: The tables that make an SQLite file a trial library (see :data:`SCHEMA`).
LIBRARY_TABLES = frozenset({"cells", "trials"})


def library_path(path: Path) -> Path:
    """The library file ``path`` names: ``path/library.sqlite`` for a folder (or a name without
    a suffix), else ``path`` itself."""
    return path / FILENAME if path.is_dir() or not path.suffix else path


def table_names(path: Path) -> set[str]:
    """The names in ``path``'s ``sqlite_master`` (tables, indexes), read without writing;
    raises :class:`sqlite3.Error` where ``path`` is not an SQLite file."""
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


class LibraryTrial(NamedTuple):
    """One trial the library holds for a cell, as recorded."""

    trial: int
    seed: int
    category: int
    tokens: int | None
    prompt_tokens: int | None
    gpu_s: float | None
    answer: str | None
    reason: str | None


class LibraryFile:
    """An open library file (created with its tables where missing, in WAL mode so that runs
    sharing it never block one another's readers)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def add_cells(self, cells: Iterable[tuple[str, str]]) -> None:
        """Add (cell key, JSON description) rows in one transaction; a known cell is kept."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT OR IGNORE INTO cells(cell, description) VALUES (?, ?)", cells
            )

    def swap_identities(self, identities: Sequence[tuple[str, str]]) -> list[str | None]:
        """Store each (model name, identity JSON) as the name's last identity, in one
        transaction; returns, per name, the identity JSON it replaced (None for a name the
        library had not seen)."""
        before: list[str | None] = []
        now = time.time()
        with self.conn:
            self.conn.execute("BEGIN")
            for name, identity in identities:
                row = self.conn.execute(
                    "SELECT identity FROM models WHERE name = ?", (name,)
                ).fetchone()
                before.append(None if row is None else row[0])
                self.conn.execute(
                    "INSERT OR REPLACE INTO models(name, identity, seen_at) VALUES (?, ?, ?)",
                    (name, identity, now),
                )
        return before

    def trials(self, cell: str, first: int, last: int) -> dict[int, LibraryTrial]:
        """The trials the library holds for ``cell`` with an index in ``first..last``
        (inclusive), by trial index."""
        return {
            row[0]: LibraryTrial(*row)
            for row in self.conn.execute(
                "SELECT trial, seed, category, tokens, prompt_tokens, gpu_s, answer, reason "
                "FROM trials WHERE cell = ? AND trial BETWEEN ? AND ?",
                (cell, first, last),
            )
        }

    def add_trials(self, trials: Iterable[tuple[str, Trial]], origin: str) -> None:
        """Add (cell key, trial) pairs, noted as added now by ``origin``, in one transaction; a
        trial the library already holds is kept as it was."""
        now = time.time()
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT OR IGNORE INTO trials(cell, trial, seed, category, tokens, prompt_tokens, "
                "gpu_s, answer, reason, origin, added_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        cell,
                        t.trial,
                        t.seed,
                        t.category,
                        t.tokens,
                        t.prompt_tokens,
                        t.gpu_s,
                        t.answer,
                        t.reason,
                        origin,
                        now,
                    )
                    for cell, t in trials
                ],
            )

    def count(self) -> int:
        """How many trials the library holds, over every cell."""
        return int(self.conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])


__all__ = [
    "FILENAME",
    "LIBRARY_TABLES",
    "SCHEMA",
    "LibraryFile",
    "LibraryTrial",
    "library_path",
    "table_names",
]
