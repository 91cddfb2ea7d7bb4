"""Error rates and cost of sequential decision rules and allocators, on campaigns with known truth.

    python benchmarks/sequential.py --replicates 300 --out runs/bench-sequential

For each campaign of the suite and each design (pair rule x allocator), ``replicates`` seeded
campaigns run through :func:`adaptive_eval.forecast.simulate.simulate` (the controller's loop with
the
real rules, stopping and allocators; outcomes drawn per round). Reported per design:

* ``run_wrong``: share of campaigns whose final ranking has at least one wrong decided pair
  (Wilson 95% interval); ``pair_wrong_max``: the worst pair's wrong rate;
* ``decided``: share of campaigns with every adjacent pair settled;
* ``trials`` (mean) and ``tokens`` (mean, where the scenario has token means);
* ``x_lb``: trials over the delta-correct lower bound (the convex program with the true values,
  delta = the pair's error budget, Neyman variance across questions);
* ``x_fixed``: trials over the fixed N (one look, same statistic and boundary at the fixed-sample
  level, TOST for ties) whose chance of settling every pair correctly is at least the design's.

``--replay FILE.npz`` runs the same designs on a recorded (L, M, N) outcome tensor: trials are
resampled from each cell's recorded outcomes (at most N per cell) and decisions are scored
against the full tensor's means. ``--with-replacement`` draws them with replacement instead
(fresh draws from each cell's recorded frequencies, which are then the truth), to tell what a
finite recorded pool changes.

The allocator ``track_and_stop_oracle`` (a design label such as
``group_sequential+track_and_stop_oracle``) is ``track_and_stop`` whose plug-in program is
given the true gaps and the true per-question variances: it measures what better allocation
could buy the shipped rules, not a rule anyone can run.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import norm

from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import CampaignView, any_of
from adaptive_eval.forecast.simulate import (
    SimPolicy,
    SimResult,
    Truth,
    replay_sampler,
    simulate,
    wrong_calls,
)
from adaptive_eval.stats import allocation as program
from adaptive_eval.stats import sequential as seq
from policies.allocation import TrackAndStop

REPO = Path(__file__).resolve().parent.parent
MIMICS = [0.2332, 0.2545, 0.3604, 0.3642, 0.3642, 0.4466, 0.5418, 0.5276, 0.608, 0.6213, 0.7327]
EPSILON = 0.02
DEFAULT_FUTILITY = 0.2


def matched(rng: np.random.Generator, target: float, size: int, kappa: float) -> np.ndarray:
    """Per-question success probabilities ~ Beta(kappa t, kappa (1-t)), mean exactly t."""
    raw = np.clip(rng.beta(kappa * target, kappa * (1 - target), size), 0.01, 0.99)
    shift = brentq(lambda s: expit(logit(raw) + s).mean() - target, -15, 15, xtol=1e-15)
    return np.asarray(expit(logit(raw) + shift))


def binary(scores: list[float], questions: int, kappa: float, seed: int) -> Truth:
    rng = np.random.default_rng(seed)
    success = np.stack([matched(rng, t, questions, kappa) for t in scores])
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def categorical(scores: list[float], questions: int, seed: int) -> Truth:
    """Three categories (wrong, partial, right) with weights (0, 0.5, 1): a right answer with
    probability r_q, else partial credit with probability 0.2; the mean score is exactly t."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in scores:
        right = matched(rng, (t - 0.1) / 0.9, questions, 4.0)
        partial = 0.2 * (1 - right)
        rows.append(np.stack([1 - right - partial, partial, right], axis=1))
    return Truth(np.stack(rows), np.array([0.0, 0.5, 1.0]))


def sparse(scores: list[float], questions: int, solved: float = 0.6) -> Truth:
    """Models near 0 whose few successes sit on a handful of questions (each model its own):
    score t puts ``solved`` on ``round(t M / solved)`` questions and 0 elsewhere, the rest of
    the mean on one more question. The hard case for a per-trial variance taken from the
    model's pooled score: a question not yet solved looks like the model's many zeros."""
    rows = []
    for index, target in enumerate(scores):
        p = np.zeros(questions)
        mass = target * questions
        start = (index * 5) % questions
        full = int(mass // solved)
        for j in range(full):
            p[(start + j) % questions] = solved
        p[(start + full) % questions] = mass - full * solved
        rows.append(p)
    success = np.stack(rows)
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


def suite(questions: int) -> dict[str, Truth]:
    hard = [0.05 + 0.016 * i for i in range(20)]
    hard[7] = hard[8] - 0.004  # a near tie
    return {
        "tie (2 models)": binary([0.5, 0.5], questions, 6.0, 1),
        "gap = eps": binary([0.51, 0.49], questions, 6.0, 2),
        "gap = eps/2": binary([0.505, 0.495], questions, 6.0, 3),
        "gap 0.05 (2 models)": binary([0.525, 0.475], questions, 6.0, 9),
        "gap 0.10 (2 models)": binary([0.55, 0.45], questions, 6.0, 10),
        # Every adjacent gap about 3x rope: the cap (400) is far above what settling needs.
        "12 models, gaps 3x rope": binary([0.17 + 0.06 * i for i in range(12)], questions, 4.0, 11),
        # Near-zero models with concentrated successes: a true tie (0.02, 0.02), a gap exactly
        # at the rope (0.04 vs 0.02), a pair inside it (0.01 vs 0).
        "sparse successes near 0": sparse([0.06, 0.04, 0.02, 0.02, 0.01, 0.0], questions),
        # Mostly near-ties (|gap| < rope), which no rule settles cheaply, and two clear gaps.
        "8 models, near-ties": binary(
            [0.40, 0.405, 0.413, 0.50, 0.508, 0.512, 0.62, 0.63], questions, 4.0, 12
        ),
        "checkpoint vs 2 incumbents": binary([0.62, 0.605, 0.59], questions, 6.0, 4),
        "11 mimics, polarized (kappa 2)": binary(MIMICS, questions, 2.0, 5),
        "11 mimics, homogeneous (kappa 10)": binary(MIMICS, questions, 10.0, 6),
        "categorical rubric (5 models)": categorical([0.35, 0.42, 0.43, 0.55, 0.6], questions, 7),
        "20 models, hard": binary(hard, questions, 1.5, 8),
    }


@dataclass(frozen=True)
class Design:
    rule: str
    allocator: str
    rule_params: tuple[tuple[str, object], ...] = ()
    alloc_params: tuple[tuple[str, object], ...] = ()
    error_control: str = "ranking"
    futility: float = DEFAULT_FUTILITY
    pooled_variance: bool = True

    @property
    def label(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.rule_params)
        alloc = ",".join(f"{k}={v}" for k, v in self.alloc_params)
        return (
            f"{self.rule}{f'({params})' if params else ''}+{self.allocator}"
            + (f"({alloc})" if alloc else "")
            + ("" if self.futility == DEFAULT_FUTILITY else f" futility={self.futility:g}")
            + ("" if self.pooled_variance else " variance=uniform")
            + ("" if self.error_control == "ranking" else f" [{self.error_control}]")
        )

    def rules(self) -> Callable[[], tuple[object, ...]]:
        def make() -> tuple[object, ...]:
            if self.rule == "naive_z":
                return (pair_rules.build("naive_z"), pair_rules.build("rope", {"epsilon": EPSILON}))
            return (pair_rules.build(self.rule, dict(self.rule_params)),)

        return make


#: The rule as it landed before futility and step-down (Bonferroni over the L - 1 slots).
LANDED = Design(
    "group_sequential",
    "track_and_stop",
    (("step_down", False),),
    futility=0.0,
    pooled_variance=False,
)
DESIGNS = [
    Design("naive_z", "pairwise", futility=0.0),
    LANDED,
    # The cap's horizon only, with futility, step-down and the pooled variance.
    Design("group_sequential", "track_and_stop", (("horizons", 1),)),
    # The default: also tests at 1/4 and 1/16 of the cap's horizon (a union bound).
    Design("group_sequential", "track_and_stop"),
    Design("group_sequential", "track_and_stop", futility=0.0),  # without futility
    Design("group_sequential", "track_and_stop", (("step_down", False),)),  # without Holm
    Design("anytime", "track_and_stop"),
    Design("group_sequential", "pairwise"),
    Design("group_sequential", "track_and_stop", (("spending", "obf"),)),
    # Flatter Hwang-Shih-DeCani spending than the default gamma = -4: lower early boundaries.
    Design("group_sequential", "track_and_stop", (("gamma", -2.0),)),
    Design("group_sequential", "track_and_stop", (("gamma", 1.0),)),
    Design("group_sequential", "track_and_stop", futility=0.05),
    Design("group_sequential", "track_and_stop", error_control="pair"),
]
SMALL_SUITE = ("tie", "gap", "checkpoint")


def parse_design(label: str) -> Design:
    """A design from its label, e.g. ``group_sequential(horizons=3)+track_and_stop futility=0.1
    [pair]``; the allocator takes parameters the same way, ``track_and_stop(questions=uniform)``
    (designs are separated by ``;`` on the command line)."""
    label = label.strip()
    error_control = "ranking"
    if label.endswith("]"):
        label, _, control = label[:-1].rpartition("[")
        error_control = control.strip()
        label = label.strip()
    pooled_variance = not label.endswith(" variance=uniform")
    label = label.removesuffix(" variance=uniform")
    futility = DEFAULT_FUTILITY
    if " futility=" in label:
        label, _, value = label.partition(" futility=")
        futility = float(value)
    rule_part, _, allocator_part = label.partition("+")
    rule, _, params = rule_part.partition("(")
    pairs = [p.split("=", 1) for p in params.rstrip(")").split(",") if p]
    allocator, _, alloc_text = allocator_part.partition("(")
    alloc_pairs = [p.split("=", 1) for p in alloc_text.rstrip(")").split(",") if p]
    return Design(
        rule,
        allocator.strip(),
        tuple((k, _literal(v)) for k, v in pairs),
        tuple((k, _literal(v)) for k, v in alloc_pairs),
        error_control=error_control,
        futility=futility,
        pooled_variance=pooled_variance,
    )


def _literal(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


ORACLE = "track_and_stop_oracle"


@dataclass(frozen=True)
class OracleTrackAndStop(TrackAndStop):
    """``track_and_stop`` whose program sees the true scores and the true Neyman variance
    ``((1/M) sum_q sd_q)^2`` in place of the plug-in estimates (a benchmark's yardstick)."""

    true_scores: tuple[float, ...] = ()
    true_variance: tuple[float, ...] = ()

    def program_inputs(self, view: CampaignView) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.true_scores), np.asarray(self.true_variance)


def oracle_allocator(truth: Truth, params: dict[str, object]) -> OracleTrackAndStop:
    """The oracle for ``truth`` (binary or graded: the variance of the weighted score)."""
    return OracleTrackAndStop(
        **params,  # type: ignore[arg-type]
        true_scores=tuple(truth.scores.tolist()),
        true_variance=tuple(true_variance(truth, "neyman").tolist()),
    )


def policy_for(
    design: Design, cap: int, round_trials: int, truth: Truth | None = None
) -> SimPolicy:
    if design.allocator == ORACLE:
        if truth is None:
            raise ValueError(f"{ORACLE} needs the campaign's truth")
        allocator = oracle_allocator(truth, dict(design.alloc_params))
    else:
        allocator = allocators.build(design.allocator, dict(design.alloc_params))
    return SimPolicy(
        make_rules=design.rules(),  # type: ignore[arg-type]
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocator,
        rope=EPSILON,
        error_control=design.error_control,
        futility=design.futility,
        pooled_variance=design.pooled_variance,
        max_trials=cap,
        round_trials=round_trials,
    )


Calls = list[tuple[int, int, bool]]


def shuffled(outcomes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each cell's recorded outcomes in a random order (a resampled replay, no replacement)."""
    keys = rng.random(outcomes.shape)
    return np.take_along_axis(outcomes, np.argsort(keys, axis=2), axis=2)


def resampled(outcomes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each cell's recorded outcomes drawn with replacement (fresh draws from its frequencies)."""
    picks = rng.integers(0, outcomes.shape[2], size=outcomes.shape)
    return np.take_along_axis(outcomes, picks, axis=2)


def served_outcomes(
    outcomes: np.ndarray, rng: np.random.Generator, with_replacement: bool
) -> np.ndarray:
    """A replay's outcomes in the order they are served: shuffled, or drawn with replacement."""
    return resampled(outcomes, rng) if with_replacement else shuffled(outcomes, rng)


def run_seeded(
    truth: Truth,
    policy: SimPolicy,
    rep: int,
    outcomes: np.ndarray | None,
    with_replacement: bool = False,
) -> SimResult:
    """Campaign ``rep`` (its seed): outcomes drawn from ``truth``, or served from each cell's
    recorded ``outcomes`` in a shuffled order (no replacement) or ``with_replacement``."""
    rng = np.random.default_rng(rep)
    sampler = None
    if outcomes is not None:
        sampler = replay_sampler(served_outcomes(outcomes, rng, with_replacement), truth.shape[2])
    return simulate(truth, policy, rng, sampler)


def run_chunk(
    args: tuple[Truth, Design, int, int, int, int, np.ndarray | None, bool],
) -> list[tuple[Calls, int, bool, int]]:
    """Seeded campaigns ``first .. first + count - 1``: (calls, trials, all settled, futile)."""
    truth, design, cap, round_trials, first, count, outcomes, with_replacement = args
    policy = policy_for(design, cap, round_trials, truth)
    scores = truth.scores
    out = []
    for rep in range(first, first + count):
        result = run_seeded(truth, policy, rep, outcomes, with_replacement)
        wrong = wrong_calls(result.decisions, scores, EPSILON)
        settled = [d for d in result.decisions if d.settled]
        calls = [(min(d.a, d.b), max(d.a, d.b), w) for d, w in zip(settled, wrong, strict=True)]
        futile = sum(d.futile for d in result.decisions)
        out.append((calls, result.total_trials, all(d.settled for d in result.decisions), futile))
    return out


def one_look(
    counts: np.ndarray, weights: np.ndarray, scores: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """The fixed-N test: one look at (R, L, M, K) counts, the fixed-sample boundaries at the
    pair's budget (two-sided ``alpha`` to resolve, one-sided TOST within the rope).

    Returns per replicate the adjacent pairs decided and the wrong ones (against ``scores``).
    """
    nu = np.asarray(counts, dtype=np.float64) + 1.0
    theta, se = seq.empirical_estimate(counts, nu, weights)
    resolve, equivalent = float(norm.isf(alpha / 2)), float(norm.isf(alpha))
    order = np.argsort(-theta, axis=1, kind="stable")
    rows = np.arange(len(theta))
    decided = np.zeros(len(theta), dtype=np.int64)
    wrong = np.zeros(len(theta), dtype=np.int64)
    for k in range(counts.shape[1] - 1):
        a, b = order[:, k], order[:, k + 1]
        d = theta[rows, a] - theta[rows, b]
        spread = np.hypot(se[rows, a], se[rows, b])
        resolved = d >= resolve * spread
        same = ~resolved & (np.abs(d) + equivalent * spread < EPSILON)
        true_gap = scores[a] - scores[b]
        decided += resolved | same
        wrong += (resolved & ~(true_gap > 1e-12)) | (same & ~(np.abs(true_gap) < EPSILON - 1e-12))
    return decided, wrong


def fixed_n_decisions(
    truth: Truth,
    n: int,
    alpha: float,
    reps: int,
    outcomes: np.ndarray | None,
    with_replacement: bool = False,
) -> tuple[float, float]:
    """Mean pairs decided and mean wrong calls of the fixed-N test at N = n (recorded
    outcomes served as the adaptive runs get them)."""
    rng = np.random.default_rng(777)
    if outcomes is None:
        counts = rng.multinomial(np.full((reps, *truth.shape[:2]), n), truth.probs)
    else:
        categories = np.arange(truth.shape[2])
        counts = np.stack(
            [
                (served_outcomes(outcomes, rng, with_replacement)[..., :n, None] == categories).sum(
                    axis=2
                )
                for _ in range(reps)
            ]
        )
    decided, wrong = one_look(counts, truth.weights, truth.scores, alpha)
    return float(decided.mean()), float(wrong.mean())


def true_variance(truth: Truth, scheme: str) -> np.ndarray:
    mean = truth.probs @ truth.weights
    var = np.maximum(truth.probs @ truth.weights**2 - mean**2, 1e-12)
    if scheme == "neyman":
        return np.asarray(np.sqrt(var).mean(axis=1) ** 2)
    return np.asarray(var.mean(axis=1))


def lower_bounds(truth: Truth, alpha: float, cap: int) -> tuple[float, float]:
    """The delta-correct lower bound on expected trials, twice from one program solve: with
    the program's constant ``log(1/(2.4 delta))`` (``x_lb``'s denominator), and with the
    theorem's own, larger ``kl(delta, 1 - delta)`` and each model's trials capped at ``cap``
    per question (a bound for a capped campaign)."""
    t = program.lower_bound_trials(truth.scores, true_variance(truth, "neyman"), alpha, EPSILON)
    kl = (1 - 2 * alpha) * math.log((1 - alpha) / alpha)
    scaled = t * kl / program.kl_log_term(alpha)
    return float(t.sum()), float(np.minimum(scaled, cap * truth.shape[1]).sum())


def fixed_n_reliability(
    truth: Truth, n: int, alpha: float, reps: int, rng: np.random.Generator
) -> float:
    """P(every adjacent pair settled and right) for one look at N = n (fixed-sample boundary)."""
    probs = truth.probs
    w = truth.weights
    counts = rng.multinomial(np.full((reps, *probs.shape[:2]), n), probs)  # (R, L, M, K)
    nu = counts + 1.0
    theta, se = seq.empirical_estimate(counts, nu, w)
    c = float(norm.isf(alpha / 2))
    order = np.argsort(-theta, axis=1, kind="stable")
    scores = truth.scores
    ok = np.ones(reps, dtype=bool)
    for k in range(probs.shape[0] - 1):
        a = order[:, k]
        b = order[:, k + 1]
        rows = np.arange(reps)
        d = theta[rows, a] - theta[rows, b]
        s = np.hypot(se[rows, a], se[rows, b])
        resolved = d >= c * s
        equivalent = np.abs(d) + c * s < EPSILON
        true_gap = scores[a] - scores[b]
        right = (resolved & (true_gap > 1e-12)) | (equivalent & (np.abs(true_gap) < EPSILON))
        ok &= right
    return float(ok.mean())


def fixed_n_equal(truth: Truth, target: float, alpha: float, cap: int) -> int | None:
    """Smallest N (grid) whose one-look reliability reaches ``target``; None if over 4 x cap."""
    rng = np.random.default_rng(12345)
    grid = sorted({int(x) for x in np.unique(np.geomspace(2, 4 * cap, 40).round())})
    for n in grid:
        if fixed_n_reliability(truth, n, alpha, 400, rng) >= target:
            return n
    return None


def evaluate(
    name: str,
    truth: Truth,
    designs: list[Design],
    reps: int,
    cap: int,
    jobs: int,
    outcomes: np.ndarray | None = None,
    round_trials: int | None = None,
    with_replacement: bool = False,
) -> list[dict[str, object]]:
    num_models, num_questions, _ = truth.shape
    # Rounds of one trial per cell (two for larger campaigns) unless stated: coarser than a
    # campaign's default ``policy.round_trials`` (256, with at least one trial per question of
    # each active model); decisions are made after every round.
    if round_trials is None:
        round_trials = num_models * num_questions * (1 if num_models < 5 else 2)
    rows = []
    for design in designs:
        started = time.perf_counter()
        chunk = max(1, math.ceil(reps / (jobs * 4)))
        tasks = [
            (
                truth,
                design,
                cap,
                round_trials,
                first,
                min(chunk, reps - first),
                outcomes,
                with_replacement,
            )
            for first in range(0, reps, chunk)
        ]
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as pool:
                parts = list(pool.map(run_chunk, tasks))
        else:
            parts = [run_chunk(task) for task in tasks]
        results = [r for part in parts for r in part]
        run_wrong = sum(any(w for _, _, w in calls) for calls, _, _, _ in results)
        per_pair: dict[tuple[int, int], int] = {}
        for calls, _, _, _ in results:
            for a, b, w in calls:
                per_pair[(a, b)] = per_pair.get((a, b), 0) + int(w)
        worst_pair, worst = max(per_pair.items(), key=lambda kv: kv[1], default=((0, 0), 0))
        trials = np.array([t for _, t, _, _ in results], dtype=float)
        decided = float(np.mean([d for _, _, d, _ in results]))
        pairs_decided = float(np.mean([len(c) for c, _, _, _ in results]))
        wrong_calls_mean = float(np.mean([sum(w for _, _, w in c) for c, _, _, _ in results]))
        futile = float(np.mean([f for _, _, _, f in results]))
        correct_all = float(np.mean([d and not any(w for _, _, w in c) for c, _, d, _ in results]))
        alpha = 1 - 0.95
        pair_alpha = alpha / (num_models - 1) if design.error_control == "ranking" else alpha
        lb, capped_lb = lower_bounds(truth, pair_alpha, cap)
        fixed_n = None
        if correct_all > 0 and outcomes is None:
            fixed_n = fixed_n_equal(truth, correct_all, pair_alpha, cap)
        fixed_trials = None if fixed_n is None else fixed_n * num_models * num_questions
        same_n = max(1, round(float(trials.mean()) / (num_models * num_questions)))
        fixed_reps = min(reps, 200)
        same_decided, same_wrong = fixed_n_decisions(
            truth, same_n, pair_alpha, fixed_reps, outcomes, with_replacement
        )
        cap_decided, cap_wrong = fixed_n_decisions(
            truth, cap, pair_alpha, fixed_reps, outcomes, with_replacement
        )
        low, high = seq.wilson_interval(run_wrong, reps)
        plow, phigh = seq.wilson_interval(worst, reps)
        rows.append(
            {
                "campaign": name,
                "design": design.label,
                "replicates": reps,
                "run_wrong": run_wrong / reps,
                "run_wrong_ci": [low, high],
                "pair_wrong_max": worst / reps,
                "pair_wrong_max_ci": [plow, phigh],
                "worst_pair": list(worst_pair),
                "decided": decided,
                "pairs_decided": pairs_decided,
                "wrong_calls": wrong_calls_mean,
                "futile": futile,
                "fixed_same_n": same_n,
                "fixed_same_decided": same_decided,
                "fixed_same_wrong": same_wrong,
                "fixed_cap_decided": cap_decided,
                "fixed_cap_wrong": cap_wrong,
                "fixed_cap_trials": cap * num_models * num_questions,
                "x_fixed_cap": float(trials.mean()) / (cap * num_models * num_questions),
                "all_right_and_decided": correct_all,
                "trials": float(trials.mean()),
                "trials_p90": float(np.percentile(trials, 90)),
                "lower_bound": lb,
                "x_lb": float(trials.mean() / lb) if math.isfinite(lb) else None,
                "lower_bound_kl_capped": capped_lb,
                "x_lb_kl_capped": float(trials.mean() / capped_lb)
                if math.isfinite(capped_lb)
                else None,
                "fixed_n_equal": fixed_n,
                "x_fixed": None if fixed_trials is None else float(trials.mean() / fixed_trials),
                "seconds": time.perf_counter() - started,
            }
        )
        print(_line(rows[-1]), flush=True)
    return rows


def _line(row: dict[str, object]) -> str:
    ci = row["run_wrong_ci"]
    assert isinstance(ci, list)
    x_lb = row["x_lb"]
    x_fixed = row["x_fixed"]
    return (
        f"{row['campaign']:<36} {row['design']:<38} wrong {row['run_wrong']:.3f} "
        f"[{ci[0]:.3f}, {ci[1]:.3f}] pair<= {row['pair_wrong_max']:.3f} "
        f"decided {row['decided']:.2f} pairs {row['pairs_decided']:.1f} "
        f"(fixed same {row['fixed_same_decided']:.1f}, cap {row['fixed_cap_decided']:.1f}) "
        f"futile {row['futile']:.1f} trials {row['trials']:>9.0f} "
        f"xCap {row['x_fixed_cap']:.2f} "
        f"xLB {'-' if x_lb is None else f'{x_lb:.2f}'} "
        f"xFixed {'-' if x_fixed is None else f'{x_fixed:.2f}'} "
        f"({row['seconds']:.0f}s)"
    )


def markdown(rows: list[dict[str, object]]) -> str:
    """The table the README quotes."""

    def fmt(value: object, digits: int = 2) -> str:
        return "-" if value is None else f"{float(value):.{digits}f}"  # type: ignore[arg-type]

    lines = [
        "| campaign | design | runs with a wrong call [95% CI] | worst pair | all settled "
        "| pairs decided (fixed N same compute / at cap) | futile | trials | x LB | x fixed N "
        "| x cap |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ci = row["run_wrong_ci"]
        assert isinstance(ci, list)
        lines.append(
            f"| {row['campaign']} | {row['design']} | {fmt(row['run_wrong'], 3)} "
            f"[{ci[0]:.3f}, {ci[1]:.3f}] | {fmt(row['pair_wrong_max'], 3)} | "
            f"{fmt(row['decided'])} | {fmt(row['pairs_decided'], 1)} "
            f"({fmt(row['fixed_same_decided'], 1)} / {fmt(row['fixed_cap_decided'], 1)}) | "
            f"{fmt(row['futile'], 1)} | {float(row['trials']):,.0f} | {fmt(row['x_lb'])} | "  # type: ignore[arg-type]
            f"{fmt(row['x_fixed'])} | {fmt(row['x_fixed_cap'])} |"
        )
    return "\n".join(lines) + "\n"


def scenario_truth(path: Path) -> Truth:
    """A simulated backend's scenario: true category probabilities, weights 0 .. 1."""
    with np.load(path) as data:
        probs = np.asarray(data["probs"], dtype=np.float64)
    return Truth(probs, np.linspace(0, 1, probs.shape[2]))


def recorded_truth(outcomes: np.ndarray) -> Truth:
    """The recorded outcomes' own per-cell frequencies as the truth."""
    num_categories = max(2, int(outcomes.max()) + 1)
    counts = np.stack([(outcomes == k).sum(axis=2) for k in range(num_categories)], axis=2)
    return Truth(counts / counts.sum(axis=2, keepdims=True), np.linspace(0, 1, num_categories))


def replay_truth(path: Path, key: str) -> tuple[Truth, np.ndarray]:
    """The recorded outcomes and the truth they are judged against: the full published pool
    (``correct_total / count_total``) where the file has it, else the recorded outcomes."""
    with np.load(path) as data:
        outcomes = np.asarray(data[key], dtype=np.int64)
        pool = None
        if "correct_total" in data.files and "count_total" in data.files:
            pool = data["correct_total"] / np.maximum(data["count_total"], 1)
    if pool is not None and int(outcomes.max()) <= 1:
        return Truth(np.stack([1 - pool, pool], axis=2), np.linspace(0, 1, 2)), outcomes
    return recorded_truth(outcomes), outcomes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicates", type=int, default=300)
    parser.add_argument(
        "--round-trials",
        type=int,
        default=None,
        help="trials per round (default: 1 per cell, 2 for 5+ models; a campaign's own "
        "default is policy.round_trials = 256)",
    )
    parser.add_argument(
        "--big-replicates",
        type=int,
        default=None,
        help="replicates for campaigns of 10+ models (default: --replicates)",
    )
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--cap", type=int, default=400, help="max trials per question")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--only", default=None, help="run campaigns whose name contains one of these (a,b)"
    )
    parser.add_argument(
        "--designs",
        default=None,
        help="design labels separated by ';', e.g. "
        "'group_sequential(horizons=3)+track_and_stop;anytime+track_and_stop futility=0'",
    )
    parser.add_argument(
        "--replay",
        type=Path,
        nargs="*",
        default=None,
        help="recorded (L, M, N) outcome files; each cell's outcomes are served in a shuffled "
        "order (no replacement), decisions judged against the full pool's means",
    )
    parser.add_argument(
        "--with-replacement",
        action="store_true",
        help="replays draw each cell's outcomes with replacement, judged against the recorded "
        "frequencies (the world they are drawn from)",
    )
    parser.add_argument("--key", default="outcomes")
    parser.add_argument(
        "--scenario",
        type=Path,
        nargs="*",
        default=None,
        help="simulated-backend scenario files (probs (L, M, K)), e.g. the demo's "
        "configs/scenarios/llm_mimics.npz with --cap 80",
    )
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-sequential")
    args = parser.parse_args()
    designs = DESIGNS
    if args.designs:
        designs = [parse_design(label) for label in args.designs.split(";")]
    recorded: dict[str, np.ndarray] = {}
    if args.replay is not None:
        campaigns = {}
        for path in args.replay:
            truth, served = replay_truth(path, args.key)
            if args.with_replacement:
                truth = recorded_truth(served)
            campaigns[f"replay {path.name}"] = truth
            recorded[f"replay {path.name}"] = served
    elif args.scenario is not None:
        campaigns = {f"scenario {path.name}": scenario_truth(path) for path in args.scenario}
    else:
        campaigns = suite(args.questions)
    if args.only:
        wanted = args.only.split(",")
        campaigns = {k: v for k, v in campaigns.items() if any(w in k for w in wanted)}
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for name, truth in campaigns.items():
        print(f"# {name}: true scores {np.round(truth.scores, 4).tolist()}", flush=True)
        reps = args.replicates
        if truth.shape[0] >= 10 and args.big_replicates is not None:
            reps = args.big_replicates
        outcomes = recorded.get(name)
        cap = args.cap if outcomes is None else min(args.cap, outcomes.shape[2])
        rows += evaluate(
            name,
            truth,
            designs,
            reps,
            cap,
            args.jobs,
            outcomes,
            args.round_trials,
            args.with_replacement and outcomes is not None,
        )
        (args.out / "sequential.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "sequential.md").write_text(markdown(rows))
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        entry = totals.setdefault(str(row["design"]), {"trials": 0.0, "lb": 0.0})
        entry["trials"] += float(row["trials"])  # type: ignore[arg-type]
        entry["lb"] += float(row["lower_bound"])  # type: ignore[arg-type]
    print("\n# suite totals: trials / delta-correct lower bound")
    for label, entry in totals.items():
        print(f"{label:<40} {entry['trials']:>10.0f} {entry['trials'] / entry['lb']:.2f}x")


if __name__ == "__main__":
    main()
