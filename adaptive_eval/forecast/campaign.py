"""What a campaign will settle and what it will cost, before it samples: the campaign's own
decision core run forward many times on a posterior predictive of what is known.

Every simulated campaign is a path of :mod:`~adaptive_eval.forecast.paths` (the path simulator
the live forecast summarises too) from the campaign before its first trial: the very
pair rules, stopping rules, allocator and limits that ``run`` executes; nothing here decides.
What differs from a run is only where outcomes come from:

1. **The truth is drawn.** Per simulation ``s`` and cell ``(i, a)`` (model, question)::

       p_ia ~ Dirichlet(alpha_i + n_ia),

   ``n_ia`` the recorded category counts of the evidence (a pilot, an earlier run of the same
   campaign, the config's prior trials) and ``alpha_i`` the empirical-Bayes Dirichlet of model
   ``i`` fitted to them (:func:`~adaptive_eval.stats.posterior.empirical_bayes_prior`: centred on
   the model's pooled frequencies, strength by marginal likelihood). A benchmark whose questions
   are mostly always or never solved gets a weak ``alpha`` and truths near 0 and 1, as it should;
   a model with no evidence gets the uniform Dirichlet (a prior guess, said so).
2. **Recorded trials come first.** A pilot's trials are the run's own first trials
   (:attr:`~adaptive_eval.forecast.evidence.Evidence.replayed`): each simulated campaign is
   served them in order before it draws anything, exactly as the run will reuse them.
3. **Costs follow the outcomes.** A new trial of cell ``(i, a)`` in category ``k`` costs
   ``c_ik r_ia`` tokens (and GPU-seconds): ``c_ik`` the model's mean in that category (wrong
   answers of reasoning models run longer), ``r_ia`` the cell's observed ratio to it shrunk
   toward 1 by :data:`~adaptive_eval.forecast.evidence.COST_SHRINK` pseudo-trials; the per-trial
   scatter adds a normal term of variance ``sum n_ia v_i``. Wall time is trials times the
   evidence's own seconds per trial, where the evidence was timed. Each simulated round is
   priced so (the replayed trials at their recorded costs) into the simulated run's ledgers,
   so a cost-aware allocator (``track_and_stop(cost=tokens | gpu_s)``) weighs the models by
   what their trials cost, as it will in the run, and the path's tokens are what those
   ledgers hold.

Each simulation runs to the campaign's natural stop with no trial, token or wall-clock budget,
keeping its path (trials, tokens, GPU-seconds, pairs settled and width goals met after every
round); a budget ``B`` stops a run at the first round its spending reaches ``B`` and the core only
clips the last plan, so the same paths give the configured budget's forecast and the whole
budget-decision curve. Ranges are the 10th, 50th and 90th percentiles over the simulations.

A forecast of ``compare`` (given its :class:`~adaptive_eval.campaign.checkpoint.Judge`) also
judges each path after every round with compare's own judge, so the share of simulations ending
in each exit code, at the cap or where a budget stops them, is the forecast of the gate's
verdict (:class:`VerdictForecast`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from adaptive_eval.base.errors import first_few
from adaptive_eval.base.types import PairDecision
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.campaign.checkpoint import (
    EXIT_NOT_WORSE,
    EXIT_REGRESSION,
    EXIT_UNDECIDED,
    Judge,
    exit_code,
)
from adaptive_eval.config.settings import BudgetSettings
from adaptive_eval.decide.contracts import CampaignView
from adaptive_eval.decide.core import RoundDecision
from adaptive_eval.decide.state import RoundCosts
from adaptive_eval.forecast.evidence import CostModel, Evidence, fit_cost, score_resolution
from adaptive_eval.forecast.paths import (
    PathStart,
    default_processes,
    prior_trials,
    run_path,
    run_paths,
)
from adaptive_eval.forecast.predictive import Predictive, Resolution
from adaptive_eval.forecast.simulate import Costing, Sampler, Truth, recorded_costing

#: forecast.json's format; a renamed or removed field is a new number.
FORECAST_FORMAT = 1
#: The predictive range reported: 10th, 50th and 90th percentiles.
QUANTILES = (0.1, 0.5, 0.9)
#: Simulated campaigns per forecast unless asked otherwise (:func:`default_simulations`).
DEFAULT_SIMULATIONS = 40
#: Above this many cells (models x questions) a forecast simulates half as many campaigns: one
#: simulation of L = 50, M = 500 takes about 2 s of a core, and 40 of them took 34-46 s on
#: 2 cores against the 30 s target (20: 10th and 90th percentiles from 20 draws, coarser).
LARGE_CELLS = 5_000


def default_simulations(cells: int) -> int:
    """Simulated campaigns of a forecast over ``cells`` (model, question) cells."""
    return DEFAULT_SIMULATIONS if cells <= LARGE_CELLS else DEFAULT_SIMULATIONS // 2


#: Points of the budget-decision curve (besides the configured budget).
CURVE_POINTS = 12


@dataclass(frozen=True)
class SimPath:
    """One simulated campaign, round by round (cumulative after each applied round)."""

    trials: np.ndarray  # (R,)
    fresh: np.ndarray  # (R,) trials sampled beyond the replayed evidence
    tokens: np.ndarray | None  # (R,) the replayed trials' recorded, plus the new ones' expected
    gpu_s: np.ndarray | None
    settled: np.ndarray  # (R,) pairs settled
    widths_met: np.ndarray | None  # (R,) models whose width goal is met
    settled_at: dict[tuple[str, str], tuple[int, float]]  # pair -> (round, trials/question)
    token_sd: float  # sd of the scatter of the final tokens around the expectation
    gpu_sd: float
    stop: str
    #: compare's: the judge's exit code after each round (None: no candidate).
    codes: np.ndarray | None = None  # (R,)
    #: compare's: after each round, the candidate's decision against each incumbent (in
    #: :attr:`incumbents` order), as the judge words it (better / worse / equivalent /
    #: undecided; with a margin pass / fail / undecided).
    sides: tuple[tuple[str, ...], ...] | None = None
    incumbents: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Job:
    """What every simulation of one forecast shares (inherited by forked processes)."""

    start: PathStart  # the campaign before its first trial
    evidence: Evidence
    predictive: Predictive  # where each simulation's truth is drawn from
    tokens: CostModel | None
    gpu_s: CostModel | None
    seed: int
    candidate: int | None  # compare's candidate: only its pairs count
    judge: Judge | None = None  # compare's judge: its exit code is forecast


def _replay_table(evidence: Evidence, num_categories: int) -> np.ndarray:
    """(L, M, N + 1, K) category counts among each cell's first n recorded trials."""
    hits = (evidence.categories[..., None] == np.arange(num_categories)).astype(np.int64)
    zero = np.zeros((*hits.shape[:2], 1, num_categories), dtype=np.int64)
    return np.concatenate([zero, np.cumsum(hits, axis=2)], axis=2)


def _simulate_one(job: _Job, index: int) -> SimPath:
    """Path ``index`` of the forecast: its truth drawn, then the campaign run on it to its stop
    (:func:`~adaptive_eval.forecast.paths.run_path`), both on the path's own stream."""
    start, evidence = job.start, job.evidence
    decision = start.decision
    rng = np.random.default_rng([job.seed, index])
    probs = job.predictive.draw(rng)
    num_categories = decision.num_categories
    table = _replay_table(evidence, num_categories)
    recorded = evidence.reused
    rows, cols = np.indices(recorded.shape)

    def served(trials: np.ndarray) -> np.ndarray:
        return np.asarray(table[rows, cols, np.minimum(trials, recorded)], dtype=np.int64)

    def draw(plan: np.ndarray, before: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        replay = served(before + plan) - served(before)
        fresh = plan - replay.sum(axis=2)
        drawn: np.ndarray = replay + rng.multinomial(fresh, probs)
        return drawn

    sampler: Sampler = draw
    costing = _costing(job, served)
    design = decision.interval_design
    names = decision.names
    trials: list[int] = []
    sampled: list[int] = []
    tokens: list[float] = []
    gpu: list[float] = []
    settled: list[int] = []
    widths: list[int] = []
    settled_at: dict[tuple[str, str], tuple[int, float]] = {}
    codes: list[int] = []
    sides: list[tuple[str, ...]] = []
    incumbents: tuple[int, ...] = ()

    def watch(view: CampaignView, outcome: RoundDecision) -> None:
        new = view.counts - served(view.trials)
        trials.append(view.trials_used)
        sampled.append(int(new.sum()))
        # What the simulated ledgers hold (costing): the replayed trials' recorded costs and
        # the fresh ones' expected costs, as the run will report them.
        if job.tokens is not None:
            tokens.append(float(view.tokens_used or 0))
        if job.gpu_s is not None and view.cell_gpu_s is not None:
            gpu.append(float(np.where(view.trials > 0, view.cell_gpu_s * view.trials, 0).sum()))
        decided = [d for d in outcome.decisions if d.settled and counts_pair(d, job.candidate)]
        settled.append(len(decided))
        for d in decided:
            key = pair_key(names, d)
            if key not in settled_at:
                per_question = (view.trials[d.a].mean() + view.trials[d.b].mean()) / 2
                settled_at[key] = (len(trials) - 1, float(per_question))
        if design.half_width is not None:
            found = view.score_intervals(design)
            width = np.where(np.isfinite(found.boundary), found.half_width, np.inf)
            widths.append(int((width <= design.half_width).sum()))
        if job.judge is not None:
            nonlocal incumbents
            judged = job.judge(outcome.decisions)
            incumbents = tuple(v.incumbent for v in judged)
            words = tuple(v.decision for v in judged)
            sides.append(words)
            codes.append(exit_code(words))

    result = run_path(start, Truth(probs, decision.weights), rng, sampler, watch, costing)
    fresh = result.trials - np.minimum(result.trials, recorded)
    return SimPath(
        np.asarray(trials, dtype=np.int64),
        np.asarray(sampled, dtype=np.int64),
        None if job.tokens is None else np.asarray(tokens),
        None if job.gpu_s is None else np.asarray(gpu),
        np.asarray(settled, dtype=np.int64),
        np.asarray(widths, dtype=np.int64) if design.half_width is not None else None,
        settled_at,
        0.0 if job.tokens is None else math.sqrt(job.tokens.scatter(fresh)),
        0.0 if job.gpu_s is None else math.sqrt(job.gpu_s.scatter(fresh)),
        "" if result.stop is None else result.stop.reason.value,
        None if job.judge is None else np.asarray(codes, dtype=np.int64),
        None if job.judge is None else tuple(sides),
        incumbents,
    )


def _costing(job: _Job, served: Callable[[np.ndarray], np.ndarray]) -> Costing | None:
    """Each simulated round's cost per cell, as the run's ledgers will record it: the replayed
    trials' recorded costs, and each fresh trial's expected cost given its drawn category
    (:attr:`CostModel.per_trial`), so a cost-aware allocator (``track_and_stop(cost=tokens)``)
    weighs the models as it will in the run. ``None`` with no cost known."""
    if job.tokens is None and job.gpu_s is None:
        return None
    evidence = job.evidence
    recorded = evidence.reused
    depth = np.arange(evidence.tokens.shape[2])
    kept = depth < recorded[..., None]
    replayed = recorded_costing(
        np.where(kept, evidence.tokens, -1), np.where(kept, evidence.gpu_s, 0.0)
    )
    unit_tokens = None if job.tokens is None else job.tokens.per_trial
    unit_gpu_s = None if job.gpu_s is None else job.gpu_s.per_trial
    nothing = np.zeros(recorded.shape)
    no_trials = np.zeros(recorded.shape, dtype=np.int64)

    def fresh_cost(fresh: np.ndarray, unit: np.ndarray | None) -> np.ndarray:
        return nothing if unit is None else np.einsum("lmk,lmk->lm", fresh, unit)

    def price(plan: np.ndarray, before: np.ndarray, counts: np.ndarray) -> RoundCosts:
        fresh, fresh_trials = counts, plan
        tokens, token_trials, gpu_s = nothing, no_trials, nothing
        if (before < recorded).any():  # the round still serves replayed trials
            sunk = replayed(plan, before, counts)
            fresh = counts - (served(before + plan) - served(before))
            fresh_trials = fresh.sum(axis=2)
            tokens, token_trials, gpu_s = sunk.tokens, sunk.token_trials, sunk.gpu_s
        if unit_tokens is not None:
            tokens = tokens + fresh_cost(fresh, unit_tokens)
            token_trials = token_trials + fresh_trials
        return RoundCosts(tokens, token_trials, gpu_s + fresh_cost(fresh, unit_gpu_s))

    return price


def counts_pair(decision: PairDecision, candidate: int | None) -> bool:
    """Whether a pair counts: every pair of a ranking; compare's candidate's own."""
    return candidate is None or candidate in (decision.a, decision.b)


def pair_key(names: Sequence[str], decision: PairDecision) -> tuple[str, str]:
    """A pair by its models' names, in a fixed order."""
    a, b = names[decision.a], names[decision.b]
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Range:
    """A predictive range: the 10th, 50th and 90th percentiles over the simulations."""

    p10: float
    p50: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Range:
        """The median, and as the 10th and 90th percentiles the order statistics that make a
        distribution-free 80% prediction interval for one more draw: the ``k``-th smallest and
        largest of ``n``, ``k = max(1, floor((n + 1) / 10))`` (coverage ``(n + 1 - 2k) / (n +
        1)``, 81% at n = 20). Interpolated quantiles of 20 draws hold another draw only about
        72% of the time: too narrow for the run they forecast."""
        ordered = np.sort(np.asarray(values, dtype=np.float64))
        n = len(ordered)
        k = max(1, int((n + 1) * QUANTILES[0]))
        low, high = (ordered[k - 1], ordered[n - k]) if n >= 2 else (ordered[0], ordered[-1])
        return cls(float(low), float(np.median(ordered)), float(high))

    def holds(self, value: float) -> bool:
        """Inside the 10-90% range, a zero-width one included (quantiles of equal values can
        differ from them in the last bits)."""
        slack = 1e-9 * max(1.0, abs(value))
        return self.p10 - slack <= value <= self.p90 + slack

    def record(self) -> dict[str, float]:
        return {"p10": self.p10, "p50": self.p50, "p90": self.p90}


@dataclass(frozen=True)
class PairForecast:
    a: str
    b: str
    settled: float  # probability of being settled by the cap
    settled_in_budget: float | None  # ... by the configured budget
    trials_per_question: Range | None  # where it settles (None: never in the simulations)


@dataclass(frozen=True)
class CurvePoint:
    """What a trial budget buys: pairs settled (and width goals met) at the last round within
    it, over the simulations; for compare, the probability of each exit code there."""

    trials: int
    settled: Range
    settled_mean: float
    widths_met: Range | None
    exit_codes: dict[int, float] | None = None


#: compare's exit codes, always listed in a verdict forecast (at probability 0 if need be).
EXIT_CODES = (EXIT_NOT_WORSE, EXIT_REGRESSION, EXIT_UNDECIDED)


@dataclass(frozen=True)
class IncumbentForecast:
    """The candidate's decision against one incumbent: probability of each (the judge's
    words), at the cap and at the configured budget."""

    incumbent: str
    at_cap: dict[str, float]
    in_budget: dict[str, float] | None


@dataclass(frozen=True)
class VerdictForecast:
    """compare's verdict: the probability of each exit code of the run, where each simulated
    campaign stops unbudgeted (``at_cap``) and where the configured budget stops it
    (``in_budget``; None without one), judged by compare's own judge
    (:func:`~adaptive_eval.campaign.checkpoint.exit_code`)."""

    margin: float | None
    at_cap: dict[int, float]
    in_budget: dict[int, float] | None
    meanings: dict[int, str]
    incumbents: tuple[IncumbentForecast, ...]

    def record(self) -> dict[str, Any]:
        return {
            "margin": self.margin,
            "exit_codes": [
                {
                    "code": code,
                    "meaning": self.meanings.get(code, ""),
                    "probability": self.at_cap[code],
                    "probability_in_budget": None
                    if self.in_budget is None
                    else self.in_budget.get(code, 0.0),
                }
                for code in self.at_cap
            ],
            "incumbents": [
                {"incumbent": i.incumbent, "at_cap": i.at_cap, "in_budget": i.in_budget}
                for i in self.incumbents
            ],
        }


@dataclass(frozen=True)
class Forecast:
    """The forecast of one campaign (what forecast.json holds)."""

    campaign: str
    fingerprint: str
    evidence: Evidence
    simulations: int
    seed: int
    num_pairs: int
    num_models: int
    budget: dict[str, float | None]
    trials: Range
    new_trials: Range  # sampled beyond the replayed evidence (a pilot, the library)
    #: The 5th and 95th percentiles of the new trials: the 90% range a night alerts outside.
    new_trials_90: tuple[float, float]
    tokens: Range | None
    gpu_s: Range | None
    wall_s: Range | None
    settled: Range
    widths_met: Range | None
    pairs: tuple[PairForecast, ...]
    curve: tuple[CurvePoint, ...]
    unknown: tuple[str, ...]  # what cannot be forecast, said once each
    stops: dict[str, int] = field(default_factory=dict)  # why each simulation stopped
    #: The evidence's sd of a model's score (:func:`score_resolution`), None without it.
    score_sd: float | None = None
    candidate: str | None = None  # compare's: only its pairs count
    verdict: VerdictForecast | None = None  # compare's exit code (with a candidate)
    #: What the evidence tells of the models' spacing (None: too few models, or no evidence).
    resolution: Resolution | None = None
    #: Evidence that cannot measure what it is asked to, said plainly (one line each).
    degenerate: tuple[str, ...] = ()
    #: Whether the campaign's engines run on GPUs (its device-seconds are GPU-seconds; on CPU
    #: they are the engines' seconds); None where the forecast was not told.
    gpu: bool | None = None

    def record(self) -> dict[str, Any]:
        """forecast.json."""

        def rng(value: Range | None) -> dict[str, float] | None:
            return None if value is None else value.record()

        found = {
            "format": FORECAST_FORMAT,
            "campaign": self.campaign,
            "fingerprint": self.fingerprint,
            "evidence": {
                "source": self.evidence.source,
                "detail": self.evidence.detail,
                "trials": self.evidence.trials,
                "replayed": self.evidence.replayed,
            },
            "simulations": self.simulations,
            "seed": self.seed,
            "budget": self.budget,
            "pairs_total": self.num_pairs,
            "candidate": self.candidate,
            "models": self.num_models,
            "trials": rng(self.trials),
            "new_trials": rng(self.new_trials),
            "new_trials_90": list(self.new_trials_90),
            "tokens": rng(self.tokens),
            "gpu_s": rng(self.gpu_s),
            "wall_s": rng(self.wall_s),
            "pairs_settled": rng(self.settled),
            "width_goals_met": rng(self.widths_met),
            "stops": self.stops,
            "score_sd": self.score_sd,
            # added to format 1: what the evidence resolves, and degenerate evidence
            "resolution": None if self.resolution is None else self.resolution.record(),
            "degenerate": list(self.degenerate),
            # added to format 1: whether the device-seconds are GPU-seconds
            "gpu": self.gpu,
            "unknown": list(self.unknown),
            "pairs": [
                {
                    "a": p.a,
                    "b": p.b,
                    "settled": p.settled,
                    "settled_in_budget": p.settled_in_budget,
                    "trials_per_question": rng(p.trials_per_question),
                }
                for p in self.pairs
            ],
            "curve": [
                {
                    "trials": c.trials,
                    "pairs_settled": c.settled.record(),
                    "pairs_settled_mean": c.settled_mean,
                    "width_goals_met": rng(c.widths_met),
                    # compare's (a key added to format 1, only with a candidate)
                    **({} if c.exit_codes is None else {"exit_codes": _keyed(c.exit_codes)}),
                }
                for c in self.curve
            ],
        }
        if self.verdict is not None:  # compare's (added to format 1, only with a candidate)
            found["verdict"] = self.verdict.record()
        return found


def _keyed(probabilities: dict[int, float]) -> dict[str, float]:
    """Exit code -> probability with the codes as JSON keys."""
    return {str(code): p for code, p in probabilities.items()}


def forecast(
    campaign: Campaign,
    evidence: Evidence,
    budget: BudgetSettings,
    *,
    simulations: int = DEFAULT_SIMULATIONS,
    seed: int = 0,
    processes: int | None = None,
    candidate: str | None = None,
    judge: Judge | None = None,
    meanings: Mapping[int, str] | None = None,
    predictive: str = "resolved",
) -> Forecast:
    """Forecast ``campaign`` (its paths run without a trial budget: ``budget`` is applied to
    them) from ``evidence`` over ``simulations`` (at least 1) simulated campaigns, on
    ``processes`` (default: the CPUs, at most 8). ``candidate``: a ``compare`` campaign's, whose
    pairs alone count; ``judge`` (compare's,
    :func:`~adaptive_eval.campaign.checkpoint.compare_campaign`'s) adds the forecast of its exit
    code, worded by ``meanings`` (``COMPARE_EXIT_MEANING``).
    ``predictive``: ``cells`` draws each cell's truth from its posterior (measured best from a
    pilot of 4: docs/forecast.md); ``spacing`` tilts those draws onto the deconvolved spacing
    of the models' scores (:mod:`~adaptive_eval.forecast.predictive`); ``resolved`` (the
    default) is ``spacing`` where the evidence tells a typical gap from a tie (an automatic
    pilot's aim), else ``cells``. The evidence's resolution (what pilot size tells a typical gap
    from a tie) is reported either way."""
    if simulations < 1:
        raise ValueError(f"a forecast simulates at least 1 campaign, not {simulations}")
    num_categories = campaign.num_categories
    extra = prior_trials(campaign.decision)
    counts = evidence.counts(num_categories) + extra
    drawn = Predictive.of(counts, campaign.decision.weights, predictive)
    known_tokens = evidence.tokens >= 0
    known_gpu = evidence.gpu_s > 0
    unknown = []
    token_model = gpu_model = None
    if evidence.source == "prior":
        unknown.append("tokens, GPU-seconds and wall time: no recorded trial to measure them on")
    else:
        token_model = fit_cost(evidence.tokens, evidence.categories, known_tokens, num_categories)
        gpu_model = fit_cost(evidence.gpu_s, evidence.categories, known_gpu, num_categories)
        if token_model is None:
            unknown.append(f"tokens: {_missing(campaign, known_tokens)} no token counts")
        elif token_model.borrowed:
            unknown.append(
                f"tokens: {_missing(campaign, known_tokens)} no token counts; the other "
                "models' means per category stand in for theirs"
            )
        if gpu_model is None:
            unknown.append(f"GPU-seconds: {_missing(campaign, known_gpu)} no GPU time")
        if evidence.seconds_per_trial is None:
            unknown.append("wall time: the evidence was not timed")
    if judge is not None and candidate is None:
        candidate = campaign.names[judge.candidate]
    focus = None if candidate is None else campaign.names.index(candidate)
    if judge is not None and judge.candidate != focus:
        raise ValueError(f"the judge's candidate is not {candidate}")
    start = PathStart.before_run(campaign.decision)
    job = _Job(start, evidence, drawn, token_model, gpu_model, seed, focus, judge)
    paths = run_paths(partial(_simulate_one, job), simulations, processes or default_processes())
    found = summarise(
        campaign, evidence, budget, paths, seed, tuple(unknown), judge=judge, meanings=meanings
    )
    told = None
    if drawn.fitted is not None and evidence.trials:
        per_question = float(np.median(evidence.recorded[evidence.recorded > 0]))
        told = Resolution.of(drawn.fitted, per_question)
    return replace(
        found,
        candidate=candidate,
        score_sd=score_resolution(evidence, campaign.decision.weights),
        resolution=told,
        degenerate=degenerate_evidence(campaign.names, counts - extra, campaign.decision.weights),
    )


def degenerate_evidence(
    names: Sequence[str], counts: np.ndarray, weights: np.ndarray
) -> tuple[str, ...]:
    """What the evidence cannot measure, one plain line each: models with no trial (their
    scores are the prior's guess), and evidence whose every trial of a model scored the same
    (its noise is unmeasured: the spread of truths is the prior's)."""
    trials = counts.sum(axis=2)
    lines = []
    empty = [names[i] for i in range(len(names)) if trials[i].sum() == 0]
    if empty:
        lines.append(
            f"models {first_few(empty)} have no trial: their scores are the prior's guess, "
            "uniform on every question"
        )
    scored = counts @ (weights > weights.min()).astype(np.int64)  # trials above the lowest weight
    flat = []
    for i in range(len(names)):
        if trials[i].sum() and (scored[i].sum() == 0 or scored[i].sum() == trials[i].sum()):
            flat.append(names[i])
    if flat and len(flat) == len(names) - len(empty):
        lines.append(
            "every recorded trial of every model scored the same "
            f"({'the lowest' if scored.sum() == 0 else 'above the lowest'} weight): the "
            "evidence measures no score's noise, and the ranges are the prior's spread"
        )
    elif flat:
        lines.append(
            f"every recorded trial of {first_few(flat)} scored the same: its noise is the "
            "prior's guess"
        )
    return tuple(lines)


def _missing(campaign: Campaign, known: np.ndarray) -> str:
    """Who recorded nothing: "the backends recorded", or "models A, B recorded"."""
    lacking = [campaign.names[i] for i in range(campaign.num_models) if not known[i].any()]
    if len(lacking) == campaign.num_models:
        return "the backends recorded"
    return f"models {first_few(lacking)} recorded"


def _at_budget(path: SimPath, budget: BudgetSettings, evidence: Evidence, ahead: int) -> int:
    """The index of the round at which ``budget`` stops this path (its last round if none).

    A trial budget clips the plans themselves (the run ends on the round that reaches it); a
    token or wall-clock budget is a stop asked after a round, when ``ahead - 1`` more rounds
    are already planned and dispatched: they are applied too (``ahead``:
    ``rounds_in_flight``)."""
    last = len(path.trials) - 1
    crossed = [last]
    if budget.trials is not None:
        crossed.append(_first_at_least(path.trials, budget.trials, last))
    late = ahead - 1
    if budget.tokens is not None and path.tokens is not None:
        crossed.append(min(_first_at_least(path.tokens, budget.tokens, last) + late, last))
    if budget.wall_clock_s is not None and evidence.seconds_per_trial is not None:
        wall = np.asarray([evidence.wall_s(float(f)) or 0.0 for f in path.fresh])
        at = _first_at_least(wall, budget.wall_clock_s, last)
        crossed.append(min(at + late, last))
    return min(crossed)


def _first_at_least(values: np.ndarray, limit: float, last: int) -> int:
    index = int(np.searchsorted(values, limit, side="left"))
    return min(index, last)


def summarise(
    campaign: Campaign,
    evidence: Evidence,
    budget: BudgetSettings,
    paths: list[SimPath],
    seed: int,
    unknown: tuple[str, ...],
    *,
    judge: Judge | None = None,
    meanings: Mapping[int, str] | None = None,
) -> Forecast:
    """The forecast's ranges, pairs and curve from the simulated paths (with compare's
    ``judge``, the verdict its paths reached)."""
    rng = np.random.default_rng([seed, len(paths), 7])
    per_trial = evidence.seconds_per_trial
    ahead = campaign.run.settings.execution.rounds_in_flight
    stops = [_at_budget(p, budget, evidence, ahead) for p in paths]

    def at_stop(track: str, scatter: str | None, limit: float | None) -> Range | None:
        """The range of a path quantity where the budget stops each path (with its scatter)."""
        found = []
        for p, r in zip(paths, stops, strict=True):
            values = getattr(p, track)
            if values is None:
                return None
            noise = getattr(p, scatter) * float(rng.standard_normal()) if scatter else 0.0
            value = max(float(values[r]) + noise, 0.0)
            found.append(value if limit is None else min(value, limit))
        return Range.of(found)

    trials = at_stop("trials", None, budget.trials)
    assert trials is not None
    wall = None
    if per_trial is not None:
        # Start-up once (the run's workers start anew), then the steady rate per new trial.
        wall = Range.of(
            [evidence.wall_s(float(p.fresh[r])) or 0.0 for p, r in zip(paths, stops, strict=True)]
        )
    new_trials = at_stop("fresh", None, None)
    assert new_trials is not None
    fresh_at_stop = [float(p.fresh[r]) for p, r in zip(paths, stops, strict=True)]
    low, high = np.quantile(fresh_at_stop, (0.05, 0.95))
    settled = at_stop("settled", None, None)
    assert settled is not None
    tokens = at_stop("tokens", "token_sd", None)  # the round past the budget is spent too
    gpu = at_stop("gpu_s", "gpu_sd", None)
    widths = at_stop("widths_met", None, None)
    num_pairs = campaign.num_models - 1  # the adjacent pairs, or the candidate's
    pairs = _pairs(paths, stops, budget)
    curve = _curve(paths, budget)
    verdict = None
    if judge is not None:
        verdict = _verdict(campaign.names, paths, stops, budget, judge.margin, meanings or {})
    stop_counts: dict[str, int] = {}
    for p, r in zip(paths, stops, strict=True):
        reason = p.stop if r == len(p.trials) - 1 else "budget"
        stop_counts[reason] = stop_counts.get(reason, 0) + 1
    return Forecast(
        campaign.run.settings.name,
        campaign.run.fingerprint,
        evidence,
        len(paths),
        seed,
        num_pairs,
        campaign.num_models,
        {"trials": budget.trials, "tokens": budget.tokens, "wall_clock_s": budget.wall_clock_s},
        trials,
        new_trials,
        (float(low), float(high)),
        tokens,
        gpu,
        wall,
        settled,
        widths,
        pairs,
        curve,
        unknown,
        stop_counts,
        verdict=verdict,
    )


def _pairs(
    paths: list[SimPath], stops: list[int], budget: BudgetSettings
) -> tuple[PairForecast, ...]:
    """Per pair settled in any simulation: how often, by the budget, and where."""
    keys: dict[tuple[str, str], None] = {}
    for p in paths:
        keys.update(dict.fromkeys(p.settled_at))
    out = []
    budgeted = _budgeted(budget)
    for key in sorted(keys):
        rounds = [p.settled_at.get(key) for p in paths]
        settled = float(np.mean([r is not None for r in rounds]))
        in_budget = float(
            np.mean([r is not None and r[0] <= s for r, s in zip(rounds, stops, strict=True)])
        )
        per_question = [r[1] for r in rounds if r is not None]
        out.append(
            PairForecast(
                key[0],
                key[1],
                settled,
                in_budget if budgeted else None,
                Range.of(per_question) if per_question else None,
            )
        )
    out.sort(key=lambda p: -p.settled)
    return tuple(out)


def _budgeted(budget: BudgetSettings) -> bool:
    return any(v is not None for v in (budget.trials, budget.tokens, budget.wall_clock_s))


def _shares(values: Sequence[Any], keys: Sequence[Any] = ()) -> dict[Any, float]:
    """The share of each value among ``values``: ``keys`` first (at 0 if absent), then the
    others in order of appearance; they sum to 1."""
    found: dict[Any, float] = dict.fromkeys(keys, 0.0)
    for value in values:
        found[value] = found.get(value, 0.0) + 1.0
    return {key: count / len(values) for key, count in found.items()}


def _verdict(
    names: Sequence[str],
    paths: list[SimPath],
    stops: list[int],
    budget: BudgetSettings,
    margin: float | None,
    meanings: Mapping[int, str],
) -> VerdictForecast:
    """compare's exit code over the paths: where each stops unbudgeted (its last round) and
    where the budget stops it (``stops``, :func:`_at_budget`), and per incumbent the
    candidate's decision there."""
    codes = tuple(dict.fromkeys([*EXIT_CODES, *meanings]))
    last = [len(p.trials) - 1 for p in paths]
    budgeted = _budgeted(budget)

    def code_shares(where: list[int]) -> dict[int, float]:
        return _shares([int(p.codes[r]) for p, r in zip(paths, where, strict=True)], codes)  # type: ignore[index]

    incumbents = []
    for slot, incumbent in enumerate(paths[0].incumbents):

        def sides(where: list[int], slot: int = slot) -> dict[str, float]:
            return _shares([p.sides[r][slot] for p, r in zip(paths, where, strict=True)])  # type: ignore[index]

        incumbents.append(
            IncumbentForecast(names[incumbent], sides(last), sides(stops) if budgeted else None)
        )
    return VerdictForecast(
        margin,
        code_shares(last),
        code_shares(stops) if budgeted else None,
        {code: meanings.get(code, "") for code in codes},
        tuple(incumbents),
    )


def _curve(paths: list[SimPath], budget: BudgetSettings) -> tuple[CurvePoint, ...]:
    """Pairs settled (and widths met) against trial budgets from the smallest first round to
    the largest run, on a geometric grid, plus the configured budget."""
    low = max(1, min(int(p.trials[0]) for p in paths))
    high = max(int(p.trials[-1]) for p in paths)
    grid = {round(x) for x in np.geomspace(low, max(high, low + 1), CURVE_POINTS)}
    if budget.trials is not None and budget.trials < high:
        grid.add(int(budget.trials))
    points = []
    for trials in sorted(grid):
        # As _at_budget: a budget ends the run on the round that reaches it.
        where = [_first_at_least(p.trials, trials, len(p.trials) - 1) for p in paths]
        settled = [int(p.settled[r]) for p, r in zip(paths, where, strict=True)]
        widths = None
        if all(p.widths_met is not None for p in paths):
            widths = Range.of(
                [int(p.widths_met[r]) for p, r in zip(paths, where, strict=True)]  # type: ignore[index]
            )
        exit_codes = None
        if all(p.codes is not None for p in paths):
            found = [int(p.codes[r]) for p, r in zip(paths, where, strict=True)]  # type: ignore[index]
            exit_codes = _shares(found, EXIT_CODES)
        points.append(
            CurvePoint(trials, Range.of(settled), float(np.mean(settled)), widths, exit_codes)
        )
    return tuple(points)
