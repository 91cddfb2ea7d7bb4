"""What the pages and the console say of the live forecast, of a budget's cut and of a gate that
stopped on purpose (issue 47, item 5; issue 48, items 12 and 13).

Each page is rendered from a real run's summary.json with the fields under test set by hand,
so what is asserted is the wording a user reads, not a function's return value alone."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

from adaptive_eval.base.summary_schema import read_summary
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.outputs.headline import headline
from adaptive_eval.outputs.presentation import (
    LIVE_PLOT_MIN,
    _places,
    cut_text,
    live_forecast_rows,
)
from adaptive_eval.outputs.report import render_console, write_outputs
from adaptive_eval.workflows.report import report_run

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A finished in-process run's folder and its summary as a dict."""
    tmp_path = tmp_path_factory.mktemp("pages")
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(config), tmp_path / "run")
    return tmp_path / "run", summary_dict(
        report_run(build_campaign(load(config)), tmp_path / "run")
    )


def _point(trials_used: int, total: float, **extra: Any) -> dict[str, Any]:
    spread = {"p10": total * 0.8, "p50": total, "p90": total * 1.2}
    return {
        "round": trials_used // 100,
        "trials_used": trials_used,
        "elapsed_s": trials_used / 100,
        "simulations": 20,
        "trials": spread,
        "trials_to_go": {k: v - trials_used for k, v in spread.items()},
        "tokens_to_go": None,
        "gpu_s_to_go": None,
        "wall_s_to_go": {"p10": 10.0, "p50": 12.0, "p90": 15.0},
        "pairs_to_settle": {"p10": 1.0, "p50": 2.0, "p90": 3.0},
        "settled_now": 0,
        "budget_trials": None,
        "budget_short": None,
        "budget_needed": None,
        "seconds": 0.2,
        **extra,
    }


def _with(summary: dict[str, Any], **fields: Any) -> dict[str, Any]:
    changed = copy.deepcopy(summary)
    changed.update(fields)
    return changed


def test_the_table_takes_each_quarters_nearest_forecast_and_marks_where_none_was_made(
    finished: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = finished
    final = summary["trials_used"]
    points = [_point(int(0.24 * final), final * 1.1), _point(int(0.52 * final), final)]
    rows = live_forecast_rows(read_summary(_with(summary, live_forecast=points)))
    assert [row[0] for row in rows] == [
        "10% (none made there: the nearest)",
        "25%",
        "50%",
        "75% (none made there: the nearest)",
    ]
    assert rows[1][1].endswith("(24%)") and rows[1][4] == "yes"
    assert rows[2][1].endswith("(52%)")


def test_the_figure_needs_three_forecasts_else_a_line_says_how_many(
    finished: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = finished
    final = summary["trials_used"]
    two = [_point(int(s * final), final) for s in (0.2, 0.6)]
    write_outputs(run_dir, read_summary(_with(summary, live_forecast=two)))
    page = (run_dir / "report.html").read_text()
    assert "id='live-forecast'" not in page and "id='live-forecast-note'" in page
    assert "2 live forecasts made during the run" in page
    many = [_point(int(s * final), final) for s in (0.1, 0.3, 0.5, 0.7)][: max(LIVE_PLOT_MIN, 3)]
    write_outputs(run_dir, read_summary(_with(summary, live_forecast=many)))
    page = (run_dir / "report.html").read_text()
    assert "id='live-forecast'" in page and "id='live-forecast-note'" not in page
    assert "## Live forecast over the run" in (run_dir / "report.md").read_text()


def test_a_budget_too_small_is_said_in_the_headline_and_both_reports(
    finished: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = finished
    final = summary["trials_used"]
    short = _point(
        int(0.3 * final), final, budget_trials=3000, budget_short=2.0, budget_needed=5400.0
    )
    said = (
        "the trial budget (3,000) will likely leave 2 pair(s) unsettled that the campaign can "
        "settle; about 5,400 trials would settle them"
    )
    changed = read_summary(_with(summary, live_forecast=[short]))
    assert f"forecast: {said}" in headline(changed).details
    write_outputs(run_dir, changed)
    assert f"- forecast: {said}" in (run_dir / "report.md").read_text()
    assert f"Budget: {said}." in (run_dir / "report.md").read_text()
    page = (run_dir / "report.html").read_text()
    assert "id='budget-short'" in page and said in page


def test_a_budgets_cut_is_not_called_a_saving(finished: tuple[Path, dict[str, Any]]) -> None:
    """The last console line of a run the budget ended read "saved 24.2% ... (stopped on
    trial_budget with 9 pair(s) undecided)"."""
    run_dir, summary = finished
    changed = _with(summary, stop_reason="trial_budget", stop_detail="300 trials used of 300")
    changed["pairs"][0]["decision"] = "undecided"
    typed = read_summary(changed)
    cut = cut_text(typed)
    undecided = sum(p["decision"] == "undecided" for p in changed["pairs"])
    assert cut is not None
    assert cut.startswith(f"cut by the trial budget with {undecided} pair(s) undecided")
    assert cut.endswith("a cut, not a saving")
    last = render_console(typed).splitlines()[-1]
    assert "cut by the trial budget" in last and "saved" not in last
    write_outputs(run_dir, typed)
    page = (run_dir / "report.html").read_text()
    assert "a cut, not a saving" in page and "not a settled ranking's" not in page
    assert "(a budget's cut, not a saving)" in (run_dir / "report.md").read_text()
    assert cut_text(read_summary(summary)) is None


def test_a_gate_stopped_at_a_regression_owes_no_note_and_says_its_trials_once(
    finished: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = finished
    name = summary["models"][0]["name"]
    verdict = {
        "incumbent": summary["models"][1]["name"],
        "decision": "worse",
        "z": -4.0,
        "boundary": 3.3,
        "decided_at_round": 3,
        "trials_at_decision": 100,
        "trials": 100,
    }
    undecided = {**verdict, "incumbent": summary["models"][2]["name"], "decision": "undecided"}
    comparison = {
        "candidate": name,
        "margin": None,
        "exit_code": 3,
        "meaning": "a regression",
        "stopped": "the candidate is a regression against it",
        "verdicts": [verdict, undecided],
    }
    write_outputs(run_dir, read_summary(_with(summary, comparison=comparison)))
    page = (run_dir / "report.html").read_text()
    assert "not a settled ranking's" not in page
    trials = summary["trials_used"]
    assert f"Trials used {trials:,} against" in page
    assert f"{trials:,} trials used." not in page  # once, not twice
    # Undecided at the cap (exit 4): the note stands.
    held = {**comparison, "exit_code": 4, "meaning": "undecided", "verdicts": [undecided]}
    write_outputs(run_dir, read_summary(_with(summary, comparison=held)))
    assert "not a settled ranking's" in (run_dir / "report.html").read_text()


@pytest.mark.parametrize(
    ("low", "high", "value", "places", "shown"),
    [
        (0.2371, 0.2389, 0.2396, 1, 3),  # printed "0.2 (0.2 to 0.2) / 0.2 / no"
        (0.2, 0.2, 0.2, 1, 1),  # a zero-width range holding its value: as it was
        (1000.0, 2000.0, 1500.0, 0, 0),
        (1000.0, 2000.0, 2000.4, 0, 1),
    ],
)
def test_a_value_outside_its_range_is_printed_outside_it(
    low: float, high: float, value: float, places: int, shown: int
) -> None:
    assert _places(low, high, value, places) == shown


def test_a_forecast_of_engines_on_cpu_says_there_is_no_gpu(tmp_path: Path) -> None:
    """vLLM on CPU printed "GPU-seconds: 0 s": its device-seconds are its CPU seconds."""
    from dataclasses import replace

    import numpy as np

    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.settings import BudgetSettings
    from adaptive_eval.forecast.campaign import forecast
    from adaptive_eval.forecast.evidence import Evidence
    from adaptive_eval.workflows.forecast import render

    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=6))
    campaign = build_campaign(load(write_config(tmp_path / "c.yaml", base_config("s.npz"))))
    m, q, t = np.indices((campaign.num_models, campaign.num_questions, 4)).reshape(3, -1)
    evidence = Evidence.from_trials(
        (campaign.num_models, campaign.num_questions),
        m,
        q,
        t,
        (t % 2).astype(np.int64),
        np.full(m.shape, 50),
        np.full(m.shape, 0.0004),  # the engine's seconds per trial, on a CPU
        replayed=True,
        source="pilot",
        detail="a pilot on CPU",
        elapsed_s=5.0,
        startup_s=1.0,
        seconds_per_trial=0.01,
    )
    found = forecast(campaign, evidence, BudgetSettings(None, None, None), simulations=10)
    assert found.gpu_s is not None
    on_cpu = render(replace(found, gpu=False))
    assert "GPU-seconds" not in on_cpu and "(no GPU: the engines' seconds on CPU)" in on_cpu
    line = next(x for x in on_cpu.splitlines() if x.strip().startswith("device-s:"))
    assert " 0 s" not in line  # seconds below 1 keep their decimals
    assert "GPU-seconds:" in render(replace(found, gpu=True))


def test_the_compute_plots_fixed_n_line_says_what_it_counts(
    finished: tuple[Path, dict[str, Any]],
) -> None:
    """The dashed line read "fixed-N run": N per question and per model, as the README says it
    (issue 48, item 15)."""
    run_dir, summary = finished
    write_outputs(run_dir, read_summary(summary))
    page = (run_dir / "report.html").read_text()
    fixed_n = summary["baseline"]["fixed_n"]
    per_model = summary["baseline"]["trials"] // len(summary["models"])
    assert f"fixed-N run: {fixed_n} per question = {per_model:,} per model" in page
