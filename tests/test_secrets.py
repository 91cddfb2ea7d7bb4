"""Issue 16, item 5: no credential on disk or on the console, and no shared, predictable paths.

A key given as a header (``options.headers: {Authorization: ...}``) is redacted in RUN/config.yaml
and never written anywhere else; the run's fingerprint leaves credentials out, so a rotated key
(or a run recorded before this change) resumes. Error logs go to the run folder or a private
per-user folder, never through a symbolic link."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import (
    TEST_DISPATCH,
    base_config,
    mimic_success,
    run_inline,
    served_campaign,
    write_config,
    write_scenario,
)

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.base.redact import REDACTED
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.campaign.campaign import fingerprint_of
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import load_config
from adaptive_eval.loop import rundir
from adaptive_eval.store import TrialStore
from adaptive_eval.workflows import run as runner

KEY = "sk-live-0123456789abcdef"
OTHER = "tok-9876543210zyxwvu"


def _openai_config(tmp_path: Path, url: str, key: str) -> Path:
    data = served_campaign(
        url,
        "secret",
        1,
        {"headers": {"Authorization": f"Bearer {key}", "x-api-key": OTHER, "X-Trace": "t1"}},
        batch_size=4,
    )
    return write_config(tmp_path / "c.yaml", data)


def _files_holding(folder: Path, secrets: tuple[str, ...]) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in secrets if s.encode() in data]
    return found


def test_a_header_key_is_redacted_in_the_run_folder_and_never_printed(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    with FlakyServer() as server:
        config = _openai_config(tmp_path, server.url, KEY)
        assert main(["validate", str(config)]) == 0
        assert main(["run", str(config), "--out", str(run_dir), "--json", *TEST_DISPATCH]) == 0
        sent = server.headers[0]
    assert sent["authorization"] == f"Bearer {KEY}" and sent["x-api-key"] == OTHER  # used
    out, err = capsys.readouterr()
    assert KEY not in out + err and OTHER not in out + err
    assert _files_holding(run_dir, (KEY, OTHER, "0123456789abcdef")) == []
    copied = yaml.safe_load((run_dir / "config.yaml").read_text())
    headers = copied["models"][0]["options"]["headers"]
    assert headers == {"Authorization": REDACTED, "x-api-key": REDACTED, "X-Trace": "t1"}
    # report reads the redacted copy; run refuses to send the marker as a key.
    assert main(["report", str(run_dir)]) == 0
    capsys.readouterr()
    assert main(["run", str(run_dir / "config.yaml"), "--out", str(run_dir), *TEST_DISPATCH]) == 2
    assert "headers.Authorization" in capsys.readouterr().err


USER_TOKEN = "ut-5555666677778888"


def test_any_key_that_looks_like_a_credential_is_redacted_not_a_word_list(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22, failure 18: ``extra_body.user_token`` was stored in plain text in config.yaml
    and in the store (``token`` counted only after ``auth``, ``hf``, ...)."""
    run_dir = tmp_path / "run"
    with FlakyServer() as server:
        config = _openai_config(tmp_path, server.url, KEY)
        data = yaml.safe_load(config.read_text())
        data["models"][0]["options"]["extra_body"] = {
            "user_token": USER_TOKEN,
            "sessionSecret": "ss-1234123412341234",
            "top_k": 20,
        }
        write_config(config, data)
        assert main(["validate", str(config)]) == 0
        assert main(["run", str(config), "--out", str(run_dir), "--json", *TEST_DISPATCH]) == 0
        sent = server.bodies[0]
    assert sent["user_token"] == USER_TOKEN and sent["top_k"] == 20  # sent as given
    out, err = capsys.readouterr()
    assert USER_TOKEN not in out + err
    assert _files_holding(run_dir, (USER_TOKEN, "ss-1234123412341234")) == []
    copied = yaml.safe_load((run_dir / "config.yaml").read_text())
    body = copied["models"][0]["options"]["extra_body"]
    assert body == {"user_token": REDACTED, "sessionSecret": REDACTED, "top_k": 20}


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        *[(k, True) for k in ("user_token", "refreshToken", "client_secret", "db-password")],
        *[(k, True) for k in ("signing_key", "cache_key", "auth", "x-auth", "usertoken")],
        *[(k, False) for k in ("max_tokens", "min_tokens", "stop_token_ids", "eos_token")],
        *[(k, False) for k in ("api_key_env", "token_file", "auth_type", "key", "tokenizer")],
    ],
)
def test_credential_keys_are_judged_by_their_words(key: str, secret: bool) -> None:
    from adaptive_eval.base.redact import is_secret_key

    assert is_secret_key(key) is secret


def test_a_rotated_key_is_the_same_campaign(tmp_path: Path) -> None:
    first = build_campaign(load_config(_openai_config(tmp_path, "http://a:1/v1", KEY)))
    second = build_campaign(
        load_config(_openai_config(tmp_path, "http://a:1/v1", "sk-new-key-0000"))
    )
    assert first.run.fingerprint == second.run.fingerprint
    assert KEY not in json.dumps(first.run.identity)


def test_a_store_whose_identity_holds_a_credential_resumes_and_forgets_it(
    tmp_path: Path,
) -> None:
    """A run recorded before credentials left the identity: its stored identity and fingerprint
    hold one. Resuming finds no change and rewrites both without it."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=4))
    config = load_config(write_config(tmp_path / "c.yaml", base_config("s.npz")))
    run_inline(config, tmp_path / "run")
    campaign = build_campaign(config)
    old = json.loads(json.dumps(campaign.run.identity))
    old["config"]["models"][0]["options"] = {"api_key": KEY}
    store = TrialStore(tmp_path / "run")
    store.set_meta(identity=old, fingerprint=fingerprint_of(old))
    store.close()
    store, _, resumed = rundir.open_run_dir(campaign, tmp_path / "run")
    try:
        assert resumed and store.get_meta("fingerprint") == campaign.run.fingerprint
    finally:
        store.close()
    assert _files_holding(tmp_path / "run", (KEY,)) == []


def test_credentials_are_scrubbed_from_error_lines_and_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _openai_config(tmp_path, "http://127.0.0.1:9/v1", KEY)
    # A bad value beside the key: the error line quotes the value, never the key.
    assert main(["validate", str(config), "--set", f"models[0].options.headers=Bearer {KEY}"]) == 2
    assert KEY not in capsys.readouterr().err
    # An unexpected error with the key on the command line: the log has no key either.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def broken(*args: Any, **kw: Any) -> None:
        raise RuntimeError(f"failed talking with Authorization: Bearer {KEY}")

    monkeypatch.setattr(runner, "run_campaign", broken)
    override = f"models[0].options.headers.Authorization=Bearer {KEY}"
    assert main(["run", str(config), "--out", str(tmp_path / "none"), "--set", override]) == 1
    err = capsys.readouterr().err
    assert KEY not in err
    log = Path(re.search(r"the traceback is in (\S+)", err).group(1))  # type: ignore[union-attr]
    assert "RuntimeError" in log.read_text() and KEY not in log.read_text()


def _unexpected_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: Path) -> Path:
    """Make ``run`` fail unexpectedly; the log file its one line names."""
    write_scenario(tmp_path / "s.npz", mimic_success([0.3, 0.7], questions=4))
    config = write_config(tmp_path / "c.yaml", base_config("s.npz"))

    def broken(*args: Any, **kw: Any) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(runner, "run_campaign", broken)
    capsys_err = _capture(lambda: main(["run", str(config), "--out", str(out)]))
    return Path(re.search(r"the traceback is in (\S+)", capsys_err).group(1))  # type: ignore[union-attr]


def _capture(call: Any) -> str:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert call() == 1
    return err.getvalue()


def test_error_logs_go_to_a_private_folder_not_the_shared_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    log = _unexpected_error(tmp_path, monkeypatch, tmp_path / "no-such-run")
    assert log.parent == tmp_path / "state" / "adaptive-eval"
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert not str(log).startswith(os.path.join(tempfile.gettempdir(), "adaptive-eval"))


def test_a_planted_link_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    # A link where the state folder would be: refused, a fresh private folder is used instead.
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "adaptive-eval").symlink_to(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    log = _unexpected_error(tmp_path, monkeypatch, tmp_path / "no-such-run")
    assert log.parent != tmp_path and stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    # A link planted as RUN/error.log: not followed; the log goes to the state folder.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "error.log").symlink_to(victim)
    log = _unexpected_error(tmp_path, monkeypatch, run_dir)
    assert log != run_dir / "error.log" and "ZeroDivisionError" in log.read_text()
    assert victim.read_text() == "precious\n"
