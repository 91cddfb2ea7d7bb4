"""``betting``: a pair rule whose bets a prior chooses and whose error guarantee no prior can break.

The order of a pair is tested by two betting e-processes on its difference ``Delta``
(:mod:`adaptive_eval.stats.betting`), each at ``alpha / 2``: ``a > b`` against ``Delta <= 0``,
``b > a`` against ``Delta >= 0``; their bets are where a prior enters. Equivalence is the
group-sequential TOST of ``group_sequential`` (its looks, its one-sided ``alpha`` boundary),
each side remembered once shown (``Delta > -epsilon``, ``Delta < epsilon``): equivalent when
both are. An order is declared only once its own side of the rope is shown too (``a > b`` needs
``Delta > -epsilon``), which ties the errors together:

* ``|Delta| >= epsilon``: a wrong order and a wrong "equivalent" both need the same one-sided
  group-sequential test to reject a true hypothesis (``Delta <= -epsilon`` for a wrong
  ``a > b``): at most ``alpha`` together;
* ``0 < |Delta| < epsilon``: only the wrong order, ``alpha / 2``; a true tie: either order,
  ``alpha / 2`` each.

So a pair's error stays within ``alpha`` at every look, under any allocation fixed before the
outcomes it brings, whatever the bets. Holm's step-down and the non-binding futility stop are
:class:`~policies.pair_rules.ConfidenceSequenceRule`'s.

**Priors.** ``prior`` names an earlier run (its folder or its summary.json): each model's
score and standard error there (``prior_models`` maps tonight's names to its names; by default
the same) predict the pair's difference as ``N(m, tau^2)``, ``m`` the earlier difference and
``tau^2 = (se_a^2 + se_b^2) / prior_weight + 2 drift^2`` (``prior_weight`` discounts the earlier
evidence as a power prior does; ``drift`` is how far a score may have moved since). The bets
put ``1 - robust`` of their weight there and the rest on the prior-free mixtures, so a
wrong prior costs at most ``log(1 / robust)`` of wealth and never the guarantee. The earlier
run's trials are not this run's: they enter no estimate and no count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import Field

from adaptive_eval.base import summary_schema
from adaptive_eval.base.types import PairDecision
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.decide.contracts import CampaignView, PairMemory
from adaptive_eval.stats import betting
from adaptive_eval.stats import sequential as seq
from policies.pair_rules import ConfidenceSequenceRule, GroupSequential, capped_se

#: Model name -> (score, standard error) in the earlier run.
PriorScores = Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class Bets:
    """A pair's mixtures of bets on its order: ``Delta > 0`` (``up``), ``Delta < 0``."""

    up: betting.Mixture
    down: betting.Mixture


def read_prior_scores(path: str) -> dict[str, tuple[float, float]]:
    """Each model's ``(score, score_se)`` in an earlier run: ``path`` is its folder (holding
    summary.json) or the summary.json itself."""
    where = Path(path).expanduser()
    if where.is_dir():
        where = where / "summary.json"
    try:
        document = json.loads(where.read_text())
        summary = summary_schema.read_summary(summary_schema.upgrade(document))
    except FileNotFoundError:
        raise ValueError(f"no earlier run at {path}: no such folder or summary.json") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{where} is not a readable summary.json: {first}") from None
    return {row.name: (row.score, row.score_se) for row in summary.models}


@pair_rules.register("betting", internal=("futility_growth",))
@dataclass(frozen=True)
class Betting(ConfidenceSequenceRule):
    """Betting e-processes whose bets a prior (an earlier run's scores) chooses (module
    docstring). Without ``prior`` the bets are the prior-free scale mixture."""

    prior: str | None = None
    prior_weight: Annotated[float, Field(gt=0, le=1)] = 0.5
    drift: Annotated[float, Field(ge=0, le=1)] = 0.02
    robust: Annotated[float, Field(gt=0, lt=1)] = 0.2
    #: Both tests widen ``s`` by ``sqrt(inflation)``, ``group_sequential``'s measured
    #: correction of the Gaussian limit at small counts (docs/sequential.md).
    inflation: Annotated[float, Field(ge=1, le=4)] = seq.VARIANCE_INFLATION
    prior_models: Mapping[str, str] = field(default_factory=dict)
    #: The earlier scores stated inline (model -> [score, standard error]) instead of a run.
    scores: Mapping[str, list[float]] = field(default_factory=dict)
    name: str = "betting"

    def __post_init__(self) -> None:
        if self.prior is not None and self.scores:
            raise ValueError("give the earlier run (prior) or its scores (scores), not both")
        if self.prior is not None:
            _ = self.prior_scores  # read now: a bad prior is a config error, not a mid-run one
        for model, pair in self.scores.items():
            if len(pair) != 2 or not pair[1] >= 0:
                raise ValueError(
                    f"scores[{model!r}] must be [score, standard error >= 0], got {pair}"
                )

    @cached_property
    def prior_scores(self) -> PriorScores:
        if self.prior is not None:
            return read_prior_scores(self.prior)
        return {model: (pair[0], pair[1]) for model, pair in self.scores.items()}

    @cached_property
    def equivalence(self) -> GroupSequential:
        """The group-sequential TOST that declares equivalence (module docstring)."""
        return GroupSequential(epsilon=self.epsilon, error_control=self.error_control)

    @cached_property
    def fallback(self) -> betting.Mixture:
        return betting.scale_mixture()

    def predicted(self, view: CampaignView, a: int, b: int) -> tuple[float, float] | None:
        """The prior's ``(m, tau)`` for ``Delta = score_a - score_b`` (None: not known)."""
        names = [self.prior_models.get(view.names[i], view.names[i]) for i in (a, b)]
        first, second = (self.prior_scores.get(name) for name in names)
        if first is None or second is None:
            return None
        (score_a, se_a), (score_b, se_b) = first, second
        spread = (se_a**2 + se_b**2) / self.prior_weight + 2 * self.drift**2
        return score_a - score_b, max(math.sqrt(spread), 1e-4)

    def mixtures(self, view: CampaignView, a: int, b: int) -> Bets:
        """The pair's bets on ``Delta > 0`` (``up``) and on ``Delta < 0`` (``down``)."""
        known = self.predicted(view, a, b)
        if known is None:
            return Bets(self.fallback, self.fallback)
        mean, scale = known
        return Bets(
            betting.prior_mixture(mean, scale, self.robust, self.fallback),
            betting.prior_mixture(-mean, scale, self.robust, self.fallback),
        )

    def _test(
        self,
        view: CampaignView,
        known: PairMemory,
        a: int,
        b: int,
        alpha: float,
        gap: float,
        spread: float,
    ) -> tuple[PairDecision | None, PairMemory]:
        if spread <= 0:
            return None, known
        epsilon = self.rope(view)
        tested, looked = self.equivalence.look(view, known, a, b, alpha, spread)
        shown = known.shown
        z = abs(gap) / spread
        if tested is not None and epsilon:
            edge = tested.equivalent * spread * self.widen
            now = (gap - edge > -epsilon, gap + edge < epsilon)
            shown = (shown[0] or now[0], shown[1] or now[1])
            if all(now):  # both sides at one look, as group_sequential's TOST
                known = replace(looked, shown=shown)
                boundary = tested.equivalent * self.widen
                decision = PairDecision.equivalent(a, b, z, self.name, boundary, alpha, view.round)
                return decision, known
        known = replace(looked, shown=shown)
        information = 1.0 / spread**2 / self.inflation
        bets = self.mixtures(view, a, b)
        toward, side = (bets.up, shown[0]) if gap > 0 else (bets.down, shown[1])
        if (side or not epsilon) and betting.rejects(
            abs(gap) * information, information, toward, alpha / 2
        ):
            boundary = betting.z_boundary(information, toward, alpha / 2) * self.widen
            decision = PairDecision.resolved(
                a, b, z, gap > 0, self.name, boundary, alpha, view.round
            )
            return decision, known
        return self._futile(view, a, b, gap, spread, alpha), known

    def final_at(self, view: CampaignView, a: int, b: int, alpha: float) -> tuple[float, float]:
        """The (resolve, equivalent) ``z`` boundaries at the cap, the larger of the two sides
        (futility projects the pair there)."""
        spread_cap = capped_se(view, a, b)
        if spread_cap is None or spread_cap <= 0:
            return math.inf, math.inf
        information = 1.0 / spread_cap**2 / self.inflation
        bets = self.mixtures(view, a, b)
        resolve = max(betting.z_boundary(information, m, alpha / 2) for m in (bets.up, bets.down))
        return resolve, self.equivalence.final_at(view, a, b, alpha)[1]
