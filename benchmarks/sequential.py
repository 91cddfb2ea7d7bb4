"""Error rates and cost of sequential decision rules and allocators, on campaigns with known truth.

    python benchmarks/sequential.py --replicates 300 --out runs/bench-sequential

For each campaign of the suite and each design (pair rule x allocator), ``replicates`` seeded
campaigns run through :func:`adaptive_eval.simulate.simulate` (the controller's loop with the
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
against the full tensor's means.
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

from adaptive_eval.policy import any_of
from adaptive_eval.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.simulate import SimPolicy, Truth, simulate, wrong_calls
from adaptive_eval.stats import sequential as seq

REPO = Path(__file__).resolve().parent.parent
MIMICS = [0.2332, 0.2545, 0.3604, 0.3642, 0.3642, 0.4466, 0.5418, 0.5276, 0.608, 0.6213, 0.7327]
EPSILON = 0.02


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


def suite(questions: int) -> dict[str, Truth]:
    hard = [0.05 + 0.016 * i for i in range(20)]
    hard[7] = hard[8] - 0.004  # a near tie
    return {
        "tie (2 models)": binary([0.5, 0.5], questions, 6.0, 1),
        "gap = eps": binary([0.51, 0.49], questions, 6.0, 2),
        "gap = eps/2": binary([0.505, 0.495], questions, 6.0, 3),
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

    @property
    def label(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.rule_params)
        return f"{self.rule}{f'({params})' if params else ''}+{self.allocator}" + (
            "" if self.error_control == "ranking" else f" [{self.error_control}]"
        )

    def rules(self) -> Callable[[], tuple[object, ...]]:
        def make() -> tuple[object, ...]:
            if self.rule == "naive_z":
                return (pair_rules.build("naive_z"), pair_rules.build("rope", {"epsilon": EPSILON}))
            return (pair_rules.build(self.rule, dict(self.rule_params)),)

        return make


DESIGNS = [
    Design("naive_z", "pairwise"),
    Design("group_sequential", "pairwise"),
    Design("group_sequential", "track_and_stop"),
    Design("anytime", "track_and_stop"),
    Design("group_sequential", "track_and_stop", (("spending", "obf"),)),
    # Flatter Hwang-Shih-DeCani spending than the default gamma = -4: lower early boundaries.
    Design("group_sequential", "track_and_stop", (("gamma", -2.0),)),
    Design("group_sequential", "track_and_stop", (("gamma", 1.0),)),
    Design("group_sequential", "track_and_stop", error_control="pair"),
]
SMALL_SUITE = ("tie", "gap", "checkpoint")


def policy_for(design: Design, cap: int, round_trials: int) -> SimPolicy:
    return SimPolicy(
        make_rules=design.rules(),  # type: ignore[arg-type]
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build(design.allocator, dict(design.alloc_params)),
        rope=EPSILON,
        error_control=design.error_control,
        max_trials=cap,
        round_trials=round_trials,
    )


def run_chunk(
    args: tuple[Truth, Design, int, int, int, int],
) -> list[tuple[list[tuple[int, int, bool]], int, bool]]:
    truth, design, cap, round_trials, first, count = args
    policy = policy_for(design, cap, round_trials)
    scores = truth.scores
    out = []
    for rep in range(first, first + count):
        result = simulate(truth, policy, np.random.default_rng(rep))
        wrong = wrong_calls(result.decisions, scores, EPSILON)
        settled = [d for d in result.decisions if d.settled]
        calls = [(min(d.a, d.b), max(d.a, d.b), w) for d, w in zip(settled, wrong, strict=True)]
        out.append((calls, result.total_trials, all(d.settled for d in result.decisions)))
    return out


def true_variance(truth: Truth, scheme: str) -> np.ndarray:
    mean = truth.probs @ truth.weights
    var = np.maximum(truth.probs @ truth.weights**2 - mean**2, 1e-12)
    if scheme == "neyman":
        return np.asarray(np.sqrt(var).mean(axis=1) ** 2)
    return np.asarray(var.mean(axis=1))


def lower_bound(truth: Truth, alpha: float) -> float:
    t = seq.lower_bound_trials(truth.scores, true_variance(truth, "neyman"), alpha, EPSILON)
    return float(t.sum())


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
    name: str, truth: Truth, designs: list[Design], reps: int, cap: int, jobs: int
) -> list[dict[str, object]]:
    num_models, num_questions, _ = truth.shape
    # Rounds of one trial per cell (two for larger campaigns, as a real campaign's
    # round_trials would give); decisions are made after every round.
    round_trials = num_models * num_questions * (1 if num_models < 5 else 2)
    rows = []
    for design in designs:
        started = time.perf_counter()
        chunk = max(1, math.ceil(reps / (jobs * 4)))
        tasks = [
            (truth, design, cap, round_trials, first, min(chunk, reps - first))
            for first in range(0, reps, chunk)
        ]
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as pool:
                parts = list(pool.map(run_chunk, tasks))
        else:
            parts = [run_chunk(task) for task in tasks]
        results = [r for part in parts for r in part]
        run_wrong = sum(any(w for _, _, w in calls) for calls, _, _ in results)
        per_pair: dict[tuple[int, int], int] = {}
        for calls, _, _ in results:
            for a, b, w in calls:
                per_pair[(a, b)] = per_pair.get((a, b), 0) + int(w)
        worst_pair, worst = max(per_pair.items(), key=lambda kv: kv[1], default=((0, 0), 0))
        trials = np.array([t for _, t, _ in results], dtype=float)
        decided = float(np.mean([d for _, _, d in results]))
        correct_all = float(np.mean([d and not any(w for _, _, w in c) for c, _, d in results]))
        alpha = 1 - 0.95
        pair_alpha = alpha / (num_models - 1) if design.error_control == "ranking" else alpha
        lb = lower_bound(truth, pair_alpha)
        fixed_n = fixed_n_equal(truth, correct_all, pair_alpha, cap) if correct_all > 0 else None
        fixed_trials = None if fixed_n is None else fixed_n * num_models * num_questions
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
                "all_right_and_decided": correct_all,
                "trials": float(trials.mean()),
                "trials_p90": float(np.percentile(trials, 90)),
                "lower_bound": lb,
                "x_lb": float(trials.mean() / lb) if math.isfinite(lb) else None,
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
        f"decided {row['decided']:.2f} trials {row['trials']:>9.0f} "
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
        "| trials | x LB | x fixed N |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ci = row["run_wrong_ci"]
        assert isinstance(ci, list)
        lines.append(
            f"| {row['campaign']} | {row['design']} | {fmt(row['run_wrong'], 3)} "
            f"[{ci[0]:.3f}, {ci[1]:.3f}] | {fmt(row['pair_wrong_max'], 3)} | "
            f"{fmt(row['decided'])} | {float(row['trials']):,.0f} | {fmt(row['x_lb'])} | "  # type: ignore[arg-type]
            f"{fmt(row['x_fixed'])} |"
        )
    return "\n".join(lines) + "\n"


def replay_truth(path: Path, key: str) -> tuple[Truth, np.ndarray]:
    with np.load(path) as data:
        outcomes = np.asarray(data[key], dtype=np.int64)
    num_categories = int(outcomes.max()) + 1
    counts = np.stack([(outcomes == k).sum(axis=2) for k in range(num_categories)], axis=2)
    probs = counts / counts.sum(axis=2, keepdims=True)
    weights = np.linspace(0, 1, num_categories)
    return Truth(probs, weights), outcomes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicates", type=int, default=300)
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
    parser.add_argument("--designs", default=None, help="comma-separated design labels")
    parser.add_argument("--replay", type=Path, default=None)
    parser.add_argument("--key", default="outcomes")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-sequential")
    args = parser.parse_args()
    designs = DESIGNS
    if args.designs:
        wanted = set(args.designs.split(","))
        designs = [d for d in DESIGNS if d.label in wanted]
    if args.replay is not None:
        truth, outcomes = replay_truth(args.replay, args.key)
        campaigns = {f"replay {args.replay.name}": truth}
        args.cap = min(args.cap, outcomes.shape[2])
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
        rows += evaluate(name, truth, designs, reps, args.cap, args.jobs)
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
