"""Non-inferiority of a candidate against each incumbent: the release gate of ``compare --margin``.

A release gate asks "is the candidate not worse than the incumbent by more than ``margin``?",
not "which is better?": an unchanged checkpoint cannot be shown better, nor (within a small
rope) equivalent, at any affordable number of trials, but it can be shown not worse by a margin.
With ``D`` = candidate - incumbent on the unbiased decision scores (``CampaignView.pair_stat``)
and ``s`` its standard error, the statistic is ``z_m = (D + margin) / s`` and, at each planned
look ``k`` of the pair,

* **pass** (not worse by more than ``margin``) when ``z_m >= c_k``;
* **fail** (a regression: worse by more than ``margin``) when ``z_m <= -c_k``;

with ``c_k`` the group-sequential boundary of two-sided level ``2 alpha`` (one-sided ``alpha``
per side), at the information fractions and looks of the campaign's ``group_sequential`` rule
(its defaults if the campaign uses another pair rule). ``alpha = (1 - confidence) / K`` over
the candidate's ``K`` incumbents (Bonferroni). For a given truth only one of the two verdicts
is wrong (``pass`` when ``Delta <= -margin``, ``fail`` when ``Delta >= -margin``), and each is
the crossing of one side of a level-``alpha`` one-sided sequence, so every comparison errs with
probability at most ``alpha`` and the gate as a whole at most ``1 - confidence``.
A verdict, once reached, is kept (the sequential test stopped).

**Variance inflation** (issue 26, chosen by measurement): ``s`` is the standard error of a
variance inflated by :data:`VARIANCE_INFLATION` (1.10, ``s`` x 1.049). Without it the gate spent
its budget exactly under the normal model and measured 1-6% above ``alpha`` on binomial data
(the plug-in variances and the looks' discreteness; 60,000 simulated campaigns per case at the
margin, ``benchmarks/verdicts.py``), which a lab's CI cannot rest on; with it the wrong-pass rate
is 0.041-0.043 at alpha 0.05 and 0.0072-0.0079 at 0.01, for 7% more trials when the checkpoint
is unchanged. docs/sequential.md has the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from adaptive_eval.base.types import PairDecision, Verdict
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.decide.contracts import CampaignView, PairMemory, RuleMemory, pair_key
from adaptive_eval.stats import sequential as seq

#: The gate's variance inflation (see the module docstring).
VARIANCE_INFLATION = seq.VARIANCE_INFLATION

PASS = Verdict.PASS.value
FAIL = Verdict.FAIL.value
UNDECIDED = Verdict.UNDECIDED.value


@dataclass(frozen=True)
class NonInferiority:
    """The sequential non-inferiority test of ``candidate`` against every other model, as the
    pair rule of the candidate's pairs.

    Every pair with the candidate gets an answer stated for (candidate, incumbent): ``pass``,
    ``fail`` or undecided (so no other rule settles it); other pairs pass to the next rule.
    ``schedule`` supplies the looks: ``design`` (a
    :class:`~adaptive_eval.stats.sequential.LookDesign`), ``fractions()`` and
    ``information_fraction(view, a, b)`` (a ``group_sequential`` pair rule).
    """

    candidate: int
    margin: float
    schedule: Any
    name: str = "noninferiority"

    @property
    def error_controlled(self) -> bool:
        return True

    def alpha(self, view: CampaignView) -> float:
        return (1.0 - view.confidence) / max(1, view.num_models - 1)

    def z(self, view: CampaignView, incumbent: int) -> float:
        """``(D + margin) / s`` with ``s`` the inflated standard error."""
        gap, spread = view.pair_stat(self.candidate, incumbent)
        spread *= VARIANCE_INFLATION**0.5
        return (gap + self.margin) / spread if spread > 0 else 0.0

    def settle(
        self, view: CampaignView, pairs: Sequence[tuple[int, int]], memory: RuleMemory
    ) -> tuple[tuple[PairDecision | None, ...], RuleMemory]:
        """Each candidate pair's verdict (kept once reached); ``None`` for the others."""
        remembered = dict(memory)
        answers: list[PairDecision | None] = []
        for a, b in pairs:
            if self.candidate not in (a, b):
                answers.append(None)
                continue
            incumbent = b if a == self.candidate else a
            key = pair_key(a, b)
            known = remembered.get(key, PairMemory())
            verdict = known.decision
            if verdict is None:
                verdict, known = self._test(view, known, incumbent)
                if verdict is not None:
                    known = replace(known, decision=verdict)
                remembered[key] = known
            undecided = PairDecision.undecided(self.candidate, incumbent, self.z(view, incumbent))
            answers.append(verdict or undecided)
        return tuple(answers), MappingProxyType(remembered)

    def _test(
        self, view: CampaignView, known: PairMemory, incumbent: int
    ) -> tuple[PairDecision | None, PairMemory]:
        fractions = self.schedule.fractions()
        information = self.schedule.information_fraction(view, self.candidate, incumbent)
        reached = int(np.searchsorted(fractions, information + 1e-9))
        if reached <= (known.looks[0] if known.looks else 0):
            return None, known
        known = replace(known, looks=(reached,))
        _, spread = view.pair_stat(self.candidate, incumbent)
        if spread <= 0:
            return None, known
        boundary = self.schedule.design.boundaries(2 * self.alpha(view))[reached - 1]
        z = self.z(view, incumbent)
        verdict = Verdict.PASS if z >= boundary else Verdict.FAIL if z <= -boundary else None
        if verdict is None:
            return None, known
        decision = PairDecision(
            self.candidate, incumbent, z, verdict, self.name, boundary, None, view.round
        )
        return decision, known


def look_schedule(rules: tuple[Any, ...]) -> Any:
    """The campaign's ``group_sequential`` rule (its looks and spending), or one with the
    defaults where the campaign decides pairs with another rule."""
    for rule in rules:
        if hasattr(rule, "information_fraction") and hasattr(rule, "design"):
            return rule
    return pair_rules.build("group_sequential")


__all__ = ["FAIL", "PASS", "UNDECIDED", "VARIANCE_INFLATION", "NonInferiority", "look_schedule"]
