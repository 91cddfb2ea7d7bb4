"""The live forecast of the rest of a run and the pilot forecast's spacing predictive.

Oracles: the exponential tilt is checked against the scores it must reach, computed directly;
a snapshot taken after the campaign's last planned round has nothing left to forecast but the
rounds in flight, so every continuation equals the run; the same run with the live forecast
on and off records the same trials in the same rounds (the forecast never changes the run); a
forecast that raises is one event and the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    TEST_DISPATCH,
    base_config,
    ledger,
    mimic_success,
    write_config,
    write_scenario,
)

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import load_config
from adaptive_eval.decide.state import RunState
from adaptive_eval.forecast import forecaster as live_forecast
from adaptive_eval.forecast.campaign import Range, degenerate_evidence
from adaptive_eval.forecast.evidence import wall_model
from adaptive_eval.forecast.forecaster import LiveForecaster
from adaptive_eval.forecast.live import Snapshot, forecast_rest
from adaptive_eval.forecast.paths import freeze_core, thaw_core
from adaptive_eval.forecast.predictive import (
    Resolution,
    ScoreEvidence,
    SpacingPrior,
    tilt_to_scores,
)
from adaptive_eval.forecast.simulate import Truth, run_core
from adaptive_eval.stats.posterior import empirical_bayes_prior

SCORES = [0.25, 0.4, 0.55, 0.7]


def _config(tmp_path: Path, **extra: Any) -> Path:
    scenario = write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    data = base_config(str(scenario))
    for section, values in extra.items():
        data.setdefault(section, {}).update(values)
    return write_config(tmp_path / "c.yaml", data)


def _probs(scores: list[float], questions: int, seed: int = 0) -> np.ndarray:
    success = mimic_success(scores, questions=questions, seed=seed)
    return np.stack([1 - success, success], axis=2)


# -- the predictive -----------------------------------------------------------------------------


@pytest.mark.parametrize("weights", [[0.0, 1.0], [0.0, 0.5, 1.0], [-1.0, 0.0, 2.0]])
def test_the_tilt_reaches_each_models_target_score(weights: list[float]) -> None:
    rng = np.random.default_rng(3)
    w = np.asarray(weights)
    probs = rng.dirichlet(np.ones(len(w)), size=(5, 9))
    targets = np.linspace(w.min() + 0.1, w.max() - 0.1, 5)
    tilted = tilt_to_scores(probs, w, targets)
    assert np.allclose(tilted.sum(axis=2), 1.0)
    assert np.allclose((tilted @ w).mean(axis=1), targets, atol=1e-9)
    if len(w) == 2:  # binary: a logit shift per model keeps the questions' order of difficulty
        order = np.argsort(probs @ w, axis=1)
        assert (np.argsort(tilted @ w, axis=1) == order).all()


def _spacing(probs: np.ndarray, trials: int, seed: int) -> SpacingPrior:
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(trials, probs)
    alpha = empirical_bayes_prior(counts)
    weights = np.array([0.0, 1.0])
    found = SpacingPrior.fit(ScoreEvidence.of(alpha, counts, weights), weights)
    assert found is not None
    return found


def test_precise_evidence_draws_the_spacings_it_measured() -> None:
    """With many trials per question the spacing posterior sits at the observed spacings."""
    probs = _probs([0.2, 0.35, 0.5, 0.65, 0.8], questions=30)
    prior = _spacing(probs, 4000, seed=1)
    truth = np.diff(np.sort((probs[..., 1]).mean(axis=1)))
    draws = np.stack(
        [np.diff(np.sort(prior.draw_scores(np.random.default_rng(i)))) for i in range(50)]
    )
    assert np.abs(draws.mean(axis=0) - truth).max() < 0.01


def test_evenly_spread_models_get_fewer_false_near_ties_than_cell_draws() -> None:
    """The issue's measurement: 12 models 0.06 apart, a pilot of 4. Drawing each cell from its
    posterior (the forecast before) puts a pair closer than 0.02 in most simulated campaigns;
    the deconvolved spacing puts far fewer, and never more."""
    scores = [0.17 + 0.06 * i for i in range(12)]
    probs = _probs(scores, questions=30)
    weights = np.array([0.0, 1.0])
    near_cells, near_spacing = [], []
    for pilot in range(30):
        rng = np.random.default_rng(pilot)
        counts = rng.multinomial(4, probs)
        alpha = empirical_bayes_prior(counts)
        prior = SpacingPrior.fit(ScoreEvidence.of(alpha, counts, weights), weights)
        assert prior is not None
        for draw in range(10):
            inner = np.random.default_rng([pilot, draw])
            cells = inner.dirichlet(np.ones(2), size=1)  # keep the generator's stream apart
            gamma = inner.gamma(alpha + counts)
            cell_scores = (gamma[..., 1] / gamma.sum(axis=2)).mean(axis=1)
            near_cells.append(np.diff(np.sort(cell_scores)).min() < 0.02)
            near_spacing.append(np.diff(np.sort(prior.draw_scores(inner))).min() < 0.02)
            del cells
    assert np.mean(near_cells) > 0.6
    assert np.mean(near_spacing) < np.mean(near_cells) - 0.15


def test_resolution_says_what_pilot_tells_a_typical_gap_from_a_tie() -> None:
    probs = _probs([0.17 + 0.06 * i for i in range(12)], questions=30)
    small = Resolution.of(_spacing(probs, 4, seed=2), 4.0)
    assert not small.resolved and small.needed_per_question is not None
    assert small.needed_per_question > 4
    assert "CANNOT tell" in small.text() and f"{small.needed_per_question} trials" in small.text()
    large = Resolution.of(_spacing(probs, 400, seed=2), 400.0)
    assert large.resolved and "CANNOT" not in large.text()


def test_degenerate_evidence_is_said_plainly() -> None:
    names = ("a", "b", "c")
    weights = np.array([0.0, 1.0])
    failed = np.zeros((3, 4, 2), dtype=np.int64)
    failed[..., 0] = 4  # every trial wrong
    lines = degenerate_evidence(names, failed, weights)
    assert len(lines) == 1 and "every recorded trial of every model scored the same" in lines[0]
    partial = failed.copy()
    partial[2] = 0  # model c: no trial
    lines = degenerate_evidence(names, partial, weights)
    assert "models c have no trial" in lines[0] and "every recorded trial" in lines[1]
    assert degenerate_evidence(names, np.ones((3, 4, 2), dtype=np.int64), weights) == ()


def test_a_zero_width_range_holds_its_own_value() -> None:
    found = Range.of([0.5] * 7 + [0.1 + 0.2 + 0.2])  # 0.5000000000000001 beside 0.5
    assert found.holds(0.5) and found.holds(0.1 + 0.2 + 0.2)
    assert not found.holds(0.51)


def test_wall_time_counts_start_up_once_then_the_steady_rate() -> None:
    # 30 s to the first round of 100 trials, then 400 trials in 40 s: 0.1 s a trial, 20 s start-up.
    startup, rate = wall_model(70.0, 500, {"elapsed_s": 30.0, "trials": 100})
    assert rate == pytest.approx(0.1) and startup == pytest.approx(20.0)
    assert wall_model(70.0, 100, {"elapsed_s": 70.0, "trials": 100}) == (None, 0.7)
    assert wall_model(None, 100, None) == (None, None)


# -- the live forecast --------------------------------------------------------------------------


def _continue(campaign: Any, probs: np.ndarray, stop_round: int | None) -> tuple[Any, RunState]:
    """The campaign run on ``probs`` (seeded), halted after round ``stop_round``."""
    state = RunState(
        campaign.decision.prior,
        campaign.decision.weights,
        bayes_prior=campaign.decision.policy.bayes_prior,
    )
    core = campaign.decision.decision_core()

    class Halt(Exception):
        pass

    def watch(view: Any, outcome: Any) -> None:
        if stop_round is not None and view.round >= stop_round:
            raise Halt

    with contextlib.suppress(Halt):
        run_core(
            core,
            state,
            campaign.decision.view_settings(),
            Truth(probs, campaign.decision.weights),
            np.random.default_rng(5),
            watch=watch,
        )
    return core, state


def test_a_snapshot_survives_the_trip_to_the_worker(tmp_path: Path) -> None:
    campaign = build_campaign(load_config(_config(tmp_path)))
    core, _ = _continue(campaign, _probs(SCORES, 12), stop_round=3)
    copy = thaw_core(freeze_core(core))
    assert copy.decisions == core.decisions and copy is not core
    assert copy.state.memory is not None and all(
        dict(a) == dict(b) for a, b in zip(copy.state.memory, core.state.memory or (), strict=True)
    )


def test_the_live_forecast_converges_on_the_run_it_forecasts(tmp_path: Path) -> None:
    campaign = build_campaign(load_config(_config(tmp_path)))
    probs = _probs(SCORES, 12)
    _, final = _continue(campaign, probs, stop_round=None)
    total = final.trials_used
    rounds = final.applied_rounds
    early, late = [], []
    for stop_round, kept in ((max(rounds // 4, 1), early), (rounds - 1, late)):
        core, state = _continue(campaign, probs, stop_round)
        snapshot = Snapshot(stop_round, freeze_core(core), pickle.dumps(state), 1.0, 0.01, 0, 20)
        found = forecast_rest(campaign.decision, snapshot)
        kept.append(found)
        assert found.trials_used == state.trials_used
        assert found.trials_to_go.p10 >= 0 and found.trials.p50 >= state.trials_used
        assert found.wall_s_to_go is not None
        assert found.wall_s_to_go.p50 == pytest.approx(found.trials_to_go.p50 * 0.01)
    # One round before the stop, what is left is a round or two: the forecast is almost sure.
    assert abs(late[0].trials.p50 - total) <= 2 * campaign.decision.policy.round_trials
    assert late[0].trials.p90 - late[0].trials.p10 <= early[0].trials.p90 - early[0].trials.p10


def test_a_budget_that_will_leave_pairs_unsettled_says_what_would_settle_them(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, budget={"trials": 600})
    campaign = build_campaign(load_config(config))
    core, state = _continue(campaign, _probs(SCORES, 12), stop_round=2)
    found = forecast_rest(
        campaign.decision, Snapshot(2, freeze_core(core), pickle.dumps(state), 0.0, None, 0, 20)
    )
    assert found.budget_trials == 600
    assert found.budget_short is not None and found.budget_short >= 1
    assert found.budget_needed is not None and found.budget_needed > 600
    warning = found.budget_warning()
    assert warning is not None and "trial budget (600)" in warning


def _run(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str], *sets: str) -> Path:
    config = _config(tmp_path)
    out = tmp_path / name
    args = ["run", str(config), "--out", str(out), "--quiet", *TEST_DISPATCH]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    capsys.readouterr()
    return out


def test_the_live_forecast_never_changes_the_run_and_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process (a spawned worker would answer after this small run has ended).
    real_init = LiveForecaster.__init__

    def inline(self: LiveForecaster, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **{**kwargs, "inline": True})

    monkeypatch.setattr(LiveForecaster, "__init__", inline)
    on = _run(tmp_path, "on", capsys)
    off = _run(tmp_path, "off", capsys, "output.live_forecast=0")
    columns = "model, question, trial, seed, category, tokens, round"
    assert ledger(on, columns) == ledger(off, columns)
    summary = json.loads((on / "summary.json").read_text())
    assert json.loads((off / "summary.json").read_text()).get("live_forecast") is None
    history = summary["live_forecast"]
    assert history and all(p["trials"]["p10"] <= p["trials"]["p90"] for p in history)
    assert [p["round"] for p in history] == sorted({p["round"] for p in history})
    events = [json.loads(line) for line in (on / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "live_forecast" for e in events) == len(history)
    assert "## Live forecast over the run" in (on / "report.md").read_text()
    page = (on / "report.html").read_text()
    # A figure from three forecasts on; with fewer, a line of text says how many were made.
    if len(history) >= 3:
        assert "id='live-forecast'" in page
    else:
        assert "id='live-forecast-note'" in page and "id='live-forecast'" not in page


@pytest.mark.parametrize("fault", ["the forecast raises", "the snapshot cannot be sent"])
def test_a_failing_live_forecast_is_one_event_and_the_run_goes_on(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    real_init = LiveForecaster.__init__

    def inline(self: LiveForecaster, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **{**kwargs, "inline": True})

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("worker lost")

    monkeypatch.setattr(LiveForecaster, "__init__", inline)
    if fault == "the forecast raises":
        monkeypatch.setattr(live_forecast, "forecast_rest", broken)
    else:  # an unpicklable plug-in's core, say
        from adaptive_eval.forecast import live

        monkeypatch.setattr(live, "freeze_core", broken)
    out = _run(tmp_path, "broken", capsys)
    plain = _run(tmp_path, "plain", capsys, "output.live_forecast=0")
    columns = "model, question, trial, category, round"
    assert ledger(out, columns) == ledger(plain, columns)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    failed = [e for e in events if e["event"] == "live_forecast_failed"]
    assert len(failed) == 1 and "RuntimeError: worker lost" in failed[0]["message"]
    assert json.loads((out / "summary.json").read_text()).get("live_forecast") is None


def test_the_background_process_answers_without_the_loop_waiting(tmp_path: Path) -> None:
    """A real forecast process, forked warm when the campaign starts (no other thread runs;
    spawned where threads run): the first call only sends (never waits); a later call
    collects."""
    import time

    campaign = build_campaign(load_config(_config(tmp_path)))
    core, state = _continue(campaign, _probs(SCORES, 12), stop_round=2)
    forecaster = LiveForecaster(campaign.decision, simulations=5)
    try:
        forecaster.start()  # forked now, or (threads run: pytest-xdist's) spawned when asked
        found, failed = forecaster.after_round(core, state, 10.0, 0.01)
        assert found is None and failed is None
        assert forecaster.process is not None and forecaster._pending is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found, failed = forecaster._collect()
            if found is not None or failed is not None:
                break
            time.sleep(0.05)
        assert failed is None and found is not None
        assert found.round == state.applied_rounds and forecaster.history == [found]
        assert found.wall_s_to_go is not None
        # Idle a while (its boundary tables built, then waiting): it answers again.
        time.sleep(3.0)
        later, moved = _continue(campaign, _probs(SCORES, 12), stop_round=5)
        assert forecaster.after_round(later, moved, 1e4, 0.01) == (None, None)
        deadline = time.monotonic() + 120
        found = failed = None
        while found is None and failed is None and time.monotonic() < deadline:
            found, failed = forecaster._collect()
            time.sleep(0.05)
        assert failed is None and found is not None and found.round == moved.applied_rounds
    finally:
        forecaster.close()


def test_a_pilot_whose_every_trial_failed_says_so_instead_of_a_zero_resolution(
    tmp_path: Path,
) -> None:
    from adaptive_eval.config.settings import BudgetSettings
    from adaptive_eval.forecast.campaign import forecast
    from adaptive_eval.forecast.evidence import Evidence
    from adaptive_eval.workflows.forecast import render

    campaign = build_campaign(load_config(_config(tmp_path)))
    shape = (campaign.num_models, campaign.num_questions, 4)
    m, q, t = np.indices(shape).reshape(3, -1)
    evidence = Evidence.from_trials(
        shape[:2],
        m,
        q,
        t,
        np.zeros(m.shape, dtype=np.int64),  # every trial wrong
        np.full(m.shape, 100),
        np.zeros(m.shape),
        replayed=True,
        source="pilot",
        detail="a pilot that failed",
    )
    found = forecast(
        campaign, evidence, BudgetSettings(None, None, None), simulations=4, processes=1
    )
    said = render(found)
    assert "every recorded trial of every model scored the same" in said
    assert "+-0.000" not in said
    assert found.record()["degenerate"] == list(found.degenerate)


def test_a_resumed_run_keeps_the_live_forecasts_of_its_earlier_legs(tmp_path: Path) -> None:
    from helpers import NullLog

    from adaptive_eval._testing.dispatch import UnrulyInlineDispatcher
    from adaptive_eval.control.controller import Controller
    from adaptive_eval.loop.rundir import open_run_dir
    from adaptive_eval.store import TrialStore

    campaign = build_campaign(load_config(_config(tmp_path)))
    run_dir = tmp_path / "run"

    def leg(**dispatch: Any) -> int:
        store, _, _ = open_run_dir(campaign, run_dir)
        dispatcher = UnrulyInlineDispatcher(campaign.run.plans, campaign.run.offsets, **dispatch)
        controller = Controller(campaign, store, dispatcher, NullLog())
        controller.live = LiveForecaster(campaign.decision, simulations=3, inline=True)
        try:
            controller.run()
        finally:
            store.close()
        return len(controller.live.history)

    with pytest.raises(KeyboardInterrupt):
        leg(crash_after=14, batches_per_poll=1)
    store = TrialStore(run_dir, readonly=True)
    first = list(store.get_meta("live_forecast") or [])
    store.close()
    assert first
    made = leg()
    store = TrialStore(run_dir, readonly=True)
    history = store.get_meta("live_forecast")
    store.close()
    assert made > 0 and history[: len(first)] == first and len(history) == len(first) + made


def test_closing_stops_a_forecast_still_computing(tmp_path: Path) -> None:
    """A finished run's process must not wait for a forecast nobody will read (Python joins
    its children at exit: a run used to linger 10 s and more)."""
    import time

    campaign = build_campaign(load_config(_config(tmp_path)))
    core, state = _continue(campaign, _probs(SCORES, 12), stop_round=2)
    forecaster = LiveForecaster(campaign.decision, simulations=100_000)  # far longer than this test
    forecaster.start()
    assert forecaster.after_round(core, state, 10.0) == (None, None)
    assert forecaster.process is not None and forecaster._pending is not None
    pid = forecaster.process.process.pid
    assert pid is not None and _running(pid)
    started = time.monotonic()
    forecaster.close()
    assert time.monotonic() - started < 5
    # By pid, not ``is_alive()``: a ``waitpid`` racing another reaper reads as alive.
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (ended, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while being read
        return False


@pytest.mark.slow
def test_no_forecast_process_outlives_a_killed_run(tmp_path: Path) -> None:
    """kill -9 of the watcher and the command: the forecast process they started ends with
    them (it once ran on, re-parented to pid 1, 490 s later)."""
    import os
    import signal
    import subprocess
    import time

    from helpers import CLI, assert_session_ended, session_processes

    scenario = write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    data = base_config(str(scenario), max_trials_per_question=400)
    data["models"][0]["latency"] = {"per_trial_s": 0.004}
    data["execution"]["dispatch"] = "inline"
    config = write_config(tmp_path / "c.yaml", data)
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [str(CLI), "run", str(config), "--out", str(run_dir)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        events = run_dir / "events.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if events.exists() and '"live_forecast"' in events.read_text():
                break
            assert process.poll() is None, "the run ended before its first forecast"
            time.sleep(0.1)
        pids = [int(line.split()[0]) for line in session_processes(process.pid)]
        command = [pid for pid in pids if _parent(pid) == process.pid]
        forecast = [pid for pid in pids if command and _parent(pid) == command[0]]
        assert len(command) == 1 and forecast, session_processes(process.pid)
        for pid in (process.pid, command[0]):  # the watcher and the command, not the forecast
            os.kill(pid, signal.SIGKILL)
        process.wait(10)
        assert_session_ended(process.pid, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


# -- when forecasts are made, and what a failure costs ----------------------------------------


def _forecaster_at(tmp_path: Path, **kwargs: Any) -> tuple[Any, Any, Any, LiveForecaster]:
    campaign = build_campaign(load_config(_config(tmp_path)))
    core, state = _continue(campaign, _probs(SCORES, 12), stop_round=2)
    return campaign, core, state, LiveForecaster(campaign.decision, **kwargs)


def test_the_first_forecast_at_once_then_as_the_run_moves_on(tmp_path: Path) -> None:
    from adaptive_eval.forecast.forecaster import FRESH_GROWTH, FRESH_SHARE, REFRESH_S

    campaign, core, state, forecaster = _forecaster_at(tmp_path, simulations=5, inline=True)
    first, failed = forecaster.after_round(core, state, 100.0, 0.01)
    assert first is not None and failed is None
    # The same round again: nothing new to forecast.
    assert forecaster.after_round(core, state, 100.5) == (None, None)
    later, _ = _continue(campaign, _probs(SCORES, 12), stop_round=3)
    _, moved = _continue(campaign, _probs(SCORES, 12), stop_round=3)
    since = moved.trials_used - state.trials_used
    settled_before = sum(d.settled or d.futile for d in core.decisions)
    settled_after = sum(d.settled or d.futile for d in later.decisions)
    found, _ = forecaster.after_round(later, moved, 101.0)
    enough = min(FRESH_SHARE * first.trials.p50, FRESH_GROWTH * state.trials_used)
    due = since >= enough or settled_after != settled_before
    assert (found is not None) is due
    # A minute on, a forecast is due whatever moved.
    final, final_state = _continue(campaign, _probs(SCORES, 12), stop_round=4)
    found, _ = forecaster.after_round(final, final_state, 101.0 + REFRESH_S + 1)
    assert found is not None or final.stop is not None


def test_the_forecast_keeps_within_its_share_of_the_wall_time(tmp_path: Path) -> None:
    from adaptive_eval.forecast.forecaster import INLINE_DUTY

    campaign, core, state, forecaster = _forecaster_at(tmp_path, simulations=5, inline=True)
    found, _ = forecaster.after_round(core, state, 1e-3, 0.01)
    assert found is not None
    assert forecaster.busy_s > INLINE_DUTY * 1e-3
    later, moved = _continue(campaign, _probs(SCORES, 12), stop_round=6)
    # The run is far too young for a second forecast's compute: none is made.
    assert forecaster.after_round(later, moved, 2e-3) == (None, None)
    found, _ = forecaster.after_round(later, moved, 1e4)
    assert found is not None


def test_the_simulations_grow_while_a_forecast_is_quick(tmp_path: Path) -> None:
    from adaptive_eval.forecast.forecaster import MAX_GROWTH

    campaign, core, state, forecaster = _forecaster_at(tmp_path, simulations=5, inline=True)
    sizes = []
    for stop_round in range(2, 12):
        core, state = _continue(campaign, _probs(SCORES, 12), stop_round=stop_round)
        found, _ = forecaster.after_round(core, state, 1e4 * stop_round)
        if found is not None:
            sizes.append(found.simulations)
    assert sizes[0] == 5 and max(sizes) > 5 and max(sizes) <= 5 * MAX_GROWTH
    assert sizes == sorted(sizes)


class _DyingProcess:
    """A forecast process that dies as soon as it is asked."""

    def __init__(self, campaign: Any) -> None:
        self.closed = False

    def send(self, snapshot: Any) -> None:
        pass

    def answer(self) -> Any:
        raise RuntimeError("the forecast process ended (exit code -9)")

    def close(self) -> None:
        self.closed = True


def test_a_dead_process_is_one_failure_then_the_forecast_goes_on_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_forecast, "ForecastProcess", _DyingProcess)
    campaign, core, state, forecaster = _forecaster_at(tmp_path, simulations=5)
    forecaster.start()
    assert forecaster.after_round(core, state, 10.0) == (None, None)  # sent
    found, failed = forecaster.after_round(core, state, 10.1)
    assert found is None and failed is not None and "exit code -9" in failed
    assert forecaster.inline and forecaster.process is None
    later, moved = _continue(campaign, _probs(SCORES, 12), stop_round=4)
    found, failed = forecaster.after_round(later, moved, 1e4)
    assert found is not None and failed is None  # in this process from now on


def test_a_forecast_that_fails_here_too_stops_forecasting_without_another_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_forecast, "ForecastProcess", _DyingProcess)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no forecast today")

    monkeypatch.setattr(live_forecast, "forecast_rest", broken)
    campaign, core, state, forecaster = _forecaster_at(tmp_path, simulations=5)
    forecaster.start()
    said = []
    for stop_round in range(2, 8):
        core, state = _continue(campaign, _probs(SCORES, 12), stop_round=stop_round)
        said.append(forecaster.after_round(core, state, 1e4 * stop_round)[1])
    assert [line for line in said if line is not None] == [
        "RuntimeError: the forecast process ended (exit code -9)"
    ]
    assert len(forecaster.failures) == 2 and forecaster._off


def test_compare_campaigns_and_their_cores_can_be_sent_to_the_forecast_process(
    tmp_path: Path,
) -> None:
    """The closures of compare's pair selectors failed to pickle: every compare run logged a
    live_forecast_failed per round and never forecast."""
    from adaptive_eval.campaign.checkpoint import compare_campaign

    campaign = build_campaign(load_config(_config(tmp_path)))
    for margin in (None, 0.05):
        steered, _ = compare_campaign(campaign, campaign.names[1], margin)
        copy = pickle.loads(pickle.dumps(steered))
        assert copy.names == steered.names
        core = steered.decision.decision_core()
        assert thaw_core(freeze_core(core)).pairs == core.pairs
