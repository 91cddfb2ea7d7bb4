"""The forecast: the campaign's own decision core simulated forward from what is known.

Oracles: a forecast whose evidence is every trial the run will use is no forecast at all but the
run itself (every simulation replays it), so its ranges collapse onto the run's own figures; a
pilot followed by ``run`` is checked trial for trial against a run with
``min_trials_per_question: K``; costs are checked against the means they were drawn from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    TEST_DISPATCH,
    base_config,
    ledger,
    load,
    mimic_success,
    one_error_line,
    write_config,
    write_scenario,
)

from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.settings import BudgetSettings
from adaptive_eval.forecast.campaign import Range, forecast
from adaptive_eval.forecast.evidence import Evidence, fit_cost
from adaptive_eval.forecast.paths import simulate_campaign
from adaptive_eval.forecast.simulate import (
    Truth,
    recorded_costing,
    replay_sampler,
)

SCORES = [0.3, 0.45, 0.5, 0.7]
NO_BUDGET = BudgetSettings(None, None, None)


def _config(tmp_path: Path, name: str = "c.yaml", **policy: object) -> Path:
    scenario = write_scenario(tmp_path / "s.npz", mimic_success(SCORES, questions=12))
    data = base_config(str(scenario), **policy)
    return write_config(tmp_path / name, data)


def _tape(probs: np.ndarray, depth: int, seed: int) -> np.ndarray:
    """(L, M, depth) categories drawn from ``probs``."""
    rng = np.random.default_rng(seed)
    cumulative = probs.cumsum(axis=2)
    draws = rng.random((*probs.shape[:2], depth))
    return (draws[..., None] > cumulative[:, :, None, :]).sum(axis=3)


def _evidence(tape: np.ndarray, tokens: np.ndarray | None = None, **kw: object) -> Evidence:
    num_models, num_questions, _ = tape.shape
    m, q, t = np.indices(tape.shape).reshape(3, -1)
    costs = np.full(m.shape, -1) if tokens is None else tokens.reshape(-1)
    return Evidence.from_trials(
        (num_models, num_questions),
        m,
        q,
        t,
        tape.reshape(-1),
        costs,
        np.zeros(m.shape),
        **{"replayed": True, "source": "pilot", "detail": "test", **kw},  # type: ignore[arg-type]
    )


def test_evidence_refuses_trials_that_are_not_each_cells_first() -> None:
    with pytest.raises(ValueError, match="first trials"):
        Evidence.from_trials(
            (1, 1),
            np.array([0]),
            np.array([0]),
            np.array([1]),
            np.array([1]),
            np.array([-1]),
            np.array([0.0]),
            replayed=True,
            source="pilot",
            detail="",
        )


def test_a_forecast_from_every_trial_of_the_run_is_the_run_itself(tmp_path: Path) -> None:
    campaign = build_campaign(load(_config(tmp_path)))
    scenario = np.load(tmp_path / "s.npz")
    cap = campaign.decision.policy.max_trials_per_question
    tape = _tape(scenario["probs"], cap, seed=3)
    real = simulate_campaign(
        build_campaign(load(_config(tmp_path))).decision,
        Truth(scenario["probs"], campaign.decision.weights),
        np.random.default_rng(0),
        replay_sampler(tape, 2),
    )
    found = forecast(campaign, _evidence(tape), NO_BUDGET, simulations=10, processes=1)
    settled = sum(d.settled for d in real.decisions)
    assert found.trials == Range(real.total_trials, real.total_trials, real.total_trials)
    assert found.settled == Range(settled, settled, settled)
    with pytest.raises(ValueError, match="at least 1 campaign, not 0"):
        forecast(campaign, _evidence(tape), NO_BUDGET, simulations=0)


def test_a_cost_aware_forecast_from_every_trial_is_the_run_itself(tmp_path: Path) -> None:
    """``track_and_stop(cost=tokens)``: the simulated rounds are priced as the run's ledger
    prices them, so a forecast from every trial (tokens included) is the cost-aware run, trials
    and tokens, and not the run that treats every trial alike."""
    allocation = {"name": "track_and_stop", "cost": "tokens"}
    config = load(_config(tmp_path, allocation=allocation))
    probs = np.load(tmp_path / "s.npz")["probs"]
    cap = config.policy.max_trials_per_question
    tape = _tape(probs, cap, seed=3)
    level = np.array([2000.0, 100.0, 100.0, 100.0])  # the first model's trials cost 20x
    rng = np.random.default_rng(1)
    tokens = np.rint(level[:, None, None] * rng.gamma(4.0, 0.25, tape.shape)).astype(np.int64)

    def realised(costing: Any) -> Any:
        campaign = build_campaign(config)
        rng = np.random.default_rng(0)
        return simulate_campaign(
            campaign.decision,
            Truth(probs, campaign.decision.weights),
            rng,
            replay_sampler(tape, 2),
            costing=costing,
        )

    priced, blind = realised(recorded_costing(tokens)), realised(None)
    assert priced.trials[0].sum() < blind.trials[0].sum()  # the dear model is spared
    found = forecast(
        build_campaign(config), _evidence(tape, tokens), NO_BUDGET, simulations=4, processes=1
    )
    used = np.arange(cap) < priced.trials[..., None]
    assert found.trials == Range(*[float(priced.total_trials)] * 3)
    assert found.tokens == Range(*[float((tokens * used).sum())] * 3)


def test_recorded_costing_prices_each_rounds_trials_by_their_own_costs() -> None:
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, 500, (2, 3, 6))
    tokens[0, 1, 2] = -1  # unknown: neither counted nor summed
    seconds = rng.random((2, 3, 6))
    price = recorded_costing(tokens, seconds)
    before = np.array([[0, 1, 2], [5, 0, 3]])
    plan = np.array([[2, 3, 1], [4, 1, 0]])  # (1, 0) runs past the tape: nothing known there
    found = price(plan, before, np.zeros((2, 3, 2), dtype=np.int64))
    for cell in np.ndindex(2, 3):
        span = slice(before[cell], min(before[cell] + plan[cell], 6))
        known = tokens[cell][span] >= 0
        assert found.tokens[cell] == tokens[cell][span][known].sum()
        assert found.token_trials[cell] == known.sum()
        assert found.gpu_s[cell] == pytest.approx(seconds[cell][span].sum())


def test_forecast_ranges_bracket_the_runs_they_forecast(tmp_path: Path) -> None:
    """From a pilot of 4, the realised trials of seeded runs of the true campaign mostly fall
    inside the forecast's 10-90% range (a coarse check; benchmarks/forecast.py measures it)."""
    config = load(_config(tmp_path), ["policy.min_trials_per_question=4"])
    probs = np.load(tmp_path / "s.npz")["probs"]
    inside = []
    for seed in range(6):
        tape = _tape(probs, 40, seed)
        campaign = build_campaign(config)
        found = forecast(
            campaign, _evidence(tape[..., :4]), NO_BUDGET, simulations=20, seed=seed, processes=1
        )
        real = simulate_campaign(
            build_campaign(config).decision,
            Truth(probs, campaign.decision.weights),
            np.random.default_rng(seed),
            replay_sampler(tape, 2),
        )
        assert found.trials.p10 <= found.trials.p50 <= found.trials.p90
        assert found.trials.p10 >= 4 * probs.shape[0] * probs.shape[1]  # the pilot is in it
        inside.append(found.trials.p10 * 0.8 <= real.total_trials <= found.trials.p90 * 1.25)
    assert sum(inside) >= 5


def test_the_budget_curve_rises_and_a_budget_caps_the_forecast(tmp_path: Path) -> None:
    campaign = build_campaign(load(_config(tmp_path)))
    probs = np.load(tmp_path / "s.npz")["probs"]
    evidence = _evidence(_tape(probs, 3, 1))
    free = forecast(campaign, evidence, NO_BUDGET, simulations=12, processes=1)
    cap = int(free.trials.p50 * 0.7)
    found = forecast(campaign, evidence, BudgetSettings(cap, None, None), simulations=12)
    medians = [p.settled_mean for p in found.curve]
    assert medians == sorted(medians)
    assert found.trials.p90 <= cap < free.trials.p50
    assert cap in [p.trials for p in found.curve]
    assert found.settled.p50 <= free.settled.p50
    assert found.stops.get("budget", 0) >= 6
    assert all(p.settled_in_budget is not None for p in found.pairs)
    assert all(p.settled_in_budget <= p.settled for p in found.pairs)  # type: ignore[operator]


def test_costs_follow_each_models_category_means() -> None:
    rng = np.random.default_rng(0)
    categories = rng.integers(0, 2, size=(2, 50, 8))
    means = np.array([[1000.0, 200.0], [400.0, 400.0]])  # wrong answers run long for model 0
    values = rng.normal(means[np.arange(2)[:, None, None], categories], 20.0)
    model = fit_cost(values, categories, np.ones(categories.shape, bool), 2)
    assert model is not None
    assert np.allclose(model.mean, means, rtol=0.02)
    assert np.abs(model.ratio - 1).mean() < 0.02
    new = np.zeros((2, 50, 2))
    new[0, :, 0] = 1  # one wrong trial of model 0 per question
    assert model.expected(new) == pytest.approx(50 * 1000, rel=0.03)
    # A model with no cost of its own (a checkpoint new to the library) borrows the others'.
    unknown = np.ones(categories.shape, bool)
    unknown[1] = False
    borrowing = fit_cost(values, categories, unknown, 2)
    assert borrowing is not None and borrowing.borrowed == (1,)
    assert np.allclose(borrowing.mean[1], borrowing.mean[0])
    assert fit_cost(values, categories, np.zeros(categories.shape, bool), 2) is None


def test_pilot_then_run_equals_a_run_with_that_min_trials(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    piloted, plain = tmp_path / "piloted", tmp_path / "plain"
    args = ["forecast", str(config), "--pilot", "4", "--out", str(piloted), "--simulations", "10"]
    assert main([*args, *TEST_DISPATCH]) == 0
    said = capsys.readouterr().out
    assert "pairs settled" in said and "already recorded: 192" in said
    assert len(ledger(piloted)) >= 4 * 4 * 12
    record = json.loads((piloted / "forecast.json").read_text())
    assert record["evidence"]["trials"] == len(ledger(piloted))
    assert main(["run", str(config), "--out", str(piloted), "--quiet", *TEST_DISPATCH]) == 0
    overrides = ["--set", "policy.min_trials_per_question=4"]
    assert (
        main(["run", str(config), "--out", str(plain), "--quiet", *overrides, *TEST_DISPATCH]) == 0
    )
    columns = "model, question, trial, seed, category, tokens, round"
    assert ledger(piloted, columns) == ledger(plain, columns)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--pilot", "1", "--out", "{out}"], "--pilot: a pilot of 1 trial(s) per question"),
        (["--pilot", "3"], "--pilot: --pilot samples into the run folder"),
        (["--pilot", "41", "--out", "{out}"], "exceeds policy.max_trials_per_question=40"),
        (
            ["--pilot", "4", "--out", "{out}", "--set", "budget.trials=100"],
            "budget.trials: budget.trials=100 is below the pilot's own cost",
        ),
        (["--pilot", "4", "--out", "{out}", "--from", "{out}"], "--from: --pilot and --from"),
        (["--margin", "0.05"], "--margin: --margin is compare's: give --candidate"),
    ],
)
def test_a_bad_pilot_is_one_line_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    argv = [a.replace("{out}", str(out)) for a in args]
    assert main(["forecast", str(config), *argv, *TEST_DISPATCH]) == 2
    assert said in one_error_line(capsys.readouterr().err)
    assert not (out / "trials.sqlite").exists()


def test_from_another_campaigns_run_is_refused_naming_the_difference(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["run", str(config), "--out", str(run_dir), "--quiet", *TEST_DISPATCH]) == 0
    capsys.readouterr()
    other = write_scenario(tmp_path / "other.npz", mimic_success([0.2, 0.4, 0.6], questions=12))
    data = base_config(str(other))
    other_config = write_config(tmp_path / "other.yaml", data)
    assert main(["forecast", str(other_config), "--from", str(run_dir)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "is another campaign's run" in line and "models: it ran 4" in line
    # The same campaign with another policy and seed is evidence.
    assert main(["forecast", str(config), "--from", str(run_dir), "--set", "seed=9"]) == 0
    said = capsys.readouterr().out
    assert "an earlier run of this campaign" in said
    assert said.count("not forecast: tokens") == 0  # the simulated backend counts tokens


def test_a_forecast_with_no_evidence_says_it_is_a_prior_guess_and_never_a_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    assert main(["forecast", str(config), "--simulations", "10", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["evidence"]["source"] == "prior"
    assert record["tokens"] is None and record["gpu_s"] is None
    assert len(record["unknown"]) == 1
    assert main(["forecast", str(config), "--simulations", "10"]) == 0
    said = capsys.readouterr().out
    assert "PRIOR GUESS" in said and said.count("not forecast") == 1


def test_each_night_forecasts_its_cost_alerts_above_its_range_and_says_news_below(
    tmp_path: Path,
    no_ray: list[dict[str, object]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adaptive_eval.workflows import nightly

    config, history = _config(tmp_path), tmp_path / "history"
    night = ["nightly", str(config), "--history", str(history), *TEST_DISPATCH]
    assert main([*night, "--night", "2026-11-01"]) == 0
    first = json.loads((history / "nights.jsonl").read_text().splitlines()[0])
    assert first["forecast"]["evidence"] == "prior" and not first["alerts"]
    # The library now holds the whole first night: the second replays it, sampling nothing,
    # and every simulation replays it too.
    assert main([*night, "--night", "2026-11-02"]) == 0
    second = json.loads((history / "nights.jsonl").read_text().splitlines()[1])
    assert second["forecast"]["evidence"] == "library"
    assert second["forecast"]["new_trials_90"] == [0.0, 0.0] and second["sampled"] == 0
    assert (history / "runs" / "2026-11-02" / "forecast.json").exists()

    def narrow(config: object, run_dir: Path) -> dict[str, object]:
        return {"evidence": "library", "new_trials_90": [5.0, 9.0], "new_trials": {}}

    monkeypatch.setattr(nightly, "night_forecast", narrow)
    capsys.readouterr()
    # Fewer trials than forecast is good news: a line, exit 0 (it used to fail the CronJob).
    assert main([*night, "--night", "2026-11-03"]) == 0
    said = capsys.readouterr().out
    assert "trials sampled: 0, below the forecast's 90% range 5 to 9" in said
    third = json.loads((history / "nights.jsonl").read_text().splitlines()[2])
    assert not third["alerts"] and third["news"][0]["kind"] == "cost_outside_forecast"
    assert not (history / "runs" / "2026-11-03" / "alert.json").exists()

    def cheap(config: object, run_dir: Path) -> dict[str, object]:
        return {"evidence": "library", "new_trials_90": [-3.0, -1.0], "new_trials": {}}

    # More trials than the forecast's 90% range alerts (exit 3).
    monkeypatch.setattr(nightly, "night_forecast", cheap)
    assert main([*night, "--night", "2026-11-04"]) == 3
    said = capsys.readouterr().out
    assert "ALERT: trials sampled: 0, above the forecast's 90% range -3 to -1" in said
    alert = json.loads((history / "runs" / "2026-11-04" / "alert.json").read_text())
    assert alert["alerts"][0]["kind"] == "cost_outside_forecast"
    page = (history / "runs" / "2026-11-04" / "report.md").read_text()
    assert "above the forecast's 90% range" in page


def test_a_compare_forecast_counts_the_candidates_pairs_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["run", str(config), "--out", str(run_dir), "--quiet", *TEST_DISPATCH]) == 0
    capsys.readouterr()
    args = ["forecast", str(config), "--from", str(run_dir), "--candidate", "model-1", "--json"]
    assert main([*args, "--margin", "0.05", "--simulations", "10"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["candidate"] == "model-1" and record["pairs_total"] == 3
    assert record["pairs"] and all("model-1" in (p["a"], p["b"]) for p in record["pairs"])
    assert record["pairs_settled"]["p90"] <= 3


def test_validate_forecasts_from_the_library_and_otherwise_says_how(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    data = base_config(str(write_scenario(tmp_path / "s.npz", mimic_success(SCORES, 12))))
    data["library"] = str(tmp_path / "library.sqlite")
    config = write_config(tmp_path / "c.yaml", data)
    assert main(["validate", str(config)]) == 0
    assert "forecast: no recorded trial of these models yet; run `adaptive-eval forecast" in (
        capsys.readouterr().out
    )
    assert main(["run", str(config), "--out", str(tmp_path / "r"), "--quiet", *TEST_DISPATCH]) == 0
    trials = json.loads((tmp_path / "r" / "summary.json").read_text())["trials_used"]
    capsys.readouterr()
    assert main(["validate", str(config)]) == 0
    said = capsys.readouterr().out
    # Every simulation replays the library's trials: the run itself, again.
    assert f"forecast (from {trials:,} library trials; 10 simulations): trials {trials:,}" in said


def test_a_backend_without_token_counts_is_said_once_never_a_zero(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = _tape(
        np.load(write_scenario(tmp_path / "s.npz", mimic_success(SCORES, 12)))["probs"], 30, 0
    )
    np.savez(tmp_path / "r.npz", outcomes=outcomes.astype(np.int8))
    data = base_config("r.npz")
    data["models"] = [{"backend": "replay", "path": "r.npz"}]
    data["baseline"] = {}
    config = write_config(tmp_path / "c.yaml", data)
    out = tmp_path / "out"
    assert main(["forecast", str(config), "--pilot", "3", "--out", str(out), *TEST_DISPATCH]) == 0
    said = capsys.readouterr().out
    assert said.count("not forecast: tokens: the backends recorded no token counts") == 1
    assert "tokens:" not in said.replace("not forecast: tokens:", "")
    record = json.loads((out / "forecast.json").read_text())
    assert record["tokens"] is None and record["trials"]["p10"] > 0


def test_the_evidences_score_resolution_is_the_sd_of_a_pilots_estimate() -> None:
    """Monte Carlo oracle: the sd, over 2,000 pilots of 4 trials per question, of a model's
    mean of per-question means against what one pilot says it is."""
    from adaptive_eval.forecast.evidence import score_resolution

    probs = np.stack([1 - mimic_success([0.5], 30, 2), mimic_success([0.5], 30, 2)], axis=2)
    rng = np.random.default_rng(0)
    estimates = rng.binomial(4, probs[0, :, 1], size=(2000, 30)).mean(axis=1) / 4
    said = [
        score_resolution(_evidence(_tape(probs, 4, seed)), np.array([0.0, 1.0]))
        for seed in range(40)
    ]
    assert float(np.median(said)) == pytest.approx(float(estimates.std()), rel=0.1)


def test_a_pilot_below_the_configs_own_minimum_keeps_the_minimum(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The pilot records the minimum the run keeps (the config's 6, not the asked 4), so the
    run on its folder is the same campaign, and a --set that raises it again is not lowered."""
    config = _config(tmp_path, min_trials_per_question=6)
    out = tmp_path / "out"
    args = ["forecast", str(config), "--pilot", "4", "--out", str(out), "--simulations", "10"]
    assert main([*args, *TEST_DISPATCH]) == 0
    assert json.loads((out / "pilot.json").read_text()) == {"trials_per_question": 6}
    assert main(["run", str(config), "--out", str(out), "--quiet", *TEST_DISPATCH]) == 0
    assert json.loads((out / "summary.json").read_text())["forecast"]["same_campaign"]


# -- compare's verdict ---------------------------------------------------------------------------


def _shares_sum_to_one(record: dict[str, object]) -> None:
    verdict = record["verdict"]
    assert isinstance(verdict, dict)
    codes = verdict["exit_codes"]
    assert [row["code"] for row in codes] == [0, 3, 4]
    assert sum(row["probability"] for row in codes) == pytest.approx(1.0)
    if codes[0]["probability_in_budget"] is not None:
        assert sum(row["probability_in_budget"] for row in codes) == pytest.approx(1.0)
    for row in verdict["incumbents"]:
        assert sum(row["at_cap"].values()) == pytest.approx(1.0)
        if row["in_budget"] is not None:
            assert sum(row["in_budget"].values()) == pytest.approx(1.0)
    for point in record["curve"]:  # type: ignore[attr-defined]
        assert sum(point["exit_codes"].values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("candidate", "overrides", "code"),
    [
        ("model-3", [], 0),  # the best model: better than every incumbent
        ("model-0", [], 3),  # the worst: a regression
        ("model-1", ["policy.max_trials_per_question=6"], 4),  # too few trials to decide
    ],
)
def test_a_forecast_from_every_trial_of_a_compare_run_is_its_exit_code(
    tmp_path: Path,
    no_ray: list[dict[str, object]],
    capsys: pytest.CaptureFixture[str],
    candidate: str,
    overrides: list[str],
    code: int,
) -> None:
    """Oracle: given the compare run's own trials (its folder, replayed), every simulation is
    that run again, so the forecast puts probability 1 on its actual exit code and on each of
    its verdicts."""
    config, run_dir = _config(tmp_path), tmp_path / "run"
    sets = [arg for value in overrides for arg in ("--set", value)]
    compare = ["compare", str(config), "--candidate", candidate, "--out", str(run_dir), *sets]
    assert main([*compare, "--quiet", *TEST_DISPATCH]) == code
    comparison = json.loads((run_dir / "summary.json").read_text())["comparison"]
    assert comparison["exit_code"] == code
    capsys.readouterr()
    args = ["forecast", str(config), "--candidate", candidate, "--from", str(run_dir)]
    assert main([*args, "--out", str(run_dir), "--simulations", "10", "--json", *sets]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["evidence"]["replayed"] and record["evidence"]["source"] == "pilot"
    probabilities = {row["code"]: row["probability"] for row in record["verdict"]["exit_codes"]}
    assert probabilities[code] == 1.0
    meanings = {row["code"]: row["meaning"] for row in record["verdict"]["exit_codes"]}
    assert meanings[code] == comparison["meaning"]
    forecast_sides = {row["incumbent"]: row["at_cap"] for row in record["verdict"]["incumbents"]}
    assert forecast_sides == {v["incumbent"]: {v["decision"]: 1.0} for v in comparison["verdicts"]}
    _shares_sum_to_one(record)
    # The folder now holds the forecast: its summary (re-read) sets the verdict against it.
    assert main(["report", str(run_dir), "--json"]) == 0
    check = json.loads((run_dir / "summary.json").read_text())["forecast"]["verdict"]
    assert check["exit_code"] == code and check["probabilities"][str(code)] == 1.0
    assert sum(check["probabilities"].values()) == pytest.approx(1.0)
    assert "| compare's exit code | " in (run_dir / "report.md").read_text()


def _compare_forecast(
    tmp_path: Path, candidate: str, margin: float | None = None, budget: int | None = None
) -> dict[str, object]:
    """A compare forecast from a pilot of 4 trials per question of clearly spaced models."""
    from adaptive_eval.campaign.checkpoint import compare_campaign
    from adaptive_eval.outputs.presentation import COMPARE_EXIT_MEANING

    scenario = write_scenario(tmp_path / "s.npz", mimic_success([0.2, 0.5, 0.55, 0.85], 30))
    config = load(write_config(tmp_path / "c.yaml", base_config(str(scenario))))
    campaign, judge = compare_campaign(build_campaign(config), candidate, margin)
    tape = _tape(np.load(scenario)["probs"], 4, seed=2)
    found = forecast(
        campaign,
        _evidence(tape),
        BudgetSettings(budget, None, None),
        simulations=20,
        processes=1,
        judge=judge,
        meanings=COMPARE_EXIT_MEANING,
    )
    assert found.candidate == candidate and found.verdict is not None
    return found.record()


@pytest.mark.parametrize(
    ("candidate", "margin", "code"),
    [("model-3", None, 0), ("model-0", None, 3), ("model-3", 0.05, 0), ("model-0", 0.05, 3)],
)
def test_a_clearly_better_candidate_is_forecast_to_pass_and_a_clearly_worse_to_fail(
    tmp_path: Path, candidate: str, margin: float | None, code: int
) -> None:
    record = _compare_forecast(tmp_path, candidate, margin)
    probabilities = {row["code"]: row["probability"] for row in record["verdict"]["exit_codes"]}  # type: ignore[index]
    assert probabilities[code] >= 0.8, probabilities
    _shares_sum_to_one(record)


def test_a_budget_too_small_to_decide_leaves_the_verdict_undecided(tmp_path: Path) -> None:
    """The budget is applied to the same paths: a budget of the first round's trials stops
    every simulation before anything is decided (exit 4 for sure), while at the cap the
    clearly better candidate passes; the curve says the same at its first point."""
    first = _compare_forecast(tmp_path, "model-3")["curve"][0]  # type: ignore[index]
    assert first["exit_codes"] == {"0": 0.0, "3": 0.0, "4": 1.0}
    record = _compare_forecast(tmp_path, "model-3", budget=first["trials"])
    verdict = record["verdict"]
    codes = {row["code"]: row for row in verdict["exit_codes"]}  # type: ignore[index]
    assert codes[4]["probability_in_budget"] == 1.0
    assert codes[0]["probability"] >= 0.8
    assert all(row["in_budget"] == {"undecided": 1.0} for row in verdict["incumbents"])  # type: ignore[index]
    _shares_sum_to_one(record)


def test_a_forecast_without_a_candidate_has_no_verdict(tmp_path: Path) -> None:
    campaign = build_campaign(load(_config(tmp_path)))
    evidence = _evidence(_tape(np.load(tmp_path / "s.npz")["probs"], 3, 1))
    record = forecast(campaign, evidence, NO_BUDGET, simulations=10, processes=1).record()
    assert "verdict" not in record and all("exit_codes" not in p for p in record["curve"])


def test_a_damaged_forecast_in_the_folder_is_one_line_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run reads its folder's forecast.json only at its end: a damaged one is refused
    before sampling, naming the file, not after the trials were spent."""
    config, run_dir = _config(tmp_path), tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "forecast.json").write_text('{"trials": {"p10": 1}}')
    assert main(["run", str(config), "--out", str(run_dir), "--quiet", *TEST_DISPATCH]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "forecast.json" in line and "is not a forecast" in line
    assert not (run_dir / "trials.sqlite").exists()


def test_an_automatic_pilot_samples_on_until_it_resolves_the_gaps_and_the_run_reuses_it(
    tmp_path: Path, no_ray: list[dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Twelve models evenly spread: a pilot of 4 cannot tell their gaps from ties; the automatic
    pilot samples the campaign's own rounds on (each look a line and an event) and the run
    continues from every trial it recorded."""
    scores = [0.17 + 0.06 * i for i in range(12)]
    scenario = write_scenario(tmp_path / "s.npz", mimic_success(scores, questions=12))
    config = write_config(
        tmp_path / "c.yaml", base_config(str(scenario), max_trials_per_question=200)
    )
    out = tmp_path / "auto"
    args = ["forecast", str(config), "--pilot", "auto", "--out", str(out), "--simulations", "10"]
    assert main([*args, *TEST_DISPATCH]) == 0
    said = capsys.readouterr()
    looks = [line for line in said.err.splitlines() if line.startswith("pilot: ")]
    assert len(looks) >= 2 and "sampling on to about" in looks[0]
    assert "sampling on" not in looks[-1]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    grown = [e for e in events if e["event"] == "pilot_growth"]
    assert len(grown) == len(looks) and grown[-1]["target"] is None
    pilot = len(ledger(out))
    assert pilot > 4 * 12 * 12  # more than a pilot of 4
    record = json.loads((out / "forecast.json").read_text())
    assert record["evidence"]["trials"] == pilot
    assert main(["run", str(config), "--out", str(out), "--quiet", *TEST_DISPATCH]) == 0
    assert json.loads((out / "summary.json").read_text())["trials_used"] >= pilot


def test_an_automatic_pilot_asks_for_twice_the_trials_within_its_share_of_the_forecast(
    tmp_path: Path,
) -> None:
    from adaptive_eval.decide.state import RunState
    from adaptive_eval.forecast.pilot import AUTO_SHARE, next_target
    from adaptive_eval.forecast.simulate import run_core

    scores = [0.17 + 0.06 * i for i in range(12)]
    success = mimic_success(scores, questions=12)
    probs = np.stack([1 - success, success], axis=2)
    scenario = write_scenario(tmp_path / "t.npz", success)
    config = write_config(
        tmp_path / "twelve.yaml", base_config(str(scenario), max_trials_per_question=200)
    )
    campaign = build_campaign(load(config))
    core = campaign.decision.decision_core()
    state = RunState(campaign.decision.prior, campaign.decision.weights)

    class Halt(Exception):
        pass

    def watch(view: Any, outcome: Any) -> None:
        if view.round >= 1:
            raise Halt

    with pytest.raises(Halt):
        run_core(
            core,
            state,
            campaign.decision.view_settings(),
            Truth(probs, campaign.decision.weights),
            np.random.default_rng(0),
            watch=watch,
        )
    look = next_target(campaign.decision, core, state)
    assert look.resolution is not None and not look.resolution.resolved
    assert look.forecast_total is not None
    assert look.target == min(2 * state.trials_used, int(AUTO_SHARE * look.forecast_total))
