"""adaptive-eval compare: a candidate against incumbents, with CI-gate exit codes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TEST_SET, load, mimic_success, write_config, write_scenario

from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import CompareConfig
from adaptive_eval.store import RunLock, StoreError, TrialStore
from adaptive_eval.workflows.compare import run_compare

INCUMBENTS = [0.3, 0.5, 0.7]
QUESTIONS = 20


@pytest.fixture()
def incumbents(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Recorded trials of three incumbents (a replay file: they are not sampled again)."""
    success = mimic_success(INCUMBENTS, questions=QUESTIONS, seed=3)
    rng = np.random.default_rng(11)
    outcomes = (rng.random((3, QUESTIONS, 120)) < success[:, :, None]).astype(np.int64)
    path = tmp_path / "incumbents.npz"
    np.savez(path, outcomes=outcomes, models=np.array(["inc-30", "inc-50", "inc-70"]))
    return path, success


def _config(tmp_path: Path, candidate: np.ndarray, **policy: Any) -> Path:
    write_scenario(tmp_path / "cand.npz", candidate[None, :], names=["cand"])
    data = {
        "name": "cmp",
        "seed": 5,
        "models": [
            {"backend": "simulated", "path": "cand.npz"},
            {"backend": "replay", "path": "incumbents.npz"},
        ],
        "rubric": {"weights": [0, 1]},
        "policy": {
            "rope": 0.06,
            "min_trials_per_question": 2,
            "max_trials_per_question": 120,
            "round_trials": 80,
            **policy,
        },
        "baseline": {"fixed_n": 40},
        # In this process, no Ray: the tests' runs of compare are inline (the dispatch mode).
        "execution": {"workers": 1, "batch_size": 64, "dispatch": "inline"},
        "output": {"progress": False, "fsync": "normal"},
    }
    return write_config(tmp_path / "c.yaml", data)


def _compare(path: Path, run_dir: Path) -> dict[str, Any]:
    summary = summary_dict(run_compare(build_campaign(load(path)), "cand", run_dir))
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["comparison"] == summary["comparison"]
    return dict(summary["comparison"])


def _decisions(result: dict[str, Any]) -> dict[str, str]:
    return {v["incumbent"]: v["decision"] for v in result["verdicts"]}


def test_a_better_candidate_passes(tmp_path: Path, incumbents: tuple[Path, np.ndarray]) -> None:
    _, success = incumbents
    result = _compare(_config(tmp_path, np.clip(success[2] + 0.2, 0, 0.99)), tmp_path / "run")
    assert _decisions(result) == dict.fromkeys(["inc-30", "inc-50", "inc-70"], "better")
    assert result["exit_code"] == 0
    assert all(v["trials"] > 0 for v in result["verdicts"])


def test_a_worse_candidate_is_a_regression(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[0] - 0.2, 0.01, 1))
    result = _compare(path, tmp_path / "run")
    assert "worse" in _decisions(result).values()  # the gate stops at its first regression
    assert result["exit_code"] == 3
    every = summary_dict(
        run_compare(build_campaign(load(path)), "cand", tmp_path / "all", settle_all=True)
    )
    assert _decisions(every["comparison"]) == dict.fromkeys(["inc-30", "inc-50", "inc-70"], "worse")


def test_a_tied_candidate_is_equivalent_and_passes(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    result = _compare(_config(tmp_path, success[2]), tmp_path / "run")  # the best, exactly
    assert _decisions(result) == {"inc-30": "better", "inc-50": "better", "inc-70": "equivalent"}
    assert result["exit_code"] == 0


def test_undecided_at_the_cap_and_only_candidate_pairs_are_sampled(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[2] + 0.02, 0, 1), max_trials_per_question=6)
    result = _compare(path, tmp_path / "run")
    assert _decisions(result) == {"inc-30": "better", "inc-50": "better", "inc-70": "undecided"}
    assert result["exit_code"] == 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_trials"
    # Incumbents settled against the candidate stop getting trials: the one left open has more.
    store = TrialStore(tmp_path / "run", readonly=True)
    try:
        per_model = dict(store.conn.execute("SELECT model, COUNT(*) FROM trials GROUP BY model"))
    finally:
        store.close()
    assert per_model[0] == per_model[3] == 6 * QUESTIONS  # candidate and inc-70, to the cap
    # inc-30 (the clearest gap) is settled early under the error-controlled rule; inc-50 may
    # need the whole cap at 6 trials per question with the budget split over 3 comparisons.
    assert per_model[1] < per_model[3] and per_model[2] <= per_model[3]


def test_cli_exit_codes(tmp_path: Path, incumbents: tuple[Path, np.ndarray]) -> None:
    _, success = incumbents
    path = _config(tmp_path, success[2])
    assert main(["compare", str(path), "--candidate", "nobody", "--out", str(tmp_path / "x")]) == 2


@pytest.mark.slow
def test_cli_runs_a_regression_to_exit_3(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[0] - 0.2, 0.01, 1))
    code = main(
        ["compare", str(path), "--candidate", "cand", "--out", str(tmp_path / "r"), "--json"]
    )
    assert code == 3
    assert json.loads(capsys.readouterr().out)["exit_code"] == 3


# -- issue 15, item 2: compare goes through run's set-up and its reports say the verdict ---------


def test_compare_takes_the_run_folder_lock(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[2] + 0.2, 0, 0.99))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with RunLock(run_dir), pytest.raises(StoreError, match="in use by pid"):
        run_compare(build_campaign(load(path)), "cand", run_dir)


def test_compare_keeps_the_workers_output_and_says_when_they_start(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], no_ray: list[dict[str, Any]]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[2] + 0.2, 0, 0.99))
    console = io.StringIO()
    run_compare(
        build_campaign(load(path, [TEST_SET])),
        "cand",
        tmp_path / "run",
        console=console,
        quiet=False,
    )
    assert (tmp_path / "run" / "ray.log").exists()
    assert "starting the workers (dispatch mode 'test_inline')" in console.getvalue()
    assert no_ray == [{"quiet": False, "ray_address": None}]


def test_report_rebuilds_a_compare_folder_with_the_verdict(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    _, success = incumbents
    run_dir = tmp_path / "run"
    result = _compare(_config(tmp_path, success[2]), run_dir)
    assert main(["report", str(run_dir), "--json"]) == 0
    rebuilt = json.loads(capsys.readouterr().out)
    assert rebuilt["comparison"] == result
    assert main(["report", str(run_dir)]) == 0
    printed = capsys.readouterr().out
    assert "candidate cand:" in printed and "exit code 0: not worse than any incumbent" in printed
    report = (run_dir / "report.md").read_text()
    assert "Candidate **cand**" in report and "Exit code **0**" in report
    for incumbent, decision in _decisions(result).items():
        assert f"| {incumbent} | {decision} |" in report
    # Only the candidate's pairs: no incumbent-against-incumbent row.
    assert "## Adjacent pairs" not in report and "| inc-50 | inc-30 |" not in report
    html = (run_dir / "report.html").read_text()
    assert "cand" in html and "exit code 0" in html.lower()


def test_decided_at_round_is_the_pairs_own_round_in_summary_and_events(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    run_dir = tmp_path / "run"
    result = _compare(_config(tmp_path, np.clip(success[2] + 0.2, 0, 0.99)), run_dir)
    assert all(v["decided_at_round"] is not None for v in result["verdicts"])
    summary = json.loads((run_dir / "summary.json").read_text())
    logged = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "pair_decision":
            logged[frozenset((event["a"], event["b"]))] = event["decided_at_round"]
    decided = [p for p in summary["pairs"] if p["decision"] != "undecided"]
    assert decided
    for pair in decided:
        assert logged[frozenset((pair["a"], pair["b"]))] == pair["decided_at_round"]
    for row in result["verdicts"]:  # the candidate's pairs that were adjacent: same round
        key = frozenset(("cand", row["incumbent"]))
        if key in logged:
            assert logged[key] == row["decided_at_round"]


# -- issue 15, item 3: the non-inferiority gate --------------------------------------------------

MARGIN = 0.08


def test_an_unchanged_candidate_passes_non_inferiority_early(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, success[2])  # the best incumbent, unchanged
    summary = summary_dict(
        run_compare(build_campaign(load(path)), "cand", tmp_path / "run", margin=MARGIN)
    )
    result = summary["comparison"]
    assert result["margin"] == MARGIN
    assert _decisions(result) == dict.fromkeys(["inc-30", "inc-50", "inc-70"], "pass")
    assert result["exit_code"] == 0
    candidate = next(m for m in summary["models"] if m["name"] == "cand")
    assert candidate["trials_per_question_max"] <= 120 // 2  # well before the cap of 120


def test_a_candidate_worse_by_twice_the_margin_fails(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, np.clip(success[2] - 2 * MARGIN, 0.01, 1))
    summary = summary_dict(
        run_compare(build_campaign(load(path)), "cand", tmp_path / "run", margin=MARGIN)
    )
    result = summary["comparison"]
    assert _decisions(result)["inc-70"] == "fail"
    assert result["exit_code"] == 3
    assert summary["stop_reason"] == "goal_met"
    candidate = next(m for m in summary["models"] if m["name"] == "cand")
    assert candidate["trials_per_question_max"] < 120
    assert "non-inferiority with margin 0.08" in (tmp_path / "run" / "report.md").read_text()


def test_margin_from_the_config_and_a_bad_margin(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, success[2])
    config = load(path).model_copy(update={"compare": CompareConfig(margin=MARGIN)})
    summary = summary_dict(run_compare(build_campaign(config), "cand", tmp_path / "run"))
    assert summary["comparison"]["margin"] == MARGIN
    args = ["compare", str(path), "--candidate", "cand", "--out", str(tmp_path / "x")]
    assert main([*args, "--margin", "-0.1"]) == 2
    assert "--margin must be > 0, got -0.1" in capsys.readouterr().err


# -- issue 22, workflows 7-9: the gate stops once its exit code is fixed; figures say what they
# are; the verdict is the page's headline -------------------------------------------------------
def test_the_gate_stops_at_the_first_regression_and_settle_all_keeps_the_old_behaviour(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray]
) -> None:
    """A candidate tied with inc-50 and clearly worse than inc-70: the regression fixes exit
    3 early; sampling on to settle the tie (to the cap) cost trials for nothing."""
    _, success = incumbents
    path = _config(tmp_path, success[1], rope=0.005)
    stopped = summary_dict(run_compare(build_campaign(load(path)), "cand", tmp_path / "run"))
    settled = summary_dict(
        run_compare(build_campaign(load(path)), "cand", tmp_path / "all", settle_all=True)
    )
    first, every = stopped["comparison"], settled["comparison"]
    assert first["exit_code"] == every["exit_code"] == 3
    assert _decisions(first)["inc-70"] == _decisions(every)["inc-70"] == "worse"
    assert _decisions(first)["inc-50"] == "undecided"
    assert (
        stopped["stop_reason"] == "goal_met"
        and "regression against inc-70" in (stopped["stop_detail"])
    )
    worse = next(v for v in first["verdicts"] if v["incumbent"] == "inc-70")
    rounds = len(_rounds(tmp_path / "run"))
    assert rounds <= worse["decided_at_round"] + 2  # at most the pipelined rounds after it
    assert stopped["trials_used"] < settled["trials_used"]
    assert first["stopped"] == stopped["stop_detail"]


def _rounds(run_dir: Path) -> list[Any]:
    store = TrialStore(run_dir, readonly=True)
    try:
        return store.rounds()
    finally:
        store.close()


def test_each_verdict_says_its_trials_at_the_decision_and_at_the_end(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    """compare printed end-of-run totals as "6810 trials, decided at round 8" (2,700 trials
    existed then)."""
    _, success = incumbents
    path = _config(tmp_path, success[1], rope=0.005)
    summary = summary_dict(
        run_compare(build_campaign(load(path)), "cand", tmp_path / "run", settle_all=True)
    )
    worse = next(v for v in summary["comparison"]["verdicts"] if v["incumbent"] == "inc-70")
    plans = _rounds(tmp_path / "run")
    cand, inc = 0, 3  # model indices: the candidate's entry first, then inc-30, inc-50, inc-70
    expected = sum(int(plan[[cand, inc]].sum()) for plan in plans[: worse["decided_at_round"]])
    assert worse["trials_at_decision"] == expected < worse["trials"]
    from adaptive_eval.base.summary_schema import Comparison
    from adaptive_eval.workflows.compare import render

    text = render(Comparison.model_validate(summary["comparison"]))
    assert (
        f"decided at round {worse['decided_at_round']} with {expected:,} trials of the two "
        f"models ({worse['trials']:,} by the end of the run)"
    ) in text
    events = [
        json.loads(line)
        for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()
        if '"pair_decision"' in line
    ]
    assert events and all(e["logged"] for e in events)
    for event in events:
        through = sum(int(plan.sum()) for plan in plans[: event["decided_at_round"]])
        assert event["trials_at_decision"] == through


def test_the_verdict_leads_the_compare_pages_and_quiet_prints_only_it(
    tmp_path: Path, incumbents: tuple[Path, np.ndarray], capsys: pytest.CaptureFixture[str]
) -> None:
    _, success = incumbents
    path = _config(tmp_path, success[1], rope=0.005)
    run_dir = tmp_path / "run"
    run_compare(build_campaign(load(path)), "cand", run_dir)
    page = (run_dir / "report.html").read_text()
    lead = re.sub("<[^>]+>", "", "<p" + page.split("<p id='headline'", 1)[1].split("</p>")[0])
    assert "Verdict: exit 3, a regression: cand is" in lead and "worse than inc-70" in lead
    assert page.index("id='headline'") < page.index("id='stop'") < page.index("id='comparison'")
    assert "class='headline tone-bad'" in page
    report = (run_dir / "report.md").read_text()
    assert report.splitlines()[2].startswith("**Verdict:** exit 3, a regression")
    # The pairs figure: every comparison has its boundary mark (undecided ones at the cap), and
    # the legend stands beside the axes, not over the bars.
    figure = page.split("<figure id='pairs'>", 1)[1].split("</figure>", 1)[0]
    verdicts = json.loads((run_dir / "summary.json").read_text())["comparison"]["verdicts"]
    assert all(f'id="boundary-{i}"' in figure for i in range(len(verdicts)))
    assert _legend_left(figure) > _axes_right(figure)


def _axes_right(svg: str) -> float:
    path = svg.split('<g id="patch_2">', 1)[1].split(' d="', 1)[1].split('"', 1)[0]
    return max(float(x) for x in re.findall(r"[ML] ([\d.]+) ", path))


def _legend_left(svg: str) -> float:
    legend = svg.split('<g id="legend_1">', 1)[1]
    path = legend.split(' d="', 1)[1].split('"', 1)[0]
    return min(float(x) for x in re.findall(r"[MLQ] ([\d.]+) ", path))
