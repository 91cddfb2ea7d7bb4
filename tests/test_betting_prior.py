"""Issue 48, items 2 to 4: the ``betting`` rule's prior is checked before anything is sampled.

An earlier run's summary.json (``prior``) or the scores stated inline (``scores``) that cannot be
a prior (a NaN or overflowed score, a negative or infinite standard error, a score outside the
rubric's range, ``schema_version: 0``, no model or one twice, none of the campaign's models,
``prior_models`` naming a model the prior lacks) or a file that is no file (a device, a named
pipe, a summary nested 200,000 deep) ends ``validate`` and ``run`` with exit 2 and one line
naming ``policy.pair_rules[0]``, the file and the value, with no trial recorded. Before, each
passed the checks and failed after sampling (a NaN: rc 1 "unexpected error" with 4,617 trials in
the folder), hung (a pipe), or read ``/dev/zero`` to a MemoryError.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DISPATCH, base_config, mimic_success, write_config, write_scenario
from test_bad_input import _no_trials, _refused

from adaptive_eval.command_line.cli import main

NAMES = ["a", "b", "c"]


@dataclass(frozen=True)
class Prior:
    """A ``betting`` rule's parameters made bad (``params``, YAML as ``--set`` takes it);
    ``expect``: the words the error line must hold (the value among them)."""

    id: str
    params: str
    expect: tuple[str, ...]


def prior(ident: str, params: str, *expect: str) -> Any:
    return pytest.param(Prior(ident, params, expect), id=ident)


def _summary(root: Path) -> dict[str, Any]:
    """A finished run's summary.json, written by the project itself: the base of each bad one."""
    from helpers import load, run_inline

    write_scenario(root / "s.npz", mimic_success([0.3, 0.5, 0.7], questions=6), names=NAMES)
    config = write_config(root / "earlier.yaml", base_config("s.npz"))
    run_inline(load(config), root / "earlier")
    assert main(["report", str(root / "earlier"), "--json"]) == 0
    document: dict[str, Any] = json.loads((root / "earlier" / "summary.json").read_text())
    return document


def _row(document: dict[str, Any], name: str) -> dict[str, Any]:
    row: dict[str, Any] = next(r for r in document["models"] if r["name"] == name)
    return row


def _bad_summaries(root: Path, good: dict[str, Any]) -> None:
    def write(name: str, change: Any) -> None:
        document = copy.deepcopy(good)
        change(document)
        (root / f"{name}.json").write_text(json.dumps(document))  # NaN as json writes it

    write("nan", lambda d: _row(d, "a").update(score=float("nan")))
    write("huge", lambda d: _row(d, "a").update(score=1e308))
    write("outside", lambda d: _row(d, "a").update(score=7.5))
    write("se-negative", lambda d: _row(d, "a").update(score_se=-0.1))
    write("se-infinite", lambda d: _row(d, "a").update(score_se=float("inf")))
    write("version-0", lambda d: d.update(schema_version=0))
    write("no-models", lambda d: d.update(models=[]))
    write("twice", lambda d: d["models"].append(copy.deepcopy(_row(d, "a"))))
    write("strangers", lambda d: [r.update(name="x-" + r["name"]) for r in d["models"]])
    (root / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    os.mkfifo(root / "pipe.json")
    (root / "run-of-pipe").mkdir()
    os.mkfifo(root / "run-of-pipe" / "summary.json")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("priors")
    _bad_summaries(root, _summary(root))
    write_config(root / "c.yaml", base_config("s.npz"))
    return root


def betting(params: str) -> str:
    return f"policy.pair_rules=[{{name: betting, {params}}}]"


CASES = [
    # Item 2: a NaN or 1e308 score, in a file or inline (inline NaN said "must be a mapping").
    prior("file-nan", "prior: nan.json", "nan.json", "models[", "('a'): score nan"),
    prior("file-1e308", "prior: huge.json", "huge.json", "'a' scores 1e+308", "range [0, 1]"),
    prior("inline-nan", "scores: {a: [.nan, 0.01]}", "scores['a']: score nan is not a finite"),
    prior("inline-1e308", "scores: {a: [1.0e+308, 0.01]}", "'a' scores 1e+308", "range [0, 1]"),
    # Item 3: standard errors, the rubric's range, the summary's shape, the models.
    prior("file-se-negative", "prior: se-negative.json", "se-negative.json", "error -0.1"),
    prior("file-se-infinite", "prior: se-infinite.json", "se-infinite.json", "error inf is"),
    prior("inline-se-negative", "scores: {a: [0.5, -0.01]}", "standard error -0.01 is negative"),
    prior("inline-se-infinite", "scores: {a: [0.5, .inf]}", "standard error inf is not a finite"),
    prior("inline-se-wider", "scores: {a: [0.5, 3.0]}", "standard error 3, more than"),
    prior("file-outside", "prior: outside.json", "outside.json", "'a' scores 7.5", "[0, 1]"),
    prior("inline-outside", "scores: {a: [7.5, 0.01]}", "'a' scores 7.5, outside the rubric"),
    prior("file-version-0", "prior: version-0.json", "version-0.json", "schema_version = 0"),
    prior("file-no-models", "prior: no-models.json", "no-models.json", "models is empty"),
    prior("file-twice", "prior: twice.json", "twice.json", "('a') is listed twice"),
    prior("file-strangers", "prior: strangers.json", "strangers.json", "none of its models"),
    prior("inline-strangers", "scores: {z: [0.5, 0.01]}", "none of its models ('z')"),
    prior(
        "prior-models-lacking",
        "prior: earlier, prior_models: {a: gone}",
        "earlier/summary.json lacks",
        "'a' -> 'gone'",
    ),
    prior(
        "prior-models-stranger",
        "scores: {a: [0.5, 0.01]}, prior_models: {nobody: a}",
        "prior_models maps 'nobody', which is no model of this campaign",
    ),
    # Item 4: files that are no summary (read through the bounded reader, as configs are).
    prior("dev-zero", "prior: /dev/zero", "/dev/zero", "is a device, not a regular file"),
    prior("named-pipe", "prior: pipe.json", "pipe.json", "is a named pipe"),
    prior("folder-with-pipe", "prior: run-of-pipe", "run-of-pipe/summary.json", "named pipe"),
    prior("deep", "prior: deep.json", "deep.json", "nested too deep to read"),
]


@contextlib.contextmanager
def pipes_answered(root: Path) -> Iterator[None]:
    """Were a pipe opened for reading (the bug), write ``{}`` to it and close it, so that the
    case fails on its message instead of hanging the suite."""
    done = threading.Event()

    def answer() -> None:
        while not done.wait(0.01):
            for pipe in (root / "pipe.json", root / "run-of-pipe" / "summary.json"):
                try:
                    fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as error:
                    if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                        raise
                    continue
                with os.fdopen(fd, "w") as writer:
                    writer.write("{}")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def memory_capped(extra: int = 2 << 30) -> Iterator[None]:
    """At most ``extra`` more bytes of address space: a reader of ``/dev/zero`` (the bug) ends
    in a MemoryError within seconds instead of taking the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text()
    size = int(next(line for line in status.splitlines() if line.startswith("VmSize:")).split()[1])
    cap = size * 1024 + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("case", CASES)
def test_a_bad_prior_is_refused_in_one_line_before_any_trial(
    case: Prior,
    inputs: Path,
    tmp_path: Path,
    no_ray: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = inputs / "c.yaml"
    sets = ["--set", betting(case.params)]
    run_dir = tmp_path / "run"
    for command in (["validate", str(config)], ["run", str(config), "--out", str(run_dir)]):
        with memory_capped() if case.id == "dev-zero" else pipes_answered(inputs):
            line = _refused([*command, *sets, *TEST_DISPATCH], capsys)
        assert "policy.pair_rules[0]" in line and "pair rule 'betting'" in line, line
        assert all(words in line for words in case.expect), line
    assert not no_ray, "Ray must not start"
    assert not run_dir.exists() or not list(run_dir.iterdir())
    _no_trials(tmp_path)


def test_a_good_prior_still_passes(inputs: Path, no_ray: list[Any]) -> None:
    """The checks refuse only what is wrong: the earlier run itself, by folder or by file, and
    inline scores at the rubric's ends with a zero standard error, are priors."""
    config = str(inputs / "c.yaml")
    for params in (
        "prior: earlier",
        "prior: earlier/summary.json",
        "scores: {a: [0, 0], b: [1, 0.5]}",
        "prior: earlier, prior_models: {a: c, c: a}",
    ):
        assert main(["validate", config, "--set", betting(params), *TEST_DISPATCH]) == 0, params
