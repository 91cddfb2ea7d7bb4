"""The project's decision rules vs peer sequential gates on identical 2-model outcome streams.

    /work/peers-venv/bin/python benchmarks/peers.py --runs 200 --out runs/bench-peers

The peers come from the package index and live in their own environment (``expectation`` needs
Python >= 3.12; ``confseq`` 0.0.11 ships only an sdist, built with ``libboost-dev`` and a
pybind11 newer than its pinned 2.6)::

    python3.12 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install evalsig savvi expectation numpy scipy pydantic structlog \\
        pyyaml tqdm
    apt-get install libboost-dev
    /work/peers-venv/bin/pip install "setuptools<70" wheel "pybind11>=2.11" cmake scikit-build \\
        ninja
    /work/peers-venv/bin/pip install --no-build-isolation confseq==0.0.11
    /work/peers-venv/bin/pip install -e . --no-deps

A peer whose package is missing is reported as unavailable and skipped.

Streams (the issue 17 harness): M questions, per-question difficulty
``p_q = 0.05 + 0.9 Beta(2, 2)`` for model A, ``p_B = expit(logit(p_q) + shift + N(0, 0.5^2))``
for the candidate B, with ``shift`` solved (brentq) so that ``mean(p_B) - mean(p_A)`` is the
target gap exactly. Run ``r`` draws its difficulties and its (2, M, cap) Bernoulli outcomes from
``default_rng(r)``; every method sees the same outcomes (trial t of each cell in order).

Methods, all at alpha = 0.05 two-sided:

* the project's rules through :func:`adaptive_eval.forecast.simulate.simulate` with
  :func:`adaptive_eval.forecast.simulate.replay_sampler` over those outcomes (designs of
  ``benchmarks/sequential.py``; round_trials = 2 M, so ``uniform`` with one trial per question
  per model per round is exactly the peers' stream);
* peer gates on the per-round paired difference ``Y_t = mean_q(x_B,q,t - x_A,q,t)`` in [-1, 1]
  (or ``(Y_t + 1) / 2`` in [0, 1] where a package wants [0, 1] data), one observation per round,
  stopping at the first round the confidence sequence excludes 0 (or the e-process reaches
  1 / alpha): the decision is the sign, undecided at the cap. See :data:`PEERS` for each one's
  function, parameters and validity.

Reported per gap and method: mean trials (both models, the cap for undecided runs), share of
runs decided, wrong-decision rate with a Wilson 95% interval. Wrong: any resolution on a true
tie; the wrong sign on a gap; for the project's rules also "equivalent" when |gap| >= rope.
Per gap, a Markdown table is printed; ``--out`` gets ``peers.json`` (config, rows; rewritten
after each gap) and ``peers.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from sequential import EPSILON, Design, policy_for

from adaptive_eval.base.types import Verdict
from adaptive_eval.forecast.simulate import Truth, replay_sampler, simulate, wrong_calls
from adaptive_eval.stats.sequential import wilson_interval

REPO = Path(__file__).resolve().parent.parent
ALPHA = 0.05
#: Rounds the tuned boundaries are sharpest at (the issue's "rho tuned for n = 100").
N_OPT = 100
#: Normal-mixture precision in samples for N_OPT (Howard et al. 2021, two-sided best rho).
RHO2 = N_OPT / (2 * math.log(1 / ALPHA) + math.log(1 + 2 * math.log(1 / ALPHA)))
#: A design guess of the per-round sd of (Y + 1) / 2 (about 0.059 in this harness), fixed
#: before any data: intrinsic time at N_OPT for the variance-scaled boundaries.
V_OPT = N_OPT * 0.06**2
LOCKSTEP = (("trials_per_round", 1),)
DESIGNS = {
    "group_sequential+track_and_stop": Design("group_sequential", "track_and_stop"),
    "group_sequential(horizons=3)+track_and_stop": Design(
        "group_sequential", "track_and_stop", (("horizons", 3),)
    ),
    "anytime+track_and_stop": Design("anytime", "track_and_stop"),
    "group_sequential+uniform(1)": Design("group_sequential", "uniform", alloc_params=LOCKSTEP),
    "group_sequential(horizons=3)+uniform(1)": Design(
        "group_sequential", "uniform", (("horizons", 3),), LOCKSTEP
    ),
    "anytime+uniform(1)": Design("anytime", "uniform", alloc_params=LOCKSTEP),
}

#: (rounds used, sign of the decision: +1 B > A, -1 A > B, 0 undecided at the cap).
Gate = Callable[[np.ndarray], tuple[int, int]]


def first_exclusion(lower: np.ndarray, upper: np.ndarray, null: float) -> tuple[int, int]:
    """First round whose interval excludes ``null``, and the side it falls on."""
    hits = np.flatnonzero((lower > null) | (upper < null))
    if hits.size == 0:
        return len(lower), 0
    t = int(hits[0])
    return t + 1, 1 if lower[t] > null else -1


def evalsig_gate(y: np.ndarray, min_n: int) -> tuple[int, int]:
    from evalsig.inference.sequential import sequential_gate

    out = sequential_gate(y, alpha=ALPHA, alternative="two-sided", rho=math.sqrt(RHO2), min_n=min_n)
    return (out.n_pairs, int(np.sign(out.delta))) if out.stopped else (len(y), 0)


def savvi_gate(y: np.ndarray) -> tuple[int, int]:
    from savvi.linear_regression import LinearRegression

    test = LinearRegression(ALPHA, 1, phi=RHO2)  # intercept only: the mean of Y
    with np.errstate(all="ignore"):
        for t, value in enumerate(y, 1):
            test.update(np.array([value, 1.0]))
            test.infer()
            low, high = test.conf_int[0]
            if low > 0 or high < 0:
                return t, 1 if low > 0 else -1
    return len(y), 0


def _numpy2_confseq() -> None:
    """confseq 0.0.11 names ``np.float_`` (removed in NumPy 2) in its type annotations only."""
    if not hasattr(np, "float_"):
        np.float_ = np.float64  # type: ignore[attr-defined]


def confseq_betting_gate(y: np.ndarray) -> tuple[int, int]:
    """The hedged capital process at m = 1/2: max(K+/2, K-/2) >= 1/alpha."""
    _numpy2_confseq()
    from confseq.betting import betting_mart
    from confseq.betting_strategies import lambda_predmix_eb

    x = (y + 1) / 2

    def bets(data: np.ndarray, _m: float) -> np.ndarray:
        return np.asarray(lambda_predmix_eb(data, alpha=ALPHA / 2))

    up = betting_mart(x, 0.5, alpha=ALPHA, lambdas_fn_positive=bets, theta=1)
    down = betting_mart(x, 0.5, alpha=ALPHA, lambdas_fn_negative=bets, theta=0)
    threshold = 2 / ALPHA
    return first_exclusion((up >= threshold).astype(float), 1.0 - (down >= threshold), 0.5)


def confseq_predmix_gate(y: np.ndarray) -> tuple[int, int]:
    _numpy2_confseq()
    from confseq.predmix import predmix_empbern_twosided_cs

    lower, upper = predmix_empbern_twosided_cs((y + 1) / 2, alpha=ALPHA)
    return first_exclusion(np.asarray(lower), np.asarray(upper), 0.5)


def _conjmix_lower(x: np.ndarray) -> np.ndarray:
    """``conjmix_empbern_lower_cs(x, V_OPT, alpha=ALPHA)``. The package raises where the
    empirical variance process V_t is still 0 (a prefix of rounds with x_t = its running mean,
    where no interval can exclude the null); those rounds get no bound here."""
    from confseq.boundaries import gamma_exponential_mixture_bound
    from confseq.conjmix_bounded import conjmix_empbern_lower_cs

    try:
        return np.asarray(conjmix_empbern_lower_cs(x, V_OPT, alpha=ALPHA))
    except RuntimeError:
        t = np.arange(1, len(x) + 1)
        mean = np.cumsum(x) / t
        variance = np.cumsum((x - np.append(0.5, mean[:-1])) ** 2)
        bound = np.full(len(x), np.inf)
        live = variance > 0
        bound[live] = gamma_exponential_mixture_bound(
            variance[live], alpha=ALPHA / 2, v_opt=V_OPT, c=1, alpha_opt=ALPHA / 2
        )
        return np.asarray(np.maximum(mean - bound / t, 0))


def confseq_conjmix_gate(y: np.ndarray) -> tuple[int, int]:
    """Each side at alpha / 2 (``conjmix_empbern_lower_cs`` halves its alpha itself; the
    package's ``conjmix_empbern_twosided_cs`` halves it twice, a CS at level 1 - alpha / 2)."""
    _numpy2_confseq()
    x = (y + 1) / 2
    return first_exclusion(_conjmix_lower(x), 1 - _conjmix_lower(1 - x), 0.5)


def expectation_etest_gate(y: np.ndarray) -> tuple[int, int]:
    from expectation.seqtest.sequential_e_testing import SequentialTesting

    test = SequentialTesting("mean", 0.0, "two_sided")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for t, value in enumerate(y, 1):
            if test.update(np.array([value])).reject_null:
                return t, int(np.sign(test.data_sum))
    return len(y), 0


def expectation_cs_gate(y: np.ndarray) -> tuple[int, int]:
    """A fresh sequence fed rounds 1..t at each t (one batch update is the same state as t
    single updates). The package raises at zero intrinsic time (all values so far equal); such a
    round cannot exclude the null, and a failed update would drop its data, hence the refeed."""
    from expectation.confseq.confidenceconfig import ConfidenceSequenceConfig
    from expectation.confseq.confidencesequence import ConfidenceSequence

    config = ConfidenceSequenceConfig(alpha=ALPHA, v_opt=V_OPT, c=1.0)
    x = (y + 1) / 2
    with np.errstate(all="ignore"):
        for t in range(1, len(x) + 1):
            try:
                out = ConfidenceSequence(config=config).update(x[:t])
            except RuntimeError:
                continue
            if out.lower > 0.5 or out.upper < 0.5:
                return t, 1 if out.lower > 0.5 else -1
    return len(y), 0


def _evalsig_min2(y: np.ndarray) -> tuple[int, int]:
    return evalsig_gate(y, 2)


def _evalsig_min30(y: np.ndarray) -> tuple[int, int]:
    return evalsig_gate(y, 30)


@dataclass(frozen=True)
class Peer:
    package: str
    call: str
    validity: str
    gate: Gate


PEERS = {
    "evalsig acs(min_n=2)": Peer(
        "evalsig",
        f"evalsig.inference.sequential.sequential_gate(Y, alpha=0.05, alternative='two-sided', "
        f"rho={math.sqrt(RHO2):.3f} (two-sided normal mixture best rho for n={N_OPT}), min_n=2)",
        "asymptotic: Howard et al. normal-mixture boundary with the sample sd plugged in",
        _evalsig_min2,
    ),
    "evalsig acs(min_n=30)": Peer(
        "evalsig",
        f"same, min_n=30 (the package default warm-up), rho={math.sqrt(RHO2):.3f}",
        "asymptotic (plug-in sd)",
        _evalsig_min30,
    ),
    "savvi t-test": Peer(
        "savvi",
        f"savvi.linear_regression.LinearRegression(alpha=0.05, p=1, phi={RHO2:.2f}) fed "
        "[Y_t, 1] (intercept-only regression = mean of Y), update + infer per round, stop when "
        "the running-intersection conf_int excludes 0",
        "exact for i.i.d. Gaussian Y (Lindon et al. 2024 anytime-valid t-test); approximate "
        "for bounded non-Gaussian Y",
        savvi_gate,
    ),
    "confseq betting": Peer(
        "confseq",
        "confseq.betting.betting_mart((Y+1)/2, m=0.5, theta=1 and theta=0, bets "
        "lambda_predmix_eb(alpha=0.025), trunc_scale=0.5, m_trunc): hedged capital "
        "max(K+, K-)/2 >= 1/alpha (hedged_cs's defaults, tested at the null directly)",
        "exact (nonasymptotic; Waudby-Smith & Ramdas 2024) for [0,1]-bounded data",
        confseq_betting_gate,
    ),
    "confseq predmix-EB": Peer(
        "confseq",
        "confseq.predmix.predmix_empbern_twosided_cs((Y+1)/2, alpha=0.05) (truncation 0.5)",
        "exact (predictable-mixture empirical Bernstein, Waudby-Smith & Ramdas 2024)",
        confseq_predmix_gate,
    ),
    "confseq conjmix-EB": Peer(
        "confseq",
        f"confseq.conjmix_bounded.conjmix_empbern_lower_cs(x, v_opt={V_OPT:.2f}, alpha=0.05) "
        "for the lower side and 1 - the same on 1 - x for the upper (alpha/2 each)",
        "exact (gamma-exponential conjugate mixture, Howard et al. 2021 Thm 4)",
        confseq_conjmix_gate,
    ),
    "expectation e-test": Peer(
        "expectation",
        "expectation.seqtest.sequential_e_testing.SequentialTesting('mean', null_value=0.0, "
        "alternative='two_sided') defaults (normal mixture, empirical variance), update(Y_t) "
        "per round, stop at reject_null",
        "heuristic: plug-in variance and a mixture re-tuned from the data each round (not an "
        "e-process under the null in general)",
        expectation_etest_gate,
    ),
    "expectation CS": Peer(
        "expectation",
        f"expectation.confseq.confidencesequence.ConfidenceSequence(ConfidenceSequenceConfig("
        f"alpha=0.05, v_opt={V_OPT:.2f}, c=1.0)) on (Y+1)/2, update per round",
        "asymptotic at best: gamma-exponential boundary on intrinsic time n * sample variance "
        "(not the empirical-Bernstein V_t)",
        expectation_cs_gate,
    ),
}


def make_truth(gap: float, questions: int, rng: np.random.Generator) -> Truth:
    base = 0.05 + 0.9 * rng.beta(2.0, 2.0, questions)
    noise = rng.normal(0.0, 0.5, questions)

    def excess(shift: float) -> float:
        return float(expit(logit(base) + shift + noise).mean() - base.mean() - gap)

    shift = brentq(excess, -15, 15, xtol=1e-14)
    success = np.stack([base, expit(logit(base) + shift + noise)])
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]), ("A", "B"))


def make_stream(gap: float, run: int, questions: int, cap: int) -> tuple[Truth, np.ndarray]:
    """Run ``run``'s truth and its (2, M, cap) outcomes (seeded by the run index alone)."""
    rng = np.random.default_rng(run)
    truth = make_truth(gap, questions, rng)
    draws = rng.random((2, questions, cap)) < truth.probs[:, :, 1, None]
    return truth, draws.astype(np.int64)


def run_design(design: Design, truth: Truth, outcomes: np.ndarray) -> dict[str, object]:
    num_questions, cap = outcomes.shape[1:]
    policy = policy_for(design, cap, 2 * num_questions)
    result = simulate(truth, policy, np.random.default_rng(0), replay_sampler(outcomes, 2))
    (decision,) = result.decisions
    verdict = decision.verdict
    if verdict in (Verdict.A_GT_B, Verdict.B_GT_A):
        b_wins = (verdict is Verdict.A_GT_B) == (decision.a == 1)
        call = "B>A" if b_wins else "A>B"
    else:
        call = verdict.value
    wrong = any(wrong_calls(result.decisions, truth.scores, EPSILON))
    return {"trials": result.total_trials, "call": call, "wrong": wrong}


def run_peer(gate: Gate, truth: Truth, outcomes: np.ndarray) -> dict[str, object]:
    y = (outcomes[1] - outcomes[0]).mean(axis=0)
    rounds, sign = gate(y.astype(np.float64))
    gap = float(truth.scores[1] - truth.scores[0])
    true_sign = 1 if gap > 1e-12 else -1 if gap < -1e-12 else 0
    return {
        "trials": 2 * outcomes.shape[1] * rounds,
        "call": {1: "B>A", -1: "A>B", 0: "undecided"}[sign],
        "wrong": sign != 0 and sign != true_sign,
    }


def run_chunk(args: tuple[float, list[int], int, int, list[str]]) -> list[dict[str, object]]:
    """Every method on runs ``runs`` of one gap: one record per (run, method)."""
    gap, runs, questions, cap, methods = args
    records = []
    for run in runs:
        truth, outcomes = make_stream(gap, run, questions, cap)
        for method in methods:
            started = time.perf_counter()
            if method in DESIGNS:
                record = run_design(DESIGNS[method], truth, outcomes)
            else:
                record = run_peer(PEERS[method].gate, truth, outcomes)
            record |= {"method": method, "run": run, "seconds": time.perf_counter() - started}
            records.append(record)
    return records


def summarize(gap: float, method: str, records: list[dict[str, object]]) -> dict[str, object]:
    mine = [r for r in records if r["method"] == method]
    runs = len(mine)
    trials = np.array([float(r["trials"]) for r in mine])  # type: ignore[arg-type]
    calls = [str(r["call"]) for r in mine]
    wrong = sum(bool(r["wrong"]) for r in mine)
    low, high = wilson_interval(wrong, runs)
    peer = PEERS.get(method)
    return {
        "gap": gap,
        "method": method,
        "kind": "project" if peer is None else "peer",
        "validity": "project rule" if peer is None else peer.validity,
        "runs": runs,
        "trials": float(trials.mean()),
        "trials_p90": float(np.percentile(trials, 90)),
        "decided": sum(c != "undecided" for c in calls) / runs,
        "resolved": sum(c in ("A>B", "B>A") for c in calls) / runs,
        "equivalent": calls.count("equivalent") / runs,
        "wrong": wrong / runs,
        "wrong_ci": [low, high],
        "seconds": float(sum(float(r["seconds"]) for r in mine)),  # type: ignore[arg-type]
    }


def markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| gap | method | mean trials | decided | (equivalent) | wrong [95% CI] | s/run |",
        "|---:|---|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        low, high = row["wrong_ci"]  # type: ignore[misc]
        lines.append(
            f"| {row['gap']:+.2f} | {row['method']} | {row['trials']:,.0f} | "
            f"{row['decided']:.3f} | {row['equivalent']:.3f} | {row['wrong']:.3f} "
            f"[{low:.3f}, {high:.3f}] | {float(row['seconds']) / int(row['runs']):.3f} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines) + "\n"


def available_methods(only: str | None) -> list[str]:
    methods = list(DESIGNS)
    for name, peer in PEERS.items():
        if importlib.util.find_spec(peer.package) is None:
            print(f"# {name}: package {peer.package!r} is not installed; skipped", flush=True)
        else:
            methods.append(name)
    if only:
        wanted = only.split(",")
        methods = [m for m in methods if any(w in m for w in wanted)]
    return methods


def evaluate(gap: float, args: argparse.Namespace, methods: list[str]) -> list[dict[str, object]]:
    runs = list(range(args.runs))
    size = max(1, math.ceil(len(runs) / (args.jobs * 4)))
    tasks = [
        (gap, runs[i : i + size], args.questions, args.cap, methods)
        for i in range(0, len(runs), size)
    ]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            parts = list(pool.map(run_chunk, tasks))
    else:
        parts = [run_chunk(task) for task in tasks]
    records = [r for part in parts for r in part]
    return [summarize(gap, method, records) for method in methods]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--gaps", default="0.05,0.10,-0.03,0,0.02", help="B minus A, comma list")
    parser.add_argument("--cap", type=int, default=400, help="max trials per question")
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", default=None, help="methods whose name contains one of (a,b)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-peers")
    args = parser.parse_args()
    methods = available_methods(args.only)
    args.out.mkdir(parents=True, exist_ok=True)
    config = {
        "alpha": ALPHA,
        "rope": EPSILON,
        "runs": args.runs,
        "questions": args.questions,
        "cap": args.cap,
        "peers": {name: vars(peer) | {"gate": peer.gate.__name__} for name, peer in PEERS.items()},
        "designs": {name: DESIGNS[name].label for name in DESIGNS},
    }
    rows: list[dict[str, object]] = []
    for gap in (float(g) for g in args.gaps.split(",")):
        started = time.perf_counter()
        rows += evaluate(gap, args, methods)
        print(f"# gap {gap:+.2f}: {time.perf_counter() - started:.0f}s", flush=True)
        print(markdown([r for r in rows if r["gap"] == gap]), flush=True)
        (args.out / "peers.json").write_text(
            json.dumps({"config": config, "rows": rows}, indent=2) + "\n"
        )
    (args.out / "peers.md").write_text(markdown(rows))


if __name__ == "__main__":
    main()
