"""A settled campaign (issue 27): the config is resolved once, into frozen typed settings, and
nothing below the campaign builder reads the config itself."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from adaptive_eval import settings as settings_module
from adaptive_eval.base.redact import REDACTED
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.config import load_config, parse_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "adaptive_eval"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

#: The modules that may hold the config: its schema, the campaign builder and its checks, and
#: what stands above them (the workflows, the command line, test support).
ABOVE_OR_BUILDER = (
    "config.py",
    "campaign/build.py",
    "campaign/checks.py",
    "commands.py",
    "cli.py",
)
# inspect/ is a workflow (scripts/check_layers.py places it there): it builds a campaign from a
# config, as run and compare do.
ABOVE_FOLDERS = ("workflows", "_testing", "inspect")


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
        "control/cluster.py",
        "loop/progress.py",
        "control/simulate.py",
        "control/library.py",
        "outputs/summary.py",
        "campaign/checkpoint.py",
        "control/preflight.py",
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
        "from adaptive_eval.config import CampaignConfig\n"
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
    assert campaign.settings == config.settle()
    assert campaign.settings.library == config.resolve_path("lib")
    assert campaign.settings.budget.trials == 500 and campaign.settings.budget.is_set
    assert campaign.settings.generation.grader is None


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
