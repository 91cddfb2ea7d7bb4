"""The loop: determinism, resume after a crash, stops, no double counting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    base_config,
    ledger,
    load,
    mimic_success,
    run_inline,
    trials_in,
    write_config,
    write_scenario,
)

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.base.types import StopReason
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.report import report_run

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture()
def config_path(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    return write_config(tmp_path / "c.yaml", base_config("s.npz"))


def final(controller) -> tuple:
    return (
        controller.stop,
        controller.decisions,
        controller.state.counts.tolist(),
        controller.state.trials_used,
    )


def test_decisions_do_not_depend_on_arrival_order(tmp_path: Path, config_path: Path) -> None:
    config = load(config_path)
    runs = [
        run_inline(config, tmp_path / f"run{i}", shuffle_seed=i, batches_per_poll=1 + i)
        for i in range(3)
    ]
    assert final(runs[0]) == final(runs[1]) == final(runs[2])
    assert ledger(tmp_path / "run0") == ledger(tmp_path / "run2")
    assert runs[0].stop is not None


@pytest.mark.parametrize("crash_after", [1, 7, 23])
def test_resume_after_crash_reaches_the_same_state(
    tmp_path: Path, config_path: Path, crash_after: int
) -> None:
    config = load(config_path)
    reference = run_inline(config, tmp_path / "ref", shuffle_seed=0)
    crashed = tmp_path / "crashed"
    with pytest.raises(KeyboardInterrupt):
        run_inline(config, crashed, shuffle_seed=1, crash_after=crash_after, batches_per_poll=1)
    partial = len(ledger(crashed))
    assert 0 < partial < reference.state.trials_used
    resumed = run_inline(config, crashed, shuffle_seed=2)
    assert final(resumed) == final(reference)
    assert [row[:6] for row in ledger(crashed)] == [row[:6] for row in ledger(tmp_path / "ref")]
    # Each decision event was logged once, across the crash.
    store = TrialStore(crashed, readonly=True)
    ref_store = TrialStore(tmp_path / "ref", readonly=True)
    try:
        strip = lambda events: [(r, k, {**p, "trials_used": None}) for r, k, p in events]  # noqa: E731
        assert strip(store.events("pair_decision")) == strip(ref_store.events("pair_decision"))
    finally:
        store.close()
        ref_store.close()


def test_resumed_posterior_is_rebuilt_exactly_from_the_store(
    tmp_path: Path, config_path: Path
) -> None:
    config = load(config_path)
    done = run_inline(config, tmp_path / "run")
    summary = summary_dict(report_run(build_campaign(config), tmp_path / "run"))
    mu, _sigma = done.state.moments()
    theta, _se, _ = done.state.estimate()
    names = done.campaign.names
    assert {m["name"]: m["bayes_mu"] for m in summary["models"]} == dict(
        zip(names, mu.tolist(), strict=True)
    )
    assert [m["score"] for m in summary["models"]] == sorted(theta.tolist(), reverse=True)
    assert summary["trials_used"] == done.state.trials_used == len(ledger(tmp_path / "run"))
    assert summary["stop_reason"] == done.stop.reason.value


def test_changed_config_is_refused_with_the_change(tmp_path: Path, config_path: Path) -> None:
    run_inline(load(config_path), tmp_path / "run")
    changed = build_campaign(load(config_path, ["policy.confidence=0.99"]))
    with pytest.raises(InputError) as info:
        open_run_dir(changed, tmp_path / "run")
    assert "different campaign" in str(info.value)
    assert "policy.confidence: 0.95 -> 0.99" in str(info.value)
    # Execution settings may change.
    open_run_dir(build_campaign(load(config_path, ["execution.batch_size=5"])), tmp_path / "run")[
        0
    ].close()


def test_changed_input_file_is_refused(tmp_path: Path, config_path: Path) -> None:
    run_inline(load(config_path), tmp_path / "run")
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12, seed=5))
    with pytest.raises(InputError, match=r"different campaign.*scenario"):
        open_run_dir(build_campaign(load(config_path)), tmp_path / "run")


def test_goal_met_saves_trials_on_easy_models(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.1, 0.5, 0.9], questions=10))
    data = base_config("s.npz", max_trials_per_question=200)
    done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / "run")
    assert done.stop.reason is StopReason.GOAL_MET
    assert all(d.settled for d in done.decisions)
    assert done.state.trials_used < 3 * 10 * 20  # less than fixed N = 20


def test_max_trials_stop_on_a_tie(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.5, 0.5], questions=10))
    # Futility off: a tie at a cap of 12 is futile from 8 trials per question, which would stop
    # the campaign before the cap this test is about.
    data = base_config("s.npz", rope=None, max_trials_per_question=12, confidence=0.999, futility=0)
    done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / "run")
    assert done.stop.reason is StopReason.MAX_TRIALS
    assert done.state.trials.max() == 12 and done.state.trials.min() == 12


def test_trial_budget_is_never_exceeded(tmp_path: Path, config_path: Path) -> None:
    done = run_inline(load(config_path, ["budget.trials=250"]), tmp_path / "run")
    assert done.stop.reason is StopReason.TRIAL_BUDGET
    assert done.state.trials_used == 250


def test_replay_exhaustion_stops_the_campaign(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    outcomes = (rng.random((2, 6, 8)) < 0.5).astype(np.int8)
    np.savez(tmp_path / "r.npz", outcomes=outcomes)
    data = base_config("r.npz", rope=None, futility=0)  # sample the tie to exhaustion
    data["models"] = [{"backend": "replay", "path": "r.npz"}]
    data["baseline"] = {}
    done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / "run")
    assert done.stop.reason is StopReason.EXHAUSTED
    assert done.state.trials_used == outcomes.size
    np.testing.assert_array_equal(done.state.counts[..., 1], outcomes.sum(axis=2))


def test_replay_of_a_fixed_n_run_reports_savings(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    p = np.array([0.2, 0.5, 0.8])[:, None, None]
    outcomes = (rng.random((3, 15, 40)) < p).astype(np.int64)
    np.savez(tmp_path / "r.npz", outcomes=outcomes, tokens=np.full(outcomes.shape, 1000))
    data = base_config("r.npz")
    data["models"] = [{"backend": "replay", "path": "r.npz"}]
    data["baseline"] = {}
    done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / "run")
    savings = done.savings()
    assert savings.fixed_n == 40 and savings.baseline_trials == outcomes.size
    assert savings.trials_fraction == pytest.approx(1 - done.state.trials_used / outcomes.size)
    assert savings.trials_fraction > 0.5
    assert savings.tokens_used == 1000 * done.state.trials_used
    assert savings.baseline_tokens == pytest.approx(1000.0 * outcomes.size)


def test_duplicate_batch_is_not_counted_twice(tmp_path: Path, config_path: Path) -> None:
    from adaptive_eval.base.types import Batch, WorkItem

    campaign = build_campaign(load(config_path))
    store, _, _ = open_run_dir(campaign, tmp_path / "run")
    worker = campaign.run.plans[0].make_worker(0)()
    result = worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 4),)))
    assert store.record(result, keep_text=False) == 4
    assert store.record(result, keep_text=False) == 0
    assert store.count_trials() == 4
    store.close()


def test_a_batch_delivered_twice_counts_once(tmp_path: Path, config_path: Path) -> None:
    from helpers import NullLog

    from adaptive_eval.control.controller import Controller
    from adaptive_eval.dispatch import InlineDispatcher

    campaign = build_campaign(load(config_path))
    store, _, _ = open_run_dir(campaign, tmp_path / "run")
    sent: list[Any] = []

    class Watched(InlineDispatcher):
        def submit(self, batches: Any) -> None:
            sent.extend(batches)
            super().submit(batches)

    dispatcher = Watched(campaign.run.plans, campaign.run.offsets)
    controller = Controller(campaign, store, dispatcher, NullLog())
    controller.resume()
    batch = sent[0]
    result = campaign.run.plans[0].make_worker(0)().run(batch)
    planned = controller.rounds[batch.round].missing
    controller.record([result, result])
    controller.record([result])
    entry = controller.rounds[batch.round]
    assert len(entry.trials) == len(result.trials) == batch.size
    assert entry.missing == planned - batch.size
    assert store.count_trials() == batch.size
    store.close()


def test_execution_only_entry_options_may_change_on_resume(
    tmp_path: Path, config_path: Path
) -> None:
    run_inline(load(config_path), tmp_path / "run")
    data = base_config("s.npz")
    data["models"][0]["options"] = {"load_s": 0.01, "swappable": True}
    changed = build_campaign(load(write_config(tmp_path / "changed.yaml", data)))
    before = trials_in(tmp_path / "run" / "trials.sqlite")
    store, _, resumed = open_run_dir(changed, tmp_path / "run")  # results cannot differ
    try:
        assert resumed and store.count_trials() == before > 0
    finally:
        store.close()


def test_token_savings_are_not_inflated_by_trials_without_counts() -> None:
    from adaptive_eval.base.accounting import compute_savings

    trials = np.full((2, 3), 10)
    tokens_sum = np.array([[1000, 1000, 1000], [0, 0, 0]])
    tokens_count = np.array([[10, 10, 10], [0, 0, 0]])  # model 1 reports no tokens
    savings = compute_savings(trials, tokens_sum, tokens_count, np.zeros((2, 3)), fixed_n=10)
    assert savings.trials_fraction == 0.0
    assert savings.tokens_fraction == pytest.approx(0.0)
    assert savings.tokens_used == 3000


def test_a_goal_stop_always_reports_settled_pairs(tmp_path: Path) -> None:
    # Rounds still in flight at a goal stop are applied afterwards; their data can reopen a
    # pair, and then the stop is withdrawn and sampling goes on instead of reporting "settled".
    for seed in range(12):
        write_scenario(
            tmp_path / "s.npz", mimic_success([0.3, 0.34, 0.5, 0.52, 0.7], questions=10, seed=seed)
        )
        data = base_config("s.npz", max_trials_per_question=200, round_trials=32)
        data["seed"] = seed
        done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / f"r{seed}")
        if done.stop.reason is StopReason.GOAL_MET:
            assert all(d.settled for d in done.decisions), seed


def test_pairs_per_round_skips_pairs_stuck_at_capacity(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.5, 0.5, 0.62, 0.66], questions=10))
    data = base_config(
        "s.npz",
        rope=None,
        max_trials_per_question=30,
        allocation={"name": "pairwise", "pairs_per_round": 1},
        futility=0,  # the tie must stay open to the cap
    )
    done = run_inline(load(write_config(tmp_path / "c.yaml", data)), tmp_path / "run")
    # The 0.5/0.5 tie can never settle; the other open pairs must still get their trials.
    assert done.stop.reason is StopReason.MAX_TRIALS
    open_models = {m for d in done.decisions if not d.settled for m in (d.a, d.b)}
    assert all(done.state.trials[m].min() == 30 for m in open_models)


def test_incomplete_batches_are_detected_not_waited_on_forever(
    tmp_path: Path, config_path: Path
) -> None:
    from helpers import NullLog

    from adaptive_eval.base.errors import BackendError
    from adaptive_eval.control.controller import Controller
    from adaptive_eval.dispatch import InlineDispatcher

    class Lossy(InlineDispatcher):
        def poll(self, timeout: float):
            from dataclasses import replace

            return [replace(r, trials=r.trials[:-1]) for r in super().poll(timeout)]

    campaign = build_campaign(load(config_path))
    store, _, _ = open_run_dir(campaign, tmp_path / "run")
    controller = Controller(
        campaign, store, Lossy(campaign.run.plans, campaign.run.offsets), NullLog()
    )
    with pytest.raises(BackendError, match="trials do not match"):
        controller.run()
    store.close()
