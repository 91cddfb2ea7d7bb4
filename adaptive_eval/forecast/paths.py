"""The one path simulator both forecasts summarise.

A forecast is a summary of paths: the campaign's own decision core (its pair rules, stopping rules,
allocator and limits, from the :class:`~adaptive_eval.decide.spec.DecisionSpec`) run forward from a
start to its natural stop, on truths drawn from what is known, with no trial budget: each forecast
applies the budget to the paths afterwards, so one set of paths also says where a pair the budget
would leave unsettled settles. (:func:`simulate_campaign`, a path with the budget kept, is a run
emulated on a known truth: the benchmarks' and the tests'.) A path starts from one of two places
(:class:`PathStart`):

* **before the run** (:meth:`PathStart.before_run`): the campaign's prior state and a core that
  has decided nothing; the pre-run forecast (:mod:`~adaptive_eval.forecast.campaign`) records
  each round (trials, pairs settled, width goals met, the ledgers, compare's judge) and
  summarises the paths into forecast.json;
* **a running campaign** (:meth:`PathStart.of_snapshot`): its core, every rule's memory
  included, having decided on its state, the rounds in flight queued; the live forecast
  (:mod:`~adaptive_eval.forecast.live`) records the trials and pairs settled after each round
  and summarises them into a ``live_forecast`` event.

Each path is :func:`run_path`: :func:`~adaptive_eval.forecast.simulate.run_core`, the controller's
loop with its I/O replaced by draws from the path's truth, on the path's own random stream.
:func:`run_paths` runs many, on forked processes where asked (the first runs in the caller's
process and builds the boundary tables the forked ones inherit). Where every plug-in of the core
has a batched form (:meth:`PathStart.batched`) and what the caller records is what the batched
engine keeps, :func:`run_together` advances the paths together
(:mod:`~adaptive_eval.forecast.batched`: path for path the core's, ``tests/test_batched_core.py``)
on one stream for all; the live forecast does so. The pre-run forecast records per round what the
batched engine does not keep (score widths, compare's judge on each round's decisions, the replayed
trials' recorded costs in the ledgers a cost-aware allocator reads, the stop's reason) and draws
each path on a stream of its own, so its paths run one by one: its forecast.json is the same file
it was.
"""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np

from adaptive_eval.decide.batch import BatchSettings
from adaptive_eval.decide.contracts import without_budget
from adaptive_eval.decide.core import DecisionCore
from adaptive_eval.decide.spec import DecisionSpec
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.batched import BatchCore, Continuations, RowCosting, continue_runs
from adaptive_eval.forecast.simulate import Costing, Sampler, SimResult, Truth, Watch, run_core

Path = TypeVar("Path")


def freeze_core(core: DecisionCore) -> bytes:
    """``core`` pickled (its rules' memories are read-only mappings, sent as dicts)."""
    memory = core.state.memory
    portable = copy.copy(core)
    if memory is not None:
        portable.state = replace(core.state, memory=tuple(dict(m) for m in memory))
    return pickle.dumps(portable)


def thaw_core(frozen: bytes) -> DecisionCore:
    """A fresh copy of the core :func:`freeze_core` pickled."""
    core: DecisionCore = pickle.loads(frozen)
    memory = core.state.memory
    if memory is not None:
        core.state = replace(core.state, memory=tuple(MappingProxyType(m) for m in memory))
    return core


def prior_trials(decision: DecisionSpec) -> np.ndarray:
    """The config's prior beyond the uniform one, as whole trials per (model, question, category):
    what the truths are drawn from besides the recorded counts."""
    whole: np.ndarray = np.rint(np.maximum(decision.prior - 1, 0)).astype(np.int64)
    return whole


@dataclass(frozen=True)
class PathStart:
    """Where every path starts: ``decision``'s campaign from its prior state (``core`` and
    ``state`` ``None``) or from a running campaign's frozen core (:func:`freeze_core`; it has
    decided on the state) and pickled state; without the trial budget unless ``budgeted`` (an
    emulated run, :func:`simulate_campaign`: a forecast applies the budget to its paths)."""

    decision: DecisionSpec
    core: bytes | None = None
    state: bytes | None = None
    budgeted: bool = False

    def __post_init__(self) -> None:
        if (self.core is None) != (self.state is None):
            raise ValueError("a path starts from a snapshot's core and state together, or neither")

    @classmethod
    def before_run(cls, decision: DecisionSpec) -> PathStart:
        """The campaign before its first trial."""
        return cls(decision)

    @classmethod
    def of_snapshot(cls, decision: DecisionSpec, core: bytes, state: bytes) -> PathStart:
        """A running campaign: its frozen core and pickled state after an applied round."""
        return cls(decision, core, state)

    def begin(self) -> tuple[DecisionCore, RunState, bool]:
        """A fresh core (rules' memories its own) and state for one path, and whether the core
        has decided on the state."""
        if self.core is None or self.state is None:  # (both, by __post_init__)
            core, state = self.decision.decision_core(), self.decision.empty_state()
            decided = False
        else:
            core, state, decided = thaw_core(self.core), pickle.loads(self.state), True
        if not self.budgeted:
            core.stopping = without_budget(core.stopping)
            core.limits = replace(core.limits, trial_budget=None)
        return core, state, decided

    def batched(self) -> tuple[BatchCore, DecisionCore, RunState] | None:
        """The start's core in its batched form with the core and state it continues, or
        ``None`` where a plug-in has none (:meth:`BatchCore.of`)."""
        core, state, decided = self.begin()
        batch = BatchCore.of(core, self.decision.capacity)
        if batch is None:
            return None
        if not decided:
            core.decide(self.decision.view_settings().view(state))
        return batch, core, state


def run_path(
    start: PathStart,
    truth: Truth,
    rng: np.random.Generator,
    sampler: Sampler | None = None,
    watch: Watch | None = None,
    costing: Costing | None = None,
) -> SimResult:
    """One path from ``start`` to its stop: outcomes drawn from ``truth`` on ``rng`` (or served by
    ``sampler``), each round priced by ``costing`` and seen by ``watch`` (:func:`run_core`)."""
    core, state, decided = start.begin()
    settings = start.decision.view_settings()
    return run_core(core, state, settings, truth, rng, sampler, watch, costing, decided)


def simulate_campaign(
    decision: DecisionSpec,
    truth: Truth,
    rng: np.random.Generator,
    sampler: Sampler | None = None,
    watch: Watch | None = None,
    costing: Costing | None = None,
) -> SimResult:
    """One campaign to its stop exactly as built for users: the campaign's own decision core
    (:meth:`~adaptive_eval.decide.spec.DecisionSpec.decision_core`: its pair rules, stopping
    rules, allocator, limits and budget), prior and view settings, with outcomes drawn from
    ``truth`` (or served by ``sampler``) instead of its backends, each round priced by ``costing``
    where given (without it the view knows no cost, and a cost-aware allocator sees equal costs).
    Each call starts a fresh rule memory, so one spec serves any number of independent runs."""
    return run_path(PathStart(decision, budgeted=True), truth, rng, sampler, watch, costing)


_PATH_OF: Callable[[int], Any] | None = None


def _path(index: int) -> Any:
    assert _PATH_OF is not None
    return _PATH_OF(index)


def run_paths(path_of: Callable[[int], Path], count: int, processes: int = 1) -> list[Path]:
    """``path_of(0)``, ..., ``path_of(count - 1)``, on up to ``processes`` forked processes.

    The first runs here: it builds the boundary tables the others share (a forked process
    inherits them instead of building its own)."""
    global _PATH_OF
    if count == 0:
        return []
    paths = [path_of(0)]
    rest = list(range(1, count))
    workers = min(processes, len(rest))
    if workers <= 1:
        return paths + [path_of(i) for i in rest]
    outer, _PATH_OF = _PATH_OF, path_of
    try:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            chunks = max(1, len(rest) // (4 * workers))
            paths += list(pool.map(_path, rest, chunksize=chunks))
    finally:
        _PATH_OF = outer
    return paths


def default_processes() -> int:
    """The processes a forecast's paths run on unless asked: the CPUs, at most 8."""
    return min(os.cpu_count() or 1, 8)


def run_together(
    start: PathStart,
    batched: tuple[BatchCore, DecisionCore, RunState],
    truths: list[np.ndarray],
    rng: np.random.Generator,
    costing: RowCosting,
) -> Continuations:
    """One path per truth in ``truths`` from ``start`` (``batched``: :meth:`PathStart.batched`),
    advanced together (:func:`~adaptive_eval.forecast.batched.continue_runs`) with every round's
    outcomes drawn on ``rng`` and priced by ``costing``."""
    batch, core, state = batched
    probs = np.stack(truths)
    decision = start.decision
    settings = BatchSettings.of(decision.view_settings(), decision.prior, decision.weights)

    def sample(plan: np.ndarray, ids: np.ndarray, before: np.ndarray) -> np.ndarray:
        drawn = np.zeros((*plan.shape, probs.shape[-1]), dtype=np.int64)
        cells = np.nonzero(plan)
        p = probs[ids[cells[0]], cells[1], cells[2]]
        n = plan[cells]
        if p.shape[-1] == 2:  # a binomial draw: the same law, a fifth of the time
            hits = rng.binomial(n, np.clip(p[:, 1], 0.0, 1.0))
            drawn[(*cells, np.zeros_like(n))] = n - hits
            drawn[(*cells, np.ones_like(n))] = hits
        else:
            drawn[cells] = rng.multinomial(n, p)
        return drawn

    return continue_runs(batch, core, state, settings, len(truths), sample, costing)


__all__ = [
    "PathStart",
    "default_processes",
    "freeze_core",
    "prior_trials",
    "run_path",
    "run_paths",
    "run_together",
    "simulate_campaign",
    "thaw_core",
]
