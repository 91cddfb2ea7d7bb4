"""The Python front door (adaptive_eval/api/): README's Python section runs as written, a run
from Python values is the command's run, and a bad value is the command's one-line error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adaptive_eval import api

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
CLI = str(Path(sys.executable).with_name("adaptive-eval"))

SMALL = {
    "name": "python",
    "seed": 3,
    "models": [{"backend": "simulated", "path": str(REPO / "configs/scenarios/llm_mimics.npz")}],
    "rubric": {"weights": [0, 1]},
    "policy": {"max_trials_per_question": 12, "min_trials_per_question": 2},
    "execution": {"dispatch": "inline"},
}


def readme_python() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "README has one Python section"
    return blocks[0]


def test_readme_python_section_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "configs").symlink_to(REPO / "configs")
    code = readme_python() + "\nprint('FORECAST', forecast.trials.p50)"
    code += "\nprint('MODELS', decision.num_models)\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    assert first.split()[0] in ("pairs_settled", "futility", "max_trials")
    summary = json.loads((tmp_path / "runs/notebook/summary.json").read_text())
    assert summary["models"][0]["name"] in first  # what it printed is what the folder holds
    assert float(done.stdout.split("FORECAST")[1].split()[0]) > 0
    assert int(done.stdout.split("MODELS")[1]) == len(summary["models"])


def _without_ids(path: Path) -> dict[str, object]:
    summary = json.loads(path.read_text())
    for key in ("campaign_id", "elapsed_s", "provenance", "dispatch"):  # ids and times
        summary.pop(key, None)
    return summary


def test_a_run_from_python_values_is_the_commands_run(tmp_path: Path) -> None:
    summary = api.run(SMALL, tmp_path / "python")
    config = tmp_path / "campaign.yaml"
    config.write_text(yaml.safe_dump(SMALL))
    done = subprocess.run(
        [CLI, "run", str(config), "--out", str(tmp_path / "cli"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert summary == api.read(tmp_path / "python")
    python, command = (_without_ids(tmp_path / name / "summary.json") for name in ("python", "cli"))
    python.pop("name"), command.pop("name")
    assert python == command  # same trials, decisions, scores: one workflow behind both doors


def test_compare_and_forecast_from_python(tmp_path: Path) -> None:
    compared = api.compare(SMALL, "LLM_10", tmp_path / "compare")
    assert compared.comparison is not None
    assert compared.comparison.candidate == "LLM_10"
    assert compared.comparison.exit_code in (0, 3, 4)
    found = api.forecast(SMALL, from_dir=tmp_path / "compare", simulations=10)
    assert found.trials.p10 <= found.trials.p50 <= found.trials.p90


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"policy": {"confidence": 2}}, "policy.confidence"),
        ({"policy": {"no_such_key": 1}}, "policy.no_such_key"),
        ({"rubric": {"weights": "high"}}, "rubric.weights"),
    ],
)
def test_a_bad_value_is_the_commands_error_before_sampling(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    out = tmp_path / "run"
    with pytest.raises(api.InputError) as raised:
        api.run({**SMALL, **change}, out)
    assert raised.value.field == field
    assert "\n" not in str(raised.value)
    assert not out.exists()  # refused before the run folder was made
    config = tmp_path / "campaign.yaml"
    config.write_text(yaml.safe_dump({**SMALL, **change}))
    done = subprocess.run([CLI, "validate", str(config)], capture_output=True, text=True)
    assert done.returncode == 2
    assert raised.value.message in done.stderr  # the YAML user's line, less the file's name


def test_wrong_kinds_of_values_are_named() -> None:
    with pytest.raises(api.InputError, match="a campaign is a mapping"):
        api.campaign([SMALL])  # type: ignore[arg-type]
    with pytest.raises(api.InputError, match="trials per question or 'auto'") as raised:
        api.forecast(SMALL, pilot=2.5, out="unused")  # type: ignore[arg-type]
    assert raised.value.field == "pilot"
    with pytest.raises(api.InputError, match="file not found"):
        api.campaign({**SMALL, "models": [{"backend": "simulated", "path": "/no/such.npz"}]})


def test_a_typed_config_passes_through() -> None:
    config = api.config(SMALL)
    assert api.config(config) is config
    assert api.campaign(config).num_models == 11


def test_without_budget_is_a_typed_change_equal_to_the_campaign_built_without_one() -> None:
    """Issue 49, item 1: the forecast's campaign without a budget is a change to the built
    campaign, not a config patched and built again; it decides as the unbudgeted build does."""
    from adaptive_eval.config.settings import BudgetSettings

    budgeted = api.campaign({**SMALL, "budget": {"trials": 900, "tokens": 10**9}})
    variant = budgeted.without_budget()
    built = api.campaign(SMALL)
    assert [rule.name for rule in budgeted.decision.stopping.rules] == ["pairs_settled", "budget"]
    assert [rule.name for rule in variant.decision.stopping.rules] == ["pairs_settled"]
    assert variant.run.settings.budget == BudgetSettings(None, None, None)
    assert variant.run.settings == built.run.settings  # config.yaml and the limits recorded too
    assert variant.run.fingerprint == built.run.fingerprint == budgeted.run.fingerprint
    assert variant.decision.limits == built.decision.limits
    assert budgeted.run.settings.budget.trials == 900  # the campaign it came from is unchanged


def test_a_pilot_is_a_typed_change_equal_to_the_campaign_built_with_its_minimum() -> None:
    """Issue 49, item 1: a pilot's trials raise the built campaign's minimum as a typed change
    (no config patched and built again); its identity, fingerprint and the run folder's
    config.yaml are those of the config that asked for that minimum, and a minimum already as
    high is left alone."""
    raised = api.campaign(SMALL).with_min_trials(7)
    asked = api.campaign(
        {**SMALL, "policy": {**SMALL.get("policy", {}), "min_trials_per_question": 7}}
    )
    assert raised.decision.policy == asked.decision.policy == raised.run.settings.policy
    assert raised.decision.view_settings().min_trials == 7
    assert raised.run.identity == asked.run.identity
    assert raised.run.fingerprint == asked.run.fingerprint
    assert raised.run.settings.run_record == asked.run.settings.run_record
    assert raised.run.fingerprint != api.campaign(SMALL).run.fingerprint
    assert asked.with_min_trials(3) is asked  # never lowered


def test_a_library_is_a_typed_change_equal_to_the_campaign_built_naming_it(tmp_path: Path) -> None:
    """Issue 49, item 1: nightly's library is a typed change of the built campaign; the run's
    settings and config.yaml are those of a config naming it, and the identity is kept."""
    library = (tmp_path / "library.sqlite").resolve()
    kept = api.campaign(SMALL).with_library(library)
    named = api.campaign({**SMALL, "library": str(library)})
    assert kept.run.settings == named.run.settings
    assert kept.run.identity == named.run.identity == api.campaign(SMALL).run.identity


def test_a_typed_variant_runs_as_the_config_that_gives_it(tmp_path: Path) -> None:
    """A built campaign changed by a typed variant is taken by run as it is, and runs as the
    campaign of a config giving the change: the same summary (ids and times aside) and the same
    recorded config; a built campaign is refused where values are wanted."""
    variant = api.campaign(SMALL).with_min_trials(6)
    ran = api.run(variant, tmp_path / "variant")
    asked = {**SMALL, "policy": {**SMALL["policy"], "min_trials_per_question": 6}}  # type: ignore[dict-item]
    api.run(asked, tmp_path / "asked")
    assert min(row.trials_per_question_min for row in ran.models) >= 6
    assert _without_ids(tmp_path / "variant/summary.json") == _without_ids(
        tmp_path / "asked/summary.json"
    )
    config_yaml = (tmp_path / "variant/config.yaml").read_text()
    assert config_yaml == (tmp_path / "asked/config.yaml").read_text()
    with pytest.raises(api.InputError, match="built campaign"):
        api.config(variant)
