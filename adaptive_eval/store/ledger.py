"""The trial ledger: rounds, trials, completions, events and the digest chain over them.

The file beneath it (opening, checks, metadata, transactions) is :mod:`.file`.
"""

from __future__ import annotations

import contextlib
import json
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.base.types import BatchResult, Trial
from adaptive_eval.store import chain
from adaptive_eval.store.file import ChainState, StoreError
from adaptive_eval.store.queries import TrialQueries


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


#: A bare trial row for :meth:`TrialStore.load_trials`: (model, question, trial, round,
#: batch_id, seed, category, tokens, gpu_s).
BareTrial = tuple[int, int, int, int, int, int, int, int | None, float | None]


class TrialStore(TrialQueries):
    """One run directory's ledger. Not thread-safe: the controller is its only writer."""

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
    def _chain_state(self) -> ChainState:
        if self._chain is None:
            planned = {index: int(plan.sum()) for index, plan in enumerate(self.rounds())}
            rows = self.conn.execute("SELECT round, digest FROM digests ORDER BY round").fetchall()
            self._chain = ChainState(
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

    def batch_trial_keys(self, batch_id: int, round_index: int) -> set[tuple[int, int, int]]:
        """The (model, question, trial) keys recorded by batch ``batch_id`` of a round (the
        first writer of a trial keeps its row, so a later duplicate's keys are not among them)."""
        return set(
            self.conn.execute(
                "SELECT model, question, trial FROM trials WHERE batch_id = ? AND round = ?",
                (batch_id, round_index),
            ).fetchall()
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

    def load_trials(self, rows: Iterable[BareTrial]) -> None:
        """Insert bare trial rows (no texts, no worker, recorded at time 0) in one transaction.

        For writing a large synthetic store fast (``_testing/bigstore.py``): unlike
        :meth:`record_many` it neither counts the rows towards the chain nor seals rounds, so
        the writer calls :meth:`build_chain` once every row is in.
        """
        with self._transaction():
            self.conn.executemany(
                "INSERT INTO trials(model, question, trial, round, batch_id, seed, "
                "category, tokens, gpu_s, recorded_at) VALUES (?,?,?,?,?,?,?,?,?,0)",
                rows,
            )

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
