"""What a prior buys the ``betting`` pair rule, and what a wrong one costs, against the default.

    python benchmarks/betting.py --replicates 200 --out runs/bench-betting

A nightly candidate whose weights changed a little: last night's scores (each model's true
score, the candidate's moved by ``--moved``, with the standard error a night reaches, 0.01) are
the prior of tonight's ``betting`` rule; tonight's truth is the stated one. Per case and design,
``replicates`` seeded campaigns on the same truths (the candidate is model 0) through
:func:`adaptive_eval.forecast.simulate.simulate` (the shipped decision core); reported: the share
of campaigns with a wrong decided pair (Wilson 95% upper bound), the share with every pair
settled, mean trials, and trials over the cold default's (``group_sequential``).

Designs: ``group_sequential`` (the default, cold), ``betting`` cold (no prior), ``betting``
with a right prior (candidate moved 0.01 since), with wrong ones (moved +0.1 and -0.1: the
prior says the candidate is 0.1 better or worse than it is) and with another model's scores
(the prior's names swapped).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.decide.contracts import any_of
from adaptive_eval.forecast.simulate import SimPolicy, Truth, simulate, wrong_calls
from adaptive_eval.stats import sequential as seq

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# benchmarks/sequential.py's scenario builder (imported by name, not followed by mypy).
binary: Callable[[list[float], int, float, int], Truth] = importlib.import_module(
    "sequential"
).binary
EPSILON = 0.02
NIGHT_SE = 0.01


def cases(questions: int) -> dict[str, Truth]:
    return {
        "2 models, gap 0.10": binary([0.55, 0.45], questions, 6.0, 10),
        "2 models, gap 0.05": binary([0.525, 0.475], questions, 6.0, 9),
        "2 models, gap 0.03": binary([0.515, 0.485], questions, 6.0, 13),
        "2 models, tie": binary([0.5, 0.5], questions, 6.0, 1),
        "candidate vs 2 incumbents": binary([0.62, 0.605, 0.59], questions, 6.0, 4),
        "6 models, gaps 3x rope": binary([0.3 + 0.06 * i for i in range(6)], questions, 4.0, 11),
    }


def designs(truth: Truth, moved: float) -> dict[str, dict[str, Any] | None]:
    names = [f"m{i}" for i in range(truth.shape[0])]
    scores = truth.scores

    def prior(shift: float, swap: bool = False) -> dict[str, Any]:
        earlier = scores.copy()
        earlier[0] -= shift  # last night's candidate, ``shift`` below tonight's
        if swap:
            earlier = earlier[::-1]
        return {"scores": {n: [float(s), NIGHT_SE] for n, s in zip(names, earlier, strict=True)}}

    return {
        "group_sequential (default, cold)": None,
        "betting, cold": {},
        f"betting, prior moved {moved:g}": prior(moved),
        "betting, wrong prior +0.1": prior(-0.1),
        "betting, wrong prior -0.1": prior(0.1),
        "betting, another model's prior": prior(0.0, swap=True),
    }


def policy(truth: Truth, params: dict[str, Any] | None, cap: int, confidence: float) -> SimPolicy:
    """As ``benchmarks/sequential.py`` runs a design: one trial per cell a round (two from 5
    models)."""
    num_models, num_questions, _ = truth.shape

    def make() -> tuple[Any, ...]:
        if params is None:
            return (pair_rules.build("group_sequential"),)
        return (pair_rules.build("betting", params),)

    make_rules: Callable[[], tuple[Any, ...]] = make
    return SimPolicy(
        make_rules=make_rules,
        stopping=any_of(stopping_rules.build("pairs_settled")),
        allocator=allocators.build("track_and_stop"),
        confidence=confidence,
        rope=EPSILON,
        max_trials=cap,
        round_trials=num_models * num_questions * (1 if num_models < 5 else 2),
    )


def one(job: tuple[Truth, dict[str, Any] | None, int, float, int]) -> tuple[bool, bool, int]:
    truth, params, cap, confidence, seed = job
    result = simulate(truth, policy(truth, params, cap, confidence), np.random.default_rng(seed))
    wrong = any(wrong_calls(result.decisions, truth.scores, EPSILON))
    settled = all(d.settled for d in result.decisions)
    return wrong, settled, result.total_trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--cap", type=int, default=400)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--moved", type=float, default=0.01)
    parser.add_argument("--only", default="", help="substring of case names, ','-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-betting")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    wanted = [w for w in args.only.split(",") if w]
    with ProcessPoolExecutor(args.jobs) as pool:
        for case, truth in cases(args.questions).items():
            if wanted and not any(w in case for w in wanted):
                continue
            cold = None
            for label, params in designs(truth, args.moved).items():
                started = time.monotonic()
                jobs = [
                    (truth, params, args.cap, args.confidence, s) for s in range(args.replicates)
                ]
                found = list(pool.map(one, jobs, chunksize=8))
                wrong = sum(w for w, _, _ in found)
                trials = float(np.mean([t for _, _, t in found]))
                cold = trials if cold is None else cold
                row = {
                    "case": case,
                    "design": label,
                    "wrong": wrong / len(found),
                    "wrong_upper": seq.wilson_interval(wrong, len(found))[1],
                    "settled": float(np.mean([s for _, s, _ in found])),
                    "trials": trials,
                    "x_default": trials / cold,
                }
                rows.append(row)
                print(
                    f"{case:<28} {label:<34} wrong {row['wrong']:.3f} (<= {row['wrong_upper']:.3f})"
                    f" settled {row['settled']:.2f} trials {trials:>8.0f} x{row['x_default']:.2f}"
                    f" ({time.monotonic() - started:.0f}s)",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "betting.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
