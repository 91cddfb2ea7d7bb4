"""The ``external`` backend (issue 49, item 3): models another harness samples (the Inspect
bridge), named in the entry's options; no file read, no worker that samples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adaptive_eval import api

CLI = str(Path(sys.executable).with_name("adaptive-eval"))

VALUES = {
    "name": "external",
    "models": [
        {
            "backend": "external",
            "options": {"models": ["a", "b"], "questions": ["q1", "q2"], "trials": 6},
        }
    ],
    "rubric": {"weights": [0, 1]},
    "policy": {"max_trials_per_question": 6},
    "execution": {"dispatch": "inline"},
}


def test_a_campaign_of_external_models_builds_from_values() -> None:
    campaign = api.campaign(VALUES)
    assert campaign.names == ("a", "b")
    assert campaign.question_ids == ("q1", "q2")
    assert campaign.decision.capacity.tolist() == [6, 6]
    assert campaign.run.identity["files"] == [{}]  # no file is read


@pytest.mark.parametrize(
    ("options", "field", "says"),
    [
        ({"models": ["a", "a"], "questions": ["q"], "trials": 2}, "models", "names 'a' twice"),
        ({"models": ["a"], "questions": [], "trials": 2}, "questions", "at least 1"),
        ({"models": ["a"], "questions": ["q"], "trials": 0}, "trials", "greater than or equal"),
        ({"models": ["a"], "questions": ["q"], "trials": 2, "path": "x"}, "path", "Extra"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, object], field: str, says: str) -> None:
    values = {**VALUES, "models": [{"backend": "external", "options": options}]}
    with pytest.raises(api.InputError) as raised:
        api.campaign(values)
    assert raised.value.field == f"models[0].options.{field}"
    assert says in str(raised.value)


def test_run_refuses_external_models_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "external.yaml"
    config.write_text(yaml.safe_dump(VALUES))
    valid = subprocess.run([CLI, "validate", str(config)], capture_output=True, text=True)
    assert valid.returncode == 0, valid.stderr
    assert "external: 2 models x 2 questions" in valid.stdout
    done = subprocess.run(
        [CLI, "run", str(config), "--out", str(tmp_path / "run")], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "another harness samples them" in done.stderr
    assert (
        len(done.stderr.strip().splitlines()) <= 2
    )  # one line (and where the log is), no traceback
    assert not (tmp_path / "run" / "trials.sqlite").exists()


def test_an_integer_of_5000_digits_from_python_is_one_line() -> None:
    sys.set_int_max_str_digits(0)
    big = int("9" * 5000)
    sys.set_int_max_str_digits(4300)
    options = {"models": ["a"], "questions": ["q"], "trials": big}
    for values in (
        {**VALUES, "models": [{"backend": "external", "options": options}]},
        {**VALUES, "seed": big},
    ):
        with pytest.raises(api.InputError, match="an integer of about 5,000 digits"):
            api.campaign(values)
