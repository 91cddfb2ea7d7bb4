"""The digest chain of a trial store: SQLite keeps no checksums, so a changed row went unnoticed.

Each round, once every trial it planned is recorded, is sealed: its digest chains the previous
round's digest with a canonical encoding of the round's recorded trials, and is written in the
same transaction as the trial that completed it (with the trials of every later round already
complete, in round order):

    digest(r) = sha256(digest(r - 1) "\\n" r "\\n" json(rows of round r))

where ``digest(-1)`` is empty and ``rows`` are the round's trials as JSON arrays of
``DIGEST_COLUMNS``, in (model, question, trial) order, as ``json.dumps(rows,
separators=(",", ":"))`` writes them. A trial changed, added or removed after its round was sealed
changes that round's digest and breaks the chain from there on; :func:`first_mismatch` finds
the first bad round. A round still missing trials (in flight when the run stopped) is not
sealed, so its rows are not covered until it completes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass

#: What a round's digest covers: every recorded value that identifies or grades a trial.
DIGEST_COLUMNS = (
    "model, question, trial, seed, category, tokens, prompt_tokens, gpu_s, answer, reason"
)
TABLE = """
CREATE TABLE IF NOT EXISTS digests (
    round INTEGER PRIMARY KEY, digest TEXT NOT NULL, trials INTEGER NOT NULL,
    sealed_at REAL NOT NULL);
"""
_CHUNK_ROWS = 1 << 14


def round_digest(conn: sqlite3.Connection, round_index: int, previous: str) -> tuple[str, int]:
    """The digest of ``round_index`` chained to ``previous``, and how many trials it covers.

    The rows are hashed a chunk at a time (one ``json.dumps`` per chunk, the chunks' encodings
    joined as one array), so memory stays flat however large the round.
    """
    digest = hashlib.sha256(f"{previous}\n{round_index}\n[".encode())
    cursor = conn.execute(
        f"SELECT {DIGEST_COLUMNS} FROM trials WHERE round = ? ORDER BY model, question, trial",
        (round_index,),
    )
    count = 0
    while rows := cursor.fetchmany(_CHUNK_ROWS):
        if count:
            digest.update(b",")
        digest.update(json.dumps(rows, separators=(",", ":"))[1:-1].encode())
        count += len(rows)
    digest.update(b"]")
    return digest.hexdigest(), count


@dataclass(frozen=True)
class Mismatch:
    """The first round whose recorded trials do not match the chain, and why."""

    round: int
    why: str


def first_mismatch(
    conn: sqlite3.Connection, planned: dict[int, int], recorded: dict[int, int]
) -> tuple[Mismatch | None, int]:
    """Recompute every sealed round's digest in order; (the first mismatch or None, rounds
    checked). A complete round after the sealed ones is a mismatch too: sealing never leaves
    one behind, so its digest was removed."""
    previous = ""
    checked = 0
    for round_index, stored, trials in conn.execute(
        "SELECT round, digest, trials FROM digests ORDER BY round"
    ):
        if round_index != checked:
            return Mismatch(checked, "its digest is missing"), checked
        digest, count = round_digest(conn, round_index, previous)
        if count != trials:
            return Mismatch(round_index, f"it holds {count} trials, {trials} were sealed"), checked
        if digest != stored:
            return Mismatch(round_index, "a recorded value was changed after it was sealed"), (
                checked
            )
        previous = stored
        checked += 1
    if checked in planned and recorded.get(checked, 0) >= planned[checked] > 0:
        return Mismatch(checked, "it is complete but was never sealed (its digest is gone)"), (
            checked
        )
    return None, checked


__all__ = ["DIGEST_COLUMNS", "TABLE", "Mismatch", "first_mismatch", "round_digest"]
