"""A damaged trial store is salvaged, never thrown away whole.

Truncating ``trials.sqlite-wal`` to 0 bytes while a run wrote to it left a store that failed
SQLite's integrity check for good (the writer's next checkpoint copied the lost frames' zeros
into the main file), and every resume refused it: every trial was lost. Most of such a file is
still readable, and the digest chain (:mod:`.chain`) says which rounds are intact.

:func:`salvage` reads the damaged file read-only, round by round in round order, and keeps the
longest prefix of rounds whose plan reads, whose trials read and whose recomputed digest matches
the sealed one. :func:`recover` (what ``run`` does on resume) writes those rounds, with the
run's metadata and the events of the kept rounds, into a fresh store, keeps the damaged file
beside it as ``trials.sqlite.damaged-<time>``, and records what was lost in the store's
``recoveries`` metadata; the controller then plans and samples the later rounds again. Trials
are functions of their seeds, and a round's plan of the posterior before it, so the recovered
run records the trials the run had recorded. ``verify`` says what a recovery kept and lost.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_eval.store import chain
from adaptive_eval.store.file import StoreError
from adaptive_eval.store.ledger import TrialStore

#: The trials table's columns, in the order they are copied.
TRIAL_COLUMNS = (
    "model, question, trial, round, batch_id, seed, category, tokens, prompt_tokens, "
    "latency_s, gpu_s, worker, answer, reason, recorded_at"
)
#: Meta keys that describe the run as it was before the damage and no longer hold.
RESET_META = ("finished",)


@dataclass
class Salvage:
    """What a damaged store still holds that its digests vouch for."""

    meta: dict[str, Any]
    rounds: int = 0  # rounds 0..rounds-1 kept whole (plan, trials, digest)
    trials: int = 0  # trials in those rounds
    unverified: int = 0  # trials read from later rounds, dropped (their round is not vouched)
    planned_rounds: int = 0  # rounds whose plan was recorded before the damage
    why_stopped: str = ""  # why the next round was not kept
    texts_unreadable: int = 0  # kept rounds whose completion texts (if any) could not be read
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def describe(self) -> str:
        kept = (
            f"{_rounds(self.rounds)} ({self.trials} trials) verify against their digests"
            if self.rounds
            else "no round verifies against its digest"
        )
        lost = f"; round {self.rounds} on is sampled again ({self.why_stopped})"
        if self.unverified:
            lost += f"; {self.unverified} trial(s) read from those rounds are not vouched for"
        return kept + lost


def _rounds(count: int) -> str:
    return "no round" if count == 0 else "round 0" if count == 1 else f"rounds 0..{count - 1}"


def _reader(path: Path) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None)


def _try(conn: sqlite3.Connection, query: str, args: tuple[Any, ...] = ()) -> list[Any] | None:
    """Rows of ``query``, or None where SQLite cannot read them (a damaged page)."""
    try:
        return conn.execute(query, args).fetchall()
    except sqlite3.Error:
        return None


def salvage(path: Path) -> Salvage:
    """Read what the damaged store ``path`` holds, round by round, keeping the rounds whose
    digests verify (nothing is written)."""
    try:
        conn = _reader(path)
    except sqlite3.Error as error:
        raise StoreError(f"cannot be read at all ({error})", source=str(path)) from None
    try:
        return _salvage(conn)
    finally:
        conn.close()


def _salvage(conn: sqlite3.Connection) -> Salvage:
    meta_rows = _try(conn, "SELECT key, value FROM meta") or []
    meta: dict[str, Any] = {}
    for key, value in meta_rows:
        with contextlib.suppress(TypeError, ValueError):
            meta[str(key)] = json.loads(value)
    found = Salvage(meta, rows={"rounds": [], "trials": [], "digests": [], "completions": []})
    plans = _try(conn, "SELECT round, shape, plan, planned_at FROM rounds ORDER BY round")
    digests = _try(conn, "SELECT round, digest, trials, sealed_at FROM digests ORDER BY round")
    if plans is None or digests is None:
        found.why_stopped = "the plans or digests of the rounds cannot be read"
        return found
    found.planned_rounds = len(plans)
    previous = ""
    for index, (plan, sealed) in enumerate(zip(plans, digests, strict=False)):
        if plan[0] != index or sealed[0] != index:
            found.why_stopped = f"the plan or digest of round {index} is missing"
            break
        try:
            digest, count = chain.round_digest(conn, index, previous)
        except sqlite3.Error as error:
            found.why_stopped = f"its trials cannot be read: {error}"
            break
        if digest != sealed[1] or count != sealed[2]:
            found.why_stopped = "its trials do not match its digest"
            break
        trials = _try(
            conn,
            f"SELECT {TRIAL_COLUMNS} FROM trials WHERE round = ? ORDER BY model, question, trial",
            (index,),
        )
        if trials is None:
            found.why_stopped = "its trials cannot be read"
            break
        found.rows["rounds"].append(tuple(plan))
        found.rows["digests"].append(tuple(sealed))
        found.rows["trials"] += trials
        found.rounds, found.trials, previous = index + 1, found.trials + count, digest
    else:
        found.why_stopped = (
            "its digest is missing"
            if found.rounds < len(plans)
            else "no later round is left in the readable part of the file"
        )
    later = _try(conn, "SELECT COUNT(*) FROM trials WHERE round >= ?", (found.rounds,))
    found.unverified = int(later[0][0]) if later else 0
    _salvage_texts(conn, found)
    through = min(_events_through(meta), found.rounds)
    found.rows["events"] = (
        _try(
            conn,
            "SELECT seq, round, kind, payload, at FROM events WHERE round <= ? ORDER BY seq",
            (through,),
        )
        or []
    )
    return found


def _events_through(meta: dict[str, Any]) -> int:
    """The last round whose events the run committed (-1: none)."""
    through = meta.get("events_through")
    return through if isinstance(through, int) and not isinstance(through, bool) else -1


def _salvage_texts(conn: sqlite3.Connection, found: Salvage) -> None:
    """The completion texts of the kept trials, one round at a time where the table cannot be
    read whole (a damaged page loses the texts it held, never the trials)."""
    rows = _try(
        conn,
        "SELECT c.model, c.question, c.trial, c.text, c.signals FROM completions c "
        "JOIN trials t USING (model, question, trial) WHERE t.round < ?",
        (found.rounds,),
    )
    if rows is not None:
        found.rows["completions"] = rows
        return
    for index in range(found.rounds):
        part = _try(
            conn,
            "SELECT c.model, c.question, c.trial, c.text, c.signals FROM completions c "
            "JOIN trials t USING (model, question, trial) WHERE t.round = ?",
            (index,),
        )
        if part is None:
            found.texts_unreadable += 1
        else:
            found.rows["completions"] += part


def recover(run_dir: Path, fsync: str = "full", found: Salvage | None = None) -> Salvage:
    """Replace the damaged store of ``run_dir`` by one holding what :func:`salvage` kept (or
    ``found``, its result); the damaged file (and its -wal, -shm) stays beside it as
    ``trials.sqlite.damaged-<time>``."""
    damaged = run_dir / TrialStore.FILENAME
    found = found if found is not None else salvage(damaged)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kept_as = damaged.with_name(f"{damaged.name}.damaged-{stamp}")
    scratch = run_dir / f".recovery-{stamp}"
    scratch.mkdir()
    try:
        _write(scratch, found, kept_as.name, fsync)
        for suffix in ("", "-wal", "-shm"):
            source = damaged.with_name(damaged.name + suffix)
            if source.exists():
                source.rename(kept_as.with_name(kept_as.name + suffix))
        (scratch / TrialStore.FILENAME).rename(damaged)
    finally:
        for leftover in scratch.iterdir():
            leftover.unlink()
        scratch.rmdir()
    return found


def _write(folder: Path, found: Salvage, kept_as: str, fsync: str) -> None:
    store = TrialStore(folder, fsync=fsync)
    try:
        rows = found.rows
        conn = store.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO rounds VALUES (?, ?, ?, ?)", rows["rounds"])
        marks = ", ".join("?" * len(TRIAL_COLUMNS.split(",")))
        conn.executemany(f"INSERT INTO trials({TRIAL_COLUMNS}) VALUES ({marks})", rows["trials"])
        conn.executemany("INSERT INTO completions VALUES (?, ?, ?, ?, ?)", rows["completions"])
        conn.executemany("INSERT INTO digests VALUES (?, ?, ?, ?)", rows["digests"])
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows["events"])
        meta = {k: v for k, v in found.meta.items() if k not in RESET_META}
        meta["events_through"] = min(_events_through(meta), found.rounds)
        if "library_reused" in meta:  # reused trials of the dropped rounds are gone too
            meta["library_reused"] = sum(1 for row in rows["trials"] if row[11] == "library")
        meta["recoveries"] = [
            *list(meta.get("recoveries") or []),
            {
                "at": time.time(),
                "damaged_file": kept_as,
                "rounds_kept": found.rounds,
                "trials_kept": found.trials,
                "rounds_planned_before": found.planned_rounds,
                "trials_not_vouched": found.unverified,
                "rounds_without_texts": found.texts_unreadable,
                "why": found.why_stopped,
            },
        ]
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?)",
            [(key, json.dumps(value, sort_keys=True)) for key, value in meta.items()],
        )
        conn.execute("COMMIT")
    finally:
        store.close()


def describe_recoveries(recoveries: list[dict[str, Any]]) -> list[str]:
    """One sentence per recovery a store went through, for ``verify`` and the reports."""
    out = []
    for item in recoveries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(item.get("at", 0))))
        kept = int(item.get("rounds_kept", 0))
        out.append(
            f"recovered on {when} from a damaged store (kept as {item.get('damaged_file')}): "
            f"{_rounds(kept)} kept ({item.get('trials_kept')} trials, their digests "
            f"verified); round {kept} on sampled again ({item.get('why')}; "
            f"{item.get('trials_not_vouched', 0)} trial(s) of those rounds were not vouched "
            f"for); completion texts (where kept) unreadable in "
            f"{item.get('rounds_without_texts', 0)} kept round(s)"
        )
    return out


__all__ = ["Salvage", "describe_recoveries", "recover", "salvage"]
