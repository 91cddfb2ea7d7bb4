"""Fast in-process campaigns with known truth, for measuring decision rules and allocators.

The loop is the controller's, minus I/O: rounds are planned ``rounds_in_flight`` ahead of the
posterior, applied whole in order, and after each applied round the campaign's decision core
(:class:`~adaptive_eval.decide.core.DecisionCore`, the controller's own) decides what happens next;
``tests/test_core_parity.py`` drives both on the same outcomes and finds them equal round by
round. Outcomes are drawn per round as multinomial counts from the true category
probabilities, so thousands of seeded campaigns run in minutes (``benchmarks/sequential.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from adaptive_eval.base.types import PairDecision, Stop, Verdict
from adaptive_eval.decide.contracts import Allocator, CampaignView, PairRule, StoppingRule
from adaptive_eval.decide.core import DecisionCore, Limits, RoundDecision
from adaptive_eval.decide.state import RoundCosts, RunState, ViewSettings


@dataclass(frozen=True)
class Truth:
    """A campaign with known truth: (L, M, K) category probabilities and the rubric weights."""

    probs: np.ndarray
    weights: np.ndarray
    names: tuple[str, ...] = ()

    @property
    def scores(self) -> np.ndarray:
        """True score per model: (1/M) sum_q w . p_q."""
        return np.asarray((self.probs @ self.weights).mean(axis=1), dtype=np.float64)

    @property
    def shape(self) -> tuple[int, int, int]:
        num_models, num_questions, num_categories = self.probs.shape
        return int(num_models), int(num_questions), int(num_categories)


@dataclass(frozen=True)
class SimPolicy:
    """What a campaign's ``policy:`` section builds, with fresh (stateful) rule objects."""

    make_rules: Callable[[], tuple[PairRule, ...]]
    stopping: StoppingRule
    allocator: Allocator
    confidence: float = 0.95
    rope: float | None = 0.02
    error_control: str = "ranking"
    futility: float = 0.2
    pooled_variance: bool = True
    bayes_prior: str = "empirical"
    min_trials: int = 2
    max_trials: int = 400
    round_trials: int = 256
    rounds_in_flight: int = 2
    trial_budget: int | None = None


@dataclass(frozen=True)
class SimResult:
    decisions: tuple[PairDecision, ...]
    trials: np.ndarray  # (L, M)
    stop: Stop | None
    rounds: int
    estimate: np.ndarray
    estimate_se: np.ndarray
    state: RunState  # the final evidence
    counts: np.ndarray  # (L, M, K) observed category counts
    plans: tuple[np.ndarray, ...] = ()  # each round's (L, M) plan, in round order

    @property
    def total_trials(self) -> int:
        return int(self.trials.sum())

    @cached_property
    def mu(self) -> np.ndarray:
        """Bayes@N under the policy's bayes_prior (fitted on first use: the forecast's many
        simulations never read it)."""
        return self.state.moments()[0]


#: Sees each applied round: the view after it and the core's decision on it.
Watch = Callable[[CampaignView, RoundDecision], None]

#: Draws one round: (plan (L, M), trials planned before it (L, M), rng) -> (L, M, K) counts.
Sampler = Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]


#: Prices one drawn round: (plan (L, M), trials before it (L, M), its (L, M, K) counts) -> costs.
Costing = Callable[[np.ndarray, np.ndarray, np.ndarray], RoundCosts]


def recorded_costing(tokens: np.ndarray, gpu_s: np.ndarray | None = None) -> Costing:
    """Price each cell's trials by their recorded costs (L, M, N), trial ``t`` of a cell costing
    ``tokens[l, m, t]`` (``< 0``: unknown) and ``gpu_s[l, m, t]``, in the order
    :func:`replay_sampler` serves them; trials past N cost nothing known."""
    known = tokens >= 0
    seconds = np.zeros(tokens.shape) if gpu_s is None else np.asarray(gpu_s, dtype=np.float64)

    def cumulative(values: np.ndarray) -> np.ndarray:
        zero = np.zeros((*values.shape[:2], 1), dtype=values.dtype)
        return np.concatenate([zero, np.cumsum(values, axis=2)], axis=2)

    token_sums = cumulative(np.where(known, tokens, 0).astype(np.float64))
    token_counts = cumulative(known.astype(np.int64))
    gpu_sums = cumulative(seconds)
    rows, cols = np.indices(tokens.shape[:2])
    depth = tokens.shape[2]

    def price(plan: np.ndarray, before: np.ndarray, counts: np.ndarray) -> RoundCosts:
        start = np.minimum(before, depth)
        end = np.minimum(before + plan, depth)

        def between(table: np.ndarray) -> np.ndarray:
            found: np.ndarray = table[rows, cols, end] - table[rows, cols, start]
            return found

        return RoundCosts(between(token_sums), between(token_counts), between(gpu_sums))

    return price


def replay_sampler(outcomes: np.ndarray, num_categories: int) -> Sampler:
    """Serve each cell's recorded outcomes (L, M, N) in order, as a replay backend does.

    Trial ``t`` of a cell is ``outcomes[l, m, t]``; a plan past N is an error (cap the campaign
    at N). Shuffle the cells' outcomes beforehand for a resampled replay.
    """
    cumulative = np.concatenate(
        [
            np.zeros((*outcomes.shape[:2], 1, num_categories), dtype=np.int64),
            np.cumsum(outcomes[..., None] == np.arange(num_categories), axis=2),
        ],
        axis=2,
    )  # (L, M, N + 1, K): category counts among each cell's first n trials
    rows, cols = np.indices(outcomes.shape[:2])

    def draw(plan: np.ndarray, before: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        after = before + plan
        counts: np.ndarray = cumulative[rows, cols, after] - cumulative[rows, cols, before]
        return counts

    return draw


def core_of(policy: SimPolicy) -> DecisionCore:
    """The campaign's decision core for ``policy``, with fresh rules: the same core the
    controller runs (:class:`~adaptive_eval.decide.core.DecisionCore`)."""
    limits = Limits(
        policy.round_trials, policy.rounds_in_flight, policy.max_trials, policy.trial_budget
    )
    return DecisionCore(policy.make_rules(), policy.stopping, policy.allocator, limits)


def simulate(
    truth: Truth, policy: SimPolicy, rng: np.random.Generator, sampler: Sampler | None = None
) -> SimResult:
    """One campaign to its stop under ``policy``: see :func:`run_core`."""
    state = RunState(
        np.ones(truth.probs.shape), truth.weights, policy.pooled_variance, policy.bayes_prior
    )
    settings = ViewSettings(
        names=truth.names or tuple(f"m{i}" for i in range(truth.shape[0])),
        capacity=np.full(truth.shape[0], policy.max_trials, dtype=np.int64),
        confidence=policy.confidence,
        min_trials=policy.min_trials,
        rope=policy.rope,
        error_control=policy.error_control,
        futility=policy.futility,
    )
    return run_core(core_of(policy), state, settings, truth, rng, sampler)


def run_core(
    core: DecisionCore,
    state: RunState,
    settings: ViewSettings,
    truth: Truth,
    rng: np.random.Generator,
    sampler: Sampler | None = None,
    watch: Watch | None = None,
    costing: Costing | None = None,
    decided: bool = False,
) -> SimResult:
    """The controller's loop with its I/O replaced by ``sampler`` (default: multinomial draws
    from ``truth``): rounds are planned ``rounds_in_flight`` ahead of the posterior, applied
    whole in order, and after each applied round the decision core decides and plans.
    ``watch`` sees the view and the core's decision after every applied round (the forecast
    keeps each simulated campaign's path: trials, settled pairs, widths); ``costing`` prices
    each round for the view (:class:`RoundCosts`). ``decided``: ``core`` has already decided on
    ``state`` (a running campaign's snapshot, continued by the live forecast): it is not asked
    again before the first new round.
    """

    def view() -> CampaignView:
        return settings.view(state)

    def plan_ahead() -> None:
        while len(state.plans) - state.applied_rounds < core.limits.rounds_in_flight:
            plan = core.next_plan(view(), len(state.plans) - state.applied_rounds)
            if plan is None:
                return
            state.add_plan(plan)

    if not decided:
        core.decide(view())
    plan_ahead()
    while state.applied_rounds < len(state.plans):
        plan = state.plans[state.applied_rounds]
        before = state.trials.copy()
        if sampler is None:
            drawn = rng.multinomial(plan, truth.probs)
        else:
            drawn = sampler(plan, before, rng)
        state.apply_counts(drawn, None if costing is None else costing(plan, before, drawn))
        current = view()
        outcome = core.decide(current)
        if watch is not None:
            watch(current, outcome)
        plan_ahead()
    theta, se, _ = state.estimate()
    return SimResult(
        core.decisions,
        state.trials.copy(),
        core.stop,
        state.applied_rounds,
        theta,
        se,
        state,
        state.counts.copy(),
        tuple(state.plans),
    )


def wrong_calls(
    decisions: tuple[PairDecision, ...], scores: np.ndarray, epsilon: float | None
) -> list[bool]:
    """Per settled decision: is it wrong for the true ``scores``?

    Resolved ``a > b`` is wrong unless ``score_a > score_b`` (a true tie makes any resolution
    wrong); equivalent is wrong when ``|score_a - score_b| >= epsilon``.
    """
    out = []
    for d in decisions:
        if not d.settled:
            continue
        gap = float(scores[d.a] - scores[d.b])
        if d.verdict is Verdict.EQUIVALENT:
            out.append(epsilon is None or abs(gap) >= epsilon - 1e-12)
        elif d.verdict is Verdict.A_GT_B:
            out.append(not gap > 1e-12)
        else:
            out.append(not gap < -1e-12)
    return out
