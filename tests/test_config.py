"""Config errors name the file, the field path and the value; the contract config loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import TEST_DISPATCH, base_config, mimic_success, write_config, write_scenario

from adaptive_eval.base.errors import InputError
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config.schema import load_config

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def scenario(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.5, 0.7]))


def error_of(tmp_path: Path, data: dict, overrides: list[str] | None = None) -> str:
    path = write_config(tmp_path / "c.yaml", data)
    with pytest.raises(InputError) as info:
        build_campaign(load_config(path, overrides))
    return str(info.value)


def test_contract_config_from_the_issue_runs_through_validation(
    tmp_path: Path, scenario: Path
) -> None:
    text = f"""
name: demo
seed: 0
models:
  - backend: simulated
    path: {scenario.name}
rubric:
  weights: [0, 1]
policy:
  confidence: 0.95
  rope: 0.02
  min_trials_per_question: 2
  max_trials_per_question: 400
baseline:
  fixed_n: 80
"""
    path = tmp_path / "contract.yaml"
    path.write_text(text)
    campaign = build_campaign(load_config(path))
    assert campaign.names == ("model-0", "model-1", "model-2")
    assert campaign.run.fixed_n == 80
    assert list(campaign.decision.capacity) == [400, 400, 400]


def test_unknown_key_names_file_field_and_value(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario))
    data["policy"]["confidance"] = 0.9
    message = error_of(tmp_path, data)
    assert "c.yaml" in message and "policy.confidance" in message and "0.9" in message


def test_mistyped_value_names_field(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario))
    data["policy"]["max_trials_per_question"] = "lots"
    message = error_of(tmp_path, data)
    assert "policy.max_trials_per_question" in message and '"lots"' in message


def test_unknown_key_in_a_model_entry(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario))
    data["models"][0]["pth"] = "x.npz"
    assert "models[0].pth" in error_of(tmp_path, data)


def test_weights_length_must_match_categories(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario))
    data["rubric"]["weights"] = [0, 0.5, 1]
    message = error_of(tmp_path, data)
    assert "rubric.weights" in message and "3 weights" in message and "2 categories" in message


def test_min_above_max_is_refused(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario), min_trials_per_question=50)
    assert "min_trials_per_question=50" in error_of(tmp_path, data)


def test_unknown_backend_and_policy_names(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario))
    data["models"][0]["backend"] = "simulatd"
    message = error_of(tmp_path, data)
    assert "models[0].backend" in message and "simulatd" in message and "simulated" in message
    data = base_config(str(scenario), allocation="roundrobin")
    assert "policy.allocation" in error_of(tmp_path, data)


def test_bad_policy_parameter_is_named(tmp_path: Path, scenario: Path) -> None:
    data = base_config(str(scenario), stopping=[{"name": "ci_width", "widht": 0.1}])
    message = error_of(tmp_path, data)
    assert "policy.stopping[0]" in message and "widht" in message
    data = base_config(str(scenario), stopping=[{"name": "ci_width", "width": -1}])
    assert "width must be a finite number > 0, got -1" in error_of(tmp_path, data)


def test_overrides_apply_and_are_validated(tmp_path: Path, scenario: Path) -> None:
    path = write_config(tmp_path / "c.yaml", base_config(str(scenario)))
    config = load_config(path, ["policy.confidence=0.99", "execution.workers=3"])
    assert config.policy.confidence == 0.99 and config.execution.workers == 3
    with pytest.raises(InputError, match=r"policy\.confidence"):
        load_config(path, ["policy.confidence=1.5"])


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(InputError, match=r"bad\.yaml: invalid YAML"):
        load_config(bad)
    with pytest.raises(InputError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")


def test_shipped_configs_validate() -> None:
    for name in ("demo.yaml", "demo-fixed-n.yaml", "demo-settle-all.yaml"):
        campaign = build_campaign(load_config(REPO / "configs" / name))
        assert campaign.num_models == 11 and campaign.num_questions == 30


def test_identity_ignores_execution_settings(tmp_path: Path, scenario: Path) -> None:
    path = write_config(tmp_path / "c.yaml", base_config(str(scenario)))
    a = build_campaign(load_config(path))
    b = build_campaign(load_config(path, ["execution.workers=4", "execution.batch_size=3"]))
    c = build_campaign(load_config(path, ["seed=8"]))
    assert a.run.fingerprint == b.run.fingerprint != c.run.fingerprint


def test_demo_scenario_matches_the_paper_scores() -> None:
    data = np.load(REPO / "configs" / "scenarios" / "llm_mimics.npz")
    means = data["probs"][:, :, 1].mean(axis=1)
    np.testing.assert_allclose(means, data["true_scores"], atol=1e-9)
    assert data["probs"].shape == (11, 30, 2)


# -- issue 22, failures 5 and 19: say what a campaign will do and what it ignores ---------------
def test_generation_sections_with_a_simulated_backend_are_named_as_ignored(
    tmp_path: Path, scenario: Path, no_ray: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from adaptive_eval.command_line.cli import main

    data = base_config(scenario.name)
    data["sampling"] = {"temperature": 1.0}
    data["grader"] = "math"
    config = write_config(tmp_path / "c.yaml", data)
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "sampling, grader are ignored: no model of this config" in out
    assert main(["run", str(config), "--out", str(tmp_path / "run"), *TEST_DISPATCH]) == 0
    err = capsys.readouterr().err  # the run's console says so too, as a sentence
    assert (
        "warning: " in err and "sampling, grader are ignored" in err and "config_ignored" not in err
    )
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "sampling, grader are ignored" in events
    data.pop("sampling")
    data.pop("grader")
    assert main(["validate", str(write_config(tmp_path / "c.yaml", data))]) == 0
    assert "ignored" not in capsys.readouterr().out


def test_validate_says_an_empty_stopping_list_samples_every_model_to_the_cap(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from adaptive_eval.command_line.cli import main

    data = base_config(scenario.name, stopping=[])
    assert main(["validate", str(write_config(tmp_path / "c.yaml", data))]) == 0
    out = capsys.readouterr().out
    assert "stops on: none (policy.stopping is empty): every model is sampled to" in out
    data = base_config(scenario.name)
    data["budget"] = {"trials": 500}
    assert main(["validate", str(write_config(tmp_path / "c.yaml", data))]) == 0
    assert "stops on: pairs_settled (the default" in capsys.readouterr().out


def test_a_long_integer_is_refused_by_the_reader_wherever_it_is_used(tmp_path: Path) -> None:
    """Issue 48, item 8: 5,000 digits ended "unexpected error: ValueError: Exceeds the limit
    (4300 digits)" from inside PyYAML. An anchored one is named where it was written, once;
    100 digits still reach the schema, whose line names the field."""
    from adaptive_eval.config.reader import load_yaml
    from adaptive_eval.inputs.bounded import MAX_INT_DIGITS

    long = "9" * 5000
    with pytest.raises(InputError) as info:
        load_yaml(f"a: &n {long}\nb: [*n, *n]\n", "c.yaml")
    assert info.value.source == "c.yaml" and info.value.field in ("a", "b[0]", "b[1]")
    assert "an integer of 5,000 digits" in info.value.message and len(str(info.value)) < 200
    for text in (f"x: -{long}", f"x: +1_{long}", f"x: !!int '{long}'", "x: 0b" + "1" * 20_000):
        with pytest.raises(InputError, match="x: an integer of"):
            load_yaml(text, "c.yaml")
    assert load_yaml("x: " + "9" * MAX_INT_DIGITS, "c.yaml") == {"x": 10**MAX_INT_DIGITS - 1}
    assert load_yaml(f"x: '{long}'", "c.yaml") == {"x": long}  # text stays text
    path = write_config(tmp_path / "c.yaml", {"name": "t", "seed": 10**MAX_INT_DIGITS - 1})
    with pytest.raises(InputError, match=r"seed: Input should be .* \(got 9{100}\)"):
        load_config(path)
