"""Issue 15, item 9: the command line explains itself and a config's errors are all listed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers import base_config, write_config

from adaptive_eval.command_line.cli import main
from adaptive_eval.command_line.parser import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    described = text.split("Commands:", 1)[1].split("\n\n", 1)[0]
    for name in _subcommands():
        assert f"\n  {name} " in described, name
    assert {"compare", "nightly", "import", "export"} <= set(_subcommands())


def test_every_positional_and_option_has_help_text() -> None:
    missing = [
        f"{name} {action.dest}"
        for name, sub in _subcommands().items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []


def test_config_errors_are_all_listed_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = base_config("s.npz", confidence=1.5, rope=-1)
    data["policy"]["colour"] = "blue"
    path = write_config(tmp_path / "bad.yaml", data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "more error" not in err
    assert "3 errors" in err
    for field in ("policy.confidence", "policy.rope", "policy.colour"):
        assert field in err
    assert "1.5" in err and "-1" in err and "blue" in err
