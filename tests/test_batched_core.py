"""The live forecast's continuations advanced together (:mod:`adaptive_eval.forecast.batched`)
against the decision core run one continuation at a time (:func:`run_core`, the controller's
loop).

Oracle: both are served the same outcomes (each continuation its own seeded tape, replayed in
order) from the same snapshot of a running campaign; every continuation must end at the same
trial count with the same pairs settled after every round. The batched forms restate the rules'
arithmetic (policies/batched.py), so a change to a rule made in one place only fails here. The
integer split and the lower-bound program are checked on their own against their single forms.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import base_config, mimic_success, write_config, write_scenario

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.config.schema import load_config
from adaptive_eval.decide.batch import BatchSettings, split_integer_rows
from adaptive_eval.decide.contracts import without_budget
from adaptive_eval.decide.core import DecisionCore
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.batched import BatchCore, continue_runs
from adaptive_eval.forecast.live import Snapshot, forecast_rest
from adaptive_eval.forecast.paths import (
    PathStart,
    freeze_core,
    run_path,
    run_paths,
    simulate_campaign,
    thaw_core,
)
from adaptive_eval.forecast.simulate import Truth, replay_sampler, run_core
from adaptive_eval.stats.allocation import allocation_program, allocation_program_rows
from policies.allocation import split_integer


def _campaign(
    tmp_path: Path,
    probs: np.ndarray,
    weights: list[float],
    execution: dict[str, Any] | None = None,
    **policy: Any,
) -> Campaign:
    scenario = tmp_path / "s.npz"
    np.savez(scenario, probs=probs, tokens_mean=np.full(probs.shape[:2], 100.0))
    data = base_config(str(scenario), **policy)
    data["rubric"]["weights"] = weights
    data["execution"].update(execution or {})
    return build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))


def _binary(scores: list[float], questions: int, seed: int = 0) -> np.ndarray:
    success = mimic_success(scores, questions=questions, seed=seed)
    return np.stack([1 - success, success], axis=2)


def _tape(probs: np.ndarray, depth: int, rng: np.random.Generator) -> np.ndarray:
    """Each cell's outcomes, ``depth`` deep, drawn from ``probs``."""
    draws = rng.random((*probs.shape[:2], depth))
    return (draws[..., None] > probs.cumsum(axis=2)[:, :, None, :]).sum(axis=3)


class _Reached(Exception):
    pass


def _snapshot(campaign: Campaign, tape: np.ndarray, share: float) -> tuple[DecisionCore, RunState]:
    """The campaign served ``tape``, halted at the first round whose trials reach ``share`` of
    its whole run (round 1 at ``share`` 0)."""
    k = campaign.num_categories

    def run(stop_at: int | None) -> tuple[DecisionCore, RunState]:
        state = RunState(campaign.decision.prior, campaign.decision.weights)
        core = campaign.decision.decision_core()

        def watch(view: Any, outcome: Any) -> None:
            if stop_at is not None and view.trials_used >= stop_at:
                raise _Reached

        truth = Truth(np.full((*tape.shape[:2], k), 1 / k), campaign.decision.weights)
        with contextlib.suppress(_Reached):
            run_core(
                core,
                state,
                campaign.decision.view_settings(),
                truth,
                np.random.default_rng(0),
                replay_sampler(tape, k),
                watch,
            )
        return core, state

    _, whole = run(None)
    return run(max(1, int(share * whole.trials_used)))


def _both(
    campaign: Campaign, core: DecisionCore, state: RunState, tapes: list[np.ndarray]
) -> tuple[list[tuple[int, list[int]]], list[tuple[int, list[int]]]]:
    """Each continuation's (final trials, settled pairs after every round): one by one, and
    together."""
    k = campaign.num_categories
    # The reference is the core continued by hand, as the controller's loop (run_core) would
    # from the snapshot with no budget; the batched side is PathStart's, as the live forecast's.
    frozen = freeze_core(core)
    one_by_one = []
    for tape in tapes:
        single = thaw_core(frozen)
        single.stopping = without_budget(single.stopping)
        single.limits = replace(single.limits, trial_budget=None)
        run = pickle.loads(pickle.dumps(state))
        settled: list[int] = []

        def watch(view: Any, outcome: Any, settled: list[int] = settled) -> None:
            settled.append(sum(d.settled for d in outcome.decisions))

        run_core(
            single,
            run,
            campaign.decision.view_settings(),
            Truth(np.full((*tape.shape[:2], k), 1 / k), campaign.decision.weights),
            np.random.default_rng(0),
            replay_sampler(tape, k),
            watch,
            decided=True,
        )
        one_by_one.append((run.trials_used, settled))
    batched = PathStart.of_snapshot(campaign.decision, frozen, pickle.dumps(state)).batched()
    assert batched is not None
    batch, continued, state = batched
    cumulative = [
        np.concatenate(
            [
                np.zeros((*tape.shape[:2], 1, k), dtype=np.int64),
                np.cumsum(tape[..., None] == np.arange(k), axis=2),
            ],
            axis=2,
        )
        for tape in tapes
    ]
    rows, cols = np.indices(tapes[0].shape[:2])

    def sample(plan: np.ndarray, ids: np.ndarray, before: np.ndarray) -> np.ndarray:
        drawn = np.zeros((*plan.shape, k), dtype=np.int64)
        for row, sim in enumerate(ids.tolist()):
            after = before[row] + plan[row]
            drawn[row] = (
                cumulative[sim][rows, cols, after] - cumulative[sim][rows, cols, before[row]]
            )
        return drawn

    settings = BatchSettings.of(
        campaign.decision.view_settings(), campaign.decision.prior, campaign.decision.weights
    )
    runs = continue_runs(
        batch, continued, state, settings, len(tapes), sample, lambda plan: (None, None, None)
    )
    together = [
        (int(final), [count for _, count in path])
        for final, path in zip(runs.trials.tolist(), runs.paths, strict=True)
    ]
    return one_by_one, together


CASES: dict[str, tuple[list[float] | None, dict[str, Any]]] = {
    "six models, the default rules": ([0.2, 0.35, 0.45, 0.5, 0.62, 0.8], {}),
    "a near-tie and a tie": ([0.3, 0.31, 0.5, 0.5, 0.7], {}),
    "two models a rope apart": ([0.45, 0.48], {}),
    "step-down off, pairs apart, no futility": (
        [0.2, 0.4, 0.45, 0.7],
        {"error_control": "pair", "futility": 0.0},
    ),
    "one round in flight": ([0.2, 0.4, 0.45, 0.7], {"execution": {"rounds_in_flight": 1}}),
    "three rounds in flight": ([0.2, 0.4, 0.45, 0.7], {"execution": {"rounds_in_flight": 3}}),
    "uniform allocation": ([0.25, 0.4, 0.55, 0.6], {"allocation": "uniform"}),
    "uniform questions": (
        [0.25, 0.4, 0.55, 0.6],
        {"allocation": {"name": "track_and_stop", "questions": "uniform"}},
    ),
    "at 99% confidence": ([0.2, 0.3, 0.42, 0.5, 0.7], {"confidence": 0.99}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("share", [0.0, 0.4])
def test_continuations_together_equal_the_core_one_by_one(
    tmp_path: Path, case: str, share: float
) -> None:
    scores, policy = CASES[case]
    assert scores is not None
    campaign = _campaign(tmp_path, _binary(scores, 10), [0.0, 1.0], **policy)
    rng = np.random.default_rng([len(scores), int(share * 10)])
    cap = campaign.decision.policy.max_trials_per_question
    core, state = _snapshot(campaign, _tape(_binary(scores, 10), cap, rng), share)
    if core.stop is not None:
        pytest.skip("the campaign stopped before the share")  # pragma: no cover - seeded
    tapes = [_tape(_binary(scores, 10, seed=s + 1), cap, rng) for s in range(6)]
    one_by_one, together = _both(campaign, core, state, tapes)
    assert together == one_by_one


def test_a_categorical_rubric_continues_alike(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    probs = rng.dirichlet([2.0, 1.0, 2.0], size=(4, 8))
    probs[:, :, 2] *= np.array([0.5, 0.8, 1.0, 1.4])[:, None]
    probs /= probs.sum(axis=2, keepdims=True)
    campaign = _campaign(tmp_path, probs, [0.0, 0.5, 1.0])
    cap = campaign.decision.policy.max_trials_per_question
    core, state = _snapshot(campaign, _tape(probs, cap, rng), 0.0)
    tapes = [_tape(probs, cap, rng) for _ in range(6)]
    one_by_one, together = _both(campaign, core, state, tapes)
    assert together == one_by_one


def test_models_with_different_caps_continue_alike(tmp_path: Path) -> None:
    """A replayed model holds fewer trials than the cap: its pairs' horizons and futility
    differ (the caps fix them)."""
    rng = np.random.default_rng(9)
    probs = _binary([0.3, 0.42, 0.5, 0.66], 10)
    scenario = write_scenario(tmp_path / "s.npz", probs[:3, :, 1])
    recorded = tmp_path / "r.npz"
    np.savez(recorded, outcomes=_tape(probs[3:], 24, rng), models=np.array(["replayed"]))
    data = base_config(str(scenario))
    data["models"].append({"backend": "replay", "path": str(recorded), "key": "outcomes"})
    campaign = build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))
    assert len(set(campaign.decision.capacity.tolist())) == 2
    cap = int(campaign.decision.capacity.max())
    core, state = _snapshot(campaign, _tape(probs, cap, rng), 0.0)
    tapes = [_tape(probs, cap, rng) for _ in range(6)]
    one_by_one, together = _both(campaign, core, state, tapes)
    assert together == one_by_one


def test_a_path_continued_from_its_own_snapshot_ends_where_it_would_have(tmp_path: Path) -> None:
    """The two starts of the one path simulator: a path from before the run, and the same path
    halted after a round and continued from its snapshot (the live forecast's start), served
    the same outcomes, end at the same trials with the same decisions."""
    rng = np.random.default_rng(5)
    probs = _binary([0.2, 0.35, 0.42, 0.5, 0.7], 10)
    campaign = _campaign(tmp_path, probs, [0.0, 1.0])
    k = campaign.num_categories
    tape = _tape(probs, campaign.decision.policy.max_trials_per_question, rng)
    truth = Truth(np.full((*tape.shape[:2], k), 1 / k), campaign.decision.weights)
    whole = run_path(PathStart.before_run(campaign.decision), truth, rng, replay_sampler(tape, k))
    assert PathStart.before_run(campaign.decision).begin()[2] is False
    for share in (0.0, 0.3, 0.7):
        core, state = _snapshot(campaign, tape, share)
        assert state.trials_used < whole.state.trials_used
        start = PathStart.of_snapshot(campaign.decision, freeze_core(core), pickle.dumps(state))
        assert start.begin()[2] is True  # the snapshot's core has decided on its round
        seen: list[int] = []

        def watch(view: Any, outcome: Any, seen: list[int] = seen) -> None:
            seen.append(view.round)

        continued = run_path(start, truth, rng, replay_sampler(tape, k), watch)
        assert len(seen) == whole.rounds - state.applied_rounds  # it went on from there
        assert np.array_equal(continued.trials, whole.trials)
        assert continued.decisions == whole.decisions
        assert continued.stop == whole.stop


def test_paths_on_forked_processes_are_the_paths_run_here() -> None:
    def path_of(index: int) -> tuple[int, list[float]]:
        return os.getpid(), np.random.default_rng([3, index]).random(4).tolist()

    here = run_paths(path_of, 9)
    forked = run_paths(path_of, 9, processes=2)
    assert [p for _, p in forked] == [p for _, p in here]
    assert len({tuple(p) for _, p in here}) == 9
    assert forked[0][0] == os.getpid()  # the first path runs here (it builds the tables)
    assert {pid for pid, _ in forked[1:]} - {os.getpid()}  # the others on forked processes
    assert run_paths(path_of, 0, processes=2) == []


def test_a_forecast_s_paths_run_without_the_budget_an_emulated_run_with_it(
    tmp_path: Path,
) -> None:
    """The trial budget: dropped on every forecast path, before the run and from a snapshot
    (each forecast applies it to the paths afterwards); kept by :func:`simulate_campaign`."""
    probs = _binary([0.3, 0.35, 0.5, 0.55], 10)
    scenario = tmp_path / "s.npz"
    np.savez(scenario, probs=probs)
    data = base_config(str(scenario))
    data["budget"] = {"trials": 400}
    campaign = build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))
    assert campaign.decision.limits.trial_budget == 400
    truth = Truth(probs, campaign.decision.weights)
    kept = simulate_campaign(campaign.decision, truth, np.random.default_rng(1))
    assert kept.state.trials_used <= 400
    assert kept.stop is not None and kept.stop.reason.value == "trial_budget"
    start = PathStart.before_run(campaign.decision)
    dropped = run_path(start, truth, np.random.default_rng(1))
    assert dropped.state.trials_used > 400
    assert dropped.stop is not None and dropped.stop.reason.value != "trial_budget"
    halted, state, _ = PathStart(campaign.decision, budgeted=True).begin()
    assert halted.limits.trial_budget == 400
    snapshot = PathStart.of_snapshot(campaign.decision, freeze_core(halted), pickle.dumps(state))
    assert snapshot.begin()[0].limits.trial_budget is None
    with pytest.raises(ValueError, match="core and state together"):
        PathStart(campaign.decision, core=freeze_core(halted))


def test_rules_without_a_batched_form_are_forecast_one_by_one(tmp_path: Path) -> None:
    probs = _binary([0.3, 0.5, 0.7], 8)
    plain = _campaign(tmp_path, probs, [0.0, 1.0])
    anytime = _campaign(tmp_path, probs, [0.0, 1.0], pair_rules=["anytime"])
    width = _campaign(tmp_path, probs, [0.0, 1.0], stopping=[{"name": "ci_width", "width": 0.2}])
    for campaign, batched in ((plain, True), (anytime, False), (width, False)):
        core = campaign.decision.decision_core()
        found = BatchCore.of(core, campaign.decision.capacity, without_budget(core.stopping))
        assert (found is not None) is batched
        core, state = _snapshot(campaign, _tape(probs, 40, np.random.default_rng(2)), 0.0)
        snapshot = Snapshot(
            state.applied_rounds, freeze_core(core), pickle.dumps(state), 1.0, 0.01, 0, 8
        )
        forecast = forecast_rest(campaign.decision, snapshot)
        assert state.trials_used <= forecast.trials.p10 <= forecast.trials.p50
        assert forecast.trials.p50 <= forecast.trials.p90


def test_the_row_split_equals_the_single_split_ties_included() -> None:
    rng = np.random.default_rng(0)
    for trial in range(600):
        width, rows = int(rng.integers(1, 10)), int(rng.integers(1, 5))
        if trial % 3 == 0:
            weights = rng.random((rows, width))
        elif trial % 3 == 1:
            weights = rng.integers(0, 3, (rows, width)).astype(np.float64)  # exact ties, zeros
        else:
            weights = np.round(rng.random((rows, width)), 1)  # sums inexact in binary
        room = rng.integers(0, 6, (rows, width))
        totals = rng.integers(0, 30, rows)
        found = split_integer_rows(totals, weights, room)
        for row in range(rows):
            assert (
                found[row].tolist()
                == split_integer(int(totals[row]), weights[row], room[row]).tolist()
            )


def test_the_programs_solved_together_equal_each_solved_alone() -> None:
    rng = np.random.default_rng(3)
    sims, models = 12, 7
    variance = rng.uniform(0.05, 0.3, (sims, models))
    cost = rng.uniform(0.5, 2.0, (sims, models))
    order = np.argsort(rng.random((sims, models)), axis=1)
    pairs = np.stack([order[:, :-1], order[:, 1:]], axis=2)
    valid = rng.random((sims, models - 1)) < 0.7
    valid[0] = False  # a program with no pair
    # Each program's pairs first, as the forecast lays them out.
    first = np.argsort(~valid, axis=1, kind="stable")
    valid = np.take_along_axis(valid, first, axis=1)
    pairs = np.take_along_axis(pairs, first[..., None], axis=1)
    radius = rng.uniform(1e-4, 1e-2, (sims, models - 1))
    found = allocation_program_rows(variance, pairs, valid, radius, cost)
    for sim in range(sims):
        count = int(valid[sim].sum())
        alone = allocation_program(
            variance[sim], pairs[sim, :count], radius[sim, :count], cost[sim]
        )
        assert np.allclose(found[sim], alone, rtol=1e-9, atol=0.0)
