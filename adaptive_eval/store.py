"""Durable trial ledger of a run directory: SQLite in WAL mode.

Why SQLite/WAL: one file, atomic multi-row transactions (a batch is recorded whole or not at
all), a primary key on (model, question, trial) that makes a double insert impossible, readers
(``adaptive-eval report``) that never block the writer, and ``synchronous=FULL`` so a committed
batch survives ``kill -9`` and power loss. An append-only log would need its own torn-write
recovery and de-duplication; SQLite already has both, and the write rate (a transaction per
batch, tens per second) is far below what it sustains.

Besides trials the store keeps each round's plan (the per-cell trial counts the allocation
asked for), so that a resumed run knows exactly which work was in flight, the decision log, and
the digest chain of the complete rounds (:mod:`adaptive_eval.chain`), checked on resume, by
``report`` and by ``adaptive-eval verify``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from adaptive_eval import chain
from adaptive_eval.errors import AdaptiveEvalError, InputError
from adaptive_eval.storage import free_bytes, is_read_only, storage_error
from adaptive_eval.types import BatchResult, Trial

#: Stored in SQLite's ``PRAGMA user_version``. A store without it (0) predates the field and has
#: the version-1 tables; version 2 adds the digest chain (built on the first writable open of
#: an older store).
SCHEMA_VERSION = 2
_TABLES = ("meta", "rounds", "trials", "completions", "events")

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY, shape TEXT NOT NULL, plan BLOB NOT NULL, planned_at REAL);
CREATE TABLE IF NOT EXISTS trials (
    model INTEGER NOT NULL, question INTEGER NOT NULL, trial INTEGER NOT NULL,
    round INTEGER NOT NULL, batch_id INTEGER NOT NULL, seed INTEGER NOT NULL,
    category INTEGER NOT NULL, tokens INTEGER, prompt_tokens INTEGER, latency_s REAL,
    gpu_s REAL, worker TEXT, answer TEXT, reason TEXT, recorded_at REAL NOT NULL,
    PRIMARY KEY (model, question, trial)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS completions (
    model INTEGER NOT NULL, question INTEGER NOT NULL, trial INTEGER NOT NULL,
    text BLOB, signals TEXT, PRIMARY KEY (model, question, trial)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, kind TEXT NOT NULL,
    payload TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS trials_by_round ON trials(round);
"""
    + chain.TABLE
)

SALVAGE_HINT = (
    "`adaptive-eval run` with the run's config keeps every round whose digest still verifies "
    "and samples the rest again (trials are functions of their seeds)"
)
RECOVERY_HINT = (
    "restore trials.sqlite from a backup, or salvage its readable rows with "
    "`sqlite3 {path} .recover | sqlite3 recovered.sqlite`, or start afresh with a new --out"
)


class StoreError(InputError):
    """The run directory's store is missing, damaged or held by another process (exit 2)."""


class CorruptStore(StoreError):
    """SQLite itself finds the file damaged (its integrity check fails, or it reads a page
    that is not one): what :mod:`adaptive_eval.recovery` salvages, as opposed to a value
    changed through SQL, which the digest chain refuses."""


#: SQLite's names for a file that is not a database, or one whose pages are damaged: the only
#: errors after which the store itself is called damaged (and a backup suggested).
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")

#: ``on_event(level, kind, payload)``: what the store noticed (a lost -wal file), for events.jsonl.
StoreEvents = Callable[[str, str, dict[str, Any]], None]


class RunLock:
    """An exclusive ``flock`` on ``DIR/.lock``: one writer per run directory.

    The file holds the holder's pid and host, so a refused process can say who holds it. The
    kernel drops the lock when its process dies, however it dies, so a lock left by a killed
    run never blocks the resume (the stale pid in the file is simply overwritten).
    """

    FILENAME = ".lock"

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / self.FILENAME
        self._handle: IO[str] | None = None

    def acquire(self) -> RunLock:
        doing = "lock the run directory (run and report write into it)"
        try:
            handle = self.path.open("a+", encoding="utf-8")
        except OSError as error:
            raise storage_error(error, self.path.parent, doing) from error
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise StoreError(
                f"is in use by {holder}; wait for that run to finish (or stop it) before "
                "running or reporting on this directory again",
                source=str(self.path.parent),
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
            handle.flush()
        except OSError as error:
            handle.close()
            raise storage_error(error, self.path.parent, doing) from error
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor releases the flock
            self._handle = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def reading(run_dir: Path, store: TrialStore | None = None) -> Iterator[TrialStore]:
    """``store`` itself when the caller holds the run's store open (the run writing its
    outputs: a second connection would be a second reader of the same -wal), else the run's
    store opened read-only for the block."""
    if store is not None:
        yield store
        return
    opened = TrialStore(run_dir, readonly=True)
    try:
        yield opened
    finally:
        opened.close()


@dataclass
class _Chain:
    """Where the digest chain stands: trials planned and recorded per round, and the rounds
    sealed so far (0..sealed-1, the last one's digest)."""

    planned: dict[int, int]
    recorded: dict[int, int]
    sealed: int
    last: str


@dataclass(frozen=True)
class RoundCounts:
    """One round's recorded trials aggregated per (model, question, category) cell."""

    model: np.ndarray
    question: np.ndarray
    category: np.ndarray
    count: np.ndarray
    tokens_sum: np.ndarray  # over trials with a known token count
    tokens_known: np.ndarray
    gpu_s: np.ndarray


@dataclass(frozen=True)
class TrialArrays:
    """Recorded trials as columns (sorted by model, question, trial)."""

    model: np.ndarray
    question: np.ndarray
    trial: np.ndarray
    round: np.ndarray
    category: np.ndarray
    tokens: np.ndarray  # -1 where unknown
    gpu_s: np.ndarray


class TrialStore:
    """One run directory's ledger. Not thread-safe: the controller is its only writer.

    A reader (``readonly``) never writes: it opens the file with SQLite's ``mode=ro``, or, where
    the folder cannot be written (read-only media, a full disk) and no -wal file holds trials
    not yet in the main file, as ``immutable`` (no -shm file needed).
    """

    FILENAME = "trials.sqlite"

    def __init__(self, run_dir: Path, *, fsync: str = "full", readonly: bool = False) -> None:
        self.path = Path(run_dir) / self.FILENAME
        self.fsync = fsync
        self.readonly = readonly
        #: Set by the run: where the store reports what it noticed (see :meth:`_check_wal`).
        self.on_event: StoreEvents | None = None
        self._wal_inode: int | None = None
        self._chain: _Chain | None = None
        #: Whether the store holds a digest chain (False: written by a release before it).
        self.has_chain = True
        #: What the store's users should tell the user about it, as (event kind, message): a
        #: chain built on open (``digest_chain_built``), a damaged store salvaged
        #: (``store_recovered``).
        self.notes: list[tuple[str, str]] = []
        try:
            self.conn = self._connect()
        except sqlite3.Error as error:
            raise self.failure(error, "open the trial store") from None
        try:
            self._open(fsync, readonly)
        except sqlite3.Error as error:
            self.conn.close()
            raise self.failure(error, "open the trial store") from None
        except StoreError:
            self.conn.close()
            raise

    @property
    def wal(self) -> Path:
        return self.path.with_name(self.path.name + "-wal")

    def _connect(self) -> sqlite3.Connection:
        uri = "file:" + urllib.parse.quote(str(self.path))
        if self.readonly:
            folder = self.path.parent
            stuck = is_read_only(folder) or free_bytes(folder) == 0
            if stuck and self._wal_pending():
                raise StoreError(
                    f"its -wal file ({self.wal.stat().st_size} bytes) holds trials not yet "
                    "in trials.sqlite, and SQLite cannot read them where the folder cannot be "
                    "written (read-only, or a full disk); copy the run folder to a writable "
                    "disk and read it there. The store itself is intact",
                    source=str(self.path),
                )
            uri += "?immutable=1" if stuck else "?mode=ro"
        return sqlite3.connect(uri, uri=True, isolation_level=None)

    def _wal_pending(self) -> bool:
        try:
            return self.wal.stat().st_size > 0
        except OSError:
            return False

    def failure(self, error: sqlite3.Error, doing: str) -> AdaptiveEvalError:
        """The error to show for an SQLite error: damage only where SQLite says so; a lost
        -wal file, a full disk or a read-only file system named as such."""
        name = getattr(error, "sqlite_errorname", "") or ""
        if name.startswith(_DAMAGED):
            return self.damaged(f"is not a readable SQLite database ({error})", corrupt=True)
        shm = self.path.with_name(self.path.name + "-shm")
        # The -shm index says the -wal holds frames, and the -wal is gone (or is a new, empty
        # file: a reader that found none creates one).
        if name == "SQLITE_IOERR_SHORT_READ" and shm.exists() and not self._wal_pending():
            return AdaptiveEvalError(
                f"{self.path}: cannot {doing}: its -wal file was deleted while a run was "
                "writing to it (trials.sqlite-shm is still there). The store is intact: the "
                "running process saves those trials into trials.sqlite as it goes on and when "
                "it ends. Let it finish, then read the store again; do not replace or delete "
                "trials.sqlite"
            )
        return storage_error(error, self.path, doing)

    def _open(self, fsync: str, readonly: bool) -> None:
        """Check the file before trusting it: SQLite's own check, then the schema version."""
        problems = [row[0] for row in self.conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            found = "; ".join(" ".join(str(p).split()) for p in problems)
            raise self.damaged(f"fails SQLite's integrity check ({found})", corrupt=True)
        version = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {
            row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if version > SCHEMA_VERSION:
            raise self.damaged(
                f"has schema version {version}, newer than this adaptive-eval's "
                f"{SCHEMA_VERSION}; use the release that wrote it",
                hint=False,
            )
        if tables and not tables >= set(_TABLES):
            missing = ", ".join(sorted(set(_TABLES) - tables))
            raise self.damaged(f"lacks the table(s) {missing}")
        self.has_chain = not tables or "digests" in tables
        if readonly:
            return
        self._set_up(fsync)
        self.conn.executescript(_SCHEMA)
        if version != SCHEMA_VERSION:
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _set_up(self, fsync: str) -> None:
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={'FULL' if fsync == 'full' else 'NORMAL'}")

    def _check_wal(self) -> None:
        """After a commit: if the -wal file was deleted under us (a cleanup job, by hand), save
        its frames into trials.sqlite and start a new one.

        SQLite keeps writing to the deleted file through its descriptor, where no other process
        can read it (a reader then gets an I/O error, and creates an empty file of the same
        name: so the check is on the file's inode) and a crash would lose it. A checkpoint
        copies every committed frame into the main file; reopening starts a new -wal.
        """
        if self.readonly:
            return
        try:
            inode: int | None = self.wal.stat().st_ino
        except FileNotFoundError:
            inode = None
        if inode is not None and self._wal_inode in (None, inode):
            self._wal_inode = inode  # the file this connection writes to
            return
        self._wal_inode = None
        self.conn.execute("PRAGMA wal_checkpoint(FULL)")
        self.conn.close()
        self.conn = self._connect()
        self._set_up(self.fsync)
        if self.on_event is not None:
            self.on_event(
                "warning",
                "wal_recreated",
                {
                    "message": f"{self.wal.name} was deleted during the run; every committed "
                    "trial was saved into trials.sqlite and a new -wal file started",
                },
            )

    def damaged(self, what: str, *, hint: bool = True, corrupt: bool = False) -> StoreError:
        message = f"the trial store {what}"
        if corrupt:
            message += "; " + SALVAGE_HINT
        if hint:
            message += "; " + RECOVERY_HINT.format(path=self.path)
        return (CorruptStore if corrupt else StoreError)(message, source=str(self.path))

    def check_ranges(self, num_models: int, num_questions: int, num_categories: int) -> None:
        """Refuse rows whose model, question, category, trial or round is out of range.

        An out-of-range category would otherwise be counted on another question's cell.
        """
        num_rounds, last = self.conn.execute("SELECT COUNT(*), MAX(round) FROM rounds").fetchone()
        if num_rounds and (last != num_rounds - 1 or self._first_round() != 0):
            have = {r for (r,) in self.conn.execute("SELECT round FROM rounds")}
            gaps = sorted(set(range(max(int(last), 0) + 1)) - have)
            what = f"round {gaps[0]}" if gaps else f"rounds {sorted(have)[:3]}..."
            raise self.damaged(f"lacks the plan of {what}" if gaps else f"holds plans of {what}")
        checks = [
            ("model", num_models - 1),
            ("question", num_questions - 1),
            ("category", num_categories - 1),
            ("round", num_rounds - 1),
        ]
        row = self.conn.execute(
            "SELECT "
            + ", ".join(f"MIN({c}), MAX({c}), SUM(typeof({c}) != 'integer')" for c, _ in checks)
            + ", MIN(trial), SUM(typeof(trial) != 'integer'), COUNT(*) FROM trials"
        ).fetchone()
        if not row[-1]:
            return
        bad = []
        for index, (column, top) in enumerate(checks):
            low, high, non_int = row[3 * index : 3 * index + 3]
            if non_int or low < 0 or high > top:
                bad.append(f"{column} values span {low}..{high}, expected 0..{top}")
        if row[-3] < 0 or row[-2]:
            bad.append(f"trial indices start at {row[-3]}")
        if bad:
            raise self.damaged("holds out-of-range trial rows: " + "; ".join(bad))

    def _first_round(self) -> int:
        return int(self.conn.execute("SELECT MIN(round) FROM rounds").fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    # -- metadata -----------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._meta_value(key, row[0])

    def _meta_value(self, key: str, text: Any) -> Any:
        try:
            return json.loads(text)
        except (TypeError, ValueError) as error:
            shown = repr(text)[:60]
            raise self.damaged(
                f"holds a meta value {key!r} that is not JSON ({shown}: {error}); it was "
                "changed outside adaptive-eval"
            ) from None

    def check_meta(self) -> None:
        """Every meta value must parse, and the run's identity be of the types it is written
        with (a garbage ``campaign_id`` passed ``verify`` and failed ``report`` with a
        JSONDecodeError)."""
        values = {
            str(key): self._meta_value(str(key), text)
            for key, text in self.conn.execute("SELECT key, value FROM meta ORDER BY key")
        }
        if not values:
            return
        expected: dict[str, tuple[type, ...]] = {
            "fingerprint": (str,),
            "campaign_id": (str,),
            "identity": (dict,),
            "models": (list,),
            "questions": (list,),
        }
        for key, kinds in expected.items():
            value = values.get(key)
            bad = not isinstance(value, kinds) or not value
            if isinstance(value, str):
                bad = bad or not value.isprintable()
            if isinstance(value, list):
                bad = bad or not all(isinstance(item, str) for item in value)
            if bad:
                shown = "missing" if key not in values else repr(value)[:60]
                raise self.damaged(
                    f"holds a meta value {key!r} of the wrong kind ({shown}); it was changed "
                    "outside adaptive-eval"
                )

    def check_applied_rounds(self, sealed: int) -> None:
        """The rounds the run applied (its decisions were committed through them) must still be
        recorded: deleting the last round's trials and its digest used to leave a shortened run
        that ``verify`` and ``report`` presented as final."""
        through = self.get_meta("events_through")
        if isinstance(through, int) and through > sealed:
            raise StoreError(
                f"the run is incomplete: its decisions were committed through round {through}, "
                f"but only rounds 0..{sealed - 1} are recorded whole; the trials of round "
                f"{sealed} on were deleted after the run recorded them (with their digests). "
                "Restore trials.sqlite from a backup, or start afresh with a new --out",
                source=str(self.path),
            )

    def set_meta(self, **values: Any) -> None:
        with self._transaction():
            self._put_meta(values)

    def _put_meta(self, values: dict[str, Any]) -> None:
        if values:
            self.conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(key, json.dumps(value, sort_keys=True)) for key, value in values.items()],
            )

    # -- rounds -------------------------------------------------------------------------------
    def add_round(self, round_index: int, plan: np.ndarray) -> None:
        blob = zlib.compress(np.ascontiguousarray(plan, dtype=np.int32).tobytes())
        with self._transaction():
            self.conn.execute(
                "INSERT INTO rounds(round, shape, plan, planned_at) VALUES (?, ?, ?, ?)",
                (round_index, json.dumps(list(plan.shape)), blob, time.time()),
            )
        if self._chain is not None:
            self._chain.planned[round_index] = int(plan.sum())

    # -- the digest chain ---------------------------------------------------------------------
    def _chain_state(self) -> _Chain:
        if self._chain is None:
            planned = {index: int(plan.sum()) for index, plan in enumerate(self.rounds())}
            rows = self.conn.execute("SELECT round, digest FROM digests ORDER BY round").fetchall()
            self._chain = _Chain(
                planned, self.trials_per_round(), len(rows), rows[-1][1] if rows else ""
            )
        return self._chain

    def _seal_ready(self) -> int:
        """Seal every complete round after the sealed ones, in order (inside a transaction);
        how many were sealed."""
        state = self._chain_state()
        sealed = 0
        while state.recorded.get(state.sealed, 0) >= state.planned.get(state.sealed, 0) > 0:
            digest, count = chain.round_digest(self.conn, state.sealed, state.last)
            self.conn.execute(
                "INSERT INTO digests(round, digest, trials, sealed_at) VALUES (?, ?, ?, ?)",
                (state.sealed, digest, count, time.time()),
            )
            state.sealed, state.last = state.sealed + 1, digest
            sealed += 1
        return sealed

    def build_chain(self) -> int:
        """Seal the complete rounds of a store written before the digest chain existed (its
        first writable open); how many rounds. Changes made to them before cannot be seen."""
        with self._transaction():
            built = self._seal_ready()
            self._put_meta({"digest_chain_built": {"at": time.time(), "rounds": built}})
        self.has_chain = True
        return built

    def verify_chain(self) -> int:
        """Recompute the chain; the rounds it covers. A mismatch is a :class:`StoreError`
        naming the first bad round."""
        state = self._chain_state()
        found, checked = chain.first_mismatch(self.conn, state.planned, state.recorded)
        if found is not None:
            earlier = f"rounds 0..{found.round - 1} match" if found.round else "no earlier round"
            raise StoreError(
                f"the trial store's round {found.round} does not match its digest: {found.why} "
                f"({earlier}). A trial recorded in round {found.round} "
                "was changed, added or removed outside adaptive-eval; restore trials.sqlite "
                "from a backup, or start afresh with a new --out",
                source=str(self.path),
            )
        return checked

    def rounds(self) -> list[np.ndarray]:
        out = []
        for index, (round_index, shape, blob) in enumerate(
            self.conn.execute("SELECT round, shape, plan FROM rounds ORDER BY round")
        ):
            if round_index != index:
                raise self.damaged(f"lacks the plan of round {index}")
            try:
                plan = np.frombuffer(zlib.decompress(blob), dtype=np.int32)
                out.append(plan.reshape(json.loads(shape)).astype(np.int64))
            except (zlib.error, ValueError, TypeError) as error:
                what = f"holds an unreadable plan for round {index} ({error})"
                raise self.damaged(what) from None
        return out

    def trials_per_round(self) -> dict[int, int]:
        """How many trials each round has recorded (rounds without any are absent)."""
        return dict(self.conn.execute("SELECT round, COUNT(*) FROM trials GROUP BY round"))

    def round_counts(self, round_index: int) -> RoundCounts:
        """A round's trials aggregated in SQL: memory grows with the cells, not the trials."""
        rows = self.conn.execute(
            "SELECT model, question, category, COUNT(*), COALESCE(SUM(tokens), 0), "
            "COUNT(tokens), COALESCE(SUM(gpu_s), 0.0) FROM trials WHERE round = ? "
            "GROUP BY model, question, category ORDER BY model, question, category",
            (round_index,),
        ).fetchall()
        table = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
        ints = table[:, :6].astype(np.int64)
        return RoundCounts(
            model=ints[:, 0],
            question=ints[:, 1],
            category=ints[:, 2],
            count=ints[:, 3],
            tokens_sum=ints[:, 4],
            tokens_known=ints[:, 5],
            gpu_s=table[:, 6],
        )

    def round_trial_keys(self, round_index: int) -> set[tuple[int, int, int]]:
        """The (model, question, trial) keys a round has recorded."""
        return set(
            self.conn.execute(
                "SELECT model, question, trial FROM trials WHERE round = ?", (round_index,)
            )
        )

    # -- trials -------------------------------------------------------------------------------
    def record(self, result: BatchResult, keep_text: bool) -> int:
        """Record one batch atomically; returns how many trials were new."""
        return self.record_many([result], keep_text)[0]

    def record_many(self, results: list[BatchResult], keep_text: bool) -> list[int]:
        """Record batches in one transaction (one fsync: group commit).

        Returns, per batch, how many of its trials were new; a trial already recorded is
        ignored, never counted twice.
        """
        now = time.time()
        added: list[int] = []
        with self._transaction():
            state = self._chain_state()
            for result in results:
                before = self.conn.total_changes
                self.conn.executemany(
                    "INSERT OR IGNORE INTO trials(model, question, trial, round, batch_id, seed, "
                    "category, tokens, prompt_tokens, latency_s, gpu_s, worker, answer, reason, "
                    "recorded_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            t.model,
                            t.question,
                            t.trial,
                            result.round,
                            result.batch_id,
                            t.seed,
                            t.category,
                            t.tokens,
                            t.prompt_tokens,
                            t.latency_s,
                            t.gpu_s,
                            result.worker,
                            t.answer,
                            t.reason,
                            now,
                        )
                        for t in result.trials
                    ],
                )
                added.append(self.conn.total_changes - before)
                state.recorded[result.round] = state.recorded.get(result.round, 0) + added[-1]
                extra = [
                    (
                        t.model,
                        t.question,
                        t.trial,
                        zlib.compress(t.text.encode())
                        if keep_text and t.text is not None
                        else None,
                        json.dumps(t.signals) if t.signals is not None else None,
                    )
                    for t in result.trials
                    if t.text is not None or t.signals is not None
                ]
                if extra:
                    self.conn.executemany(
                        "INSERT OR IGNORE INTO completions(model, question, trial, text, signals) "
                        "VALUES (?,?,?,?,?)",
                        extra,
                    )
            self._seal_ready()  # in the transaction that completed the round
        return added

    def trial_arrays(self) -> TrialArrays:
        rows = self.conn.execute(
            "SELECT model, question, trial, round, category, COALESCE(tokens, -1), "
            "COALESCE(gpu_s, 0) FROM trials ORDER BY model, question, trial"
        ).fetchall()
        table = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
        ints = table[:, :6].astype(np.int64)
        return TrialArrays(
            model=ints[:, 0],
            question=ints[:, 1],
            trial=ints[:, 2],
            round=ints[:, 3],
            category=ints[:, 4],
            tokens=ints[:, 5],
            gpu_s=table[:, 6],
        )

    def count_trials(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])

    def trials(self, model: int | None = None) -> Iterator[Trial]:
        query = (
            "SELECT t.model, t.question, t.trial, t.seed, t.category, t.tokens, "
            "t.prompt_tokens, t.latency_s, t.gpu_s, t.answer, t.reason, c.text, c.signals "
            "FROM trials t LEFT JOIN completions c USING (model, question, trial)"
        )
        args: tuple[Any, ...] = ()
        if model is not None:
            query += " WHERE t.model = ?"
            args = (model,)
        for row in self.conn.execute(query + " ORDER BY t.model, t.question, t.trial", args):
            text = zlib.decompress(row[11]).decode() if row[11] is not None else None
            signals = json.loads(row[12]) if row[12] is not None else None
            yield Trial(
                model=row[0],
                question=row[1],
                trial=row[2],
                seed=row[3],
                category=row[4],
                tokens=row[5],
                prompt_tokens=row[6],
                latency_s=row[7],
                gpu_s=row[8],
                answer=row[9],
                reason=row[10],
                text=text,
                signals=signals,
            )

    # -- events -------------------------------------------------------------------------------
    def add_events(
        self,
        round_index: int,
        events: Iterable[tuple[str, dict[str, Any]]],
        **meta: Any,
    ) -> None:
        """Append a round's events and update ``meta`` keys, in one transaction."""
        now = time.time()
        rows = [
            (round_index, kind, json.dumps(payload, sort_keys=True), now)
            for kind, payload in events
        ]
        with self._transaction():
            self.conn.executemany(
                "INSERT INTO events(round, kind, payload, at) VALUES (?,?,?,?)", rows
            )
            self._put_meta(meta)

    def events(self, kind: str | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        query = "SELECT round, kind, payload FROM events"
        args: tuple[Any, ...] = ()
        if kind is not None:
            query += " WHERE kind = ?"
            args = (kind,)
        return [
            (r, k, json.loads(p)) for r, k, p in self.conn.execute(query + " ORDER BY seq", args)
        ]

    def max_batch_id(self) -> int:
        """Largest batch id recorded, so a resumed run numbers its batches after it."""
        row = self.conn.execute("SELECT MAX(batch_id) FROM trials").fetchone()
        return 0 if row[0] is None else int(row[0])

    # -- helpers ------------------------------------------------------------------------------
    class _Tx:
        """One write transaction; an SQLite failure becomes a one-line error naming its cause."""

        def __init__(self, store: TrialStore) -> None:
            self.store = store

        def __enter__(self) -> None:
            try:
                self.store.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise self.store.failure(error, "write to the trial store") from error

        def __exit__(self, kind: object, value: object, tb: object) -> None:
            conn = self.store.conn
            try:
                conn.execute("COMMIT" if kind is None else "ROLLBACK")
            except sqlite3.Error as error:
                if kind is None:
                    raise self.store.failure(error, "write to the trial store") from error
            if isinstance(value, sqlite3.Error):
                raise self.store.failure(value, "write to the trial store") from value
            if kind is None:
                self.store._check_wal()

    def _transaction(self) -> TrialStore._Tx:
        return TrialStore._Tx(self)
