"""Wrong-verdict rates of every verdict a user can rest on, measured through the shipped core.

    python benchmarks/verdicts.py --confidence 0.95 --replicates 2000 --out v95.json
    python benchmarks/verdicts.py --confidence 0.99 --replicates 4000 --out v99.json

Each campaign is built from a config exactly as ``run`` and ``compare`` build it
(:func:`adaptive_eval.campaign.build.build_campaign`,
:func:`adaptive_eval.campaign.checkpoint.compare_campaign`)
and run by :func:`adaptive_eval.forecast.paths.simulate_campaign`: the campaign's own decision
core
(the controller's, ``tests/test_core_parity.py``) with outcomes drawn from a known truth. Per
case, ``truths`` different per-question rate profiles are drawn (Beta around the stated mean,
the candidate shifted by exactly the stated difference on every question), and the seeded
campaigns cycle through them. Cases (binary rubric; ``M`` questions; cap 200 per question):

* ``gate at -margin``: ``compare --margin 0.05`` with the candidate exactly 0.05 worse: "pass"
  is wrong (the gate's guarantee: at most ``alpha = 1 - confidence``);
* ``gate, no margin, tie``: ``compare`` without a margin on an unchanged checkpoint: "better"
  or "worse" is wrong;
* ``equivalence at the rope``: ``compare`` without a margin, the candidate exactly ``rope``
  apart: "equivalent" is wrong;
* ``ranking tie``: a 2-model ranking campaign (``run``) on a true tie: any order is wrong.

Reported: the wrong rate with its Wilson 95% interval against ``alpha`` and ``1.3 alpha``, the
verdict shares and the mean trials per question of the candidate (or model 0).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.checkpoint import compare_campaign
from adaptive_eval.config.schema import load_config
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.simulate import Truth
from adaptive_eval.stats import sequential as seq

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "real"
CAP = 200
ROPE = 0.02
MARGIN = 0.05


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # gate / compare / ranking
    questions: int
    mean: float  # the incumbent's (model 1's) mean per-question rate
    difference: float  # candidate - incumbent, exactly, on every question
    wrong: tuple[str, ...]  # verdicts that are wrong for this truth
    #: A file of ../shared/data/real/: the incumbent's per-question rates are a real model's
    #: full published pool, the candidate's the same trials with successes dropped at random so
    #: that its score is exactly ``difference`` lower (``mean`` is then unused).
    real: str = ""


CASES = (
    Case("gate at -margin, M=30, rates ~0.6", "gate", 30, 0.6, -MARGIN, ("pass",)),
    Case("gate at -margin, M=10, rates ~0.6", "gate", 10, 0.6, -MARGIN, ("pass",)),
    Case("gate at -margin, M=30, rates ~0.93", "gate", 30, 0.93, -MARGIN, ("pass",)),
    Case("gate at -margin, M=30, rates ~0.08", "gate", 30, 0.08, -MARGIN, ("pass",)),
    Case(
        "gate at -margin, real AIME 2025 (thinned)",
        "gate",
        30,
        0.0,
        -MARGIN,
        ("pass",),
        "noises_highk_aime2025",
    ),
    Case(
        "gate at -margin, real HumanEval+ (thinned)",
        "gate",
        164,
        0.0,
        -MARGIN,
        ("pass",),
        "noises_highk_humaneval_plus",
    ),
    Case("gate, unchanged checkpoint, M=30", "gate", 30, 0.6, 0.0, ("fail",)),
    Case("gate, regression at -2 margin, M=30", "gate", 30, 0.6, -2 * MARGIN, ("pass",)),
    Case(
        "gate, unchanged, real AIME 2025", "gate", 30, 0.0, 0.0, ("fail",), "noises_highk_aime2025"
    ),
    Case("gate, no margin, tie, M=30", "compare", 30, 0.6, 0.0, ("better", "worse")),
    Case("gate, no margin, tie, M=10", "compare", 10, 0.6, 0.0, ("better", "worse")),
    Case("equivalence at the rope, M=30", "compare", 30, 0.6, ROPE, ("equivalent",)),
    Case("ranking tie, 2 models, M=30", "ranking", 30, 0.6, 0.0, ("a>b",)),
    Case("ranking tie, 2 models, M=10", "ranking", 10, 0.6, 0.0, ("a>b",)),
    Case("gate, no margin, tie, M=30, rates ~0.93", "compare", 30, 0.93, 0.0, ("better", "worse")),
    Case("equivalence at the rope, M=30, rates ~0.08", "compare", 30, 0.08, ROPE, ("equivalent",)),
    Case("ranking tie, 2 models, M=30, rates ~0.93", "ranking", 30, 0.93, 0.0, ("a>b",)),
)


def rates(case: Case, seed: int) -> np.ndarray:
    """(2, M) success rates: the candidate (row 0) = the incumbent + ``difference``."""
    if case.real:
        return real_rates(case, seed)
    rng = np.random.default_rng(seed)
    kappa = 8.0
    low, high = max(0.0, -case.difference), min(1.0, 1.0 - case.difference)
    incumbent = rng.beta(kappa * case.mean, kappa * (1 - case.mean), case.questions)
    incumbent = np.clip(incumbent, low + 0.005, high - 0.005)
    return np.stack([incumbent + case.difference, incumbent])


def real_rates(case: Case, seed: int) -> np.ndarray:
    """A real model's pooled per-question rates (models scoring 0.2-0.9, by ``seed``) and the
    same thinned to exactly ``difference`` below (a dropped success is a failure)."""
    with np.load(REAL / f"{case.real}.npz") as data:
        pool = data["correct_total"] / np.maximum(data["count_total"], 1)
    means = pool.mean(axis=1)
    eligible = np.flatnonzero((means >= 0.2) & (means <= 0.9))
    incumbent = pool[eligible[seed % len(eligible)]]
    candidate = incumbent * (1 + case.difference / incumbent.mean())
    return np.stack([candidate, incumbent])


#: ``--betting-prior``: how far the candidate moved since the prior's night (its prior score is
#: the true one less this), or ``swap``: the prior holds the other model's scores.
PRIORS = {"right": 0.01, "+0.1": 0.1, "-0.1": -0.1, "swap": 0.0}
PRIOR_SE = 0.01


def betting_prior(success: np.ndarray, prior: str) -> list[dict[str, Any]]:
    """``policy.pair_rules`` of a ``betting`` rule whose prior is the truth of ``success``
    (candidate, incumbent) moved as ``prior`` says (:data:`PRIORS`)."""
    earlier = success.mean(axis=1)
    earlier[0] -= PRIORS[prior]
    if prior == "swap":
        earlier = earlier[::-1]
    names = ("candidate", "incumbent")
    scores = {n: [float(x), PRIOR_SE] for n, x in zip(names, earlier, strict=True)}
    return [{"name": "betting", "scores": scores}]


def write_config(
    folder: Path,
    case: Case,
    confidence: float,
    success: np.ndarray,
    seed: int = 0,
    prior: str | None = None,
) -> Path:
    probs = np.stack([1 - success, success], axis=2)
    np.savez(folder / "truth.npz", probs=probs, models=np.array(["candidate", "incumbent"]))
    data = {
        "name": "verdicts",
        "seed": seed,
        "models": [{"backend": "simulated", "path": "truth.npz"}],
        "rubric": {"weights": [0, 1]},
        "policy": {"confidence": confidence, "rope": ROPE, "max_trials_per_question": CAP},
        "execution": {"dispatch": "inline"},
    }
    if prior is not None:
        data["policy"]["pair_rules"] = betting_prior(success, prior)
    path = folder / "verdicts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def one_case(
    args: tuple[Case, float, int, int, int, list[str], str | None],
) -> list[tuple[str, float]]:
    """(verdict, candidate's trials per question) of campaigns ``first .. first + count``."""
    case, confidence, truths, first, count, overrides, prior = args
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        configs = {}
        for rep in range(first, first + count):
            which = rep % truths
            if which not in configs:
                folder = Path(tmp) / str(which)
                folder.mkdir()
                success = rates(case, 1_000 + which)
                configs[which] = (
                    load_config(
                        write_config(folder, case, confidence, success, prior=prior), overrides
                    ),
                    Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0])),
                )
            config, truth = configs[which]
            out.append(run_one(case, config, truth, rep))
    return out


def run_one(case: Case, config: Any, truth: Truth, rep: int) -> tuple[str, float]:
    rng = np.random.default_rng(rep)
    if case.kind == "ranking":
        campaign = build_campaign(config)
        result = simulate_campaign(campaign.decision, truth, rng)
        (decision,) = result.decisions
        verdict = (
            "a>b"
            if decision.settled and decision.verdict.value != "equivalent"
            else (decision.verdict.value)
        )
        return verdict, float(result.trials[0].mean())
    margin = MARGIN if case.kind == "gate" else None
    campaign, judge = compare_campaign(build_campaign(config), "candidate", margin)
    result = simulate_campaign(campaign.decision, truth, rng)
    (found,) = judge(result.decisions)
    return found.decision, float(result.trials[0].mean())


#: compare's exit codes, as the gate's verdict.
EXIT_VERDICT = {0: "pass", 3: "fail", 4: "undecided"}


def through_cli(
    case: Case,
    confidence: float,
    truths: int,
    first: int,
    count: int,
    overrides: list[str],
    prior: str | None = None,
) -> list[str]:
    """The gate's verdicts as a user gets them: ``adaptive-eval compare CONFIG --candidate
    candidate --margin 0.05 --set execution.dispatch=inline``, one process per campaign (the
    campaign's seed is its number), the verdict read off the exit code."""
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(first, first + count):
            folder = Path(tmp) / str(rep)
            folder.mkdir()
            config = write_config(
                folder, case, confidence, rates(case, 1_000 + rep % truths), rep, prior
            )
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "adaptive_eval.command_line.cli",
                    "compare",
                    str(config),
                    "--candidate",
                    "candidate",
                    "--margin",
                    str(MARGIN),
                    "--out",
                    str(folder / "run"),
                    "--quiet",
                    "--set",
                    "execution.dispatch=inline",
                    *[arg for override in overrides for arg in ("--set", override)],
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode not in EXIT_VERDICT:
                raise RuntimeError(f"compare exited {done.returncode}: {done.stderr[-500:]}")
            found.append(EXIT_VERDICT[done.returncode])
    return found


def check_overrides(overrides: list[str], parser: argparse.ArgumentParser) -> None:
    """Refuse a bad ``--set`` once, in one line (rc 2), before any campaign runs: the config
    loader checks keys and values, building the campaign checks the plug-ins' parameters."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_config(Path(tmp), CASES[0], 0.95, rates(CASES[0], 0))
        try:
            build_campaign(load_config(path, overrides))
        except InputError as error:
            parser.error(f"--set: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--truths", type=int, default=20, help="rate profiles per case")
    parser.add_argument("--cases", default="", help="substring of case names, ';'-separated")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first campaign")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="a config override for every campaign, as `run --set` (repeatable), e.g. "
        "'policy.pair_rules=[{name: group_sequential, futility_growth: 0.65}]'",
    )
    parser.add_argument(
        "--betting-prior",
        choices=sorted(PRIORS),
        help="decide with the `betting` rule, its prior the truth with the candidate moved "
        "since (right: 0.01; +0.1 / -0.1: a wrong prior), or swap: the other model's scores",
    )
    parser.add_argument(
        "--cli",
        action="store_true",
        help="gate cases through the command line (slow: one process per campaign)",
    )
    args = parser.parse_args()
    wanted = [c for c in CASES if not args.cases or any(w in c.name for w in args.cases.split(";"))]
    if args.overrides:
        check_overrides(args.overrides, parser)
    alpha = 1 - args.confidence
    print(
        f"confidence {args.confidence} (alpha {alpha:.3g}), {args.replicates} campaigns per case, "
        f"{args.truths} rate profiles, cap {CAP}, margin {MARGIN}, rope {ROPE}"
        + "".join(f", --set {o}" for o in args.overrides)
        + (f", betting with prior {args.betting_prior}" if args.betting_prior else "")
        + "\n"
    )
    print(
        "| case | wrong | rate [Wilson 95%] | <= alpha | upper <= 1.3 alpha | shares | "
        "trials/question |"
    )
    print("|---|---:|---|:-:|:-:|---|---:|")
    rows = []
    chunk = max(1, args.replicates // (4 * args.jobs))
    with multiprocessing.Pool(args.jobs) as pool:
        for case in wanted:
            started = time.perf_counter()
            work = [
                (
                    case,
                    args.confidence,
                    args.truths,
                    args.first_seed + first,
                    min(chunk, args.replicates - first),
                    args.overrides,
                    args.betting_prior,
                )
                for first in range(0, args.replicates, chunk)
            ]
            if args.cli:
                if case.kind != "gate":
                    continue
                parts = pool.starmap(through_cli, work)
                found = [(verdict, float("nan")) for part in parts for verdict in part]
            else:
                found = [row for part in pool.map(one_case, work) for row in part]
            decisions = [d for d, _ in found]
            wrong = sum(d in case.wrong for d in decisions)
            low, high = seq.wilson_interval(wrong, len(decisions))
            shares = {d: decisions.count(d) / len(decisions) for d in sorted(set(decisions))}
            per_question = float(np.mean([n for _, n in found]))
            row = {
                **asdict(case),
                "confidence": args.confidence,
                "replicates": len(decisions),
                "wrong": wrong,
                "rate": wrong / len(decisions),
                "wilson": [low, high],
                "within_alpha": wrong / len(decisions) <= alpha and high <= 1.3 * alpha,
                "shares": shares,
                "trials_per_question": per_question,
                "seconds": time.perf_counter() - started,
            }
            rows.append(row)
            share_text = ", ".join(f"{k} {v:.3f}" for k, v in shares.items())
            print(
                f"| {case.name} | {wrong} | {row['rate']:.4f} [{low:.4f}, {high:.4f}] | "
                f"{'yes' if row['rate'] <= alpha else 'NO'} | "
                f"{'yes' if high <= 1.3 * alpha else 'NO'} | {share_text} | "
                f"{per_question:.1f} |",
                flush=True,
            )
    if args.out:
        args.out.write_text(
            json.dumps({"args": {**vars(args), "out": str(args.out)}, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
