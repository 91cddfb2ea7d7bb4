"""Issue 15, item 8: progress that means something, on a terminal and in a CI log."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import NullLog, base_config, load, mimic_success, write_config, write_scenario

from adaptive_eval.base.logs import ConsoleLines
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.control import round_events
from adaptive_eval.control.controller import Controller
from adaptive_eval.dispatch import InlineDispatcher
from adaptive_eval.loop.progress import Progress
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.outputs.report import render_console


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_controller(
    planned: np.ndarray,
    wanted: list[bool],
    recorded: int,
    undecided: int = 2,
    live: Any = None,
    rate: float | None = None,
) -> Any:
    """What Progress reads of a controller: the plan, the needed models, the recorded trials,
    the live forecast and the run's steady seconds per trial."""
    return SimpleNamespace(
        live=live,
        seconds_per_trial=lambda: rate,
        state=SimpleNamespace(planned=planned),
        campaign=SimpleNamespace(
            decision=SimpleNamespace(capacity=np.array([10] * len(planned))),
            run=SimpleNamespace(
                fixed_n=5, settings=SimpleNamespace(budget=SimpleNamespace(trials=None))
            ),
        ),
        wanted=np.array(wanted),
        store=SimpleNamespace(count_trials=lambda: recorded),
        decisions=[SimpleNamespace(settled=i >= undecided) for i in range(2)],
    )


def _steps() -> list[Any]:
    """A campaign of 3 models x 4 questions, cap 10: models drop out, one comes back."""
    planned = np.zeros((3, 4), dtype=np.int64)
    out = []
    for step, wanted in enumerate(
        [[True] * 3, [True] * 3, [True, True, False], [True, False, False], [True, True, False]]
    ):
        planned = planned + np.array(wanted, dtype=np.int64)[:, None] * 2
        out.append(fake_controller(planned.copy(), wanted, recorded=int(planned.sum()) - 4 * step))
    return out


def test_progress_total_is_the_cap_bound_and_never_goes_backwards() -> None:
    progress = Progress(ConsoleLines(io.StringIO()), True, clock=FakeClock())
    totals, fractions = [], []
    for controller in _steps():
        progress(controller)
        assert progress.total is not None and progress.total >= progress.done
        totals.append(progress.total)
        fractions.append(progress.done / progress.total)
    assert totals[0] == 3 * 4 * 10  # every model to the cap
    assert totals == sorted(totals, reverse=True)  # shrinks as models settle, never grows
    assert fractions == sorted(fractions)  # the bar only moves forward


def test_the_total_is_an_upper_bound_even_when_a_set_aside_model_comes_back() -> None:
    """Issue 22, workflow 2: the total counted only the models needed at that moment, and a
    model set aside could be needed again (95,792 trials against "at most 90,534")."""
    progress = Progress(ConsoleLines(io.StringIO()), True, clock=FakeClock())
    steps = [
        fake_controller(np.array([[2], [2]]), [True, False], recorded=4),
        fake_controller(np.array([[10], [10]]), [True, True], recorded=20),
    ]
    totals = []
    for controller in steps:
        progress(controller)
        totals.append(progress.total)
    assert all(total is not None and total >= progress.done == 20 for total in totals), totals


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_says_what_was_saved_not_what_was_recorded() -> None:
    """Issue 22, workflow 1: "trials saved 13392" printed the trials recorded (the demo saved
    13,008 of the fixed-N run's 26,400)."""
    stream = _Terminal()
    progress = Progress(ConsoleLines(stream), True, clock=FakeClock())
    planned = np.full((3, 4), 3)
    progress(fake_controller(planned, [True] * 3, recorded=36))
    progress.close(finished=True)
    text = stream.getvalue()
    baseline = 3 * 4 * 5
    assert f"recorded 36 (fixed-N run {baseline})" in text
    assert f"trials saved {baseline - 36} (40.0%) of the fixed-N run's {baseline}" in text
    assert "trials saved 36" not in text


def test_a_run_served_by_the_library_says_it_sampled_nothing() -> None:
    """Issue 29's walk-through: a night that sampled nothing printed "progress: done, trials
    saved 14,172 (53.7%)" just before "sampled 0 trials, reused 12228"."""
    stream = io.StringIO()
    progress = Progress(ConsoleLines(stream), True, clock=FakeClock())
    planned = np.full((3, 4), 3)
    progress(fake_controller(planned, [True] * 3, recorded=36))
    progress.close(finished=True, reused=36)
    assert "progress: done, 0 sampled, 36 reused from the trial library; trials saved" in (
        stream.getvalue()
    )


def test_eta_is_the_rate_to_the_bound() -> None:
    clock = FakeClock()
    progress = Progress(ConsoleLines(io.StringIO()), True, clock=clock)
    planned = np.full((3, 4), 2)
    progress(fake_controller(planned, [True] * 3, recorded=20))
    clock.now = 10.0
    progress(fake_controller(planned * 2, [True] * 3, recorded=40))
    assert progress.eta_s(clock.now) == pytest.approx((120 - 40) / 2.0)


def test_status_lines_appear_periodically_when_not_a_terminal() -> None:
    clock = FakeClock()
    stream = io.StringIO()  # not a TTY: a CI log
    progress = Progress(ConsoleLines(stream), True, interval_s=15, clock=clock)
    for second, controller in zip([0, 5, 16, 20, 40], _steps(), strict=True):
        clock.now = float(second)
        progress(controller)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2  # at 16 s and 40 s
    assert all(line.startswith("progress: ") and "of at most" in line for line in lines)
    assert "ETA" not in lines[1] and "s to go" in lines[1]
    quiet = io.StringIO()
    silent = Progress(ConsoleLines(quiet), False, interval_s=0, clock=clock)
    silent(_steps()[0])
    assert quiet.getvalue() == ""


def _forecast(trials_used: int = 24, rate: float | None = None) -> Any:
    from adaptive_eval.forecast.campaign import Range as Spread
    from adaptive_eval.forecast.live import LiveForecast

    return LiveForecast(
        round=3,
        trials_used=trials_used,
        elapsed_s=5.0,
        simulations=20,
        trials=Spread(7124, 9824, 14324),
        trials_to_go=Spread(7100, 9800, 14300),
        tokens_to_go=None,
        gpu_s_to_go=None,
        wall_s_to_go=Spread(60, 95, 150),
        pairs_to_settle=Spread(1, 2, 2),
        settled_now=0,
        seconds_per_trial=rate,
    )


def test_status_lines_carry_the_live_forecast_once_it_has_one() -> None:
    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(ConsoleLines(stream), True, interval_s=60, clock=clock)
    planned = np.full((3, 4), 2)
    live = SimpleNamespace(history=[])
    progress(fake_controller(planned, [True] * 3, recorded=20, live=live))
    live.history.append(_forecast())
    clock.now = 2.0
    # The first forecast gets a line at once (a run shorter than the interval still shows it).
    progress(fake_controller(planned, [True] * 3, recorded=24, live=live))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(
        "; forecast: about 9,800 trials to go (7,100 to 14,300), about 2 min, as of 0%"
    )


def test_between_forecasts_the_line_counts_down_at_the_rate_now() -> None:
    forecast = _forecast(trials_used=2000, rate=0.01)
    # 1,800 recorded since the forecast: 8,000 to go, priced at the run's rate now.
    line = forecast.line(3800, 0.02)
    assert line == "about 8,000 trials to go (5,300 to 12,500), about 3 min, as of 20%"
    assert forecast.line(3800).endswith("about 80 s, as of 20%")  # the forecast's own rate
    assert forecast.line(20000).startswith("about 0 trials to go (0 to 0)")  # never below 0


def test_a_new_forecast_gets_a_line_a_few_seconds_after_the_last() -> None:
    from adaptive_eval.loop.progress import FORECAST_LINE_S

    clock = FakeClock()
    stream = io.StringIO()
    progress = Progress(ConsoleLines(stream), True, interval_s=60, clock=clock)
    planned = np.full((3, 4), 2)
    live = SimpleNamespace(history=[_forecast()])
    progress(fake_controller(planned, [True] * 3, recorded=24, live=live, rate=0.01))
    clock.now = 1.0
    progress(fake_controller(planned, [True] * 3, recorded=30, live=live, rate=0.01))
    live.history.append(_forecast(trials_used=40))
    clock.now = 1.5
    progress(fake_controller(planned, [True] * 3, recorded=40, live=live, rate=0.01))
    assert len(stream.getvalue().splitlines()) == 1  # too soon after the first line
    clock.now = 1.0 + FORECAST_LINE_S
    progress(fake_controller(planned, [True] * 3, recorded=50, live=live, rate=0.01))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "about 9,790 trials to go" in lines[1]


def test_the_console_says_a_stop_left_pairs_undecided() -> None:
    from adaptive_eval.base import summary_schema as schema

    # Only what the console reads (model_construct: the rest of a summary left out).
    summary = schema.Summary.model_construct(
        name="x",
        stop_reason="budget",
        stop_detail="trial budget spent",
        models=[],
        pairs=[
            schema.PairRow.model_construct(a="p", b="q", decision="undecided", z=0.5, reason=None)
        ],
        trials_used=300,
        baseline=schema.Baseline.model_construct(fixed_n=80, trials=2640, note=None),
        compute_saved=schema.ComputeSaved.model_construct(
            trials_fraction=0.886, tokens_fraction=None
        ),
        score=schema.ScoreBlock.model_construct(
            confidence=0.95, interval="anytime", simultaneous=False, half_width=None
        ),
        bayes=schema.BayesBlock.model_construct(prior="uniform"),
        decision_rules=schema.DecisionRules(),
    )
    text = render_console(summary)
    assert "saved 88.6% of trials (stopped on budget with 1 pair(s) undecided)" in text


def test_the_first_slow_policy_step_is_warm_up_not_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step counts as slow here: only the first of each phase is excused (it builds the
    rules' tables); the warning still fires for the policy's later slow steps."""
    monkeypatch.setattr(round_events, "SLOW_POLICY_S", -1.0)
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]), names=["a", "b"])
    config = load(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    campaign = build_campaign(config)
    store, _, _ = open_run_dir(campaign, tmp_path / "run")
    log = NullLog()
    try:
        Controller(
            campaign, store, InlineDispatcher(campaign.run.plans, campaign.run.offsets), log
        ).run()
    finally:
        store.close()
    warmups = [kw["phase"] for level, event, kw in log.events if event == "policy_warmup"]
    slow = [kw["phase"] for level, event, kw in log.events if event == "slow_policy"]
    # The decide phase also warms up on each step that computes new boundary tables (a new
    # error budget), so it may appear more than once.
    assert warmups.count("allocate") == 1 and set(warmups) == {"allocate", "decide"}
    assert all(level == "info" for level, event, _ in log.events if event == "policy_warmup")
    assert slow  # later slow steps still warn
