"""Properties of the decision core over random campaigns (hypothesis).

* a settled pair is never unsettled nor flipped later (the sequential test stopped);
* no plan takes a model past its capacity, and the plans never exceed the trial budget;
* the order in which batches come back does not change a decision (the controller, its store
  and a shuffling in-process dispatcher).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from helpers import run_inline, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptive_eval.config.registry import allocators, pair_rules, stopping_rules
from adaptive_eval.config.schema import load_config
from adaptive_eval.decide.contracts import CampaignView, any_of
from adaptive_eval.decide.core import DecisionCore, Limits, RoundDecision
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast.simulate import Truth, ViewSettings, run_core


class Recording(DecisionCore):
    """The core, keeping every round's decisions and every plan it hands out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rounds: list[RoundDecision] = []
        self.handed: list[tuple[np.ndarray, np.ndarray]] = []  # (planned before, plan)

    def decide(self, view: CampaignView) -> RoundDecision:
        outcome = super().decide(view)
        self.rounds.append(outcome)
        return outcome

    def next_plan(self, view: CampaignView, in_flight: int) -> np.ndarray | None:
        plan = super().next_plan(view, in_flight)
        if plan is not None:
            self.handed.append((np.array(view.planned), plan))
        return plan


campaigns = st.fixed_dictionaries(
    {
        "scores": st.lists(st.floats(0.05, 0.95), min_size=2, max_size=5),
        "questions": st.integers(2, 8),
        "cap": st.integers(4, 60),
        "budget": st.one_of(st.none(), st.integers(20, 3000)),
        "round_trials": st.integers(8, 200),
        "depth": st.integers(1, 3),
        "allocator": st.sampled_from(["track_and_stop", "pairwise", "uniform"]),
        "seed": st.integers(0, 2**31 - 1),
    }
)


def _truth(scores: list[float], questions: int, seed: int) -> Truth:
    rng = np.random.default_rng(seed)
    success = np.clip(
        np.array(scores)[:, None] + rng.normal(0, 0.1, (len(scores), questions)), 0.01, 0.99
    )
    return Truth(np.stack([1 - success, success], axis=2), np.array([0.0, 1.0]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(campaigns)
def test_decisions_stay_and_plans_respect_capacity_and_budget(case: dict[str, Any]) -> None:
    truth = _truth(case["scores"], case["questions"], case["seed"])
    num_models = truth.shape[0]
    stopping = [stopping_rules.build("pairs_settled")]
    if case["budget"] is not None:
        stopping.append(stopping_rules.build("budget", {"trials": case["budget"]}))
    core = Recording(
        (pair_rules.build("group_sequential"),),
        any_of(*stopping),
        allocators.build(case["allocator"]),
        Limits(case["round_trials"], case["depth"], case["cap"], case["budget"]),
    )
    capacity = np.full(num_models, case["cap"], dtype=np.int64)
    settings_ = ViewSettings(
        tuple(f"m{i}" for i in range(num_models)), capacity, 0.95, 2, 0.02, "ranking", 0.2
    )
    state = RunState(np.ones(truth.probs.shape), truth.weights)
    result = run_core(core, state, settings_, truth, np.random.default_rng(case["seed"]))

    assert result.stop is not None
    for before, plan in core.handed:
        assert plan.min() >= 0 and plan.sum() > 0
        assert np.all(before + plan <= capacity[:, None])
        if case["budget"] is not None:
            assert int((before + plan).sum()) <= case["budget"]
    assert np.all(result.trials <= case["cap"])

    settled: dict[frozenset[int], tuple[str, int]] = {}
    for outcome in core.rounds:
        for d in outcome.decisions:
            pair = frozenset((d.a, d.b))
            verdict = _verdict(d)
            if pair in settled:
                assert verdict == settled[pair], f"round {outcome.round}: {sorted(pair)} changed"
            elif verdict[0] != "undecided":
                settled[pair] = verdict


def _verdict(decision: Any) -> tuple[str, int]:
    """A pair's verdict independent of how it is listed: (kind, the better model or -1)."""
    kind = decision.verdict.value
    if kind == "a>b":
        return kind, decision.a
    if kind == "b>a":
        return "a>b", decision.b
    return kind, -1


# 15 campaigns of about 13 rounds of 3-4 batches each, each delivered in a shuffled order (it ran
# on 6 campaigns of twice the size: a smaller campaign still pipelines rounds and splits them
# into batches, and more of them try more orders).
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
def test_any_arrival_order_gives_the_same_decisions(
    tmp_path_factory: Any, shuffle: int, seed: int
) -> None:
    tmp = tmp_path_factory.mktemp("order")
    truth = _truth([0.3, 0.45, 0.5, 0.7], 6, seed)
    np.savez(tmp / "s.npz", probs=truth.probs)
    config = write_config(
        tmp / "c.yaml",
        {
            "name": "order",
            "seed": seed % 1000,
            "models": [{"backend": "simulated", "path": "s.npz", "workers": 2}],
            "rubric": {"weights": [0, 1]},
            "policy": {"max_trials_per_question": 24, "round_trials": 24},
            "execution": {"dispatch": "inline", "batch_size": 7},
        },
    )
    ordered = run_inline(load_config(config), tmp / "a", shuffle_seed=0, batches_per_poll=2)
    shuffled = run_inline(load_config(config), tmp / "b", shuffle_seed=shuffle, batches_per_poll=2)
    key = [(d.a, d.b, d.verdict, d.look) for d in ordered.decisions]
    assert key == [(d.a, d.b, d.verdict, d.look) for d in shuffled.decisions]
    assert np.array_equal(ordered.state.counts, shuffled.state.counts)
    assert ordered.stop == shuffled.stop
