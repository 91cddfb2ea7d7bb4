"""Durable trial ledger of a run directory: the file (:mod:`.file`) and the ledger on it
(:mod:`.ledger`)."""

from adaptive_eval.store.file import (
    RECOVERY_HINT,
    SALVAGE_HINT,
    SCHEMA_VERSION,
    CorruptStore,
    RunLock,
    StoreError,
    StoreEvents,
    StoreFile,
)
from adaptive_eval.store.ledger import RoundCounts, TrialArrays, TrialStore, reading

__all__ = [
    "RECOVERY_HINT",
    "SALVAGE_HINT",
    "SCHEMA_VERSION",
    "CorruptStore",
    "RoundCounts",
    "RunLock",
    "StoreError",
    "StoreEvents",
    "StoreFile",
    "TrialArrays",
    "TrialStore",
    "reading",
]
