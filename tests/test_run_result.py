"""The run's end as a frozen snapshot (issue 27): outputs never read the live controller, and a
re-read of a recorded run writes nothing to its store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

from adaptive_eval.base.logs import SilentLog
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.control.controller import Controller
from adaptive_eval.control.run_result import FinishedRun, RunFacts, finished_run
from adaptive_eval.decide.contracts import adjacent_only
from adaptive_eval.loop.runner import _NoDispatch
from adaptive_eval.outputs.provenance import collect
from adaptive_eval.outputs.summary import build_summary
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.report import report_run


@pytest.fixture()
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(config), tmp_path / "run")
    return config, tmp_path / "run"


def _replayed(config: Path, run_dir: Path) -> tuple[Controller, TrialStore]:
    campaign = build_campaign(load(config))
    store = TrialStore(run_dir)
    controller = Controller(campaign, store, _NoDispatch(), SilentLog(), record_events=False)
    controller.resume()
    return controller, store


def test_the_snapshot_is_frozen_and_detached_from_the_controller(
    recorded: tuple[Path, Path],
) -> None:
    config, run_dir = recorded
    controller, store = _replayed(config, run_dir)
    try:
        run = finished_run(controller, "cid", RunFacts(resumed=True))
        counts, trials = run.view.counts.copy(), run.view.trials.copy()
        provenance = collect(run_dir, store)
        summary = build_summary(controller.campaign, run, provenance)
        # The live state moves on (another round applied, a plan added): the snapshot does not.
        controller.state.counts += 1
        controller.state.trials += 2
        controller.state.plans.append(np.ones_like(run.plans[0]))
        assert np.array_equal(run.view.counts, counts) and np.array_equal(run.view.trials, trials)
        assert len(run.plans) == len(controller.state.plans) - 1
        assert build_summary(controller.campaign, run, provenance) == summary
        with pytest.raises(ValueError, match="read-only"):
            run.plans[0][0, 0] = 99
        with pytest.raises(dataclasses.FrozenInstanceError):
            run.campaign_id = "other"  # type: ignore[misc]
        assert summary.resumed is True and summary.dispatch is None
    finally:
        store.close()


def test_the_summary_comes_from_the_snapshot_alone(recorded: tuple[Path, Path]) -> None:
    config, run_dir = recorded
    controller, store = _replayed(config, run_dir)
    try:
        run = finished_run(controller, "cid", RunFacts())
        summary = build_summary(controller.campaign, run, collect(run_dir, store))
    finally:
        store.close()
    assert isinstance(run, FinishedRun)
    assert summary.trials_used == int(run.view.trials.sum())
    scores = {m.name: m.score for m in summary.models}
    for index, name in enumerate(controller.campaign.names):
        assert scores[name] == pytest.approx(float(run.view.theta[index]), abs=0)
    names = controller.campaign.names
    assert [(p.a, p.b, p.decision) for p in summary.pairs] == [
        (names[d.a], names[d.b], d.verdict.value) for d in adjacent_only(run.decisions, run.view)
    ]
    assert summary.pairs


def test_report_rereads_without_writing_an_event(recorded: tuple[Path, Path]) -> None:
    config, run_dir = recorded
    store = TrialStore(run_dir)
    # As a run killed between a round's commit and its events' leaves it: the re-read replays
    # those rounds too, and must not write their events (only a resume of the run may).
    store.set_meta(events_through=0)
    before = store.events()
    store.close()
    first = report_run(build_campaign(load(config)), run_dir)
    second = report_run(build_campaign(load(config)), run_dir)
    store = TrialStore(run_dir, readonly=True)
    after = store.events()
    store.close()
    assert after == before and before
    assert first.pairs == second.pairs and first.finished is True
    assert json.loads((run_dir / "summary.json").read_text())["trials_used"] == first.trials_used


# -- the dispatch counters: summary.json's typed block, written back as recorded --------------


def test_dispatch_block_gives_back_the_recorded_counts() -> None:
    from pydantic import ValidationError

    from adaptive_eval.base.summary_schema import Dispatch, record
    from adaptive_eval.dispatch import combine_dispatch

    leg = {
        "workers": 2,
        "batches": 7,
        "failed_batches": 0,
        "worker_restarts": 0,
        "worker_utilisation": 0.5,
        "model_loads": 2,
        "load_s": 0.0,
        "request_retries": 1,
        "request_retry_reasons": {"timeout": 1},
    }
    counts = Dispatch.model_validate(leg)
    assert counts.workers == 2 and counts.worker_utilisation == 0.5
    assert counts.request_retry_reasons == {"timeout": 1}
    assert json.dumps(record(counts)) == json.dumps(leg)
    # A block recorded by an earlier version: a key no longer counted, another order, a null.
    old = {"prefetch": {"sent": 3, "used": 2, "unused": 1}, "batches": 4, "workers": None}
    counts = Dispatch.model_validate(old)
    assert counts.model_extra == {"prefetch": {"sent": 3, "used": 2, "unused": 1}}
    assert counts.batches == 4 and counts.workers is None and counts.load_s is None
    assert record(counts) == old  # nothing it did not record is added
    merged = combine_dispatch(counts, Dispatch.model_validate(leg), True)
    assert merged.batches == 11 and merged.workers == 2
    assert merged.model_extra == {"prefetch": {"sent": 3, "used": 2, "unused": 1}}
    assert combine_dispatch(counts, Dispatch.model_validate(leg), False) == counts
    assert record(Dispatch(workers=1, load_s=2.5)) == {"workers": 1, "load_s": 2.5}
    for damaged in ({"batches": "7"}, {"batches": True}):
        with pytest.raises(ValidationError, match=r"batches"):
            Dispatch.model_validate(damaged)
    with pytest.raises(ValidationError, match="frozen"):
        counts.batches = 5  # type: ignore[misc]


def test_summary_json_dispatch_block_is_the_stores_record(tmp_path: Path) -> None:
    """The run's RunFacts carry the typed dispatch block; summary.json's block is the store's
    record, in the schema's order, after the run and after ``report`` re-reads it."""
    from adaptive_eval.base.summary_schema import record
    from adaptive_eval.command_line.cli import main
    from adaptive_eval.dispatch import dispatch_summary
    from adaptive_eval.dispatch.inline import InlineDispatcher

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_dir = tmp_path / "run"
    quiet = ["--set", "execution.dispatch=inline", "--quiet"]
    assert main(["run", str(config), "--out", str(run_dir), *quiet]) == 0
    store = TrialStore(run_dir, readonly=True)
    try:
        recorded = store.get_meta("dispatch")
    finally:
        store.close()
    assert recorded["batches"] > 0
    written = json.loads((run_dir / "summary.json").read_text())["dispatch"]
    assert written == recorded
    campaign = build_campaign(load(config))
    order = list(
        record(dispatch_summary(InlineDispatcher(campaign.run.plans, campaign.run.offsets)))
    )
    assert list(written) == order
    assert main(["report", str(run_dir), "--json"]) == 0
    reread = json.loads((run_dir / "summary.json").read_text())["dispatch"]
    assert reread == recorded and list(reread) == order


def test_a_damaged_dispatch_record_is_one_line_naming_it(
    recorded: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A counter the store kept as text is a damaged record: ``report`` says so in one line
    naming the block and the counter, never a summary that counts it."""
    from helpers import one_error_line

    from adaptive_eval.command_line.cli import main

    config, run_dir = recorded
    store = TrialStore(run_dir)
    store.set_meta(dispatch={"batches": "7", "workers": 1})
    store.close()
    assert main(["report", str(run_dir), "--config", str(config)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "dispatch.batches" in line and str(run_dir) in line
