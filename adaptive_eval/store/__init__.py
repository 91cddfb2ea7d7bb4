"""Every SQLite database of the project, and the only place that writes SQL.

The run's trial store: the file (:mod:`.file`), the ledger on it (:mod:`.ledger`), the
outputs' read-only queries (:mod:`.queries`), the digest chain over its rounds (:mod:`.chain`)
and the salvage of a damaged one (:mod:`.recovery`). Beside it, the trial library's file
(:mod:`.library`) and the file-hash cache (:mod:`.file_hashes`). Callers get named methods that
answer with arrays, typed rows or dataclasses, never a connection or a cursor.
"""

from adaptive_eval.store.file import (
    RECOVERY_HINT,
    SALVAGE_HINT,
    SCHEMA_VERSION,
    CorruptStore,
    RunLock,
    SQLiteError,
    StoreError,
    StoreEvents,
    StoreFile,
)
from adaptive_eval.store.ledger import RoundCounts, TrialArrays, TrialStore, reading
from adaptive_eval.store.queries import CellSpans, ServedReport

__all__ = [
    "RECOVERY_HINT",
    "SALVAGE_HINT",
    "SCHEMA_VERSION",
    "CellSpans",
    "CorruptStore",
    "RoundCounts",
    "RunLock",
    "SQLiteError",
    "ServedReport",
    "StoreError",
    "StoreEvents",
    "StoreFile",
    "TrialArrays",
    "TrialStore",
    "reading",
]
