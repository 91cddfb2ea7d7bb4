"""Policy contracts: what pair rules, stopping rules and allocators see and return.

Policies are pure functions of a :class:`CampaignView`, an immutable snapshot of the evidence
after the last applied round (its own copies of the arrays; the Bayes@N posterior and the score
intervals are computed from them on first use), so a campaign's decisions are a deterministic
function of its recorded trials. Concrete policies live in the top-level ``policies`` package and
are found by name through the registry.

* A **pair rule** settles pairs (a ranked above b) or passes. Its memory between looks (a look
  is one applied round) is explicit: :meth:`PairRule.settle` takes the view and the rule's
  :data:`RuleMemory` (per pair: the looks used and the decision kept) and returns its answers
  and the new memory, so the rule objects themselves never change and a resumed run that
  replays its rounds reaches the same memory.
* A **stopping rule** decides whether the campaign stops and which models it still needs data
  from (``needs``); shared guards live in :class:`StoppingRule`.
* An **allocator** turns the needy models into an (L, M) plan of trials for the next round.
"""

from __future__ import annotations

import abc
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from adaptive_eval import stats
from adaptive_eval.base.types import PairDecision, Stop
from adaptive_eval.stats import sequential
from adaptive_eval.stats.intervals import (
    IntervalDesign,
    ScoreIntervals,
    score_intervals,
    wald_intervals,
)


@dataclass(frozen=True)
class CampaignView:
    """The evidence after the last applied round: an immutable snapshot (read-only arrays of
    its own, not views of a live state), with what depends on it computed on first use."""

    names: tuple[str, ...]
    counts: np.ndarray  # (L, M, K) observed category counts
    trials: np.ndarray  # (L, M) applied trials per cell
    planned: np.ndarray  # (L, M) trials recorded or in flight per cell
    capacity: np.ndarray  # (L,) most trials per question for each model
    confidence: float
    min_trials: int
    round: int
    trials_used: int
    tokens_used: int | None
    elapsed_s: float
    #: Unbiased score per model (mean over questions of the per-question empirical means) and
    #: its standard error with the Bayesian per-trial variance; ``None`` falls back to mu/sigma.
    estimate: np.ndarray | None = None
    estimate_se: np.ndarray | None = None
    #: (L, M) variance of one trial's score per cell (posterior mean probabilities).
    cell_variance: np.ndarray | None = None
    #: (L, M) mean observed cost of one trial per cell (tokens or GPU-seconds), NaN if unknown.
    cell_tokens: np.ndarray | None = None
    cell_gpu_s: np.ndarray | None = None
    rope: float | None = None
    error_control: str = "ranking"
    #: Predictive probability of settling by the cap below which an open pair is futile
    #: (``policy.futility``; 0: never).
    futility: float = 0.0
    #: (L, M, K) Dirichlet counts of the uniform prior plus any prior trials, and the rubric
    #: weights: the reported Bayes@N posterior and the score intervals come from them.
    prior: np.ndarray | None = None
    weights: np.ndarray | None = None
    bayes_prior: str = "empirical"
    #: The Bayes@N ``(mu, sigma)`` where stated up front (else computed on first use from the
    #: counts, ``prior`` and ``weights``: the default rules decide on the unbiased estimate, so
    #: a round need not fit the prior).
    bayes: tuple[np.ndarray, np.ndarray] | None = None
    #: What was computed from this snapshot (the posterior, intervals per design).
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def num_models(self) -> int:
        return len(self.names)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """The reported Bayes@N posterior ``(mu, sigma)``, (L,) each
        (:func:`adaptive_eval.stats.posterior.bayes_at_n_moments`)."""
        if self.bayes is not None:
            return self.bayes
        if "posterior" not in self._memo:
            if self.prior is None or self.weights is None:
                raise ValueError("this view has neither the Bayes@N moments nor a prior")
            mu, sigma = stats.bayes_at_n_moments(
                self.counts, self.prior, self.weights, self.bayes_prior
            )
            self._memo["posterior"] = (_read_only(mu), _read_only(sigma))
        found: tuple[np.ndarray, np.ndarray] = self._memo["posterior"]
        return found

    @property
    def mu(self) -> np.ndarray:
        """Bayes@N posterior mean per model (the paper's score, under the campaign's prior)."""
        return self.posterior()[0]

    @property
    def sigma(self) -> np.ndarray:
        return self.posterior()[1]

    @property
    def theta(self) -> np.ndarray:
        """The decision score: the unbiased estimate where known, else the posterior mean."""
        return self.mu if self.estimate is None else self.estimate

    @property
    def theta_se(self) -> np.ndarray:
        return self.sigma if self.estimate_se is None else self.estimate_se

    def pair_stat(self, a: int, b: int) -> tuple[float, float]:
        """``(D, s)``: difference of decision scores and its standard error."""
        se = self.theta_se
        return float(self.theta[a] - self.theta[b]), float(np.hypot(se[a], se[b]))

    def pair_alpha(self, error_control: str | None = None) -> float:
        """Error budget of one adjacent pair: ``1 - confidence``, split over the L - 1 slots of
        the ranking under ``ranking`` control (Bonferroni)."""
        alpha = 1.0 - self.confidence
        if (error_control or self.error_control) == "ranking":
            alpha /= max(1, self.num_models - 1)
        return alpha

    @property
    def z_threshold(self) -> float:
        return stats.z_threshold(self.confidence)

    @property
    def order(self) -> np.ndarray:
        """Model indices by decision score, best first (stable for exact ties). With equal trial
        counts and a uniform prior this is the posterior-mean order (mu is affine in avg@N)."""
        return np.argsort(-self.theta, kind="stable")

    def pair_z(self, a: int, b: int) -> float:
        spread = float(np.hypot(self.sigma[a], self.sigma[b]))
        gap = float(self.mu[a] - self.mu[b])
        if spread == 0:
            return 0.0 if gap == 0 else float("inf")
        return abs(gap) / spread

    def score_intervals(self, design: IntervalDesign) -> ScoreIntervals:
        """Each model's score interval under ``design``
        (:func:`adaptive_eval.stats.intervals.score_intervals`; without a prior, the Wald
        interval ``theta +- c se``, not clipped beyond the weights)."""
        key = ("intervals", design)
        if key not in self._memo:
            if self.prior is None or self.weights is None:
                found = wald_intervals(self.theta, self.theta_se, design, (-np.inf, np.inf))
            else:
                counts = self.counts.astype(np.float64)
                found = score_intervals(counts, self.prior + counts, self.weights, design)
            self._memo[key] = found
        intervals: ScoreIntervals = self._memo[key]
        return intervals

    def capped_variance(self) -> np.ndarray | None:
        """(L,) variance each model's score estimate would have at its cap on every question,
        ``sum_q v_q / (cap M^2)`` (``None`` when the per-cell variances are unknown)."""
        if self.cell_variance is None:
            return None
        if "capped_variance" not in self._memo:
            m = self.cell_variance.shape[1]
            found = self.cell_variance.sum(axis=1) / self.capacity / m**2
            self._memo["capped_variance"] = _read_only(found)
        capped: np.ndarray = self._memo["capped_variance"]
        return capped

    def spread_variance(self) -> np.ndarray | None:
        """(L, M) per-trial variance under the plain posterior mean ``nu / T`` (the uniform
        target; :func:`adaptive_eval.stats.sequential.variance_probabilities` with
        ``pooled=False``), for spreading a model's trials over its questions; ``None`` without a
        prior. The decisions' variance (``cell_variance``) is centred on the model's pooled
        frequencies and reads a question with no failure (or no success) yet as nearly
        variance-free: a Neyman spread on it starves such a question, which then stays that way
        (a tie of two models near 100% was ordered wrongly in 7% of campaigns at 0.95)."""
        if self.prior is None or self.weights is None:
            return None
        if "spread_variance" not in self._memo:
            found = sequential.trial_variance(self.prior + self.counts, self.weights, pooled=False)
            self._memo["spread_variance"] = _read_only(found)
        variance: np.ndarray = self._memo["spread_variance"]
        return variance

    def trials_per_question(self) -> np.ndarray:
        """(L,) each model's mean applied trials per question."""
        if "trials_per_question" not in self._memo:
            self._memo["trials_per_question"] = _read_only(self.trials.mean(axis=1))
        found: np.ndarray = self._memo["trials_per_question"]
        return found

    def below_min(self) -> np.ndarray:
        """(L,) models with a question below ``min_trials``."""
        return np.asarray(self.trials.min(axis=1) < self.min_trials)


@dataclass(frozen=True)
class Goals:
    """What the stopping rules ask of the allocator besides ``needs``.

    ``trial_targets`` (L,): total trials each model should reach for a goal that can say (the
    width goal; 0 where none), or ``None``. ``settle_pairs``: some rule wants the undecided
    adjacent pairs settled (a width goal alone does not, so pairs then draw no trials of their
    own).
    """

    trial_targets: np.ndarray | None = None
    settle_pairs: bool = True
    #: How a model served only for its trial target spreads trials over questions
    #: (``uniform`` or ``neyman``); ``None``: the allocator's own scheme.
    questions: str | None = None


@dataclass(frozen=True)
class PairMemory:
    """What a sequential rule remembers about one pair between looks: the planned looks it
    has used (one count per horizon of the test, the cap's first), the decision it keeps
    once made (stated for the pair as (low index, high index)), and, for a rule that tests
    the two sides of equivalence apart, which it has shown so far: ``(Delta > -epsilon,
    Delta < epsilon)`` for ``Delta`` = low's score - high's."""

    looks: tuple[int, ...] = ()
    decision: PairDecision | None = None
    shown: tuple[bool, bool] = (False, False)


#: A rule's memory: per pair ``(min(a, b), max(a, b))``, read-only.
RuleMemory = Mapping[tuple[int, int], PairMemory]
NO_MEMORY: RuleMemory = MappingProxyType({})


def pair_key(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def oriented(decision: PairDecision | None, a: int, b: int) -> PairDecision | None:
    """A decision about the pair stated for (a, b)."""
    if decision is None or (decision.a, decision.b) == (a, b):
        return decision
    return decision.swapped()


class PairRule(Protocol):
    """Settle pairs (a above b): per pair a decision, or ``None`` to pass to the next rule.

    :meth:`settle` is a pure function of the view and the rule's memory; it returns the
    answers (in the order of ``pairs``) and the rule's new memory. ``error_controlled`` says
    whether the rule keeps its error at or under ``1 - confidence`` however many rounds are
    looked at (the report warns about rules that do not).
    """

    @property
    def error_controlled(self) -> bool: ...

    def settle(
        self, view: CampaignView, pairs: Sequence[tuple[int, int]], memory: RuleMemory
    ) -> tuple[tuple[PairDecision | None, ...], RuleMemory]: ...


class MemorylessRule(abc.ABC):
    """A pair rule that looks at each round afresh (the paper's rules): :meth:`decide` per
    pair, no memory."""

    def settle(
        self, view: CampaignView, pairs: Sequence[tuple[int, int]], memory: RuleMemory
    ) -> tuple[tuple[PairDecision | None, ...], RuleMemory]:
        return tuple(self.decide(view, a, b) for a, b in pairs), memory

    @abc.abstractmethod
    def decide(self, view: CampaignView, a: int, b: int) -> PairDecision | None: ...


class Allocator(Protocol):
    """Plan the next round: trials to add per (model, question), an int64 (L, M) array.

    ``needs`` marks models some stopping rule still wants data from; ``round_trials`` is the
    smallest round worth dispatching; ``goals`` says more where the stopping rules can (trial
    targets, whether pairs are to be settled; ``None``: pairs are, no targets). The controller
    then caps the plan at each model's capacity and at the trial budget (:func:`cap_plan`).
    """

    @property
    def name(self) -> str: ...

    def __call__(
        self,
        view: CampaignView,
        decisions: tuple[PairDecision, ...],
        needs: np.ndarray,
        round_trials: int,
        goals: Goals | None = None,
    ) -> np.ndarray: ...


class StoppingRule(abc.ABC):
    """Template for campaign stopping rules (after Ax's early-stopping strategies).

    :meth:`should_stop` applies the shared guard (no stop before every model has
    ``min_trials`` on every question, unless the rule ignores it, as budgets do) and then calls
    :meth:`_should_stop`. :meth:`needs` says which models the rule still wants data from;
    ``None`` means the rule does not steer allocation.
    """

    name: str = "rule"
    respects_min_trials: bool = True
    #: Whether the rule wants the undecided adjacent pairs settled (allocation serves them).
    settles_pairs: bool = True

    def should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        if self.respects_min_trials and view.below_min().any():
            return None
        return self._should_stop(view, decisions)

    @abc.abstractmethod
    def _should_stop(
        self, view: CampaignView, decisions: tuple[PairDecision, ...]
    ) -> Stop | None: ...

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        return None

    def trial_targets(
        self, view: CampaignView, decisions: tuple[PairDecision, ...]
    ) -> np.ndarray | None:
        """(L,) total trials each model needs for this rule's goal, where it can say (else
        ``None``)."""
        return None

    def interval_design(self, confidence: float) -> IntervalDesign | None:
        """The score interval this rule stops on, if it is a width goal (else ``None``)."""
        return None

    #: How the models this rule gives trial targets spread them over questions (``None``:
    #: the allocator's scheme).
    questions: str | None = None

    def goals(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Goals:
        """What this rule asks of the allocator this round."""
        return Goals(self.trial_targets(view, decisions), self.settles_pairs, self.questions)


class AnyOf(StoppingRule):
    """Stop when any rule stops; a model is needed if any steering rule needs it."""

    name = "any_of"
    respects_min_trials = False

    def __init__(self, *rules: StoppingRule) -> None:
        self.rules = rules
        self.settles_pairs = any(rule.settles_pairs for rule in rules)
        self.questions = next((r.questions for r in rules if r.questions is not None), None)

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        for rule in self.rules:
            stop = rule.should_stop(view, decisions)
            if stop is not None:
                return stop
        return None

    def needs(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> np.ndarray | None:
        masks = [m for m in (r.needs(view, decisions) for r in self.rules) if m is not None]
        if not masks:
            return None
        union: np.ndarray = np.logical_or.reduce(masks)
        return union

    def trial_targets(
        self, view: CampaignView, decisions: tuple[PairDecision, ...]
    ) -> np.ndarray | None:
        found = [t for t in (r.trial_targets(view, decisions) for r in self.rules) if t is not None]
        if not found:
            return None
        most: np.ndarray = np.maximum.reduce(found)
        return most

    def interval_design(self, confidence: float) -> IntervalDesign | None:
        return next(
            (d for d in (r.interval_design(confidence) for r in self.rules) if d is not None),
            None,
        )


class AllOf(AnyOf):
    """Stop when every rule stops (the reason of the last one is reported)."""

    name = "all_of"

    def _should_stop(self, view: CampaignView, decisions: tuple[PairDecision, ...]) -> Stop | None:
        stops = [rule.should_stop(view, decisions) for rule in self.rules]
        if stops and all(stop is not None for stop in stops):
            return stops[-1]
        return None


def any_of(*rules: StoppingRule) -> StoppingRule:
    return AnyOf(*rules)


def without_budget(stopping: StoppingRule) -> StoppingRule:
    """The campaign's stopping rules less the ``budget`` rule (a forecast applies the budget to
    its paths afterwards)."""
    if isinstance(stopping, AnyOf):
        return AnyOf(*(rule for rule in stopping.rules if rule.name != "budget"))
    return stopping


def all_of(*rules: StoppingRule) -> StoppingRule:
    return AllOf(*rules)


#: Which pairs a campaign settles, as (a, b) with a ranked above b where the rule has an order.
PairSelector = Callable[[CampaignView], list[tuple[int, int]]]


def adjacent_pairs(view: CampaignView) -> list[tuple[int, int]]:
    """The adjacent pairs of the current ordering, best first (a ranking campaign)."""
    return [(int(a), int(b)) for a, b in itertools.pairwise(view.order)]


@dataclass(frozen=True)
class CandidatePairs:
    """The candidate against every other model, in model order (compare's gate). A value,
    not a closure, so that a campaign using it can be sent to another process (the live
    forecast's)."""

    candidate: int

    def __call__(self, view: CampaignView) -> list[tuple[int, int]]:
        return [
            (self.candidate, other) for other in range(view.num_models) if other != self.candidate
        ]


def candidate_pairs(candidate: int) -> PairSelector:
    """The candidate against every other model, in model order (compare's gate)."""
    return CandidatePairs(candidate)


def settle_pairs(
    view: CampaignView,
    rules: Sequence[PairRule],
    pairs: PairSelector = adjacent_pairs,
    memory: Sequence[RuleMemory] | None = None,
) -> tuple[tuple[PairDecision, ...], tuple[RuleMemory, ...]]:
    """Decisions on the selected pairs (default: the adjacent pairs of the ordering, best
    first), and each rule's new memory (``memory``: one per rule; ``None``: a first look).

    A pair stays undecided until both models have ``min_trials`` on every question; otherwise
    the first rule that answers it wins (later rules are not asked about it, so their memory of
    it stays as it was). An undecided pair's ``z`` is the z of the unbiased decision statistic
    (the paper's posterior z is :meth:`CampaignView.pair_z`).
    """
    memories = tuple(memory) if memory is not None else (NO_MEMORY,) * len(rules)
    if len(memories) != len(rules):
        raise ValueError(f"{len(rules)} pair rules but {len(memories)} memories")
    selected = pairs(view)
    young = view.below_min()
    answers: dict[tuple[int, int], PairDecision] = {}
    asking = [(a, b) for a, b in selected if not (young[a] or young[b])]
    remembered = []
    for rule, known in zip(rules, memories, strict=True):
        found, known = rule.settle(view, asking, known) if asking else ((), known)
        remembered.append(known)
        answers.update((pair, d) for pair, d in zip(asking, found, strict=True) if d is not None)
        asking = [pair for pair in asking if pair not in answers]
    decisions = []
    for a, b in selected:
        decision = answers.get((a, b))
        if decision is None:
            gap, spread = view.pair_stat(a, b)
            decision = PairDecision.undecided(a, b, abs(gap) / spread if spread > 0 else 0.0)
        decisions.append(decision)
    return tuple(decisions), tuple(remembered)


def adjacent_only(
    decisions: Sequence[PairDecision], view: CampaignView
) -> tuple[PairDecision, ...]:
    """The decisions on the adjacent pairs of the view's ordering (the ranking's pairs; compare's
    core also settles the candidate's other pairs), in their order."""
    adjacent = {pair_key(a, b) for a, b in adjacent_pairs(view)}
    return tuple(d for d in decisions if pair_key(d.a, d.b) in adjacent)


def decide_pairs(
    view: CampaignView, rules: Sequence[PairRule], pairs: PairSelector = adjacent_pairs
) -> tuple[PairDecision, ...]:
    """The decisions of one look from no memory (:func:`settle_pairs` on a first look)."""
    return settle_pairs(view, rules, pairs)[0]


def even_plan(
    view: CampaignView, chosen: np.ndarray, round_trials: int, trials_per_round: int | None
) -> np.ndarray:
    """Give each chosen model the same number of trials on every question.

    Per question, ``k = trials_per_round`` or the smallest k that makes the round at least
    ``round_trials`` trials, so a round late in a campaign (few models left) still fills the
    workers. Questions behind the model's most-sampled question catch up first.
    """
    num_questions = view.planned.shape[1]
    plan = np.zeros_like(view.planned)
    count = int(chosen.sum())
    if count == 0:
        return plan
    k = trials_per_round or max(1, math.ceil(round_trials / (count * num_questions)))
    target = view.planned[chosen].max(axis=1, keepdims=True)
    plan[chosen] = k + (target - view.planned[chosen])
    return plan


def cap_plan(plan: np.ndarray, view: CampaignView, trial_budget_left: int | None) -> np.ndarray:
    """Clip a plan to each model's capacity and to the trial budget (model-major order)."""
    room = np.maximum(view.capacity[:, None] - view.planned, 0)
    capped: np.ndarray = np.minimum(np.maximum(plan, 0), room).astype(np.int64)
    if trial_budget_left is not None and capped.sum() > trial_budget_left:
        flat = capped.ravel()
        keep = np.minimum(flat, np.maximum(trial_budget_left - (np.cumsum(flat) - flat), 0))
        capped = keep.reshape(capped.shape)
    return capped


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    array.flags.writeable = False
    return array
