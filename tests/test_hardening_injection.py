"""Issue 40, section 4: a completion's (or a server's) control characters never reach the
terminal or the reports raw: ``completions`` wrote ESC/BEL bytes (clearing the screen, setting
the title), and the response's ``model`` reached report.md and report.html with a raw ESC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DISPATCH
from test_hardening_resume import _config

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.command_line.cli import main

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"
CONTROL = ("\x1b", "\x07", "\x9b")


def test_server_text_is_escaped_in_completions_and_reports(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with FlakyServer(model="srv", served_model=f"srv{ESCAPES}", suffix=f"\n{ESCAPES}\r") as server:
        config = _config(tmp_path, server.url)
        assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
    capsys.readouterr()
    assert main(["completions", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "\\x1b]0;pwned\\x07" in out  # shown, as escapes
    assert not any(c in out for c in (*CONTROL, "\r"))
    assert "The answer is" in out and out.count("\n") > 6  # a completion's lines stay lines
    assert main(["completions", str(run_dir), "--json"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in CONTROL)
    assert json.loads(out.splitlines()[0])["text"].endswith(ESCAPES + "\r")  # data unchanged
    for name in ("report.md", "report.html"):
        text = (run_dir / name).read_text()
        assert "x1b" in text and "pwned" in text, name  # the served model is shown, escaped
        assert not any(c in text for c in CONTROL), name
