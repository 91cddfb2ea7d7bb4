"""Speculative prefetch (``execution.prefetch_trials``): the engines get the next trials early,
but plans, recorded trials and decisions are exactly those of a run without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import (
    base_config,
    ledger,
    load,
    mimic_success,
    run_inline,
    write_config,
    write_scenario,
)

from adaptive_eval.config import parse_config
from adaptive_eval.errors import InputError
from adaptive_eval.prefetch import SPECULATIVE_ROUND, Prefetcher
from adaptive_eval.presentation import saving
from adaptive_eval.types import Batch, BatchResult, Trial, WorkItem

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture()
def config_path(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    data = base_config("s.npz")
    data["policy"]["round_trials"] = 48
    return write_config(tmp_path / "c.yaml", data)


@pytest.mark.parametrize(("prefetch", "shuffle"), [(16, 0), (64, 1), (500, 2)])
def test_prefetch_changes_no_trial_and_no_decision(
    tmp_path: Path, config_path: Path, prefetch: int, shuffle: int
) -> None:
    reference = run_inline(load(config_path), tmp_path / "ref", shuffle_seed=shuffle)
    config = load(config_path, [f"execution.prefetch_trials={prefetch}"])
    fetched = run_inline(config, tmp_path / "pf", shuffle_seed=shuffle, batches_per_poll=2)
    assert fetched.stop == reference.stop and fetched.decisions == reference.decisions
    assert fetched.state.counts.tolist() == reference.state.counts.tolist()
    # Same trials in the same rounds: a trial generated early joins the round that plans it.
    assert ledger(tmp_path / "pf") == ledger(tmp_path / "ref")
    counts = fetched.prefetcher.counts
    assert counts.used > 0, "no speculative trial was ever used"
    assert counts.sent >= counts.used
    # Unused speculative trials were generated but never recorded.
    summary = fetched.prefetcher.summary()
    assert summary["unused"] == summary["sent"] - summary["used"] >= 0
    assert summary["unused_ready"] + summary["unused_in_flight"] <= summary["unused"]


def test_speculative_trials_are_not_recorded_until_planned(
    tmp_path: Path, config_path: Path
) -> None:
    config = load(config_path, ["execution.prefetch_trials=400"])
    done = run_inline(config, tmp_path / "pf", shuffle_seed=3)
    rows = ledger(tmp_path / "pf")
    assert all(row[6] >= 0 for row in rows)  # no speculative round in the store
    assert len(rows) == done.state.trials_used
    assert done.prefetcher.summary()["unused"] > 0  # the run stopped with some never planned


def test_prefetch_respects_the_budget_and_the_cap(tmp_path: Path, config_path: Path) -> None:
    config = load(
        config_path,
        ["execution.prefetch_trials=60", "budget.trials=300", "policy.max_trials_per_question=9"],
    )
    reference = run_inline(load(config_path, ["budget.trials=300"]), tmp_path / "ref")
    done = run_inline(config, tmp_path / "pf")
    counts = done.prefetcher.counts
    assert done.state.trials_used == reference.state.trials_used <= 300
    # The budget caps recorded trials; speculative ones never planned come on top, at most
    # prefetch_trials of them (speculation stops where planned + speculated reach the budget).
    assert 300 < done.state.trials_used + (counts.sent - counts.used) <= 300 + 60
    fetched = done.state.planned + done.prefetcher.ahead
    assert fetched.max() <= 9


def test_prefetch_with_shared_slots_is_refused(tmp_path: Path) -> None:
    data = base_config("s.npz")
    data["execution"] = {"gpu_slots": 1, "prefetch_trials": 8}
    with pytest.raises(InputError, match=r"execution.*prefetch_trials=8 with gpu_slots=1"):
        parse_config(data, source="c.yaml")


def _trial(m: int, q: int, t: int) -> Trial:
    return Trial(m, q, t, seed=1000 * m + 10 * q + t, category=(m + q + t) % 2)


def test_claims_split_between_ready_in_flight_and_new_trials() -> None:
    prefetcher = Prefetcher(target=10, num_models=1, num_questions=2)
    latest = np.array([[3, 1]])
    planned = np.array([[3, 1]])
    items = prefetcher.choose(latest, planned, np.array([[20, 20]]), room=8)
    assert sum(i.count for i in items) == 8
    assert prefetcher.ahead.tolist() == [[6, 2]]  # 3:1 proportions
    assert {(i.question, i.first_trial) for i in items} == {(0, 3), (1, 1)}
    first = Batch(1, SPECULATIVE_ROUND, 0, (WorkItem(0, 0, 3, 6),))
    second = Batch(2, SPECULATIVE_ROUND, 0, (WorkItem(0, 1, 1, 2),))
    prefetcher.sent([first, second])
    back = BatchResult(1, SPECULATIVE_ROUND, "w", tuple(_trial(0, 0, t) for t in range(3, 9)), 0)
    assert prefetcher.receive(back) == []  # nobody planned them yet
    # A round plans 4 trials of question 0 (3..6) and 3 of question 1 (1..3).
    to_send, ready = prefetcher.take(5, [WorkItem(0, 0, 3, 4), WorkItem(0, 1, 1, 3)])
    assert to_send == [WorkItem(0, 1, 3, 1)]  # trial 3 of question 1 was never fetched
    assert [(r.batch_id, r.round, [t.trial for t in r.trials]) for r in ready] == [
        (1, 5, [3, 4, 5, 6])
    ]
    assert prefetcher.ahead.tolist() == [[2, 0]]
    # The in-flight batch arrives: both its trials were claimed by round 5.
    back = BatchResult(2, SPECULATIVE_ROUND, "w", (_trial(0, 1, 1), _trial(0, 1, 2)), 0)
    claimed = prefetcher.receive(back)
    assert [(r.round, [t.trial for t in r.trials]) for r in claimed] == [(5, [1, 2])]
    assert prefetcher.counts.used == 6 and prefetcher.counts.sent == 8
    summary = prefetcher.summary()
    assert summary["unused_ready"] == 2 and summary["unused_in_flight"] == 0
    assert prefetcher.receive(back) == []  # a duplicate delivery adds nothing


def test_choose_never_passes_the_cap_or_the_target() -> None:
    prefetcher = Prefetcher(target=5, num_models=2, num_questions=2)
    latest = np.array([[1, 1], [0, 4]])
    planned = np.array([[9, 3], [0, 8]])
    items = prefetcher.choose(latest, planned, np.array([[10, 10], [10, 10]]), room=100)
    assert sum(i.count for i in items) == 5
    assert (planned + prefetcher.ahead <= 10).all()
    assert prefetcher.ahead[1, 0] == 0  # not in the latest plan
    assert prefetcher.choose(latest, planned, np.full((2, 2), 10), room=100) == []


@pytest.mark.slow
def test_prefetch_on_ray_with_an_emulated_engine_records_the_same_trials(
    tmp_path: Path, config_path: Path, ray_local: None
) -> None:
    """Through the Ray dispatcher (planned work queued ahead of speculative work) with an
    emulated heavy-tailed engine: the same ledger as an in-process run without prefetch, and
    the summary reports what speculation sent and used."""
    from adaptive_eval.workflows.run import run_campaign

    reference = run_inline(load(config_path), tmp_path / "ref")
    data = base_config("s.npz")
    data["policy"]["round_trials"] = 48
    data["models"][0]["latency"] = {
        "engine_seqs": 16,
        "per_trial_s": 0.002,
        "per_token_s": 0.0005,
        "tokens_median": 20,
        "tokens_p99_ratio": 20,
        "max_tokens": 400,
    }
    data["execution"] = {
        "workers": 2,
        "batch_size": 8,
        "in_flight_per_worker": 8,
        "prefetch_trials": 96,
    }
    summary = run_campaign(
        load(write_config(tmp_path / "ray.yaml", data)), tmp_path / "ray", quiet=True
    )
    assert ledger(tmp_path / "ray") == ledger(tmp_path / "ref")
    assert summary["trials_used"] == reference.state.trials_used
    prefetch = summary["dispatch"]["prefetch"]
    assert prefetch["used"] > 0 and prefetch["sent"] == prefetch["used"] + prefetch["unused"]
    assert summary["dispatch"]["failed_batches"] == 0
    # report.md prices the unused speculative trials into the trials saved.
    report = (tmp_path / "ray" / "report.md").read_text()
    spent = summary["trials_used"] + prefetch["unused"]
    expected = saving(1 - spent / summary["baseline"]["trials"], "the trials")
    assert f"{prefetch['unused']} never used" in report
    assert f"counting those, {expected}." in report  # "spent X% more", never "saved -X%"


@pytest.mark.parametrize("crash_after", [4, 15])
def test_a_crash_with_speculative_trials_in_hand_resumes_to_the_same_ledger(
    tmp_path: Path, config_path: Path, crash_after: int
) -> None:
    """Speculative trials not yet planned are lost with the process (never recorded); the
    resumed run re-generates what its rounds need and ends exactly where a plain run does."""
    reference = run_inline(load(config_path), tmp_path / "ref")
    config = load(config_path, ["execution.prefetch_trials=64"])
    with pytest.raises(KeyboardInterrupt):
        run_inline(config, tmp_path / "pf", shuffle_seed=1, crash_after=crash_after)
    resumed = run_inline(config, tmp_path / "pf", shuffle_seed=2)
    assert resumed.stop == reference.stop and resumed.decisions == reference.decisions
    assert ledger(tmp_path / "pf") == ledger(tmp_path / "ref")
