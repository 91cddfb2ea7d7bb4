"""Simulated and replay backends: file validation, determinism, distribution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import base_config, mimic_success, write_config, write_scenario

from adaptive_eval.base.errors import ExhaustedError, InputError
from adaptive_eval.base.types import Batch, WorkItem, trial_seed
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import load_config


def campaign_for(tmp_path: Path, entry: dict, **overrides: object):
    data = base_config("unused")
    data["models"] = [entry]
    data.update(overrides)
    return build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))


def bad_npz(tmp_path: Path, entry_backend: str = "simulated", **arrays: np.ndarray) -> str:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(InputError) as info:
        campaign_for(tmp_path, {"backend": entry_backend, "path": "bad.npz"})
    message = str(info.value)
    assert "bad.npz" in message and "models[0]" in message
    return message


def test_simulated_file_errors(tmp_path: Path) -> None:
    good = np.full((2, 3, 2), 0.5)
    assert "missing" in bad_npz(tmp_path, other=good) and "'probs'" in bad_npz(tmp_path, other=good)
    assert "3 dimensions" in bad_npz(tmp_path, probs=np.full((2, 3), 0.5))
    assert "dtype" in bad_npz(tmp_path, probs=np.ones((2, 3, 2), dtype=np.int64))
    skewed = good.copy()
    skewed[1, 2] = [0.5, 0.6]
    assert "cell (1, 2) sum to 1.10000000" in bad_npz(tmp_path, probs=skewed)
    nan = good.copy()
    nan[0, 1, 0] = np.nan
    assert "non-finite value nan at index (0, 1, 0)" in bad_npz(tmp_path, probs=nan)
    negative = good.copy()
    negative[0, 0] = [-0.5, 1.5]
    assert "negative probability" in bad_npz(tmp_path, probs=negative)
    assert "tokens_mean" in bad_npz(tmp_path, probs=good, tokens_mean=np.ones((3, 3)))
    assert "duplicate name" in bad_npz(tmp_path, probs=good, models=np.array(["a", "a"]))


def test_missing_file_and_bad_select(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        campaign_for(tmp_path, {"backend": "simulated", "path": "absent.npz"})
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]), names=["a", "b"])
    with pytest.raises(InputError, match=r"models\[0\]\.select.*'c' not in"):
        campaign_for(tmp_path, {"backend": "simulated", "path": "s.npz", "select": ["a", "c"]})
    campaign = campaign_for(tmp_path, {"backend": "simulated", "path": "s.npz", "select": ["b"]})
    assert campaign.names == ("b",)


def test_replay_file_errors(tmp_path: Path) -> None:
    assert "category 2 at index (0, 1, 0) is outside 0..1" in bad_npz(
        tmp_path, "replay", outcomes=np.array([[[0, 1], [2, 0]]])
    )
    assert "negative category" in bad_npz(tmp_path, "replay", outcomes=np.array([[[0, -1]]]))
    assert "expected dtype kind 'i'" in bad_npz(tmp_path, "replay", outcomes=np.zeros((1, 2, 3)))
    assert "differs from outcomes" in bad_npz(
        tmp_path,
        "replay",
        outcomes=np.zeros((1, 2, 3), dtype=int),
        tokens=np.zeros((1, 2, 2), dtype=int),
    )


def test_replay_fixed_n_larger_than_recorded_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "r.npz", outcomes=np.zeros((2, 3, 10), dtype=np.int8))
    with pytest.raises(InputError, match="fixed_n=20 exceeds the 10 trials"):
        campaign_for(tmp_path, {"backend": "replay", "path": "r.npz"})
    campaign = campaign_for(tmp_path, {"backend": "replay", "path": "r.npz"}, baseline={})
    assert campaign.run.fixed_n == 10 and list(campaign.decision.capacity) == [10, 10]


def make_worker(campaign, model: int = 0):
    index, plan = campaign.run.plan_of(model)
    return plan.make_worker(campaign.run.offsets[index])()


def test_replay_serves_recorded_trials_in_order_and_refuses_more(tmp_path: Path) -> None:
    outcomes = np.arange(2 * 3 * 4).reshape(2, 3, 4) % 2
    tokens = np.arange(2 * 3 * 4).reshape(2, 3, 4) + 10
    np.savez(tmp_path / "r.npz", outcomes=outcomes, tokens=tokens, models=np.array(["x", "y"]))
    campaign = campaign_for(tmp_path, {"backend": "replay", "path": "r.npz"}, baseline={})
    worker = make_worker(campaign)
    result = worker.run(Batch(1, 0, 1, (WorkItem(1, 2, 1, 3),)))
    assert [t.category for t in result.trials] == list(outcomes[1, 2, 1:4])
    assert [t.tokens for t in result.trials] == list(tokens[1, 2, 1:4])
    assert [t.seed for t in result.trials] == [trial_seed(7, "y", "q2", i) for i in (1, 2, 3)]
    with pytest.raises(ExhaustedError, match="only 4 were recorded"):
        worker.run(Batch(2, 0, 0, (WorkItem(0, 0, 2, 3),)))


def test_simulated_outcome_depends_only_on_the_trial(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]))
    worker = make_worker(campaign_for(tmp_path, {"backend": "simulated", "path": "s.npz"}))
    whole = worker.run(Batch(1, 0, 1, (WorkItem(1, 0, 0, 6), WorkItem(1, 1, 0, 6))))
    parts = [
        worker.run(Batch(2, 0, 1, (WorkItem(1, 1, 3, 3),))),
        worker.run(Batch(3, 0, 1, (WorkItem(1, 0, 0, 6), WorkItem(1, 1, 0, 3)))),
    ]
    key = lambda t: (t.question, t.trial)  # noqa: E731
    split = sorted((t for r in parts for t in r.trials), key=key)
    assert [(t.category, t.tokens, t.seed) for t in sorted(whole.trials, key=key)] == [
        (t.category, t.tokens, t.seed) for t in split
    ]


def test_simulated_frequencies_match_probabilities(tmp_path: Path) -> None:
    probs = np.array([[[0.2, 0.5, 0.3], [0.7, 0.1, 0.2]]])
    tokens_mean = np.array([[200.0, 50.0]])
    np.savez(tmp_path / "s3.npz", probs=probs, tokens_mean=tokens_mean)
    campaign = campaign_for(
        tmp_path, {"backend": "simulated", "path": "s3.npz"}, rubric={"weights": [0, 0.5, 1]}
    )
    worker = make_worker(campaign)
    n = 20_000
    result = worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, n), WorkItem(0, 1, 0, n))))
    cats = np.array([t.category for t in result.trials]).reshape(2, n)
    toks = np.array([t.tokens for t in result.trials]).reshape(2, n)
    for q in range(2):
        freq = np.bincount(cats[q], minlength=3) / n
        se = np.sqrt(probs[0, q] * (1 - probs[0, q]) / n)
        assert np.all(np.abs(freq - probs[0, q]) < 5 * se)
        assert abs(toks[q].mean() / tokens_mean[0, q] - 1) < 0.02
        assert toks[q].std() > 0.2 * tokens_mean[0, q]  # spread, not a constant


def test_two_entries_must_cover_the_same_questions(tmp_path: Path) -> None:
    write_scenario(tmp_path / "a.npz", mimic_success([0.3], questions=5))
    write_scenario(tmp_path / "b.npz", mimic_success([0.3], questions=6))
    data = base_config("a.npz")
    data["models"].append({"backend": "simulated", "path": "b.npz"})
    with pytest.raises(InputError, match=r"models\[1\].*same questions"):
        build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))


def test_duplicate_model_names_across_entries(tmp_path: Path) -> None:
    write_scenario(tmp_path / "a.npz", mimic_success([0.3], questions=5))
    data = base_config("a.npz")
    data["models"].append({"backend": "simulated", "path": "a.npz"})
    with pytest.raises(InputError, match="appears twice"):
        build_campaign(load_config(write_config(tmp_path / "c.yaml", data)))


def test_heavy_tailed_lengths_are_seeded_lognormal() -> None:
    from adaptive_eval.backends.simulated import lognormal_lengths
    from adaptive_eval.config.schema import LatencyModel

    seeds = np.arange(200_000, dtype=np.int64) * 7919 + 13
    latency = LatencyModel(tokens_median=500, tokens_p99_ratio=20)
    lengths = lognormal_lengths(seeds, latency)
    assert lengths is not None
    median = float(np.median(lengths))
    assert abs(median / 500 - 1) < 0.02
    assert abs(float(np.quantile(lengths, 0.99)) / median / 20 - 1) < 0.05
    again = lognormal_lengths(seeds[::-1].copy(), latency)
    assert again is not None and np.array_equal(again[::-1], lengths)  # a pure function of seed
    capped = lognormal_lengths(seeds, LatencyModel(tokens_median=500, max_tokens=4000))
    assert capped is not None and capped.max() == 4000 and capped.min() >= 1
    assert lognormal_lengths(seeds, LatencyModel()) is None


def test_engine_model_feeds_queued_batches_into_free_slots() -> None:
    """Batch A: three short trials and one long; batch B: four short trials, queued at the
    same time on a 4-slot engine. With the feed B takes the slots A's short trials free and
    ends long before A; without it B waits for A's long trial."""
    from adaptive_eval.backends.simulated import EngineModel

    a = np.array([1.0, 1.0, 1.0, 20.0])
    b = np.array([2.0, 2.0, 2.0, 2.0])
    fed = EngineModel(4, feed=True)
    assert fed.schedule(a, 0.0) == 20.0
    assert fed.schedule(b, 0.0) == 5.0  # 3 slots free at t=1: three end at 3, the last at 5
    alone = EngineModel(4, feed=False)
    assert alone.schedule(a, 0.0) == 20.0
    assert alone.schedule(b, 0.0) == 22.0
    assert fed.slot_s == alone.slot_s == 31.0
    # Later arrivals start at their arrival time, not before.
    assert fed.schedule(np.array([1.0]), 30.0) == 31.0


def test_simulated_engine_runs_queued_batches_together(tmp_path: Path) -> None:
    import threading
    import time

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]))
    latency = {"engine_seqs": 4, "per_token_s": 0.001, "tokens_median": 100}
    campaign = campaign_for(tmp_path, {"backend": "simulated", "path": "s.npz", "latency": latency})
    plan = campaign.run.plans[0]
    assert plan.actor_concurrency == 3  # in_flight_per_worker (2) + 1: the batches share it
    worker = make_worker(campaign)
    batches = [Batch(i, 0, 0, (WorkItem(0, i, 0, 4),)) for i in range(2)]
    results: dict[int, object] = {}
    started = time.perf_counter()
    threads = [
        threading.Thread(target=lambda b=b: results.__setitem__(b.batch_id, worker.run(b)))
        for b in batches
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    wall = time.perf_counter() - started
    assert sorted(results) == [0, 1]
    busy = sum(r.busy_s for r in results.values())  # type: ignore[attr-defined]
    assert 0 < busy <= wall + 0.01  # shares of one engine add up to at most its time
    sequential = campaign_for(
        tmp_path,
        {"backend": "simulated", "path": "s.npz", "latency": {**latency, "feed": False}},
    )
    assert sequential.run.plans[0].actor_concurrency == 1
