"""The trial store's file: SQLite in WAL mode, opened, checked and locked.

Why SQLite/WAL: one file, atomic multi-row transactions (a batch is recorded whole or not at
all), a primary key on (model, question, trial) that makes a double insert impossible, readers
(``adaptive-eval report``) that never block the writer, and ``synchronous=FULL`` so a committed
batch survives ``kill -9`` and power loss. An append-only log would need its own torn-write
recovery and de-duplication; SQLite already has both, and the write rate (a transaction per
batch, tens per second) is far below what it sustains.

Besides trials the store keeps each round's plan (the per-cell trial counts the allocation
asked for), so that a resumed run knows exactly which work was in flight, the decision log, and
the digest chain of the complete rounds (:mod:`adaptive_eval.store.chain`), checked on resume, by
``report`` and by ``adaptive-eval verify``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sqlite3
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from adaptive_eval.base.errors import AdaptiveEvalError, InputError
from adaptive_eval.base.files import free_bytes, is_read_only, storage_error
from adaptive_eval.store import chain

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


#: The error SQLite raises, named here so that callers outside the store can catch it (to word
#: a failure) without importing ``sqlite3`` themselves.
SQLiteError = sqlite3.Error


class StoreError(InputError):
    """The run directory's store is missing, damaged or held by another process (exit 2)."""


class CorruptStore(StoreError):
    """SQLite itself finds the file damaged (its integrity check fails, or it reads a page
    that is not one): what :mod:`adaptive_eval.store.recovery` salvages, as opposed to a value
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


@dataclass
class ChainState:
    """Where the digest chain stands: trials planned and recorded per round, and the rounds
    sealed so far (0..sealed-1, the last one's digest)."""

    planned: dict[int, int]
    recorded: dict[int, int]
    sealed: int
    last: str


class StoreFile:
    """A run directory's ``trials.sqlite``, opened and checked; :class:`TrialStore
    <adaptive_eval.store.ledger.TrialStore>` adds the ledger on top.

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
        self._chain: ChainState | None = None
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

    def _transaction(self) -> StoreFile._Tx:
        return StoreFile._Tx(self)

    # -- helpers ------------------------------------------------------------------------------
    class _Tx:
        """One write transaction; an SQLite failure becomes a one-line error naming its cause."""

        def __init__(self, store: StoreFile) -> None:
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
