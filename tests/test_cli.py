"""The command line: score, validate, run (through Ray), report, exit codes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_MODULE, base_config, mimic_success, trials_in, write_config, write_scenario

from adaptive_eval import stats
from adaptive_eval.command_line.cli import main

REPO = Path(__file__).resolve().parent.parent


def run_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI_MODULE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture()
def tensor(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    p = np.array([0.3, 0.6, 0.62])[:, None, None]
    outcomes = (rng.random((3, 10, 16)) < p).astype(np.int64)
    np.savez(tmp_path / "t.npz", outcomes=outcomes, models=np.array(["a", "b", "c"]))
    return tmp_path / "t.npz"


def test_score_prints_bayes_avg_pass_and_both_rankings(tensor: Path, capsys) -> None:
    assert main(["score", str(tensor), "--k", "1,4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    outcomes = np.load(tensor)["outcomes"]
    mu, sigma = stats.bayes(outcomes, np.array([0.0, 1.0]))
    by_name = {row["name"]: row for row in result["models"]}
    for i, name in enumerate("abc"):
        assert by_name[name]["mu"] == pytest.approx(mu[i])
        assert by_name[name]["sigma"] == pytest.approx(sigma[i])
        assert by_name[name]["pass@1"] == pytest.approx(outcomes[i].mean())
        assert by_name[name]["avg@N"] == pytest.approx(outcomes[i].mean())
    assert next(row["name"] for row in result["models"]) in ("b", "c")
    ranks = sorted(row["rank"] for row in result["models"])
    assert ranks in ([1, 1, 2], [1, 2, 3])
    assert main(["score", str(tensor), "--k", "2"]) == 0
    text = capsys.readouterr().out
    assert "Bayes@N" in text and "pass@2" in text
    # The unbiased score leads (issue 29): with N trials in every cell it is avg@N.
    for i, name in enumerate("abc"):
        assert by_name[name]["score"] == pytest.approx(outcomes[i].mean())


def test_score_states_the_rank_threshold_it_uses(tensor: Path, capsys) -> None:
    """The walk-through of issue 29: ``score --json`` (and docs/workflows.md) said rank groups
    are scores within z_(1+c)/2 standard errors (1.96 at 0.95) while the ranks, and the
    console, use the one-sided z_c (1.64)."""
    for confidence in ("0.95", "0.99"):
        assert main(["score", str(tensor), "--confidence", confidence, "--json"]) == 0
        statistic = json.loads(capsys.readouterr().out)["statistic"]
        z = stats.z_threshold(float(confidence))
        assert f"z_c = {z:.2f}" in statistic and "(1+c)/2" not in statistic
        assert main(["score", str(tensor), "--confidence", confidence]) == 0
        assert f"within z = {z:.2f} se share a rank" in capsys.readouterr().out


def test_score_with_prior_and_weights(tmp_path: Path, tensor: Path, capsys) -> None:
    outcomes = np.load(tensor)["outcomes"]
    np.savez(tmp_path / "prior.npz", outcomes=outcomes[0, :, :4])
    assert main(["score", str(tensor), "--prior", str(tmp_path / "prior.npz"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    mu, _ = stats.bayes(outcomes, np.array([0.0, 1.0]), outcomes[0, :, :4])
    assert {r["name"]: r["mu"] for r in result["models"]}["a"] == pytest.approx(mu[0])
    # 0/1 data with three weights would put 1 on the middle weight: refused
    assert main(["score", str(tensor), "--weights", "0,0.5,1"]) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--k", "99"], "outside 1..N"),
        (["--weights", "1"], "outside 0..0"),
        (["--key", "nope"], "array 'nope': missing"),
        (["--confidence", "1.2"], "--confidence"),
    ],
)
def test_score_bad_input_exits_2(tensor: Path, capsys, args: list[str], expected: str) -> None:
    assert main(["score", str(tensor), *args]) == 2
    assert expected in capsys.readouterr().err


def test_validate_prints_the_plan(capsys) -> None:
    assert main(["validate", str(REPO / "configs" / "demo.yaml")]) == 0
    out = capsys.readouterr().out
    assert "models (11)" in out and "fixed-N baseline: N = 80 -> 26400 trials" in out


def test_bad_config_exits_2_with_message_on_stderr(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]))
    data = base_config("s.npz")
    data["rubric"]["wieghts"] = [0, 1]
    path = write_config(tmp_path / "c.yaml", data)
    done = run_cli("run", str(path), "--out", str(tmp_path / "run"))
    assert done.returncode == 2
    assert "c.yaml" in done.stderr and "rubric.wieghts" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_replay_campaign_through_ray_writes_the_contract(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    p = rng.uniform(0.2, 0.8, size=(4, 1, 1))
    outcomes = (rng.random((4, 12, 30)) < p).astype(np.int64)
    np.savez(
        tmp_path / "r.npz", outcomes=outcomes, tokens=rng.integers(100, 200, size=outcomes.shape)
    )
    data = base_config("r.npz")
    data["models"] = [{"backend": "replay", "path": "r.npz", "workers": 2}]
    data["baseline"] = {}
    path = write_config(tmp_path / "c.yaml", data)
    done = run_cli("run", str(path), "--out", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert json.loads(done.stdout) == summary
    for key in (
        "stop_reason",
        "trials_used",
        "tokens_used",
        "baseline",
        "compute_saved",
        "models",
        "pairs",
    ):
        assert key in summary
    assert summary["baseline"]["fixed_n"] == 30 and summary["baseline"]["trials"] == 4 * 12 * 30
    assert summary["compute_saved"]["trials_fraction"] == pytest.approx(
        1 - summary["trials_used"] / (4 * 12 * 30)
    )
    for model in summary["models"]:
        assert set(model) >= {
            "name",
            "score",
            "score_low",
            "score_high",
            "bayes_mu",
            "bayes_sigma",
            "trials",
            "rank",
        }
    for pair in summary["pairs"]:
        assert pair["decision"] in ("a>b", "b>a", "equivalent", "undecided")
    assert (tmp_path / "run" / "report.md").read_text().startswith("# Campaign")
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    assert {"campaign_start", "campaign_done"} <= {e["event"] for e in events}
    assert all(e["campaign"] == summary["campaign_id"] for e in events)
    # Resuming a finished run changes nothing; report rebuilds the same numbers offline.
    again = run_cli("run", str(path), "--out", str(tmp_path / "run"), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["trials_used"] == summary["trials_used"]
    report = run_cli("report", str(tmp_path / "run"), "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["models"] == summary["models"]


@pytest.mark.slow
def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.52, 0.7], questions=12))
    data = base_config("s.npz", max_trials_per_question=60)
    data["models"][0]["latency"] = {"per_batch_s": 0.05}
    path = write_config(tmp_path / "c.yaml", data)
    reference = run_cli("run", str(path), "--out", str(tmp_path / "ref"), "--json")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)

    run_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [
            *CLI_MODULE,
            "run",
            str(path),
            "--out",
            str(run_dir),
            "--quiet",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while trials_in(run_dir / "trials.sqlite") < expected["trials_used"] // 3:
        assert process.poll() is None, "run finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    partial = trials_in(run_dir / "trials.sqlite")
    assert 0 < partial < expected["trials_used"]

    resumed = run_cli("run", str(path), "--out", str(run_dir), "--json")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    assert got["resumed"] is True
    for key in ("trials_used", "stop_reason", "models", "pairs", "compute_saved"):
        assert got[key] == expected[key], key
    query = "SELECT model, question, trial, seed, category, tokens FROM trials ORDER BY 1, 2, 3"
    with (
        sqlite3.connect(run_dir / "trials.sqlite") as a,
        sqlite3.connect(tmp_path / "ref" / "trials.sqlite") as b,
    ):
        assert a.execute(query).fetchall() == b.execute(query).fetchall()


def test_completions_reads_the_store(tmp_path: Path, capsys) -> None:
    from helpers import load, run_inline

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6]), names=["x", "y"])
    run_inline(load(write_config(tmp_path / "c.yaml", base_config("s.npz"))), tmp_path / "run")
    assert (
        main(
            [
                "completions",
                str(tmp_path / "run"),
                "--model",
                "y",
                "--question",
                "q3",
                "--json",
                "--limit",
                "0",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and {r["model"] for r in rows} == {"y"} and {r["question"] for r in rows} == {"q3"}
    assert [r["trial"] for r in rows] == list(range(len(rows)))
    assert main(["completions", str(tmp_path / "run"), "--model", "zz"]) == 2
    assert "'zz' is not in this run" in capsys.readouterr().err


def test_validate_states_the_budget_every_rule_the_library_and_an_auto_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, items 3.8 and 4.6: "budget: trials None, tokens None, wall clock None s",
    "stops on: all_of" without its rules, a library in a missing folder not mentioned, and
    `ray_address: auto` with no cluster accepted (run then failed after Ray's wait)."""
    from helpers import base_config, mimic_success, write_config, write_scenario

    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.6], questions=6))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    capsys.readouterr()
    rules = (
        "policy.stopping=[{name: all_of, rules: [pairs_settled, "
        "{name: ci_width, half_width: 0.3}]}]"
    )
    assert (
        main(
            [
                *("validate", str(config), "--set", rules),
                *("--set", f"library={tmp_path / 'a' / 'b' / 'lib'}"),
                *("--set", "execution.ray_address=auto"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "None" not in out, out
    assert "budget: none (the stopping rules and the cap decide)" in out
    assert "stops on: all_of(pairs_settled, ci_width(half_width=0.3))" in out
    assert f"trial library: {tmp_path / 'a' / 'b' / 'lib' / 'library.sqlite'} (new: created" in out
    assert "creates 3 folder(s)" in out
    assert "execution.ray_address: auto finds no Ray cluster started on this machine" in out
    assert main(["validate", str(config), "--set", "budget.trials=500"]) == 0
    assert "budget: trials 500" in capsys.readouterr().out


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """`adaptive-eval score X | head` printed "unexpected error: BrokenPipeError" (rc 1)."""
    import subprocess

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "many.npz", outcomes=rng.integers(0, 2, (3000, 2, 2)))
    command = [
        *CLI_MODULE,
        "score",
        str(tmp_path / "many.npz"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # what `head -1` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0, err
    assert "BrokenPipe" not in err and "unexpected error" not in err, err
