"""summary.json's contract: the published JSON Schema, real runs' files against it, versioned
field lists, and every earlier version read into the current shape (issue 27)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import base_config, mimic_success, write_config, write_scenario
from pydantic import ValidationError

from adaptive_eval.base import summary_schema
from adaptive_eval.command_line.cli import main

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "docs" / "summary.schema.json"
FIELDS = Path(__file__).resolve().parent / "data"


def published() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(PUBLISHED.read_text())
    return schema


@pytest.fixture(scope="module")
def run_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """summary.json of a ranking run and of a margin compare, both through the command line."""
    folder = tmp_path_factory.mktemp("runs")
    write_scenario(folder / "s.npz", mimic_success([0.3, 0.5, 0.52, 0.7], questions=10))
    config = write_config(folder / "c.yaml", base_config("s.npz"))
    inline = ["--set", "execution.dispatch=inline", "--quiet"]
    assert main(["run", str(config), "--out", str(folder / "run"), *inline]) == 0
    code = main(
        [
            "compare",
            str(config),
            "--candidate",
            "model-2",
            "--margin",
            "0.05",
            "--out",
            str(folder / "compare"),
            *inline,
        ]
    )
    assert code in (0, 3, 4)
    return {
        name: json.loads((folder / name / "summary.json").read_text())
        for name in ("run", "compare")
    }


def test_the_published_schema_is_the_models() -> None:
    assert PUBLISHED.read_text() == summary_schema.schema_text(), (
        "docs/summary.schema.json is stale: python -m adaptive_eval.base.summary_schema > "
        "docs/summary.schema.json"
    )


def test_real_runs_validate_against_the_published_schema(
    run_files: dict[str, dict[str, Any]],
) -> None:
    schema = published()
    jsonschema.Draft202012Validator.check_schema(schema)
    for document in run_files.values():
        jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    compare = run_files["compare"]
    assert compare["comparison"]["margin"] == 0.05
    assert {v["decision"] for v in compare["comparison"]["verdicts"]} <= {
        "pass",
        "fail",
        "undecided",
    }


def test_the_published_schema_rejects_what_the_contract_does_not_hold(
    run_files: dict[str, dict[str, Any]],
) -> None:
    schema = published()
    renamed = copy.deepcopy(run_files["run"])
    renamed["models"][0]["mu"] = renamed["models"][0].pop("bayes_mu")
    with pytest.raises(jsonschema.ValidationError, match=r"bayes_mu|mu"):
        jsonschema.validate(renamed, schema)
    wrong_decision = copy.deepcopy(run_files["run"])
    wrong_decision["pairs"][0]["decision"] = "maybe"
    with pytest.raises(jsonschema.ValidationError, match="maybe"):
        jsonschema.validate(wrong_decision, schema)
    older = copy.deepcopy(run_files["run"])
    older["schema_version"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(older, schema)


def test_no_field_of_the_current_version_disappears_without_a_new_version() -> None:
    listed = FIELDS / f"summary_fields_v{summary_schema.SCHEMA_VERSION}.json"
    assert listed.exists(), (
        f"schema_version {summary_schema.SCHEMA_VERSION} has no field list: write "
        f"{listed.name} from summary_schema.field_paths()"
    )
    promised = json.loads(listed.read_text())
    assert promised["schema_version"] == summary_schema.SCHEMA_VERSION
    now = set(summary_schema.field_paths())
    gone = sorted(set(promised["fields"]) - now)
    assert not gone, (
        f"fields {gone} were renamed or removed under schema_version "
        f"{summary_schema.SCHEMA_VERSION}: raise SCHEMA_VERSION, list the new version's fields, "
        "and teach summary_schema.upgrade() the old names"
    )


def test_field_paths_follow_nested_lists_and_optional_blocks() -> None:
    paths = summary_schema.field_paths()
    for expected in (
        "models[].score_low",
        "pairs[].boundary_at_cap",
        "comparison.verdicts[].trials_at_decision",
        "nightly.alerts[].kind",
        "provenance.library.saved_fraction",
    ):
        assert expected in paths


def test_the_writer_refuses_a_field_the_contract_does_not_know(
    run_files: dict[str, dict[str, Any]],
) -> None:
    document = copy.deepcopy(run_files["run"])
    document["models"][0]["new_statistic"] = 1.0
    with pytest.raises(ValidationError, match="new_statistic"):
        summary_schema.validate(document)


def _as_version_one(document: dict[str, Any], with_estimate: bool) -> dict[str, Any]:
    """The same run as the first summaries wrote it: Bayes@N under ``mu``, ``sigma``,
    ``ci_low``, ``ci_high`` (and the unbiased estimate as ``estimate*`` from 2026-11-23)."""
    old = copy.deepcopy(document)
    del old["schema_version"], old["score"], old["bayes"], old["finished"]
    for row in old["models"]:
        row["mu"], row["sigma"] = row.pop("bayes_mu"), row.pop("bayes_sigma")
        row["ci_low"], row["ci_high"] = row.pop("bayes_low"), row.pop("bayes_high")
        score = row.pop("score"), row.pop("score_se"), row.pop("score_low"), row.pop("score_high")
        if with_estimate:
            keys = ("estimate", "estimate_se", "estimate_ci_low", "estimate_ci_high")
            row.update(dict(zip(keys, score, strict=True)))
    return old


def test_every_earlier_version_reads_into_the_current_shape(
    run_files: dict[str, dict[str, Any]],
) -> None:
    current = run_files["run"]
    for with_estimate in (True, False):
        upgraded = summary_schema.upgrade(_as_version_one(current, with_estimate))
        read = summary_schema.validate(upgraded)
        assert read.schema_version == summary_schema.SCHEMA_VERSION
        for new, old in zip(read.models, current["models"], strict=True):
            assert new.bayes_mu == old["bayes_mu"] and new.bayes_high == old["bayes_high"]
            # Without the unbiased estimate, Bayes@N was the only score a row had.
            expected = old["score"] if with_estimate else old["bayes_mu"]
            assert new.score == expected
        assert "not recorded" in read.score.statistic
    # The one-score shape without a version (2026-11-24) and version 2 need no renaming.
    unversioned = {k: v for k, v in current.items() if k != "schema_version"}
    assert summary_schema.read_summary(unversioned).models[0].score == current["models"][0]["score"]
    two = {**current, "schema_version": 2}
    assert summary_schema.read_summary(two).pairs == summary_schema.validate(current).pairs


def test_a_newer_version_is_refused_naming_it(run_files: dict[str, dict[str, Any]]) -> None:
    newer = {**run_files["run"], "schema_version": summary_schema.SCHEMA_VERSION + 1}
    with pytest.raises(ValueError, match=f"schema_version = {summary_schema.SCHEMA_VERSION + 1}"):
        summary_schema.upgrade(newer)


def test_the_summary_names_every_plugin_with_its_resolved_parameters(
    run_files: dict[str, dict[str, Any]],
) -> None:
    plugins = {
        (p["kind"], p["name"]): p["params"] for p in run_files["run"]["decision_rules"]["plugins"]
    }
    rule = plugins[("pair rule", "group_sequential")]
    # Defaults included: the config named no parameter of the rule or the allocator.
    assert rule["inflation"] == 1.1 and rule["horizons"] == 3 and rule["spending"] == "hsd"
    assert plugins[("allocation policy", "track_and_stop")]["questions"] == "neyman"
    assert ("stopping rule", "pairs_settled") in plugins
