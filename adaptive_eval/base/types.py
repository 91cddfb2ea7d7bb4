"""Frozen value types that flow through the controller.

Data flows one way: the allocation policy emits :class:`WorkItem` values, the dispatcher packs
them into :class:`Batch` values for workers, workers return :class:`BatchResult` values holding one
:class:`Trial` per sampled answer, the posterior consumes categories, and the stopping policy
returns :class:`PairDecision` and :class:`Stop` values. None of these import anything else from the
project.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def trial_seed(campaign_seed: int, model: str, question: str, trial: int) -> int:
    """Seed of one trial: a stable 31-bit hash of (campaign seed, model, question, trial index).

    The same trial gets the same seed on every worker and after a resume, so a resumed campaign
    re-creates the samples it lost.

    >>> trial_seed(0, "m", "q1", 0) == trial_seed(0, "m", "q1", 0)
    True
    >>> trial_seed(0, "m", "q1", 0) != trial_seed(0, "m", "q1", 1)
    True
    """
    payload = f"{campaign_seed}\x1f{model}\x1f{question}\x1f{trial}".encode()
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little") & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class WorkItem:
    """Trials ``first_trial .. first_trial + count - 1`` of one (model, question) cell."""

    model: int
    question: int
    first_trial: int
    count: int

    @property
    def trials(self) -> range:
        return range(self.first_trial, self.first_trial + self.count)


@dataclass(frozen=True, slots=True)
class Batch:
    """A unit of work sent to one worker: items of a single model."""

    batch_id: int
    round: int
    model: int
    items: tuple[WorkItem, ...]

    @property
    def size(self) -> int:
        return sum(item.count for item in self.items)

    def answered_by(self, trials: tuple[Trial, ...]) -> bool:
        """Whether ``trials`` are exactly this batch's trials (none missing, none extra)."""
        expected = {(self.model, item.question, t) for item in self.items for t in item.trials}
        got = [(t.model, t.question, t.trial) for t in trials]
        return len(got) == len(expected) and set(got) == expected


@dataclass(frozen=True, slots=True)
class Trial:
    """One graded sample. ``category`` is in ``0..C``; ``tokens`` may be unknown (``None``)."""

    model: int
    question: int
    trial: int
    seed: int
    category: int
    tokens: int | None = None
    prompt_tokens: int | None = None
    latency_s: float | None = None
    gpu_s: float | None = None
    answer: str | None = None
    reason: str | None = None
    text: str | None = None
    signals: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a worker returns for a batch. ``error`` set means no trial of it may be recorded."""

    batch_id: int
    round: int
    worker: str
    trials: tuple[Trial, ...]
    busy_s: float
    gpu_s: float = 0.0
    error: str | None = None
    load_s: float = 0.0  # time spent loading the model into a shared slot before this batch

    @classmethod
    def failed(cls, batch: Batch, worker: str, error: str, busy_s: float = 0.0) -> BatchResult:
        return cls(batch.batch_id, batch.round, worker, (), busy_s, 0.0, error)


class Verdict(enum.Enum):
    """How a pair (a ranked above b by posterior mean) stands.

    ``PASS`` and ``FAIL`` are the non-inferiority gate's (``compare --margin``), stated for
    (candidate, incumbent): the candidate is not worse than the incumbent by more than the
    margin, or it is (a regression).
    """

    A_GT_B = "a>b"
    B_GT_A = "b>a"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"
    PASS = "pass"
    FAIL = "fail"

    @property
    def settled(self) -> bool:
        return self is not Verdict.UNDECIDED


@dataclass(frozen=True, slots=True)
class PairDecision:
    """Decision on one pair of models, by index.

    ``z`` is the rule's statistic (|D| / s); ``boundary`` the value of the rule's boundary on
    ``|z|`` where it decided, ``alpha`` the error budget the pair had spent by then, ``look``
    the round of the decision. An undecided pair that cannot be settled by the cap with
    reasonable probability is ``futile`` (it draws no more trials for its own sake);
    ``projected`` is then the trials per question it would need.
    """

    a: int
    b: int
    z: float
    verdict: Verdict
    rule: str | None = None
    boundary: float | None = None
    alpha: float | None = None
    look: int | None = None
    futile: bool = False
    projected: float | None = None

    @classmethod
    def resolved(
        cls,
        a: int,
        b: int,
        z: float,
        a_wins: bool,
        rule: str,
        boundary: float | None = None,
        alpha: float | None = None,
        look: int | None = None,
    ) -> PairDecision:
        verdict = Verdict.A_GT_B if a_wins else Verdict.B_GT_A
        return cls(a, b, z, verdict, rule, boundary, alpha, look)

    @classmethod
    def equivalent(
        cls,
        a: int,
        b: int,
        z: float,
        rule: str,
        boundary: float | None = None,
        alpha: float | None = None,
        look: int | None = None,
    ) -> PairDecision:
        return cls(a, b, z, Verdict.EQUIVALENT, rule, boundary, alpha, look)

    def swapped(self) -> PairDecision:
        """The same decision about the pair, stated with ``a`` and ``b`` exchanged."""
        flip = {Verdict.A_GT_B: Verdict.B_GT_A, Verdict.B_GT_A: Verdict.A_GT_B}
        verdict = flip.get(self.verdict, self.verdict)
        return PairDecision(
            self.b,
            self.a,
            self.z,
            verdict,
            self.rule,
            self.boundary,
            self.alpha,
            self.look,
            self.futile,
            self.projected,
        )

    @classmethod
    def undecided(cls, a: int, b: int, z: float) -> PairDecision:
        return cls(a, b, z, Verdict.UNDECIDED, None)

    @classmethod
    def hopeless(cls, a: int, b: int, z: float, rule: str, projected: float | None) -> PairDecision:
        """Undecided, and not expected to be settled by the cap (a futility stop)."""
        return cls(a, b, z, Verdict.UNDECIDED, rule, None, None, None, True, projected)

    @property
    def settled(self) -> bool:
        return self.verdict.settled

    @property
    def open(self) -> bool:
        """Undecided and still worth trials: neither settled nor futile."""
        return not self.settled and not self.futile

    @property
    def reason(self) -> str | None:
        """Why an undecided pair is left undecided, for reports (``None`` while it is open)."""
        if not self.futile:
            return None
        need = "unboundedly many" if self.projected is None else f"about {self.projected:,.0f}"
        return f"futile: cannot be settled by the cap (would need {need} trials per question)"


class StopReason(enum.Enum):
    GOAL_MET = "goal_met"
    FUTILITY = "futility"  # every pair settled or futile, at least one futile
    CI_WIDTH = "ci_width"
    MAX_TRIALS = "max_trials"
    TRIAL_BUDGET = "trial_budget"
    TOKEN_BUDGET = "token_budget"
    WALL_CLOCK = "wall_clock_budget"
    EXHAUSTED = "exhausted"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Stop:
    """A campaign-level decision to stop sampling, with a human-readable detail."""

    reason: StopReason
    detail: str = ""


def pack_batches(
    round_index: int, items: Iterable[WorkItem], size: int, last_id: int
) -> list[Batch]:
    """Work items packed into batches of at most ``size`` trials, one model per batch, with
    ids ``last_id + 1, last_id + 2, ...``.

    Items of one model must come together; an item larger than the room left is split.
    """
    out: list[Batch] = []
    current: list[WorkItem] = []
    filled = 0

    def close() -> None:
        nonlocal current, filled
        out.append(Batch(last_id + len(out) + 1, round_index, current[0].model, tuple(current)))
        current, filled = [], 0

    for item in items:
        if current and item.model != current[0].model:
            close()
        first, count = item.first_trial, item.count
        while count:
            take = min(count, size - filled)
            current.append(WorkItem(item.model, item.question, first, take))
            first, count, filled = first + take, count - take, filled + take
            if filled == size:
                close()
    if current:
        close()
    return out
