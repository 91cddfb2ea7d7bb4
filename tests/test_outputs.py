"""Outputs other tools read (issue 29, section 2): summary.json's version, the run's own
provenance, no "95% credible" interval beside the lead score, score and export on all trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import base_config, load, mimic_success, run_inline, write_config, write_scenario

from adaptive_eval.base.summary_schema import read_summary
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.loop import rundir
from adaptive_eval.outputs.summary import SCHEMA_VERSION
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows.report import report_run

SCORES = [0.25, 0.45, 0.47, 0.7]


@pytest.fixture()
def run(tmp_path: Path) -> tuple[Path, Path]:
    """(config, run folder) of a finished in-process campaign."""
    write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    run_inline(load(config), tmp_path / "run")
    return config, tmp_path / "run"


def test_summary_json_leads_with_its_schema_version(run: tuple[Path, Path]) -> None:
    config, run_dir = run
    report_run(build_campaign(load(config)), run_dir)
    text = (run_dir / "summary.json").read_text()
    summary = json.loads(text)
    assert next(iter(summary)) == "schema_version" and summary["schema_version"] == SCHEMA_VERSION
    assert "not a confidence interval" in summary["bayes"]["credible_interval"]


def test_report_keeps_the_runs_packages_and_states_its_own_build_apart(
    run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, run_dir = run
    recorded = summary_dict(report_run(build_campaign(load(config)), run_dir))["provenance"][
        "packages"
    ]
    assert recorded["numpy"] and recorded == rundir.package_versions()
    # Later, another environment (vllm installed, another numpy) rebuilds the report.
    monkeypatch.setattr(
        rundir, "package_versions", lambda: {**recorded, "numpy": "9.9", "vllm": "0.99"}
    )
    provenance = summary_dict(report_run(build_campaign(load(config)), run_dir))["provenance"]
    assert provenance["packages"] == recorded  # what the run used, not today's
    assert provenance["packages_later"] is None  # a report is not a resume
    assert provenance["report_build"]["numpy"] == "9.9"
    text = (run_dir / "report.md").read_text()
    used = text.split("Packages the run used: ")[1].splitlines()[0]
    assert f"numpy {recorded['numpy']}," in used and "9.9" not in used
    assert "This report was written by: " in text and "numpy 9.9" in text
    assert "vllm 0.99" not in used


def test_report_reads_a_run_folder_written_before_versions_were_kept(
    run: tuple[Path, Path],
) -> None:
    config, run_dir = run
    store = TrialStore(run_dir)
    try:
        store.conn.execute("DELETE FROM meta WHERE key = 'packages'")
    finally:
        store.close()
    # A summary.json of schema version 1 (no version, Bayes@N as mu / sigma / ci_*).
    old = {"name": "x", "models": [{"name": "model-0", "mu": 0.3, "sigma": 0.1, "rank": 1}]}
    (run_dir / "summary.json").write_text(json.dumps(old))
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    assert summary["schema_version"] == SCHEMA_VERSION
    assert summary["provenance"]["packages"] is None
    assert "Packages the run used: not recorded" in (run_dir / "report.md").read_text()


def test_no_credible_interval_in_tables_or_headlines(run: tuple[Path, Path]) -> None:
    config, run_dir = run
    report_run(build_campaign(load(config)), run_dir)
    for page in ("report.md", "report.html"):
        text = (run_dir / page).read_text().replace(str(run_dir.parent), "DIR")
        assert "credible" not in text, page
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"bayes_low", "bayes_high"} <= set(summary["models"][0])  # kept, named in "bayes"


def scored(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["score", *args, "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_export_then_score_gives_the_runs_scores_from_all_trials(
    run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    out = tmp_path / "e.npz"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    result = scored(capsys, str(out))
    assert result["trials"] == "all recorded trials ('recorded', ragged)"
    got = {m["name"]: m for m in result["models"]}
    for model in summary["models"]:
        assert got[model["name"]]["score"] == pytest.approx(model["score"], abs=1e-12)
    assert [m["name"] for m in result["models"]] == [m["name"] for m in summary["models"]]
    # The dense prefix, on request, and said so.
    first = scored(capsys, str(out), "--first-n")
    assert first["trials"].startswith("the first N = ")
    # The console table leads with the score and shows no credible interval.
    capsys.readouterr()
    assert main(["score", str(out)]) == 0
    text = capsys.readouterr().out
    assert "credible" not in text and "CI" not in text
    assert text.splitlines()[1].split()[:4] == ["rank", "(no", "ties)", "model"]
    assert "score" in text.splitlines()[1]


def test_export_to_every_eval_ever_validates_against_its_schema(
    run: tuple[Path, Path], tmp_path: Path
) -> None:
    jsonschema = pytest.importorskip("jsonschema")  # installed with ray
    schemas = Path(__file__).parent / "data" / "every_eval_ever"
    aggregate = jsonschema.Draft7Validator(json.loads((schemas / "eval.schema.json").read_text()))
    instance = jsonschema.Draft7Validator(
        json.loads((schemas / "instance_level_eval.schema.json").read_text())
    )
    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    out = tmp_path / "eee"
    assert main(["export", str(run_dir), "--format", "eee", "--out", str(out)]) == 0
    records = sorted(out.glob("data/*/*/*/*.json"))
    assert len(records) == len(SCORES)
    by_name = {m["name"]: m for m in summary["models"]}
    for path in records:
        record = json.loads(path.read_text())
        aggregate.validate(record)
        model = by_name[record["model_info"]["name"]]
        (result,) = record["evaluation_results"]
        assert result["score_details"]["score"] == model["score"]  # the unbiased score
        assert result["score_details"]["uncertainty"]["num_samples"] == model["trials"]
        samples = out / record["detailed_evaluation_results"]["file_path"]
        lines = samples.read_text().splitlines()
        assert len(lines) == model["trials"] == record["detailed_evaluation_results"]["total_rows"]
        for line in lines:
            instance.validate(json.loads(line))
    # Exporting again rewrites the same files.
    assert main(["export", str(run_dir), "--format", "eee", "--out", str(out)]) == 0
    assert sorted(out.glob("data/*/*/*/*.json")) == records


# -- issue 27: the pages read the typed summary, not the dict -----------------------------------


def test_the_pages_render_from_summary_json_read_back_as_the_typed_model(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """report.md, the console and the headline are functions of summary.json alone: its file
    read back (``read_summary``) renders the same report.md the run wrote and the same console
    text ``report`` printed."""
    from adaptive_eval.base import markdown as md
    from adaptive_eval.base.summary_schema import Summary
    from adaptive_eval.outputs.headline import headline
    from adaptive_eval.outputs.report import render_console, render_markdown

    config, run_dir = run
    assert main(["report", str(run_dir), "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    typed = read_summary(json.loads((run_dir / "summary.json").read_text()))
    assert isinstance(typed, Summary)
    assert render_markdown(typed) == (run_dir / "report.md").read_text()
    assert printed == render_console(typed) + "\n"
    lead = (run_dir / "report.md").read_text().splitlines()[2]
    assert lead == f"**{headline(typed).kind.value}:** {md.text(headline(typed).text)}"


def test_a_summary_missing_a_field_is_refused_naming_it(run: tuple[Path, Path]) -> None:
    """write_outputs takes only the validated model: a document missing a field never becomes
    one (and so never reaches a page)."""
    from pydantic import ValidationError

    from adaptive_eval.base.summary_schema import validate

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    del summary["trials_used"]
    with pytest.raises(ValidationError, match=r"trials_used\n  Field required"):
        validate(summary)


# -- issue 29, items 3.3 and 3.9: an unfinished run, negative savings, long names, device-s -----


def test_an_unfinished_run_says_so_everywhere_and_never_none(run: tuple[Path, Path]) -> None:
    from adaptive_eval.outputs.report import render_console, write_outputs

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    assert summary["finished"] is True
    summary.update(stop_reason=None, stop_detail=None)
    summary.pop("finished")
    console = render_console(read_summary({**summary, "finished": False}))
    assert "None" not in console.splitlines()[0]
    assert console.startswith(f"campaign {summary['name']}: not finished")
    assert "not finished: no saving yet" in console and "saved" not in console.split("\n")[-1]
    write_outputs(run_dir, read_summary({**summary, "finished": False}))
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is False
    for page in ("report.md", "report.html"):
        text = (run_dir / page).read_text()
        assert "Stopped: **None**" not in text and "<b>None</b>" not in text, page
        assert "Not finished:" in text, page


def test_negative_savings_long_names_and_device_seconds(run: tuple[Path, Path]) -> None:
    from adaptive_eval.outputs.headline import headline
    from adaptive_eval.outputs.report import render_console, render_markdown

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    summary["compute_saved"]["trials_fraction"] = -0.391
    typed = read_summary(summary)
    assert "saved -" not in render_console(typed) and "spent 39.1% more trials" in (
        render_console(typed)
    )
    assert "spent 39.1% more than the fixed-N run" in headline(typed).text
    markdown = render_markdown(typed)
    assert "-39.1%" not in markdown and "none (39.1% more)" in markdown
    assert "| GPU-s |" not in markdown and "| device-s |" in markdown
    long = "org/" + "a-very-long-model-name-" * 3
    summary["models"][0]["name"] = long
    console = render_console(read_summary(summary))
    rows = [line for line in console.splitlines() if line[:4].strip().isdigit()]
    columns = {
        line.index(f"{m['score']:7.4f}") for line, m in zip(rows, summary["models"], strict=True)
    }
    assert len(columns) == 1  # the score column stays aligned past a long name


# -- issue 29, items 3.1 and 3.7: the width goal's headline, the verdict's order, tones --------


def test_a_width_campaign_leads_with_its_goal_not_the_ranking(run: tuple[Path, Path]) -> None:
    from adaptive_eval.outputs.headline import headline
    from adaptive_eval.outputs.report import render_console

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    summary["score"]["half_width"] = 0.05
    summary["stop_reason"] = "ci_width"
    for model in summary["models"]:
        model["width_goal_met"] = True
    found = headline(read_summary(summary))
    assert found.line.startswith("Width goal: +-0.05 at 95% (each model) met for all 4 ")
    assert "undecided" not in found.line
    # The goal never asked for pairs.
    assert "pair(s) undecided" not in render_console(read_summary(summary))
    summary["models"][0]["width_goal_met"] = False
    assert "met for 3 of 4 models, not met for 1" in headline(read_summary(summary)).text


def test_a_run_ended_by_its_budget_says_so_before_its_saving(run: tuple[Path, Path]) -> None:
    """The walk-through of issue 29: ``run configs/demo.yaml --set budget.trials=3000
    --quiet`` printed "Ranking: ... saved 88.6% of the fixed-N run's 26,400 trials ..." and
    nothing saying that the budget, not the rules, had ended it."""
    from adaptive_eval.outputs.headline import Tone, headline

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    assert "budget" not in headline(read_summary(summary)).text
    summary["stop_reason"] = "trial_budget"
    summary["stop_detail"] = "3000 trials used of 3000"
    found = headline(read_summary(summary))
    assert "; stopped by the trial budget (3000 trials used of 3000); " in found.text
    assert found.text.index("budget") < found.text.index("fixed-N run")
    assert found.tone is Tone.WARNING
    summary["score"]["half_width"] = 0.05  # a width campaign the wall clock ended
    summary["stop_reason"] = "wall_clock_budget"
    summary["stop_detail"] = None
    for model in summary["models"]:
        model["width_goal_met"] = model is not summary["models"][0]
    found = headline(read_summary(summary))
    assert "not met for 1; stopped by the wall-clock budget; " in found.text
    assert found.tone is Tone.WARNING


def test_a_verdict_tells_the_regression_first() -> None:
    from adaptive_eval.base.summary_schema import CompareVerdict, Comparison, Summary
    from adaptive_eval.outputs.headline import headline

    # Only what the headline reads (model_construct: the rest of a summary left out).
    verdicts = [
        CompareVerdict.model_construct(
            incumbent=name,
            decision=decision,
            trials=10,
            decided_at_round=None,
            trials_at_decision=None,
        )
        for name, decision in (("LLM_9", "undecided"), ("LLM_11", "worse"))
    ]
    comparison = Comparison.model_construct(
        exit_code=3, meaning="a regression", candidate="c", verdicts=verdicts, stopped=None
    )
    summary = Summary.model_construct(stop_reason="goal_met", comparison=comparison)
    text = headline(summary).text
    assert text.index("worse than LLM_11") < text.index("undecided against LLM_9"), text


def test_a_night_whose_cost_left_its_forecast_leads_with_that_alert() -> None:
    """The headline words every alert kind of the schema (a cost alert fell through to the
    ranking flip's sentence and its missing ``before``)."""
    from adaptive_eval.base.summary_schema import CostOutsideForecast, Nightly, Summary
    from adaptive_eval.outputs.headline import Kind, headline

    alert = CostOutsideForecast(
        kind="cost_outside_forecast", measure="trials sampled", low=100, high=400, actual=2500
    )
    nightly = Nightly(night="2026-11-02", alerts=[alert], exit_code=3)
    found = headline(Summary.model_construct(stop_reason="goal_met", nightly=nightly))
    assert found.kind is Kind.ALERT
    assert found.text == (
        "night 2026-11-02, exit 3: 1 alert(s): trials sampled: 2,500, above the forecast's "
        "90% range 100 to 400"
    )


def test_an_ordinary_headline_is_not_styled_as_a_warning(run: tuple[Path, Path]) -> None:
    config, run_dir = run
    report_run(build_campaign(load(config)), run_dir)
    page = (run_dir / "report.html").read_text()
    tag = page.split("<p id='headline'", 1)[1].split(">", 1)[0]
    assert "tone-" in tag
    # The page's .warning class (bold red) belongs to warnings only.
    assert "warning" not in tag.replace("tone-warning", "").split("class=")[1]


# -- issue 29, item 3.6: console lines are sentences ------------------------------------------


def test_console_lines_are_sentences_and_routine_slowness_stays_in_the_file(
    tmp_path: Path,
) -> None:
    import io

    from adaptive_eval.base.logs import open_event_log

    console = io.StringIO()
    log, handle = open_event_log(tmp_path, "c-1", "warning", console)
    try:
        log.warning("slow_policy", phase="plan", seconds=0.0508)  # routine on a loaded machine
        log.info("campaign_start", resumed=False, models=3)
        assert console.getvalue() == ""
        log.warning("slow_policy", phase="plan", seconds=2.5)
        log.info("campaign_start", resumed=True, models=3)  # shown although below the level
    finally:
        handle.close()
    lines = console.getvalue().splitlines()
    assert lines == [
        "warning: the plan step of the decision loop took 2.5 s (its own work, not sampling)",
        "note: resuming the campaign recorded in this folder: its trials are kept and sampling "
        "continues where it stopped",
    ]
    events = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(events) == 4  # the file keeps every event, raw


# -- issue 29, item 3.7: report.html's plots ---------------------------------------------------


def test_plots_are_readable_and_labelled_for_what_they_draw(run: tuple[Path, Path]) -> None:
    import re

    from adaptive_eval.outputs.report_html import plural

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    page = (run_dir / "report.html").read_text()
    sizes = {float(x) for x in re.findall(r"font-size: ([0-9.]+)px", page)}
    assert sizes and min(sizes) >= 9, sorted(sizes)  # ticks and legends were 7 px
    n, questions = summary["baseline"]["fixed_n"], 12
    assert f"fixed-N run: {n} per question = {n * questions:,} per model" in page
    assert plural(1, "pair") == "1 pair" and plural(2, "pair") == "2 pairs"
    assert "(1 pairs)" not in page


def test_a_compare_page_labels_its_stop_and_ignores_the_incumbents_own_pairs(
    run: tuple[Path, Path],
) -> None:
    from adaptive_eval.outputs.report import write_outputs

    config, run_dir = run
    summary = summary_dict(report_run(build_campaign(load(config)), run_dir))
    summary["stop_reason"] = "goal_met"
    summary["pairs"][0]["decision"] = "undecided"  # two incumbents: not the gate's business
    name = summary["models"][0]["name"]
    summary["comparison"] = {
        "candidate": name,
        "margin": None,
        "exit_code": 3,
        "meaning": "a regression",
        "stopped": None,
        "verdicts": [
            {
                "incumbent": summary["models"][1]["name"],
                "decision": "worse",
                "z": -4.0,
                "boundary": 3.3,
                "decided_at_round": 3,
                "trials_at_decision": 100,
                "trials": 100,
            }
        ],
    }
    write_outputs(run_dir, read_summary(summary))
    page = (run_dir / "report.html").read_text()
    assert "the gate was decided, exit 3 (goal_met)" in page
    assert "still undecided at the stop" not in page
    assert (
        "Stopped: **the gate was decided, exit 3 (goal\\_met)**"
        in (run_dir / "report.md").read_text()
    )
    # One sign convention, the candidate's: a worse candidate's z and boundary are negative
    # whichever way the test computed them (the two-sided rule gave +4.29 where --margin gave
    # -3.91 beside a boundary of +3.31).
    from adaptive_eval.base.summary_schema import CompareVerdict
    from adaptive_eval.outputs.presentation import candidate_side

    def side(z: float, boundary: float, decision: str) -> tuple[float, float | None]:
        row = CompareVerdict.model_construct(z=z, boundary=boundary, decision=decision)
        return candidate_side(row)

    assert side(4.29, 3.31, "worse") == (-4.29, -3.31)
    assert side(-3.91, 3.31, "fail") == (-3.91, -3.31)
    assert side(2.5, 2.1, "pass") == (2.5, 2.1)
    markdown = (run_dir / "report.md").read_text()
    assert "| worse | -4.000 | -3.300 | 3 | 100 |" in markdown
    assert ">-4.000<" in page and ">-3.300<" in page


def test_report_reads_a_run_whose_inputs_changed_since_and_a_resume_refuses_it(
    run: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint replaced at its path (or vLLM upgraded) after a night: `report` of that
    night still reads its recorded trials and states the inputs it recorded, saying they
    changed; resuming it (sampling more) is refused."""
    from adaptive_eval.base.errors import InputError
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.loop.rundir import open_run_dir

    config, run_dir = run
    before = summary_dict(report_run(build_campaign(load(config)), run_dir))["provenance"][
        "models"
    ][0]["sha256"]
    write_scenario(config.parent / "s.npz", mimic_success(SCORES, questions=12, seed=9))
    capsys.readouterr()
    after = summary_dict(report_run(build_campaign(load(config)), run_dir))
    assert after["provenance"]["models"][0]["sha256"] == before  # what the run recorded
    assert "the run's input files or engine changed since it ran (files[0].scenario" in (
        capsys.readouterr().err
    )
    with pytest.raises(InputError, match="holds a different campaign"):
        open_run_dir(build_campaign(load(config)), run_dir, recover=True)
