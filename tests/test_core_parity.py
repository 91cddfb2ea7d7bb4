"""The controller and the benchmarks' simulator are one decision loop.

Every error rate the project publishes is measured with
:func:`adaptive_eval.forecast.simulate.simulate`;
users run :class:`adaptive_eval.control.controller.Controller` (store, dispatch, events, resume).
Both
call the same :class:`adaptive_eval.decide.core.DecisionCore`. Here both are driven on the same
seeded outcomes, for every campaign of ``benchmarks/sequential.py`` (the controller through a
replay backend and its store, the simulator through a replay sampler), and must agree round by
round: the same plans, the same decisions and the same stop.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import run_inline, write_config

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.config.schema import load_config
from adaptive_eval.decide.contracts import any_of
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.simulate import (
    SimPolicy,
    Truth,
    recorded_costing,
    replay_sampler,
    simulate,
)
from adaptive_eval.store import TrialStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import sequential as bench

QUESTIONS = 12
CAP = 60
ROUND_TRIALS = 256


def _outcomes(truth: Truth, seed: int) -> np.ndarray:
    """(L, M, CAP) categories drawn from the truth's probabilities."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(truth.probs, axis=2)[:, :, None, :]
    draws = rng.random((*truth.probs.shape[:2], CAP, 1))
    return np.asarray((draws > cumulative).sum(axis=3), dtype=np.int64)


def _config(tmp_path: Path, truth: Truth, outcomes: np.ndarray, **policy: Any) -> Path:
    names = [f"m{i}" for i in range(truth.shape[0])]
    np.savez(tmp_path / "r.npz", outcomes=outcomes, models=np.array(names))
    data = {
        "name": "parity",
        "seed": 0,
        "models": [{"backend": "replay", "path": "r.npz", "workers": 1}],
        "rubric": {"weights": [float(w) for w in truth.weights]},
        "policy": {
            "confidence": 0.95,
            "rope": bench.EPSILON,
            "futility": bench.DEFAULT_FUTILITY,
            "min_trials_per_question": 2,
            "max_trials_per_question": CAP,
            "allocation": "track_and_stop",
            "round_trials": ROUND_TRIALS,
            **policy,
        },
        "baseline": {"fixed_n": CAP},
        "execution": {"dispatch": "inline", "batch_size": 50},
    }
    return write_config(tmp_path / "parity.yaml", data)


def _sim_run(truth: Truth, outcomes: np.ndarray, budget: int | None = None) -> Any:
    stopping = [stopping_rules.build("pairs_settled")]
    if budget is not None:
        stopping.append(stopping_rules.build("budget", {"trials": budget}))
    sim_policy = SimPolicy(
        make_rules=lambda: (pair_rules.build("group_sequential"),),
        stopping=any_of(*stopping),
        allocator=allocators.build("track_and_stop"),
        rope=bench.EPSILON,
        futility=bench.DEFAULT_FUTILITY,
        max_trials=CAP,
        round_trials=ROUND_TRIALS,
        trial_budget=budget,
    )
    sampler = replay_sampler(outcomes, truth.shape[2])
    return simulate(truth, sim_policy, np.random.default_rng(0), sampler)


def _key(decisions: Any) -> list[tuple[int, int, str, int | None]]:
    return [(d.a, d.b, d.verdict.value, d.look) for d in decisions]


@pytest.mark.parametrize("name", sorted(bench.suite(QUESTIONS)))
def test_controller_and_simulator_agree_round_by_round(tmp_path: Path, name: str) -> None:
    truth = bench.suite(QUESTIONS)[name]
    outcomes = _outcomes(truth, seed=len(name))
    config = _config(tmp_path, truth, outcomes)
    # Batches come back in a shuffled order: arrival order must not matter either.
    controller = run_inline(load_config(config), tmp_path / "run", shuffle_seed=7)
    simulated = _sim_run(truth, outcomes)

    store = TrialStore(tmp_path / "run", readonly=True)
    try:
        recorded_plans = store.rounds()
    finally:
        store.close()
    assert len(recorded_plans) == len(simulated.plans) == simulated.rounds
    for index, (ran, sim) in enumerate(zip(recorded_plans, simulated.plans, strict=True)):
        assert np.array_equal(ran, sim), f"round {index}: the plans differ"
    assert _key(controller.decisions) == _key(simulated.decisions)
    assert controller.stop is not None and simulated.stop is not None
    assert controller.stop.reason is simulated.stop.reason
    assert np.array_equal(controller.state.trials, simulated.trials)
    assert np.array_equal(controller.state.counts, simulated.counts)


def test_a_trial_budget_stops_both_loops_alike(tmp_path: Path) -> None:
    """The budget caps plans in the core, so the simulator applies it too (it once did not)."""
    truth = bench.suite(QUESTIONS)["11 mimics, polarized (kappa 2)"]
    outcomes = _outcomes(truth, seed=3)
    config = _config(tmp_path, truth, outcomes)
    text = config.read_text() + "budget:\n  trials: 3000\n"
    config.write_text(text)
    controller = run_inline(load_config(config), tmp_path / "run")
    simulated = _sim_run(truth, outcomes, budget=3000)
    assert int(controller.state.trials.sum()) == int(simulated.trials.sum()) <= 3000
    assert _key(controller.decisions) == _key(simulated.decisions)
    assert controller.stop is not None and simulated.stop is not None
    assert controller.stop.reason is simulated.stop.reason


def test_the_docs_describe_the_design_the_rules_use() -> None:
    """docs/sequential.md carries the text derived from the design the boundaries are built
    from: a changed default changes the fingerprint and fails this until the page follows."""
    from adaptive_eval.campaign.build import DECISION_RULES, default_design, describe_design

    page = (Path(__file__).resolve().parent.parent / "docs" / "sequential.md").read_text()
    block = page.split(
        "<!-- design: generated by adaptive_eval.campaign.build.describe_design() -->"
    )
    assert len(block) == 2, "docs/sequential.md lost its design block"
    assert block[1].split("<!-- /design -->")[0].strip() == describe_design()
    assert default_design() in DECISION_RULES


def test_a_cost_aware_allocation_weighs_the_same_costs_in_both_loops(tmp_path: Path) -> None:
    """``track_and_stop(cost=tokens)`` reads each cell's mean tokens from the run's ledger; the
    simulator's rounds priced by :func:`recorded_costing` give it the same costs, so both loops
    plan alike. Without the pricing the simulator plans as if trials cost the same (what the
    forecast once did), which differs: the costs change the plans."""
    truth = bench.suite(QUESTIONS)["12 models, gaps 3x rope"]
    outcomes = _outcomes(truth, seed=11)
    rng = np.random.default_rng(4)
    level = np.where(np.arange(truth.shape[0]) % 3 == 0, 3000.0, 300.0)
    tokens = np.rint(level[:, None, None] * rng.gamma(4.0, 0.25, outcomes.shape)).astype(np.int64)
    config = _config(
        tmp_path, truth, outcomes, allocation={"name": "track_and_stop", "cost": "tokens"}
    )
    np.savez(
        tmp_path / "r.npz",
        outcomes=outcomes,
        tokens=tokens,
        models=np.array([f"m{i}" for i in range(truth.shape[0])]),
    )
    controller = run_inline(load_config(config), tmp_path / "run")
    sampler = replay_sampler(outcomes, truth.shape[2])

    def simulated(costing: Any) -> Any:
        campaign = build_campaign(load_config(config))
        rng = np.random.default_rng(0)
        return simulate_campaign(campaign.decision, truth, rng, sampler, costing=costing)

    priced = simulated(recorded_costing(tokens))
    store = TrialStore(tmp_path / "run", readonly=True)
    try:
        recorded_plans = store.rounds()
    finally:
        store.close()
    assert len(recorded_plans) == len(priced.plans)
    for index, (ran, sim) in enumerate(zip(recorded_plans, priced.plans, strict=True)):
        assert np.array_equal(ran, sim), f"round {index}: the plans differ"
    assert _key(controller.decisions) == _key(priced.decisions)
    assert controller.state.tokens_used == priced.state.tokens_used
    blind = simulated(None)
    assert not np.array_equal(blind.trials, priced.trials)
