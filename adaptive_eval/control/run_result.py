"""What a run ends with: a frozen snapshot that every output is rendered from.

The run loop (:mod:`adaptive_eval.loop.runner`) drives a live
:class:`~adaptive_eval.control.controller.
Controller`; when it stops (or when ``report`` has rebuilt a recorded run), the loop takes one
:class:`FinishedRun` from it and hands only that to the workflow's outputs (summary.json,
report.md, report.html, compare's verdicts, nightly's alerts). Nothing downstream reads the
controller's mutable state, so an output cannot depend on when it was built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adaptive_eval.base.accounting import Savings
from adaptive_eval.base.summary_schema import Dispatch, Nightly
from adaptive_eval.control.controller import Controller
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import CoreState, DecidedByCore
from adaptive_eval.decide.state import frozen_copy


@dataclass(frozen=True)
class RunFacts:
    """What only the run itself knew, kept in its store's metadata: whether this leg resumed
    one before it, the wall time over every leg, what dispatch counted, whether the loop ran to
    its end, and a nightly run's night (``None``: not known, e.g. a folder from before the
    metadata was kept). ``dispatch`` and ``nightly`` are summary.json's blocks, as the store
    recorded them."""

    resumed: bool | None = None
    elapsed_s: float | None = None
    dispatch: Dispatch | None = None
    finished: bool | None = None
    nightly: Nightly | None = None


@dataclass(frozen=True)
class FinishedRun(DecidedByCore):
    """A run's final evidence and decisions, detached from the loop that produced them.

    ``view`` is the read-only snapshot of the evidence (counts, trials, the decision statistic,
    the Bayes@N posterior and score intervals on demand); ``core`` the decision core's state
    (pair decisions, stop, the rules' memory between looks); ``plans`` every round's (L, M)
    plan, in round order (when each verdict's trials were spent). :attr:`decisions` and
    :attr:`stop` are the core state's (:class:`DecidedByCore`).
    """

    campaign_id: str
    view: CampaignView
    core: CoreState
    plans: tuple[np.ndarray, ...]
    savings: Savings
    facts: RunFacts = field(default_factory=RunFacts)


def finished_run(controller: Controller, campaign_id: str, facts: RunFacts) -> FinishedRun:
    """The snapshot of ``controller`` now (its plans copied and made read-only)."""
    return FinishedRun(
        campaign_id,
        controller.view(),
        controller.core.state,
        tuple(frozen_copy(plan) for plan in controller.state.plans),
        controller.savings(),
        facts,
    )
