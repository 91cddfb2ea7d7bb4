"""The public surface other tools rely on: README examples, CLI commands, exported names."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import mimic_success, write_scenario

import adaptive_eval
from adaptive_eval import stats
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.parser import build_parser
from adaptive_eval.config.registry import allocators, backends, pair_rules, stopping_rules
from adaptive_eval.config.schema import parse_config

README = Path(__file__).resolve().parent.parent / "README.md"
WORKFLOWS = README.parent / "docs" / "workflows.md"
#: A README a user reads in five minutes (issue 15): the rest lives in docs/.
README_MAX_LINES = 150


def test_readme_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_readme_is_short_and_points_to_docs_that_exist() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    linked = set(re.findall(r"docs/[\w.-]+\.md", text))
    assert {"docs/workflows.md", "docs/method.md", "docs/benchmarks.md"} <= linked
    assert all((README.parent / path).exists() for path in linked)


def test_workflows_contract_config_validates(tmp_path: Path) -> None:
    block = re.search(r"```yaml\n(.*?)```", WORKFLOWS.read_text(), re.S)
    assert block is not None
    data = yaml.safe_load(block.group(1))
    write_scenario(tmp_path / "scenario.npz", mimic_success([0.2, 0.8]))
    campaign = build_campaign(parse_config(data, source=str(tmp_path / "c.yaml")))
    assert campaign.decision.policy.rope == 0.02 and campaign.run.fixed_n == 80


def test_cli_commands() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"run", "validate", "report", "score", "completions"} <= set(commands)


def test_registered_plugins() -> None:
    assert {"simulated", "replay", "vllm", "openai"} <= set(backends.names())
    assert {"z_rank", "rope"} <= set(pair_rules.names())
    assert {"pairs_settled", "ci_width", "max_trials", "budget"} <= set(stopping_rules.names())
    assert {"uniform", "pairwise"} <= set(allocators.names())


def test_bayes_is_exported_and_matches_laplace() -> None:
    mu, sigma = adaptive_eval.bayes(np.array([[1, 1, 0, 1]]), np.array([0.0, 1.0]))
    assert float(mu) == 4 / 6
    assert float(sigma) ** 2 == pytest.approx((4 / 6) * (2 / 6) / 7, rel=1e-12)
    for name in (
        "posterior_moments",
        "credible_interval",
        "pairwise_z",
        "rank_with_ties",
        "avg_at_n",
        "pass_at_k",
        "pass_hat_k",
        "g_pass_at_k",
        "mg_pass_at_k",
        "kendall_tau_b",
        "convergence_at_n",
        "bootstrap_columns",
        "bootstrap_rows",
    ):
        assert callable(getattr(stats, name))
