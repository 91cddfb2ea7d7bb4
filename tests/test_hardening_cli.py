"""Issue 8, items 4-7, 9 and 10 through the command line: inputs checked before anything is
written, missing engines named, Ray start retried, no traceback on the console, diagnostics
and run-only summary keys kept, a console a person reads, and the small defects."""

from __future__ import annotations

import io
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    CLI_MODULE,
    TEST_DISPATCH,
    TEST_SET,
    base_config,
    load,
    mimic_success,
    run_inline,
    write_config,
    write_scenario,
)

from adaptive_eval.base.errors import ClusterError, InputError
from adaptive_eval.base.summary_schema import record as summary_dict
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import load_config
from adaptive_eval.dispatch import cluster
from adaptive_eval.inputs.datasets import ARITH20
from adaptive_eval.loop import rundir
from adaptive_eval.workflows import run as runner

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def scenario_config(tmp_path: Path) -> Path:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=10))
    return write_config(tmp_path / "c.yaml", base_config("s.npz"))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# -- 4: NaN / infinite weights -------------------------------------------------------------------
@pytest.mark.parametrize("weight", [".nan", ".inf", "-.inf"])
def test_non_finite_weights_are_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], weight: str
) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5]))
    path = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    text = path.read_text().replace("- 1\n", f"- {weight}\n", 1)
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    assert "rubric.weights" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "finite" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    # The same through --set.
    good = write_config(tmp_path / "good.yaml", base_config("s.npz"))
    assert main(["validate", str(good), "--set", "rubric.weights=[0, .nan]"]) == 2


# -- 5: missing engines ----------------------------------------------------------------------------
def _openai_config_without_httpx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An openai-backend config, on a machine where httpx (the `openai` extra) looks absent."""
    data = {
        "name": "oa",
        "models": [{"backend": "openai", "name": "srv", "options": {"base_url": "http://x/v1"}}],
        "rubric": {"weights": [0, 1]},
        "dataset": {"path": str(ARITH20), "limit": 3},
    }
    path = write_config(tmp_path / "c.yaml", data)
    real = cluster.importlib.util.find_spec
    monkeypatch.setattr(
        cluster.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "httpx" else real(name, *a),
    )
    return path


def test_a_missing_engine_is_named_before_ray_or_the_run_dir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_ray: list[dict[str, Any]],
) -> None:
    path = _openai_config_without_httpx(tmp_path, monkeypatch)
    assert main(["run", str(path), "--out", str(tmp_path / "run"), *TEST_DISPATCH]) == 2
    err = capsys.readouterr().err
    assert "models[0].backend" in err and "adaptive-eval[openai]" in err and "httpx" in err
    assert not (tmp_path / "run").exists()
    assert not no_ray, "the workers must not start"


# -- 6: Ray start and unexpected errors ------------------------------------------------------------
def test_ray_start_is_retried_then_reported_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    attempts: list[dict[str, Any]] = []
    outcomes = [Exception("The current node timed out during startup."), None]

    def flaky_init(**options: Any) -> None:
        attempts.append(options)
        outcome = outcomes.pop(0) if outcomes else Exception("still overloaded")
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", flaky_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(cluster, "RAY_START_BACKOFF_S", (0.0,))
    events: list[tuple[str, str, dict[str, Any]]] = []
    cluster.init_ray(None, 2, on_event=lambda *e: events.append(e))
    assert len(attempts) == 2
    assert attempts[0]["include_dashboard"] is False and attempts[0]["num_cpus"] == 2
    assert attempts[0]["_system_config"]["enable_worker_prestart"] is False
    assert events[0][1] == "ray_start_retry" and "timed out" in events[0][2]["error"]
    with pytest.raises(ClusterError, match=r"in 3 attempts.*still overloaded.*num_cpus"):
        cluster.init_ray(None, 2)


def test_an_unexpected_error_prints_one_line_and_keeps_the_traceback(
    tmp_path: Path,
    scenario_config: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(*args: Any, **kw: Any) -> None:
        raise ZeroDivisionError("a bug deep inside")

    monkeypatch.setattr(runner, "run_campaign", broken)
    assert main(["run", str(scenario_config), "--out", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "ZeroDivisionError: a bug deep inside" in err
    log = Path(re.search(r"the traceback is in (\S+)", err).group(1))  # type: ignore[union-attr]
    assert "Traceback" in log.read_text() and "broken" in log.read_text()
    # With an existing run directory the log goes there.
    (tmp_path / "run").mkdir()
    assert main(["run", str(scenario_config), "--out", str(tmp_path / "run")]) == 1
    assert str(tmp_path / "run" / "error.log") in capsys.readouterr().err


# -- 7 and 9: diagnostics, run-only summary keys, the console ----------------------------------
def test_console_shows_one_status_line_and_details_go_to_events(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]]
) -> None:
    config = load(scenario_config, ["output.progress=true", TEST_SET])
    console = _Terminal()
    summary = summary_dict(
        runner.run_campaign(build_campaign(config), tmp_path / "run", console=console)
    )
    text = console.getvalue()
    assert "pair_decision" not in text and "campaign_start" not in text
    assert "undecided pairs" in text
    # Against the fixed-N run, worded as the pages word it (this run spends more: issue 40).
    assert "trials saved" in text or "trials spent" in text
    assert "trials saved -" not in text
    final = text.rsplit("\r", 1)[-1]
    assert f"{summary['trials_used']}/{summary['trials_used']}" in final and "100%" in final
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    kinds = {e["event"] for e in events}
    assert {"campaign_start", "pair_decision", "campaign_done"} <= kinds
    assert no_ray[0]["quiet"] is False


def test_quiet_is_quiet(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]]
) -> None:
    console = _Terminal()
    runner.run_campaign(
        build_campaign(load(scenario_config, ["output.progress=true", TEST_SET])),
        tmp_path / "run",
        console=console,
        quiet=True,
    )
    assert console.getvalue() == ""
    assert no_ray[0]["quiet"] is True


def test_report_keeps_dispatch_and_resumed(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]]
) -> None:
    ran = summary_dict(
        runner.run_campaign(
            build_campaign(load(scenario_config, [TEST_SET])),
            tmp_path / "run",
            console=io.StringIO(),
        )
    )
    assert main(["report", str(tmp_path / "run"), "--json"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["dispatch"] == ran["dispatch"] and summary["resumed"] is False
    assert summary["dispatch"]["batches"] > 0


def test_report_keeps_dispatch_of_a_run_without_it_in_its_store(
    tmp_path: Path, scenario_config: Path
) -> None:
    run_inline(load(scenario_config), tmp_path / "run")
    (tmp_path / "run" / "summary.json").write_text(
        json.dumps({"dispatch": {"model_loads": 4, "load_s": 2.5}, "resumed": True})
    )
    assert main(["report", str(tmp_path / "run"), "--json"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["dispatch"] == {"model_loads": 4, "load_s": 2.5} and summary["resumed"] is True


# -- 10: small defects -----------------------------------------------------------------------------
@pytest.fixture()
def three_category_tensor(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "t.npz", outcomes=rng.integers(0, 3, size=(2, 6, 8)))
    return tmp_path / "t.npz"


def test_negative_weights_may_follow_the_option(
    three_category_tensor: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["score", str(three_category_tensor), "--weights", "-0.5,0,1", "--json"]) == 0
    spaced = json.loads(capsys.readouterr().out)
    assert main(["score", str(three_category_tensor), "--weights=-0.5,0,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == spaced


def test_score_refuses_more_weights_than_the_data_has_categories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.savez(tmp_path / "b.npz", outcomes=np.random.default_rng(0).integers(0, 2, (2, 5, 6)))
    assert main(["score", str(tmp_path / "b.npz"), "--weights", "0,0.5,1"]) == 2
    assert "one weight per category" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert re.fullmatch(r"adaptive-eval \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_validate_prints_plain_numbers(
    scenario_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(scenario_config)]) == 0
    out = capsys.readouterr().out
    assert "weights [0.0, 1.0]" in out and "np.float64" not in out


def test_completions_of_an_unknown_question_is_an_error(
    tmp_path: Path, scenario_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_inline(load(scenario_config), tmp_path / "run")
    assert main(["completions", str(tmp_path / "run"), "--question", "no-such-id"]) == 2
    assert "no-such-id" in capsys.readouterr().err


def test_a_refused_resume_says_how_many_changes_were_not_shown(
    tmp_path: Path, scenario_config: Path
) -> None:
    run_inline(load(scenario_config), tmp_path / "run")
    changes = [
        "seed=8",
        "policy.confidence=0.9",
        "policy.rope=0.05",
        "policy.min_trials_per_question=3",
        "policy.error_control=pair",
        "policy.round_trials=32",
        "baseline.fixed_n=10",
    ]
    # (max_trials_per_question would not count: raising a cap extends the run.)
    with pytest.raises(InputError, match=r"and 2 more"):
        rundir.open_run_dir(build_campaign(load(scenario_config, changes)), tmp_path / "run")


def test_set_reaches_list_items(scenario_config: Path) -> None:
    config = load_config(scenario_config, ["models[0].workers=3", "models.0.select=[model-1]"])
    assert config.models[0].workers == 3 and config.models[0].select == ["model-1"]
    with pytest.raises(InputError, match=r"models\[4\]"):
        load_config(scenario_config, ["models[4].workers=3"])


def test_a_moved_openai_server_is_the_same_campaign(tmp_path: Path) -> None:
    def campaign(url: str) -> Any:
        data = {
            "name": "oa",
            "models": [{"backend": "openai", "name": "srv", "options": {"base_url": url}}],
            "rubric": {"weights": [0, 1]},
            "dataset": {"path": str(ARITH20), "limit": 3},
        }
        return build_campaign(load(write_config(tmp_path / "c.yaml", data)))

    assert (
        campaign("http://a:8000/v1").run.fingerprint == campaign("http://b:9000/v1").run.fingerprint
    )


def test_make_bench_has_its_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run_all.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "memory" in done.stdout
    assert "benchmarks/run_all.py" in (REPO / "Makefile").read_text()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("policy.nope=1", "policy.nope: unknown key"),
        ("policy.allocation={name: track_and_stop, gap_floor: 9}", "gap_floor must be"),
    ],
)
def test_verdicts_benchmark_refuses_a_bad_override_before_running(
    override: str, named: str
) -> None:
    """A bad ``--set`` (a key, or a plug-in's parameter that only building the campaign
    checks) is one line, rc 2, before any campaign."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "verdicts.py"),
            "--replicates",
            "2000",
            "--set",
            override,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-500:]
    assert named in done.stderr and "Traceback" not in done.stderr
    assert "| case |" not in done.stdout


def test_validate_warns_about_a_missing_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _openai_config_without_httpx(tmp_path, monkeypatch)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "is valid" in out and "warning:" in out and "adaptive-eval[openai]" in out


def test_ray_output_goes_to_the_run_log_and_the_console_keeps_the_terminal(
    tmp_path: Path,
) -> None:
    """Ray's C++ driver lines (written to descriptor 2) and forwarded worker output (1 and 2)
    land in RUN/ray.log; the status line still reaches the real stderr."""
    script = f"""
import os, sys
from pathlib import Path
from adaptive_eval.dispatch.cluster import ray_output_to
with ray_output_to(Path({str(tmp_path / "ray.log")!r}), sys.stderr) as console:
    os.write(2, b"[E core_worker.cc] noise\\n")
    os.write(1, b"(WorkerActor pid=1) noise\\n")
    print("token auth warning", file=sys.stderr)
    console.write("status line\\n")
print("final table")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "status line\n" and done.stdout == "final table\n"
    log = (tmp_path / "ray.log").read_text()
    assert "core_worker" in log and "WorkerActor" in log and "token auth" in log


def test_log_lines_do_not_run_into_the_progress_bar() -> None:
    from tqdm import tqdm

    from adaptive_eval.base.logs import ConsoleLines

    terminal = _Terminal()
    lines = ConsoleLines(terminal)
    bar = tqdm(total=10, desc="sampling", file=terminal, ncols=60)
    bar.update(3)
    lines.bar_active = True
    lines.write("warning: slow_policy")
    lines.write(" phase=decide\n")
    bar.update(1)
    bar.close()
    text = terminal.getvalue()
    # The line is whole, on a line of its own, and the bar is drawn again after it.
    assert "\nwarning: slow_policy phase=decide\n" in text.replace("\r", "\n")
    assert text.rindex("sampling") > text.index("warning: slow_policy")


# -- issue 22: workflows 3, 4 and 10, and the console's rank header -------------------------------
def test_running_a_finished_run_again_keeps_its_dispatch_and_an_extension_adds_to_it(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]]
) -> None:
    """A finished run run again (a resume that samples nothing) zeroed summary.json's dispatch
    block (workers 2, batches 309 -> 0); an extension's block held only its own leg."""
    run_dir = tmp_path / "run"
    capped = load(scenario_config, ["budget.trials=300", TEST_SET])
    first = summary_dict(
        runner.run_campaign(build_campaign(capped), run_dir, console=io.StringIO())
    )
    assert first["dispatch"]["batches"] > 0 and first["dispatch"]["workers"] > 0
    again = summary_dict(
        runner.run_campaign(build_campaign(capped), run_dir, console=io.StringIO())
    )
    assert again["dispatch"] == first["dispatch"]
    extended = summary_dict(
        runner.run_campaign(
            build_campaign(load(scenario_config, [TEST_SET])), run_dir, console=io.StringIO()
        )
    )
    with sqlite3.connect(f"file:{run_dir / 'trials.sqlite'}?mode=ro", uri=True) as conn:
        batches = conn.execute("SELECT COUNT(DISTINCT batch_id) FROM trials").fetchone()[0]
    conn.close()
    assert extended["dispatch"]["batches"] == batches > first["dispatch"]["batches"]
    assert extended["dispatch"]["workers"] == first["dispatch"]["workers"]


def test_quiet_prints_only_the_one_line_result(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]], capsys: Any
) -> None:
    """--quiet printed the whole ranking and pair list (33 lines); its help said "only
    warnings"."""
    capsys.readouterr()
    assert (
        main(
            ["run", str(scenario_config), "--out", str(tmp_path / "run"), "--quiet", *TEST_DISPATCH]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and out.startswith("Ranking: 3 models in "), out
    assert err == ""
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    from adaptive_eval.base.summary_schema import read_summary
    from adaptive_eval.outputs.headline import headline

    assert out.strip() == headline(read_summary(summary)).line
    help_text = subprocess.run(
        [*CLI_MODULE, "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "only warnings" not in help_text and "one-line result" in " ".join(help_text.split())


def test_a_pair_is_logged_as_decided_once_however_often_it_becomes_adjacent(
    tmp_path: Path, scenario_config: Path
) -> None:
    """The demo's events logged LLM_10 > LLM_7 at rounds 29 and 37 (it left the adjacent pairs
    and came back), and report.html drew 6 "decided" dots for 5 decided pairs."""
    from helpers import NullLog

    from adaptive_eval.base.types import PairDecision
    from adaptive_eval.control.round_events import RoundEvents
    from adaptive_eval.decide.core import CoreState, RoundDecision

    campaign = build_campaign(load(scenario_config))
    store, _, _ = rundir.open_run_dir(campaign, tmp_path / "run")
    try:
        events = RoundEvents(store, NullLog(), campaign.names)
        settled = PairDecision.resolved(0, 1, 4.0, True, "group_sequential", 3.0, 0.01, 0)
        rounds = [
            (settled, PairDecision.undecided(1, 2, 0.5)),
            (PairDecision.undecided(0, 2, 0.3), PairDecision.undecided(2, 1, 0.5)),
            (settled, PairDecision.undecided(1, 2, 0.5)),
        ]
        before: tuple[PairDecision, ...] = ()
        for index, decisions in enumerate(rounds):
            events.decided(
                RoundDecision(index, decisions, None, None, before, CoreState(decisions)),
                0,
                lambda r: r,
                dict,
            )
            before = decisions
        logged = [payload for kind, _, payload in events._events if kind == "pair_decision"]
    finally:
        store.close()
    assert len(logged) == 1 and logged[0]["decided_at_round"] == 0


def test_the_console_ranking_header_is_explained(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]], capsys: Any
) -> None:
    """The console's "rank (no CI)" header was unexplained (report.md said "rank (decided) |
    order"); issue 20's one-score table replaced it with an explained rank column."""
    assert main(["run", str(scenario_config), "--out", str(tmp_path / "run"), *TEST_DISPATCH]) == 0
    out = capsys.readouterr().out
    assert "(no CI)" not in out
    assert "rank: models share a rank until their pair is decided" in out


def test_a_cap_below_fixed_n_makes_the_cap_the_baseline_and_says_so(
    tmp_path: Path, scenario_config: Path, no_ray: list[dict[str, Any]], capsys: Any
) -> None:
    """vLLM item 2: configs/vllm-tiny.yaml (cap 3 trials per question, nothing decided)
    reported "saved 96.2%" against fixed N = 80, a run it could never have been."""
    sets = ["--set", "policy.max_trials_per_question=3", "--set", "baseline.fixed_n=20"]
    assert main(["validate", str(scenario_config), *sets]) == 0
    assert "N = 3 -> 90 trials (the cap: max_trials_per_question = 3 is below" in (
        capsys.readouterr().out
    )
    assert (
        main(["run", str(scenario_config), "--out", str(tmp_path / "run"), *sets, *TEST_DISPATCH])
        == 0
    )
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    base = summary["baseline"]
    assert base["fixed_n"] == 3 and base["trials"] == 3 * 3 * 10
    assert "below baseline.fixed_n = 20" in base["note"]
    assert summary["compute_saved"]["trials_fraction"] == 1 - summary["trials_used"] / 90
    assert "vs fixed N = 3 (the cap:" in out
    assert "(N = 3; the cap:" in (tmp_path / "run" / "report.md").read_text()
