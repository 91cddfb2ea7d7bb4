"""Extending a capped run: raising budget.* or policy.max_trials_per_question on resume
continues the same campaign, and the result equals one run with the larger limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import (
    base_config,
    ledger,
    load,
    mimic_success,
    run_inline,
    write_config,
    write_scenario,
)

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.types import StopReason
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.store import TrialStore

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture()
def scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))


def meta(run_dir: Path, key: str) -> object:
    store = TrialStore(run_dir, readonly=True)
    try:
        return store.get_meta(key)
    finally:
        store.close()


def round_sizes(run_dir: Path) -> list[int]:
    store = TrialStore(run_dir, readonly=True)
    try:
        return [int(plan.sum()) for plan in store.rounds()]
    finally:
        store.close()


def test_raised_trial_budget_continues_to_the_same_result(tmp_path: Path, scenario: Path) -> None:
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    reference = run_inline(load(path), tmp_path / "ref")
    sizes = round_sizes(tmp_path / "ref")
    assert len(sizes) >= 4, "the scenario must need several rounds"
    first_leg = int(np.cumsum(sizes)[2])  # the budget ends the first leg at a round boundary
    capped = run_inline(load(path, [f"budget.trials={first_leg}"]), tmp_path / "run")
    assert capped.stop is not None and capped.stop.reason is StopReason.TRIAL_BUDGET
    assert capped.state.trials_used == first_leg < reference.state.trials_used
    campaign_id = meta(tmp_path / "run", "campaign_id")

    extended = run_inline(load(path, ["budget.trials=100000"]), tmp_path / "run")
    assert meta(tmp_path / "run", "campaign_id") == campaign_id
    assert ledger(tmp_path / "run") == ledger(tmp_path / "ref")
    assert extended.decisions == reference.decisions
    assert extended.stop == reference.stop
    assert extended.state.counts.tolist() == reference.state.counts.tolist()
    history = meta(tmp_path / "run", "extensions")
    assert isinstance(history, list) and len(history) == 1
    assert history[0]["from"]["budget"]["trials"] == first_leg
    assert history[0]["to"]["budget"]["trials"] == 100000
    assert history[0]["trials"] == first_leg
    # The run folder's config follows, so `adaptive-eval report DIR` reads the new limit.
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["budget"]["trials"] == 100000


def test_raised_cap_continues_to_the_same_result(tmp_path: Path, scenario: Path) -> None:
    # Uniform allocation moves every model in step, so the smaller cap binds on one round for
    # all models at once: the case where "the same campaign" can be checked trial for trial.
    data = base_config(
        "s.npz",
        rope=None,
        confidence=0.999,
        allocation={"name": "uniform", "trials_per_round": 4},
        max_trials_per_question=40,
        # Futility depends on the cap (a raised cap reopens futile pairs), so a run that
        # stopped on futility at 20 goes on differently from one capped at 40 from the start.
        futility=0,
    )
    path = write_config(tmp_path / "c.yaml", data)
    reference = run_inline(load(path), tmp_path / "ref")
    assert reference.state.trials.max() == 40
    capped = run_inline(load(path, ["policy.max_trials_per_question=20"]), tmp_path / "run")
    assert capped.stop is not None and capped.stop.reason is StopReason.MAX_TRIALS
    assert capped.state.trials.max() == 20

    extended = run_inline(load(path), tmp_path / "run")
    assert ledger(tmp_path / "run") == ledger(tmp_path / "ref")
    assert extended.decisions == reference.decisions
    assert extended.stop == reference.stop


def test_trial_changing_fields_are_still_refused(tmp_path: Path, scenario: Path) -> None:
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(path, ["budget.trials=100"]), tmp_path / "run")
    changed = build_campaign(load(path, ["budget.trials=500", "policy.min_trials_per_question=3"]))
    with pytest.raises(InputError) as info:
        open_run_dir(changed, tmp_path / "run")
    message = str(info.value)
    assert "policy.min_trials_per_question: 2 -> 3" in message
    assert "budget" not in message


def test_a_run_recorded_with_limits_in_its_identity_still_resumes(
    tmp_path: Path, scenario: Path
) -> None:
    """Run folders written before limits left the identity hold them there: not a change."""
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(path, ["budget.trials=100"]), tmp_path / "run")
    store = TrialStore(tmp_path / "run")
    old = store.get_meta("identity")
    old["config"]["budget"] = {"trials": 100, "tokens": None, "wall_clock_s": None}
    old["config"]["policy"]["max_trials_per_question"] = 40
    store.set_meta(identity=old, fingerprint="recorded-by-an-older-version")
    store.close()
    store, _, resumed = open_run_dir(
        build_campaign(load(path, ["budget.trials=300"])), tmp_path / "run"
    )
    store.close()
    assert resumed
    assert meta(tmp_path / "run", "fingerprint") == build_campaign(load(path)).run.fingerprint
