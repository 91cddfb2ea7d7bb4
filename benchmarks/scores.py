"""Scores and intervals under adaptive sampling: what a user reads beside the ranking.

    python benchmarks/scores.py --runs 200 --out runs/bench-scores
    python benchmarks/scores.py --replay ../shared/data/real/*.npz --runs 50

Two kinds of seeded campaigns run through :func:`adaptive_eval.forecast.simulate.simulate` (the
controller's loop with the real rules, stopping and allocators):

* **ranking** (the default policy): per campaign, the largest error of Bayes@N against the
  truth under the empirical-Bayes prior (the default) and the paper's uniform prior; the model
  pairs whose true scores differ by >= 0.02 that the score shown first (and Bayes@N) orders the
  wrong way; Kendall tau_b against the truth; coverage of the reported interval.
* **width** (``ci_width``, +-h at 95%, per model and all models at once): coverage of the
  reported interval (models x runs, and runs with every model covered; Wilson 95% intervals)
  and trials against the fixed N that reaches the width for every model (the fixed-sample
  interval of the unbiased score with the true per-question variances: z_{alpha/2} per model,
  z_{alpha/(2L)} for all at once) and against the Neyman oracle (each model alone, known
  variances, Neyman across questions).

Simulated cases include a true tie and models near 0 and 1. ``--replay`` serves each cell's
recorded outcomes in a shuffled order (no replacement) and judges against the full published
pool (``correct_total / count_total``), as ``benchmarks/sequential.py`` does.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.special import expit, logit
from scipy.stats import kendalltau, norm
from sequential import (
    MIMICS,
    REPO,
    Design,
    binary,
    categorical,
    policy_for,
    replay_truth,
    run_seeded,
    sparse,
)

from adaptive_eval.config.registry import stopping_rules
from adaptive_eval.decide.contracts import any_of
from adaptive_eval.forecast.simulate import SimPolicy, Truth
from adaptive_eval.stats import posterior_moments
from adaptive_eval.stats.intervals import IntervalDesign, score_intervals
from adaptive_eval.stats.posterior import dirichlet_multinomial_loglik
from adaptive_eval.stats.sequential import wilson_interval

CONFIDENCE = 0.95
DEFAULT = Design("group_sequential", "track_and_stop")
ORDER_GAP = 0.02
MIN_TRIALS = 2  # policy.min_trials_per_question's default, as SimPolicy's


def width_suite(questions: int) -> dict[str, Truth]:
    return {
        "tie (2 models)": binary([0.5, 0.5], questions, 6.0, 1),
        "near 0 and 1 (5 models)": binary([0.02, 0.06, 0.5, 0.94, 0.98], questions, 2.0, 21),
        "11 mimics, polarized (kappa 2)": binary(MIMICS, questions, 2.0, 5),
        "11 mimics, homogeneous (kappa 10)": binary(MIMICS, questions, 10.0, 6),
        "sparse successes near 0": sparse([0.06, 0.04, 0.02, 0.02, 0.01, 0.0], questions),
        "categorical rubric (5 models)": categorical([0.35, 0.42, 0.43, 0.55, 0.6], questions, 7),
    }


def width_policy(cap: int, round_trials: int, half_width: float, simultaneous: bool) -> SimPolicy:
    base = policy_for(DEFAULT, cap, round_trials)
    goal = stopping_rules.build(
        "ci_width", {"half_width": half_width, "simultaneous": simultaneous}
    )
    return SimPolicy(
        make_rules=base.make_rules,
        stopping=any_of(goal),
        allocator=base.allocator,
        rope=base.rope,
        futility=base.futility,
        max_trials=cap,
        round_trials=round_trials,
    )


def true_variance(truth: Truth) -> np.ndarray:
    mean = truth.probs @ truth.weights
    return np.asarray(np.maximum(truth.probs @ truth.weights**2 - mean**2, 0.0))


def fixed_n_for_width(truth: Truth, half_width: float, z: float) -> int:
    """The fixed N per question whose interval ``z se`` is within +-h for every model."""
    num_questions = truth.shape[1]
    per_model = true_variance(truth).sum(axis=1) / num_questions**2
    return max(1, math.ceil(float((z / half_width) ** 2 * per_model.max()) - 1e-9))


def neyman_oracle(truth: Truth, half_width: float, z: float) -> float:
    """Trials of the per-model Neyman allocation with known variances (fixed sample)."""
    sd = np.sqrt(true_variance(truth)).mean(axis=1)
    return float(((z / half_width) ** 2 * sd**2).sum())


def neyman_oracle_with_floor(truth: Truth, half_width: float, z: float, floor: int) -> float:
    """The same oracle with at least ``floor`` trials on every question (an unbiased estimate
    needs every question sampled; the campaign's ``min_trials_per_question``): per model,
    ``n_q = max(floor, lam sd_q)`` with ``lam`` the smallest that reaches the width."""
    num_questions = truth.shape[1]
    total = 0.0
    for variance in true_variance(truth):
        budget = (half_width / z) ** 2 * num_questions**2  # sum_q v_q / n_q must stay below
        sd = np.sqrt(variance)

        def excess(
            lam: float, sd: np.ndarray = sd, variance: np.ndarray = variance, budget: float = budget
        ) -> float:
            n = np.maximum(floor, lam * sd)
            return float((variance / n).sum()) - budget

        if excess(0.0) <= 0:
            total += floor * num_questions
            continue
        low, high = 0.0, 1.0
        while excess(high) > 0:
            high *= 2
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if excess(mid) > 0 else (low, mid)
        total += float(np.maximum(floor, high * sd).sum())
    return total


def _pairs_misordered(score: np.ndarray, truth: np.ndarray) -> tuple[int, int]:
    wrong = total = 0
    for i in range(len(truth)):
        for j in range(i + 1, len(truth)):
            if abs(truth[i] - truth[j]) >= ORDER_GAP:
                total += 1
                wrong += bool((score[i] - score[j]) * (truth[i] - truth[j]) < 0)
    return wrong, total


def _strength_on_grid(counts: np.ndarray, centre: np.ndarray) -> float:
    grid = np.geomspace(1e-2, 1e4, 121)
    loglik = [float(dirichlet_multinomial_loglik(counts, g * centre)) for g in grid]
    return float(grid[int(np.argmax(loglik))])


def mean_centred_prior(counts: np.ndarray) -> np.ndarray:
    """An alternative measured against the default: a Dirichlet per model centred on the mean of
    its per-question frequencies (not its pooled trials), strength by marginal likelihood."""
    n = counts.sum(axis=-1, keepdims=True)
    freq = np.where(n > 0, counts / np.maximum(n, 1), 0.0)
    seen = (n[..., 0] > 0).sum(axis=1, keepdims=True)
    centre = (freq.sum(axis=1) + 1 / counts.shape[-1]) / (seen + 1)
    return np.stack(
        [
            _strength_on_grid(counts[i], centre[i]) * centre[i] * np.ones(counts.shape[1:])
            for i in range(counts.shape[0])
        ]
    )


def cross_model_prior(counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The other alternative (binary rubrics): each cell's prior mean from an additive logit
    model over all models and questions (ability + difficulty, weighted least squares on the
    smoothed cell means); strength per model by marginal likelihood. A model's score then moves
    when other models join the campaign."""
    n = counts.sum(axis=-1)
    target = logit(np.clip(((counts @ weights) + 0.5) / (n + 1), 1e-3, 1 - 1e-3))
    ability, difficulty = np.zeros(counts.shape[0]), np.zeros(counts.shape[1])
    w = n + 1e-3
    for _ in range(50):
        ability = ((target - difficulty) * w).sum(axis=1) / w.sum(axis=1)
        difficulty = ((target - ability[:, None]) * w).sum(axis=0) / w.sum(axis=0)
        difficulty -= difficulty.mean()
    p = expit(ability[:, None] + difficulty[None, :])
    centre = np.stack([1 - p, p], axis=-1)
    return np.stack(
        [_strength_on_grid(counts[i], centre[i]) * centre[i] for i in range(counts.shape[0])]
    )


def run_ranking(
    args: tuple[Truth, int, int, int, int, np.ndarray | None],
) -> list[dict[str, float]]:
    truth, cap, round_trials, first, count, outcomes = args
    policy = policy_for(DEFAULT, cap, round_trials)
    scores = truth.scores
    design = IntervalDesign(CONFIDENCE)
    out = []
    for rep in range(first, first + count):
        result = run_seeded(truth, policy, rep, outcomes)
        uniform, _ = posterior_moments(1.0 + result.counts, truth.weights)
        counts = result.counts.astype(np.float64)
        mean_centred, _ = posterior_moments(mean_centred_prior(counts) + counts, truth.weights)
        cross = mean_centred
        if truth.shape[2] == 2:
            cross, _ = posterior_moments(
                cross_model_prior(counts, truth.weights) + counts, truth.weights
            )
        intervals = score_intervals(result.counts, 1.0 + result.counts, truth.weights, design)
        covered = (intervals.low <= scores) & (scores <= intervals.high)
        out.append(
            {
                "trials": result.total_trials,
                "bayes_error": float(np.abs(result.mu - scores).max()),
                "uniform_error": float(np.abs(uniform - scores).max()),
                "mean_centred_error": float(np.abs(mean_centred - scores).max()),
                "cross_error": float(np.abs(cross - scores).max()),
                "mean_centred_wrong": _pairs_misordered(mean_centred, scores)[0],
                "cross_wrong": _pairs_misordered(cross, scores)[0],
                "score_error": float(np.abs(result.estimate - scores).max()),
                "score_wrong": _pairs_misordered(result.estimate, scores)[0],
                "bayes_wrong": _pairs_misordered(result.mu, scores)[0],
                "uniform_wrong": _pairs_misordered(uniform, scores)[0],
                "pairs": _pairs_misordered(scores, scores)[1],
                "tau_score": float(kendalltau(result.estimate, scores).statistic),
                "tau_bayes": float(kendalltau(result.mu, scores).statistic),
                "tau_uniform": float(kendalltau(uniform, scores).statistic),
                "covered": int(covered.sum()),
                "models": len(scores),
                "half_width_median": float(np.median(intervals.half_width)),
            }
        )
    return out


def run_width(
    args: tuple[Truth, int, int, int, int, np.ndarray | None, float, bool],
) -> list[dict[str, float]]:
    truth, cap, round_trials, first, count, outcomes, half_width, simultaneous = args
    policy = width_policy(cap, round_trials, half_width, simultaneous)
    design = IntervalDesign(CONFIDENCE, half_width, simultaneous)
    scores = truth.scores
    out = []
    for rep in range(first, first + count):
        result = run_seeded(truth, policy, rep, outcomes)
        intervals = score_intervals(result.counts, 1.0 + result.counts, truth.weights, design)
        covered = (intervals.low <= scores) & (scores <= intervals.high)
        out.append(
            {
                "trials": result.total_trials,
                "covered": int(covered.sum()),
                "all_covered": int(covered.all()),
                "models": len(scores),
                "met": int((intervals.half_width <= half_width + 1e-12).sum()),
                "widest": float(intervals.half_width.max()),
                "bayes_error": float(np.abs(result.mu - scores).max()),
            }
        )
    return out


def _parallel(function, tasks: list[tuple], jobs: int) -> list[dict[str, float]]:  # type: ignore[type-arg,no-untyped-def]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(function, tasks))
    else:
        parts = [function(task) for task in tasks]
    return [row for part in parts for row in part]


def _chunks(runs: int, jobs: int) -> list[tuple[int, int]]:
    size = max(1, math.ceil(runs / (jobs * 4)))
    return [(first, min(size, runs - first)) for first in range(0, runs, size)]


def evaluate_ranking(
    name: str, truth: Truth, runs: int, cap: int, jobs: int, outcomes: np.ndarray | None
) -> dict[str, object]:
    started = time.perf_counter()
    num_models, num_questions, _ = truth.shape
    round_trials = num_models * num_questions * (1 if num_models < 5 else 2)
    tasks = [
        (truth, cap, round_trials, first, count, outcomes) for first, count in _chunks(runs, jobs)
    ]
    rows = _parallel(run_ranking, tasks, jobs)
    covered = int(sum(r["covered"] for r in rows))
    total = int(sum(r["models"] for r in rows))
    low, high = wilson_interval(covered, total)

    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in rows]))

    def most(key: str) -> float:
        return float(np.max([r[key] for r in rows]))

    row: dict[str, object] = {
        "campaign": name,
        "kind": "ranking",
        "runs": runs,
        "trials": mean("trials"),
        "bayes_error_max": most("bayes_error"),
        "bayes_error_mean": mean("bayes_error"),
        "uniform_error_max": most("uniform_error"),
        "score_error_max": most("score_error"),
        "mean_centred_error_max": most("mean_centred_error"),
        "cross_error_max": most("cross_error"),
        "mean_centred_wrong_mean": mean("mean_centred_wrong"),
        "cross_wrong_mean": mean("cross_wrong"),
        "pairs": int(rows[0]["pairs"]),
        "score_wrong_mean": mean("score_wrong"),
        "score_wrong_max": most("score_wrong"),
        "bayes_wrong_mean": mean("bayes_wrong"),
        "uniform_wrong_mean": mean("uniform_wrong"),
        "tau_score": mean("tau_score"),
        "tau_bayes": mean("tau_bayes"),
        "tau_uniform": mean("tau_uniform"),
        "coverage": covered / total,
        "coverage_ci": [low, high],
        "half_width_median": float(np.median([r["half_width_median"] for r in rows])),
        "seconds": time.perf_counter() - started,
    }
    print(
        f"{name:<40} ranking  Bayes@N err max {row['bayes_error_max']:.4f} "
        f"(uniform {row['uniform_error_max']:.4f}, score {row['score_error_max']:.4f}) "
        f"misordered score {row['score_wrong_mean']:.2f} (max {row['score_wrong_max']:.0f}) "
        f"Bayes@N {row['bayes_wrong_mean']:.2f} uniform {row['uniform_wrong_mean']:.1f} "
        f"of {row['pairs']}; alternatives: mean-centred {row['mean_centred_error_max']:.4f} "
        f"({row['mean_centred_wrong_mean']:.2f}), cross-model {row['cross_error_max']:.4f} "
        f"({row['cross_wrong_mean']:.2f}); tau {row['tau_score']:.3f}/{row['tau_bayes']:.3f}/"
        f"{row['tau_uniform']:.3f}; coverage {row['coverage']:.3f} [{low:.3f}, {high:.3f}] "
        f"(+-{row['half_width_median']:.4f}) ({row['seconds']:.0f}s)",
        flush=True,
    )
    return row


def evaluate_width(
    name: str,
    truth: Truth,
    runs: int,
    cap: int,
    jobs: int,
    outcomes: np.ndarray | None,
    half_width: float,
    simultaneous: bool,
) -> dict[str, object]:
    started = time.perf_counter()
    num_models, num_questions, _ = truth.shape
    round_trials = num_models * num_questions * (1 if num_models < 5 else 2)
    tasks = [
        (truth, cap, round_trials, first, count, outcomes, half_width, simultaneous)
        for first, count in _chunks(runs, jobs)
    ]
    rows = _parallel(run_width, tasks, jobs)
    alpha = 1 - CONFIDENCE
    z = float(norm.isf((alpha / num_models if simultaneous else alpha) / 2))
    fixed_n = fixed_n_for_width(truth, half_width, z)
    fixed_trials = fixed_n * num_models * num_questions
    oracle = neyman_oracle(truth, half_width, z)
    oracle_floor = neyman_oracle_with_floor(truth, half_width, z, MIN_TRIALS)
    covered = int(sum(r["covered"] for r in rows))
    total = int(sum(r["models"] for r in rows))
    all_covered = int(sum(r["all_covered"] for r in rows))
    low, high = wilson_interval(covered, total)
    run_low, run_high = wilson_interval(all_covered, runs)
    trials = float(np.mean([r["trials"] for r in rows]))
    row: dict[str, object] = {
        "campaign": name,
        "kind": "width all models" if simultaneous else "width each model",
        "half_width": half_width,
        "runs": runs,
        "coverage": covered / total,
        "coverage_ci": [low, high],
        "runs_all_covered": all_covered / runs,
        "runs_all_covered_ci": [run_low, run_high],
        "goal_met": float(np.mean([r["met"] / r["models"] for r in rows])),
        "trials": trials,
        "trials_max": float(np.max([r["trials"] for r in rows])),
        "fixed_n": fixed_n,
        "fixed_trials": fixed_trials,
        "x_fixed": trials / fixed_trials,
        "oracle": oracle,
        "x_oracle": trials / oracle,
        "oracle_floor": oracle_floor,
        "x_oracle_floor": trials / oracle_floor,
        "bayes_error_max": float(np.max([r["bayes_error"] for r in rows])),
        "seconds": time.perf_counter() - started,
    }
    print(
        f"{name:<40} {row['kind']:<17} +-{half_width:g} coverage {row['coverage']:.3f} "
        f"[{low:.3f}, {high:.3f}] all {row['runs_all_covered']:.3f} [{run_low:.3f}, "
        f"{run_high:.3f}] met {row['goal_met']:.3f} trials {trials:,.0f} fixed N = {fixed_n} "
        f"({fixed_trials:,}) x{row['x_fixed']:.2f}, oracle {oracle:,.0f} "
        f"x{row['x_oracle']:.2f}, with {MIN_TRIALS} per question {oracle_floor:,.0f} "
        f"x{row['x_oracle_floor']:.2f} ({row['seconds']:.0f}s)",
        flush=True,
    )
    return row


def markdown(rows: list[dict[str, object]]) -> str:
    width = [r for r in rows if str(r["kind"]).startswith("width")]
    ranking = [r for r in rows if r["kind"] == "ranking"]
    lines: list[str] = []
    if ranking:
        lines += [
            "| campaign | runs | Bayes@N max error: default (uniform / mean-centred / "
            "cross-model) | pairs >= 0.02 misordered by the score / Bayes@N / uniform Bayes@N | "
            "Kendall tau score / Bayes@N / uniform | interval coverage [95% CI] | median +- |",
            "|---|---:|---|---|---|---|---:|",
        ]
        for r in ranking:
            ci = r["coverage_ci"]
            assert isinstance(ci, list)
            lines.append(
                f"| {r['campaign']} | {r['runs']} | {r['bayes_error_max']:.4f} "
                f"({r['uniform_error_max']:.4f} / {r['mean_centred_error_max']:.4f} / "
                f"{r['cross_error_max']:.4f}) | {r['score_wrong_mean']:.2f} / "
                f"{r['bayes_wrong_mean']:.2f} / {r['uniform_wrong_mean']:.1f} of {r['pairs']} | "
                f"{r['tau_score']:.3f} / {r['tau_bayes']:.3f} / {r['tau_uniform']:.3f} | "
                f"{r['coverage']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | {r['half_width_median']:.4f} |"
            )
        lines.append("")
    if width:
        lines += [
            "| campaign | goal | runs | coverage, models x runs [95% CI] | runs all covered "
            "[95% CI] | goal met | trials | fixed N (trials) | x fixed N | x Neyman oracle "
            f"| x oracle with {MIN_TRIALS} per question |",
            "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in width:
            ci, rci = r["coverage_ci"], r["runs_all_covered_ci"]
            assert isinstance(ci, list) and isinstance(rci, list)
            lines.append(
                f"| {r['campaign']} | {r['kind']} +-{r['half_width']} | {r['runs']} | "
                f"{r['coverage']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | {r['runs_all_covered']:.3f} "
                f"[{rci[0]:.3f}, {rci[1]:.3f}] | {r['goal_met']:.3f} | "
                f"{float(r['trials']):,.0f} | {r['fixed_n']} ({int(r['fixed_trials']):,}) | "  # type: ignore[arg-type]
                f"{r['x_fixed']:.2f} | {r['x_oracle']:.2f} | {r['x_oracle_floor']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--cap", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--half-width", type=float, default=0.02, help="the width goal's +-h")
    parser.add_argument(
        "--kinds",
        default="ranking,each,all",
        help="which campaigns: ranking (default policy), each / all (width goal per model / "
        "for all models at once)",
    )
    parser.add_argument("--only", default=None, help="campaigns whose name contains one of these")
    parser.add_argument("--replay", type=Path, nargs="*", default=None)
    parser.add_argument("--key", default="outcomes")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-scores")
    args = parser.parse_args()
    kinds = set(args.kinds.split(","))
    campaigns: dict[str, tuple[Truth, np.ndarray | None]] = {}
    if args.replay is not None:
        for path in args.replay:
            truth, served = replay_truth(path, args.key)
            campaigns[f"replay {path.name}"] = (truth, served)
    else:
        campaigns = {name: (truth, None) for name, truth in width_suite(args.questions).items()}
    if args.only:
        wanted = args.only.split(",")
        campaigns = {k: v for k, v in campaigns.items() if any(w in k for w in wanted)}
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for name, (truth, outcomes) in campaigns.items():
        cap = args.cap if outcomes is None else min(args.cap, outcomes.shape[2])
        if "ranking" in kinds:
            rows.append(evaluate_ranking(name, truth, args.runs, cap, args.jobs, outcomes))
        for kind in ("each", "all"):
            if kind in kinds:
                rows.append(
                    evaluate_width(
                        name,
                        truth,
                        args.runs,
                        cap,
                        args.jobs,
                        outcomes,
                        args.half_width,
                        kind == "all",
                    )
                )
        (args.out / "scores.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "scores.md").write_text(markdown(rows))
    print(f"\nwrote {args.out / 'scores.md'}")


if __name__ == "__main__":
    main()
