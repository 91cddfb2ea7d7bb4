"""adaptive-eval nightly: reuse the library, sample only what is new, alert on regressions."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import TEST_SET, NullLog, load, mimic_success, write_config, write_scenario

from adaptive_eval.base.summary_schema import ModelRow, Summary
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import Campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.control.controller import Controller
from adaptive_eval.control.library import attach
from adaptive_eval.dispatch import InlineDispatcher
from adaptive_eval.loop.rundir import open_run_dir
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.nightly import run_nightly
from adaptive_eval.workflows.report import report_run

QUESTIONS = 12


def inline(campaign: Campaign, run_dir: Path) -> Summary:
    store, campaign_id, _ = open_run_dir(campaign, run_dir)
    port = attach(
        campaign, store, InlineDispatcher(campaign.run.plans, campaign.run.offsets), campaign_id
    )
    try:
        Controller(campaign, store, port, NullLog()).run()
    finally:
        port.shutdown()
        store.close()
    return report_run(campaign, run_dir)


def _setup(tmp_path: Path) -> Path:
    write_scenario(
        tmp_path / "incumbents.npz",
        mimic_success([0.3, 0.5, 0.85], questions=QUESTIONS, seed=1),
        names=["small", "medium", "large"],
    )
    _checkpoint(tmp_path, 0.7)
    data = {
        "name": "nightly",
        "seed": 3,
        "models": [
            {"backend": "simulated", "path": "incumbents.npz"},
            {"backend": "simulated", "path": "ckpt.npz"},
        ],
        "rubric": {"weights": [0, 1]},
        "policy": {
            "rope": 0.03,
            "max_trials_per_question": 60,
            "round_trials": 96,
            "allocation": "pairwise",
        },
        "baseline": {"fixed_n": 20},
        "execution": {"workers": 1, "batch_size": 32},
        "output": {"progress": False, "fsync": "normal"},
    }
    return write_config(tmp_path / "c.yaml", data)


def _checkpoint(tmp_path: Path, score: float) -> None:
    success = mimic_success([score], questions=QUESTIONS, seed=2)
    write_scenario(tmp_path / "ckpt.npz", success, names=["ckpt"])


def _sampled_by_model(run_dir: Path) -> dict[int, int]:
    store = TrialStore(run_dir, readonly=True)
    try:
        return dict(
            store.conn.execute(
                "SELECT model, COUNT(*) FROM trials WHERE worker NOT LIKE '%library%' "
                "GROUP BY model"
            )
        )
    finally:
        store.close()


def _per_model(run_dir: Path) -> dict[int, int]:
    store = TrialStore(run_dir, readonly=True)
    try:
        return dict(store.conn.execute("SELECT model, COUNT(*) FROM trials GROUP BY model"))
    finally:
        store.close()


def test_nights_reuse_sample_nothing_new_and_alert_on_a_planted_regression(
    tmp_path: Path,
) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    first = run_nightly(build_campaign(load(path)), history, night="2026-01-01", runner=inline)
    assert first["sampled"] == first["trials_used"] > 0 and first["exit_code"] == 0

    second = run_nightly(build_campaign(load(path)), history, night="2026-01-02", runner=inline)
    assert second["sampled"] == 0 and second["reused"] == first["trials_used"]
    assert second["alerts"] == [] and second["exit_code"] == 0
    assert second["ranking"] == first["ranking"]

    _checkpoint(tmp_path, 0.3)  # the checkpoint regressed: new files, new library cells
    third = run_nightly(build_campaign(load(path)), history, night="2026-01-03", runner=inline)
    assert third["exit_code"] == 3
    drops = [a for a in third["alerts"] if a["kind"] == "score_drop"]
    assert [a["model"] for a in drops] == ["ckpt"]
    assert drops[0]["now"] < drops[0]["before"] - 0.2
    # The changed model was sampled from scratch; the others reused every trial held and were
    # sampled only beyond it (their pairs with the new checkpoint needed more).
    sampled = _sampled_by_model(history / "runs" / "2026-01-03")
    held = _per_model(history / "runs" / "2026-01-01")
    tonight = _per_model(history / "runs" / "2026-01-03")
    assert sampled[3] == tonight[3]
    for model in (0, 1, 2):
        # Every trial night 1 held is reused (the library may hold a few more: trials of rounds
        # drained after night 1's stop are kept as evidence too).
        assert sampled.get(model, 0) <= tonight[model] - min(held[model], tonight[model])
    alert = json.loads((history / "runs" / "2026-01-03" / "alert.json").read_text())
    assert alert["alerts"] == third["alerts"]
    assert "ckpt** score dropped" in (history / "runs" / "2026-01-03" / "alert.md").read_text()
    nights = [json.loads(x) for x in (history / "nights.jsonl").read_text().splitlines()]
    assert [n["night"] for n in nights] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert "2026-01-03 - **" in (history / "summary.md").read_text()
    page = (history / "runs" / "2026-01-03" / "report.html").read_text()
    # Six figures, and the night's forecast against what it did (each night forecasts itself).
    assert "<figure id='history'>" in page and "<figure id='forecast'>" in page
    assert page.count("<svg") == 7
    # Issue 22, workflow 6: the night's own pages lead with its alert, and report keeps it.
    night = history / "runs" / "2026-01-03"
    headline = page.split("<p id='headline'", 1)[1].split("</p>", 1)[0]
    assert "Alert:" in headline and "ckpt&#x27;s score dropped" in headline
    assert page.index("id='headline'") < page.index("id='stop'")
    markdown = (night / "report.md").read_text()
    assert markdown.split("\n")[2].startswith("**Alert:** night 2026-01-03, exit 3")
    summary = json.loads((night / "summary.json").read_text())
    assert summary["nightly"]["alerts"] == third["alerts"]
    assert main(["report", str(night)]) == 0
    assert "**Alert:**" in (night / "report.md").read_text()
    # A night that reused trials: report.html says so, and its saving counts only the sampled.
    quiet_night = (history / "runs" / "2026-01-02" / "report.html").read_text()
    assert f"counting only the 0 trials this run sampled ({second['reused']:,} reused" in (
        quiet_night
    )
    lead = re.sub(
        "<[^>]+>", "", "<p" + quiet_night.split("<p id='headline'", 1)[1].split("</p>")[0]
    )
    assert "Ranking: night 2026-01-02, no alert" in html.unescape(lead)


def _row(name: str, rank: int, score: float) -> ModelRow:
    """A summary's model row: its name, rank and score (the rest does not matter here)."""
    figures = dict.fromkeys(
        ("score_se", "score_low", "score_high", "avg", "bayes_mu", "bayes_sigma"), 0.0
    )
    figures |= {"bayes_low": 0.0, "bayes_high": 1.0}
    return ModelRow(
        name=name,
        rank=rank,
        rank_no_ties=rank,
        score=score,
        trials=10,
        trials_per_question_min=1,
        trials_per_question_max=1,
        **figures,
    )


def test_a_settled_pair_that_flipped_is_an_alert_however_far_apart_they_are() -> None:
    """Issue 22, workflow 5: only pairs adjacent on both nights were compared, so a model
    settled above another and ranked two places below it later raised no flip."""
    from adaptive_eval.workflows.nightly import ranking_flips

    def ranked(*named: tuple[str, float], ties: tuple[str, ...] = ()) -> list[ModelRow]:
        rank, models = 0, []
        for name, score in named:
            rank += 0 if name in ties and models else 1
            models.append(_row(name, rank, score))
        return models

    before = ranked(("a", 0.9), ("b", 0.5), ("c", 0.4))
    flips = ranking_flips(before, ranked(("b", 0.6), ("c", 0.5), ("a", 0.3)))
    # "a" lost more score than "b" and "c" gained: the flips are down.
    assert flips == [
        {
            "kind": "ranking_flip",
            "pair": ["a", "b"],
            "before": "a",
            "now": "b",
            "direction": "down",
        },
        {
            "kind": "ranking_flip",
            "pair": ["a", "c"],
            "before": "a",
            "now": "c",
            "direction": "down",
        },
    ]
    # Not settled tonight (a shares b's rank): no flip, whatever the order.
    tied = ranked(("b", 0.5), ("a", 0.5), ties=("a",))
    assert ranking_flips(ranked(("a", 0.6), ("b", 0.5)), tied) == []


def test_retention_keeps_the_last_nights(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    for day in (1, 2, 3):
        run_nightly(
            build_campaign(load(path)), history, night=f"2026-02-0{day}", keep=2, runner=inline
        )
    assert sorted(p.name for p in (history / "runs").iterdir()) == ["2026-02-02", "2026-02-03"]
    assert len((history / "nights.jsonl").read_text().splitlines()) == 3
    assert (history / "library.sqlite").exists()


def test_a_ranking_flip_is_an_alert(tmp_path: Path) -> None:
    from adaptive_eval.workflows.nightly import ranking_flips

    before = [_row("x", 1, 0.6), _row("y", 2, 0.5)]
    after = [_row("y", 1, 0.5), _row("x", 2, 0.4)]
    same = [_row("x", 1, 0.6), _row("y", 2, 0.5)]
    assert ranking_flips(before, after) == [
        {"kind": "ranking_flip", "pair": ["x", "y"], "before": "x", "now": "y", "direction": "down"}
    ]
    assert ranking_flips(before, same) == []
    # The model behind rose past the one ahead more than that one fell: up.
    risen = [_row("y", 1, 0.8), _row("x", 2, 0.55)]
    assert ranking_flips(before, risen)[0]["direction"] == "up"


@pytest.mark.slow
def test_nightly_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from adaptive_eval.command_line.cli import main

    path = _setup(tmp_path)
    history = str(tmp_path / "history")
    assert main(["nightly", str(path), "--history", history, "--night", "2026-03-01"]) == 0
    assert main(["nightly", str(path), "--history", history, "--night", "2026-03-02"]) == 0
    assert "night 2026-03-02: sampled 0 trials" in capsys.readouterr().out
    assert (tmp_path / "history" / "runs" / "2026-03-02" / "report.html").exists()
    assert main(["nightly", str(path), "--history", history, "--night", "03/03/2026"]) == 2


# -- issue 15, item 5: history compares the estimate; a night with nothing to sample skips Ray ---


def _estimates(run_dir: Path) -> dict[str, float]:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {m["name"]: m["score"] for m in summary["models"]}


def test_history_and_alerts_compare_the_estimate_not_bayes_at_n(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    first = run_nightly(build_campaign(load(path)), history, night="2026-04-01", runner=inline)
    _checkpoint(tmp_path, 0.3)
    second = run_nightly(build_campaign(load(path)), history, night="2026-04-02", runner=inline)
    for record, night in ((first, "2026-04-01"), (second, "2026-04-02")):
        estimates = _estimates(history / "runs" / night)
        assert {m["name"]: m["score"] for m in record["ranking"]} == estimates
        assert all("bayes_mu" in m for m in record["ranking"])  # Bayes@N stays as a column
    (drop,) = [a for a in second["alerts"] if a["kind"] == "score_drop"]
    assert drop["before"] == pytest.approx(_estimates(history / "runs" / "2026-04-01")["ckpt"])
    assert drop["now"] == pytest.approx(_estimates(history / "runs" / "2026-04-02")["ckpt"])
    assert (
        "| rank | model | score | se | Bayes@N | Bayes@N sd |"
        in (history / "summary.md").read_text()
    )


def test_a_night_with_nothing_new_to_sample_does_not_start_ray(
    tmp_path: Path, no_ray: list[dict[str, Any]]
) -> None:
    """Through the real runner: night 1 samples (the tests' dispatch mode stands in for Ray's
    workers), night 2 finds every trial in the library and must not start the workers at all."""
    path = _setup(tmp_path)
    history = tmp_path / "history"
    first = run_nightly(build_campaign(load(path, [TEST_SET])), history, night="2026-05-01")
    assert first["sampled"] > 0 and len(no_ray) == 1
    second = run_nightly(build_campaign(load(path, [TEST_SET])), history, night="2026-05-02")
    assert second["sampled"] == 0 and second["reused"] == first["trials_used"]
    assert len(no_ray) == 1  # no worker was started for the second night
    events = (history / "runs" / "2026-05-02" / "events.jsonl").read_text()
    assert "dispatch_start" not in events and "ray_starting" not in events


# -- issue 29: a past night re-run, a recovered model, the console ------------------------------


def test_a_past_night_rerun_takes_its_place_in_date_order(tmp_path: Path) -> None:
    path = _setup(tmp_path)
    history = tmp_path / "history"
    run_nightly(build_campaign(load(path)), history, night="2026-05-01", runner=inline)
    run_nightly(build_campaign(load(path)), history, night="2026-05-05", runner=inline)
    _checkpoint(tmp_path, 0.3)  # what 05-02 evaluated: a regressed checkpoint
    late = run_nightly(build_campaign(load(path)), history, night="2026-05-02", runner=inline)
    # Compared with the night before it (05-01), not with the newest (05-05).
    assert [a["model"] for a in late["alerts"] if a["kind"] == "score_drop"] == ["ckpt"]
    nights = [json.loads(x)["night"] for x in (history / "nights.jsonl").read_text().splitlines()]
    assert nights == ["2026-05-01", "2026-05-02", "2026-05-05"]
    text = (history / "summary.md").read_text()
    assert text.index("## 2026-05-05") < text.index("## 2026-05-02") < text.index("## 2026-05-01")


def test_a_recovered_model_is_news_not_an_alert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from adaptive_eval.workflows.nightly import alert_text

    path = _setup(tmp_path)
    history = tmp_path / "history"
    _checkpoint(tmp_path, 0.3)
    run_nightly(build_campaign(load(path)), history, night="2026-06-01", runner=inline)
    _checkpoint(tmp_path, 0.7)  # the checkpoint recovered: it moves up past "medium"
    night = run_nightly(build_campaign(load(path)), history, night="2026-06-02", runner=inline)
    assert night["exit_code"] == 0 and night["alerts"] == []
    (flip,) = [n for n in night["news"] if n["pair"] == ["ckpt", "medium"]]
    assert flip["direction"] == "up" and flip["now"] == "ckpt"
    assert (
        "News: ranking flip ckpt vs medium: medium was ahead, now ckpt (moved up)"
        in (history / "summary.md").read_text()
    )
    # Opted in, an upward flip alerts too; a drop alerts by default.
    every = run_nightly(
        build_campaign(load(path)), history, night="2026-06-02", runner=inline, flip_alerts="any"
    )
    assert every["exit_code"] == 3 and flip in every["alerts"]
    _checkpoint(tmp_path, 0.3)
    down = run_nightly(build_campaign(load(path)), history, night="2026-06-03", runner=inline)
    flips = [a for a in down["alerts"] if a["kind"] == "ranking_flip"]
    assert flips and all(a["direction"] == "down" for a in flips)
    # The console line of an alert is a sentence, not a raw dict.
    assert alert_text(flips[0]).startswith("ranking flip ckpt vs medium: ckpt was ahead")


def test_a_betting_rule_takes_last_nights_run_as_its_prior(tmp_path: Path) -> None:
    """A changed candidate's pairs are bet on with last night's scores: the night records the
    prior's run, the run's rule names it, and the prior's trials are not tonight's."""
    path = _setup(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["policy"]["pair_rules"] = [{"name": "betting", "futility": 0.0}]
    path.write_text(yaml.safe_dump(data))
    history = tmp_path / "history"
    first = run_nightly(build_campaign(load(path)), history, night="2026-01-01", runner=inline)
    assert "prior" not in first  # no night before it
    _checkpoint(tmp_path, 0.72)  # new weights, nearly the same score
    second = run_nightly(build_campaign(load(path)), history, night="2026-01-02", runner=inline)
    last = (history / "runs" / "2026-01-01").resolve()
    assert second["prior"] == str(last)
    summary = json.loads((history / "runs" / "2026-01-02" / "summary.json").read_text())
    (rule,) = [p for p in summary["decision_rules"]["plugins"] if p["name"] == "betting"]
    assert rule["params"]["prior"] == str(last)
    sampled = _sampled_by_model(history / "runs" / "2026-01-02")
    assert sampled[3] == _per_model(history / "runs" / "2026-01-02")[3]  # all of it tonight's
    ckpt = next(m for m in summary["models"] if m["name"] == "ckpt")
    assert ckpt["trials"] == sampled[3]


def test_a_past_summary_that_does_not_read_is_an_error_naming_it(tmp_path: Path) -> None:
    """Nightly reads the nights before it as typed summaries (any version, upgraded); one that
    does not validate is one error naming its file, never a half-read comparison."""
    from adaptive_eval.base.errors import InputError
    from adaptive_eval.workflows.nightly import read_past_summary

    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": 3, "name": "x"}))
    with pytest.raises(InputError, match="campaign_id: Field required") as info:
        read_past_summary(tmp_path)
    assert info.value.source == str(tmp_path / "summary.json")
    for text, words in (
        ("{not json", "cannot be read as JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"schema_version": 99}), "schema_version = 99"),
    ):
        (tmp_path / "summary.json").write_text(text)
        with pytest.raises(InputError, match=words) as info:
            read_past_summary(tmp_path)
        assert info.value.source == str(tmp_path / "summary.json")
