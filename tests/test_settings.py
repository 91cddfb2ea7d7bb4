"""A settled campaign (issue 27): the config is resolved once, into frozen typed settings, and
nothing below the campaign builder reads the config itself."""

from __future__ import annotations

import ast
import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from adaptive_eval.base.redact import REDACTED
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config import schema as config_module
from adaptive_eval.config import settings as settings_module
from adaptive_eval.config.schema import load_config, parse_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "adaptive_eval"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

#: The modules that may hold the config: its schema, the campaign builder, its checks and the
#: parts it builds, and what stands above them (the workflows, the command line, test support).
ABOVE_OR_BUILDER = (
    "config/schema.py",
    "campaign/build.py",
    "campaign/checks.py",
    "campaign/parts.py",
    "command_line/commands.py",
    "command_line/cli.py",
)
# inspect/ is a workflow (scripts/check_layers.py places it there): it builds a campaign from a
# config, as run and compare do.
# api/ is a front end beside the command line (the Python API takes a config's values).
ABOVE_FOLDERS = ("workflows", "_testing", "inspect", "api")


def below_the_builder() -> list[Path]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ABOVE_FOLDERS or str(relative) in ABOVE_OR_BUILDER:
            continue
        found.append(path)
    return found


def config_reads(path: Path) -> list[str]:
    """Where ``path`` names ``CampaignConfig``, reads an attribute ``.config`` (a campaign's,
    a controller's) or asks a backend context's ``extras`` for the config."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and any(
            alias.name == "CampaignConfig" for alias in node.names
        ):
            found.append(f"{line}: imports CampaignConfig")
        elif isinstance(node, ast.Name) and node.id == "CampaignConfig":
            found.append(f"{line}: names CampaignConfig")
        elif isinstance(node, ast.Attribute) and node.attr in ("config", "CampaignConfig"):
            found.append(f"{line}: reads {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Subscript | ast.Call)
            and "extras" in ast.unparse(node)
            and any(isinstance(c, ast.Constant) and c.value == "config" for c in ast.walk(node))
        ):
            found.append(f"{line}: reads the config from extras: {ast.unparse(node)}")
    return found


def test_no_module_below_the_campaign_builder_reads_the_config() -> None:
    scanned = below_the_builder()
    names = {str(p.relative_to(PACKAGE)) for p in scanned}
    # The consumers this issue moved off the config are all scanned.
    assert {
        "control/controller.py",
        "loop/runner.py",
        "loop/rundir.py",
        "dispatch/cluster.py",
        "loop/progress.py",
        "forecast/simulate.py",
        "control/library.py",
        "outputs/summary.py",
        "campaign/checkpoint.py",
        "campaign/campaign.py",
        "dispatch/preflight.py",
        "backends/generation.py",
        "backends/simulated.py",
        "backends/openai.py",
        "backends/vllm.py",
    } <= names
    found = {str(p.relative_to(PACKAGE)): config_reads(p) for p in scanned}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_scan_finds_a_config_read(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from adaptive_eval.config.schema import CampaignConfig\n"
        "x = campaign.config.seed\n"
        "y = context.extras.get('config')\n"
    )
    assert len(config_reads(probe)) == 3


def test_every_settings_type_is_frozen_documented_and_typed() -> None:
    types = [
        value
        for value in vars(settings_module).values()
        if dataclasses.is_dataclass(value) and value.__module__ == settings_module.__name__
    ]
    assert len(types) >= 10
    for kind in types:
        assert kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
        assert kind.__doc__ and not kind.__doc__.startswith(kind.__name__ + "("), kind
        hints = typing.get_type_hints(kind)
        for name, hint in hints.items():
            assert hint != dict[str, typing.Any], (kind, name)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_the_settings_carry_the_run_folder_record_the_config_gives(path: Path) -> None:
    config = load_config(path)
    settled = config.settle()
    assert settled.run_record.limits.record() == config.limits()
    assert settled.run_record.config_yaml == yaml.safe_dump(config.portable_dump(), sort_keys=False)
    assert settled.name == config.name and settled.seed == config.seed
    assert settled.source == config.source
    assert settled.rubric_span == config.rubric.span
    assert settled.budget == settled.run_record.limits.budget
    assert settled.execution.rounds_in_flight == config.execution.rounds_in_flight
    dataset = settled.generation.dataset
    if config.dataset is None:
        assert dataset is None
    else:
        assert dataset is not None and dataset == dataclasses.replace(
            dataset, path=config.resolve_path(config.dataset.path)
        )
        assert dataset.path.is_absolute()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settled.seed = 1  # type: ignore[misc]


def test_a_campaign_holds_its_settings(tmp_path: Path) -> None:
    config = load_config(ROOT / "configs" / "demo.yaml", ["library=lib", "budget.trials=500"])
    campaign = build_campaign(config)
    assert not hasattr(campaign, "config")
    assert campaign.run.settings == config.settle()
    assert campaign.run.settings.library == config.resolve_path("lib")
    assert campaign.run.settings.budget.trials == 500 and campaign.run.settings.budget.is_set
    assert campaign.run.settings.generation.grader is None


def test_grader_and_compare_and_credentials_are_settled() -> None:
    data = {
        "name": "x",
        "models": [{"backend": "simulated", "path": "s.npz"}],
        "rubric": {"weights": [0, 1]},
        "grader": {"name": "math", "strict": True},
        "compare": {"margin": 0.05},
        "dataset": {"path": "q.jsonl", "limit": 3},
    }
    settled = parse_config(data).settle()
    grader = settled.generation.grader
    assert grader is not None and (grader.name, dict(grader.params)) == ("math", {"strict": True})
    assert settled.compare is not None and settled.compare.margin == 0.05
    assert not settled.compare.settle_all
    assert settled.generation.dataset is not None and settled.generation.dataset.limit == 3
    assert settled.redacted == ()
    data["models"][0]["options"] = {"headers": {"Authorization": REDACTED}}
    assert parse_config(data).settle().redacted == ("models[0].options.headers.Authorization",)


#: Each schema section the settled campaign carries, with its settings type and where the
#: config and the settled campaign hold it.
CARRIED: tuple[tuple[type[Any], type[Any], Callable[[Any], Any]], ...] = (
    (config_module.CampaignConfig, settings_module.CampaignSettings, lambda s: s),
    (config_module.PolicyConfig, settings_module.PolicySettings, lambda s: s.policy),
    (config_module.BudgetConfig, settings_module.BudgetSettings, lambda s: s.budget),
    (config_module.ExecutionConfig, settings_module.ExecutionSettings, lambda s: s.execution),
    (config_module.OutputConfig, settings_module.OutputSettings, lambda s: s.output),
    (config_module.SamplingConfig, settings_module.SamplingSettings, lambda s: s.sampling),
    (config_module.DatasetConfig, settings_module.DatasetSettings, lambda s: s.dataset),
    (config_module.CompareConfig, settings_module.CompareSettings, lambda s: s.compare),
)
#: Settings fields that are not a copy of the schema field of their name: settle() computes
#: them, or (the campaign's sections) settles them by their own types, checked as sections.
COMPUTED = {
    "CampaignSettings": {"rubric_span", "generation", "library", "redacted", "run_record"}
    | {"policy", "budget", "execution", "output", "compare"},
    "PolicySettings": {"prior_trials"},
    "DatasetSettings": {"path"},
}
#: Sections the settled campaign does not carry: the campaign builder reads them (entries become
#: backend plans, the rubric its weights, the baseline its N, the prior its counts) and a
#: plug-in spec is built into its object.
BUILDER_SECTIONS = {
    "ModelEntry",
    "LatencyModel",
    "RubricConfig",
    "BaselineConfig",
    "PriorConfig",
    "PluginSpec",
}

#: A config that sets every carried field to a value other than its default.
EVERY_FIELD = {
    "name": "every field",
    "seed": 7,
    "models": [{"backend": "simulated", "path": "s.npz"}],
    "rubric": {"weights": [0, 0.5, 1]},
    "policy": {
        "confidence": 0.9,
        "rope": 0.05,
        "error_control": "pair",
        "futility": 0.1,
        "min_trials_per_question": 3,
        "max_trials_per_question": 50,
        "round_trials": 100,
        "bayes_prior": "uniform",
    },
    "budget": {"trials": 900, "tokens": 80_000, "wall_clock_s": 60.0},
    "execution": {
        "dispatch": "inline",
        "ray_address": "auto",
        "num_cpus": 3,
        "workers": 4,
        "batch_size": 16,
        "in_flight_per_worker": 3,
        "rounds_in_flight": 1,
        "max_batch_retries": 5,
        "gpu_slots": 2,
    },
    "output": {"keep_completions": False, "progress": False, "fsync": "normal", "live_forecast": 5},
    "sampling": {
        "temperature": 0.2,
        "top_p": 0.5,
        "max_tokens": 64,
        "logprobs": False,
        "prompt_logprobs": False,
        "ignore_eos": True,
    },
    "dataset": {
        "path": "q.jsonl",
        "id_field": "qid",
        "problem_field": "question",
        "answer_field": "gold",
        "template": "{problem}",
        "instruction": "Answer.",
        "limit": 3,
    },
    "compare": {"margin": 0.05, "settle_all": True},
}


def test_every_schema_field_is_carried_or_listed_as_not_carried() -> None:
    """Item 1 of issue 43: a field of the schema reaches the settings type of its section
    under its own name and type, or is named in NOT_SETTLED; a settings field is a copy or
    computed by settle(); every section of the schema is carried or read by the builder."""
    carried = {schema.__name__ for schema, _, _ in CARRIED}
    sections = {
        kind.__name__
        for kind in vars(config_module).values()
        if isinstance(kind, type)
        and issubclass(kind, config_module._Strict)
        and kind is not config_module._Strict
    }
    assert sections == carried | BUILDER_SECTIONS
    for schema, kind, _ in CARRIED:
        fields = {field.name: field for field in dataclasses.fields(kind)}
        hints = typing.get_type_hints(kind)
        computed = COMPUTED.get(kind.__name__, set())
        dropped = config_module.NOT_SETTLED.get(schema, frozenset())
        assert not dropped & set(fields), (schema, dropped)
        for name, info in schema.model_fields.items():
            if name in dropped:
                continue
            assert name in fields, f"{schema.__name__}.{name} reaches no {kind.__name__} field"
            if name not in computed:
                assert hints[name] == info.annotation, (schema.__name__, name)
        copied = set(fields) - computed
        assert copied <= set(schema.model_fields), (kind.__name__, copied)


def test_every_carried_value_reaches_the_settled_campaign() -> None:
    config = parse_config(EVERY_FIELD)
    settled = config.settle()
    generation = settled.generation
    for schema, kind, where in CARRIED:
        section = where(config)
        value = where(
            generation if kind.__name__ in ("SamplingSettings", "DatasetSettings") else settled
        )
        assert isinstance(section, schema) and isinstance(value, kind)
        for field in dataclasses.fields(kind):
            if field.name in COMPUTED.get(kind.__name__, set()):
                continue
            got = getattr(value, field.name)
            assert got == getattr(section, field.name), (kind.__name__, field.name)
            if field.name != "source":
                default = schema.model_fields[field.name].get_default(call_default_factory=True)
                assert got != default, f"EVERY_FIELD leaves {schema.__name__}.{field.name} default"
    assert settled.policy.prior_trials is False
    assert generation.dataset is not None
    assert generation.dataset.path == config.resolve_path("q.jsonl")


def test_a_field_added_to_a_section_appears_in_the_settled_campaign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field added to the schema's section and its settings type reaches the settled campaign
    with no copy to write; added to the schema alone, settle() refuses (it never drops one)."""
    wider = pydantic.create_model(
        "WiderExecution", __base__=config_module.ExecutionConfig, lag=(int, 3)
    )
    campaign = pydantic.create_model(
        "WiderCampaign",
        __base__=config_module.CampaignConfig,
        execution=(wider, pydantic.Field(default_factory=wider)),
    )
    data = {**EVERY_FIELD, "execution": {"workers": 3, "lag": 9}}
    config = campaign.model_validate(data)
    with pytest.raises(TypeError, match=r"WiderExecution -> ExecutionSettings: fields \['lag'\]"):
        config.settle()
    settings = dataclasses.make_dataclass(
        "WiderSettings", [("lag", int)], bases=(settings_module.ExecutionSettings,), frozen=True
    )
    monkeypatch.setattr(config_module, "ExecutionSettings", settings)
    settled = config.settle()
    assert settled.execution.lag == 9  # type: ignore[attr-defined]
    assert settled.execution.workers == 3
    assert campaign.model_validate({**data, "execution": {}}).settle().execution.lag == 3  # type: ignore[attr-defined]
