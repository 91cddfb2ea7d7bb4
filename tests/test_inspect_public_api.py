"""adaptive_eval.inspect uses Inspect's public API only, over a supported range of releases
(issue 49, item 3): no module of ``adaptive_eval/`` imports a module of ``inspect_ai`` whose
path has a ``_``-prefixed part, and ``pyproject.toml``'s ``inspect`` extra is a range whose
lower end is the oldest release ``make test-inspect-range`` tests."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The Inspect tests that run on both ends of the range (this file is one of them).
INSPECT_TESTS = ("test_inspect_bridge.py", "test_inspect_report.py", "test_inspect_resume.py")


def private_inspect_imports(source: str, name: str = "<source>") -> list[str]:
    """Each import of a private part of ``inspect_ai`` in ``source``: a module path with a
    ``_``-prefixed part (``inspect_ai.log._samples``), a ``_``-prefixed name taken from an
    ``inspect_ai`` module (``from inspect_ai import _eval``), or such a path named as a
    string (``importlib.import_module("inspect_ai._eval")``)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        paths: list[str] = []
        if isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            paths = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"inspect_ai(\.\w+)+", node.value)
        ):
            paths = [node.value]
        for path in paths:
            parts = path.split(".")
            if parts[0] == "inspect_ai" and any(part.startswith("_") for part in parts[1:]):
                found.append(f"{name}:{getattr(node, 'lineno', 0)}: {path}")
                break  # one line per import
    return found


def test_the_scan_finds_every_form_of_a_private_import() -> None:
    private = "\n".join(
        [
            "from inspect_ai.log._samples import sample_active",
            "import inspect_ai._eval.task",
            "from inspect_ai import _eval",
            "from inspect_ai.scorer import _scorer",
            "import importlib; importlib.import_module('inspect_ai._control.eval_state')",
            "def f():\n    from inspect_ai.model._model import active_model",
        ]
    )
    assert len(private_inspect_imports(private)) == 6
    public = "\n".join(
        [
            "from inspect_ai import Epochs, eval_set",
            "from inspect_ai.model import get_model",
            "import inspect_ai",
            "from inspect_ai.hooks import Hooks, hooks",
            "x = 'inspect_ai.log'",
            "from ._private import thing",  # a relative import: not inspect_ai's
        ]
    )
    assert private_inspect_imports(public) == []


def test_adaptive_eval_imports_no_private_inspect_module() -> None:
    """Every module of adaptive_eval/, and the Inspect tests: a private module of Inspect can
    move or change in any release (the bridge read three before issue 49)."""
    files = sorted((ROOT / "adaptive_eval").rglob("*.py"))
    files += [ROOT / "tests" / name for name in INSPECT_TESTS]
    assert len(files) > 50
    found = []
    for path in files:
        found += private_inspect_imports(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "\n".join(found)


def _makefile_oldest() -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^INSPECT_OLDEST\s*:?=\s*(\S+)\s*$", text, re.MULTILINE)
    assert match, "the Makefile names the oldest inspect-ai it tests (INSPECT_OLDEST := ...)"
    return match.group(1)


def _requirement(group: list[str], name: str = "inspect-ai") -> str:
    (found,) = [r for r in group if re.match(rf"{name}\s*[<>=!~]", r)]
    return found


def test_the_inspect_extra_is_a_range_from_the_oldest_release_tested() -> None:
    """``inspect = ["inspect-ai>=OLDEST,<NEXT"]``: OLDEST is the release ``make
    test-inspect-range`` (and ``make test``) runs the Inspect tests on, the bridge's
    ``SUPPORTED`` lower end; NEXT is the next minor, its upper end; the ``dev`` extra pins the
    newest release tested, inside the range."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    from adaptive_eval.inspect.bridge import NEWEST_TESTED, SUPPORTED

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    spec = Requirement(_requirement(extras["inspect"])).specifier
    lower = {s.version for s in spec if s.operator == ">="}
    upper = {s.version for s in spec if s.operator == "<"}
    assert len(spec) == 2 and len(lower) == 1 and len(upper) == 1, str(spec)
    oldest = _makefile_oldest()
    assert lower == {oldest}
    assert Version(oldest).release == SUPPORTED[0]
    assert Version(upper.pop()).release[:2] == SUPPORTED[1][:2]
    (pinned,) = Requirement(_requirement(extras["dev"])).specifier
    assert pinned.operator == "=="
    assert Version(pinned.version).release == NEWEST_TESTED
    assert pinned.version in spec and Version(oldest) < Version(pinned.version)


def test_the_version_check_follows_the_range() -> None:
    from adaptive_eval.base.errors import InputError
    from adaptive_eval.inspect.bridge import NEWEST_TESTED, SUPPORTED, check_inspect_version

    oldest = ".".join(map(str, SUPPORTED[0]))
    newest = ".".join(map(str, NEWEST_TESTED))
    assert check_inspect_version(oldest) == oldest
    assert check_inspect_version(newest) == newest
    assert check_inspect_version(f"{newest}.dev4+g1a2b3c") == f"{newest}.dev4+g1a2b3c"
    below = ".".join(map(str, (*SUPPORTED[0][:2], SUPPORTED[0][2] - 1)))
    next_minor = ".".join(map(str, SUPPORTED[1]))
    for refused in (below, next_minor, "0.2.1"):
        with pytest.raises(InputError, match=rf"supported: inspect-ai>={oldest},<"):
            check_inspect_version(refused)


def test_scorer_keys_are_named_as_inspect_names_them(tmp_path: Path) -> None:
    """The bridge names a task's scorers as Inspect keys their scores (``match``, ``match1``,
    ...), by a rule of its own rather than Inspect's private function: compared here with the
    keys of a real eval's scores."""
    pytest.importorskip("inspect_ai")
    import numpy as np
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match

    from adaptive_eval.inspect.context import unique_scorer_name
    from adaptive_eval.inspect.replay import graded_answer, recorded_run

    assert unique_scorer_name("match", []) == "match"
    assert unique_scorer_name("match", ["match"]) == "match1"
    assert unique_scorer_name("match", ["match", "match1"]) == "match2"
    assert unique_scorer_name("match", ["match1"]) == "match"

    path = tmp_path / "recorded.npz"
    np.savez(
        path,
        outcomes=np.ones((1, 2, 1), dtype=np.int8),
        models=np.array(["m0"]),
        questions=np.array(["q0", "q1"]),
    )
    task = Task(
        dataset=[Sample(id=q, input="x", target="C") for q in ("q0", "q1")],
        solver=recorded_run(),
        scorer=[graded_answer(), match(), graded_answer(), match(), graded_answer()],
    )
    (log,) = inspect_eval(
        task,
        model="replay/m0",
        model_args={"path": str(path)},
        display="none",
        log_dir=str(tmp_path / "logs"),
    )
    assert log.status == "success", log.error
    keys: list[str] = []
    for scorer in log.eval.scorers or []:
        keys.append(unique_scorer_name(scorer.name, keys))
    assert len(keys) == 5
    for sample in log.samples or []:
        assert sorted(sample.scores or {}) == sorted(keys)
