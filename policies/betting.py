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

A prior is checked before anything is sampled (issue 48): the earlier summary.json is read
through the bounded reader (a device, a pipe, a file past :data:`MAX_SUMMARY_BYTES` or one nested
too deep is refused), every score and standard error must be a finite number (the error
``>= 0``), a model may be listed once, and ``prior_models`` may name only models the prior
scores (:meth:`Betting.__post_init__`); against the campaign
(:meth:`Betting.check_campaign`, called by :mod:`adaptive_eval.campaign.checks`), the scores
must lie in the rubric's range and the prior must score at least one of its models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import AllowInfNan, Field, ValidationError

from adaptive_eval.base import summary_schema
from adaptive_eval.base.errors import InputError, first_few
from adaptive_eval.base.types import PairDecision
from adaptive_eval.config.registry import pair_rules
from adaptive_eval.decide.contracts import CampaignView, PairMemory
from adaptive_eval.inputs import bounded
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


#: The most of an earlier run's summary.json read (one of hundreds of models is a few MB).
MAX_SUMMARY_BYTES = 64 << 20


def summary_file(path: str) -> Path:
    """The summary.json ``path`` names: the file itself, or the one in the run folder."""
    where = Path(path).expanduser()
    return where / "summary.json" if where.is_dir() else where


def read_prior_scores(path: str) -> dict[str, tuple[float, float]]:
    """Each model's ``(score, score_se)`` in an earlier run: ``path`` is its folder (holding
    summary.json) or the summary.json itself. A file that is not a summary.json, is not a
    regular file, is too large or nested too deep, holds no model or one twice, or a score or
    standard error that is no finite number (the error ``>= 0``), is a ``ValueError`` naming the
    file and the value."""
    where = summary_file(path)
    if not where.exists() and not where.is_symlink():
        raise ValueError(f"no earlier run at {path}: no such folder or summary.json")
    try:
        data = bounded.read_bytes(
            where, limit=MAX_SUMMARY_BYTES, what="summary.json", source=str(where)
        )
    except InputError as error:
        raise ValueError(f"prior {where}: {error.message}") from None
    summary = _parse_summary(where, data)
    if not summary.models:
        raise ValueError(
            f"prior {where}: models is empty: a run that scored no model cannot be a prior"
        )
    scores: dict[str, tuple[float, float]] = {}
    for index, row in enumerate(summary.models):
        label = f"prior {where}: models[{index}] ({row.name!r})"
        if row.name in scores:
            raise ValueError(f"{label} is listed twice: a summary scores each model once")
        scores[row.name] = check_score(label, row.score, row.score_se)
    return scores


def _parse_summary(where: Path, data: bytes) -> summary_schema.Summary:
    """``data`` (the bytes of ``where``) as a summary of any version, upgraded and validated."""
    unreadable = f"prior {where} is not a readable summary.json"
    try:
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict):
            raise ValueError(f"not a JSON object but a {type(document).__name__}")
        return summary_schema.read_summary(document)
    except RecursionError:  # json's decoder recurses: a file nested thousands deep
        raise ValueError(
            f"{unreadable}: nested too deep to read (a summary is a few levels deep)"
        ) from None
    except ValidationError as error:
        found = error.errors()[0]
        place = ".".join(str(part) for part in found["loc"])
        raise ValueError(f"{unreadable}: {place}: {found['msg']}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        # Not UTF-8, not JSON, a version this one does not read, or a shape upgrade() cannot.
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{unreadable}: {first}") from None


def check_score(label: str, score: Any, se: Any) -> tuple[float, float]:
    """``(score, se)`` as floats once both are finite numbers and ``se >= 0``; else a
    ``ValueError`` starting with ``label`` and naming the value."""
    for what, value in (("score", score), ("standard error", se)):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise ValueError(f"{label}: {what} {value!r} is not a finite number")
    if se < 0:
        raise ValueError(f"{label}: standard error {se!r} is negative (it must be >= 0)")
    return float(score), float(se)


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
    #: NaN and infinities pass the parameter's type to be refused here, named as what they are
    #: (the type's refusal said "scores must be a mapping").
    scores: Mapping[str, list[Annotated[float, AllowInfNan(True)]]] = field(default_factory=dict)
    name: str = "betting"

    def __post_init__(self) -> None:
        if self.prior is not None and self.scores:
            raise ValueError("give the earlier run (prior) or its scores (scores), not both")
        for model, pair in self.scores.items():
            if len(pair) != 2:
                raise ValueError(
                    f"scores[{model!r}] must be [score, standard error >= 0], got {pair}"
                )
            check_score(f"scores[{model!r}]", *pair)
        # Read now: a bad prior is a config error, not a mid-run one.
        known = self.prior_scores
        missing = [f"{k!r} -> {v!r}" for k, v in self.prior_models.items() if v not in known]
        if known and missing:
            raise ValueError(
                f"prior_models maps {first_few(missing)}, which {self.prior_source} lacks (its "
                f"models: {first_few([repr(n) for n in known])})"
            )

    @cached_property
    def prior_scores(self) -> PriorScores:
        if self.prior is not None:
            return read_prior_scores(self.prior)
        return {model: (pair[0], pair[1]) for model, pair in self.scores.items()}

    @property
    def prior_source(self) -> str:
        """Where the prior's scores come from, for a message: its file, or ``scores``."""
        return "the inline scores" if self.prior is None else f"prior {summary_file(self.prior)}"

    def check_campaign(self, names: Sequence[str], low: float, high: float) -> None:
        """Refuse (``ValueError``) a prior that cannot be this campaign's, whose models are
        ``names`` and whose rubric's weights span ``[low, high]``: a score outside that range or
        a standard error wider than it (a run on another rubric, or a damaged file: a score of
        1e308 passed every check and failed mid-run), ``prior_models`` mapping a name that is no
        model here, or a prior that scores none of the models (its bets would never be used: the
        wrong run, or names that need ``prior_models``). Nothing to check without a prior."""
        known = self.prior_scores
        if not known:
            return
        source, span = self.prior_source, high - low
        slack = 1e-9 * max(1.0, abs(low), abs(high))  # a mean of weights, in floating point
        for model, (score, se) in known.items():
            if not low - slack <= score <= high + slack:
                raise ValueError(
                    f"{source}: {model!r} scores {score:g}, outside the rubric's range "
                    f"[{low:g}, {high:g}]: a run on another rubric, or a damaged file"
                )
            if se > span + slack:
                raise ValueError(
                    f"{source}: {model!r} has standard error {se:g}, more than the rubric's "
                    f"range ({span:g}): a run on another rubric, or a damaged file"
                )
        strangers = [repr(n) for n in self.prior_models if n not in names]
        if strangers:
            raise ValueError(
                f"prior_models maps {first_few(strangers)}, which is no model of this campaign "
                f"(its models: {first_few(list(names))})"
            )
        if not any(self.prior_models.get(n, n) in known for n in names):
            raise ValueError(
                f"{source}: none of its models ({first_few([repr(n) for n in known])}) is one of "
                f"this campaign's ({first_few(list(names))}), so its bets would never be used: "
                "give the run of these models, or map their names with prior_models"
            )

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
