"""Issue 40, section 1: every secret the process holds (a key read from ``api_key_env``, every
header value not listed safe, a URL's user-info, a credential in a ``--set``) stays out of every
line, file and error it writes, even when a server echoes it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import TEST_DISPATCH, served_campaign, write_config

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.base.redact import REDACTED, SAFE_HEADERS, redact, remember, scrub
from adaptive_eval.command_line.cli import main

ENV_KEY = "sk-proj-EnvKey0123456789abcdefXYZ"
SUBSCRIPTION = "sub-4e5f6a7b8c9d0e1f"
ACCESS = "acc-1122334455667788"
PASSWORD = "pw-hunter2-77665544"


def _config(tmp_path: Path, url: str, **options: Any) -> Path:
    data = served_campaign(
        url,
        "echo",
        1,
        {"backoff": 0.001, "backoff_max": 0.01, "max_retries": 1, "timeout_s": 5, **options},
        batch_size=4,
        max_batch_retries=1,
    )
    return write_config(tmp_path / "c.yaml", data)


def _holding(folder: Path, secrets: tuple[str, ...]) -> list[str]:
    found = []
    for path in folder.rglob("*") if folder.exists() else ():
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {s}" for s in secrets if s.encode() in data]
    return found


def test_a_key_from_the_environment_that_a_server_echoes_is_never_printed_or_written(
    tmp_path: Path,
    no_ray: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway's 401 "Incorrect API key provided: <key>" and a 502 HTML page holding the key:
    only ``Bearer <key>`` was known to the redaction, so the bare key reached stderr and
    events.jsonl."""
    monkeypatch.setenv("ECHO_TEST_KEY", ENV_KEY)
    run_dir = tmp_path / "run"
    with FlakyServer(script=["echo-html", "echo-401"] * 40) as server:
        # One request at a time: the 502 page, its retry answered 401, which fails the batch.
        config = _config(tmp_path, server.url, api_key_env="ECHO_TEST_KEY", max_concurrency=1)
        code = main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH])
        assert server.headers[0]["authorization"] == f"Bearer {ENV_KEY}"  # the key was used
    out, err = capsys.readouterr()
    assert code == 1
    assert "HTTP 401" in err and REDACTED in err  # the server's error is shown, the key is not
    assert ENV_KEY not in out + err and ENV_KEY[8:24] not in out + err
    assert _holding(run_dir, (ENV_KEY, ENV_KEY[8:24])) == []
    assert (run_dir / "events.jsonl").exists()


def test_every_header_value_is_a_secret_unless_listed_safe(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``api-subscription`` and ``X-Access`` were stored in plain text in config.yaml (their
    names hold no credential word), and printed where a server echoed them."""
    headers = {"api-subscription": SUBSCRIPTION, "X-Access": ACCESS, "Accept": "application/json"}
    run_dir = tmp_path / "run"
    with FlakyServer(script=["echo-html"] * 2) as server:
        config = _config(tmp_path, server.url, headers=headers, max_retries=3)
        assert main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH]) == 0
        assert server.headers[0]["api-subscription"] == SUBSCRIPTION  # sent as configured
    out, err = capsys.readouterr()
    assert SUBSCRIPTION not in out + err and ACCESS not in out + err
    assert _holding(run_dir, (SUBSCRIPTION, ACCESS)) == []
    copied = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert copied["models"][0]["options"]["headers"] == {
        "api-subscription": REDACTED,
        "X-Access": REDACTED,
        "Accept": "application/json",
    }
    assert "accept" in SAFE_HEADERS


def test_header_redaction_and_scrubbing_are_by_safe_list() -> None:
    data = {"options": {"headers": {"X-Custom-Thing": "v-0011223344556677", "traceparent": "00"}}}
    assert redact(data)["options"]["headers"] == {"X-Custom-Thing": REDACTED, "traceparent": "00"}
    remember(data)
    assert scrub("gateway said v-0011223344556677") == f"gateway said {REDACTED}"


def test_a_base_url_with_user_info_is_refused_and_never_shown(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``http://user:pw@host/v1`` printed the password in the "reports no model card" warning,
    and httpx sent Basic auth from it in place of the configured Authorization header."""
    with FlakyServer() as server:
        url = server.url.replace("http://", f"http://bob:{PASSWORD}@")
        config = _config(tmp_path, url, headers={"Authorization": "Bearer sk-0000111122223333"})
        assert main(["validate", str(config)]) == 2
        _, err = capsys.readouterr()
        assert "options.base_url" in err and "user-info" in err
        assert PASSWORD not in err and len(err.strip().splitlines()) == 1
        assert main(["run", str(config), "--out", str(tmp_path / "run"), *TEST_DISPATCH]) == 2
        _, err = capsys.readouterr()
        assert PASSWORD not in err
        assert server.requests == 0
    assert not (tmp_path / "run").exists()
    assert scrub(f"at http://someone-long:{PASSWORD}@h/v1") == f"at http://{REDACTED}@h/v1"


@pytest.mark.parametrize(
    "override",
    [
        "models[0].options.headers.x-api-key: sk-override-99887766",
        "models[0].options.headers.x=[sk-override-99887766",
        "models[5].options.headers.x-api-key=sk-override-99887766",
    ],
)
def test_a_malformed_override_does_not_echo_its_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str
) -> None:
    config = _config(tmp_path, "http://127.0.0.1:9/v1")
    assert main(["validate", str(config), "--set", override]) == 2
    err = capsys.readouterr().err
    assert "override 'models[" in err  # the override is named by its key
    assert "sk-override-99887766" not in err and "99887766" not in err


def test_a_worker_process_scrubs_the_key_it_read_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under Ray the error is made in the worker's process, which knows nothing the driver
    remembered (the key was written 3 times to events.jsonl): the worker notes the key it
    reads, and scrubs a server's text before cutting it."""
    from adaptive_eval.base import redact as redaction
    from adaptive_eval.base.errors import BackendError
    from adaptive_eval.base.types import Batch, WorkItem
    from adaptive_eval.campaign.build import build_campaign
    from adaptive_eval.config.schema import load_config

    monkeypatch.setenv("ECHO_TEST_KEY", ENV_KEY)
    with FlakyServer(script=["echo-401"]) as server:
        config = _config(tmp_path, server.url, api_key_env="ECHO_TEST_KEY", max_concurrency=1)
        plan = build_campaign(load_config(config)).run.plans[0]
        monkeypatch.setattr(redaction, "_known", set())  # a fresh process: nothing remembered
        worker = plan.make_worker(0)()
        with pytest.raises(BackendError) as caught:
            worker.run(Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),)))
        worker.close()
    message = str(caught.value)
    assert "HTTP 401" in message and "Incorrect API key provided" in message
    assert ENV_KEY not in message and ENV_KEY[8:24] not in message


def test_a_verifier_that_echoes_its_key_records_no_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The verifier's error (a trial's invalid reason, stored in trials.sqlite) held the
    server's text whole: an echoed key with it."""
    from adaptive_eval.base import redact as redaction
    from adaptive_eval.grading import GeneratedSample, build_grader
    from adaptive_eval.inputs.datasets import Question

    monkeypatch.setenv("ECHO_TEST_KEY", ENV_KEY)
    monkeypatch.setattr(redaction, "_known", set())  # a worker's process: nothing remembered
    with FlakyServer(script=["echo-401"]) as server:
        grader = build_grader(
            "math",
            schema="verifier_prob",
            verifier={"base_url": server.url, "model": "judge", "api_key_env": "ECHO_TEST_KEY"},
        )
        graded = grader(
            GeneratedSample(text="\\\\boxed{5}", completion_tokens=3, finish_reason="stop"),
            Question(id="q", problem="What is 2 + 3?", answer="5", metadata={}),
        )
    assert graded.invalid and "HTTP 401" in (graded.reason or "")
    assert ENV_KEY not in (graded.reason or "") and ENV_KEY[8:24] not in (graded.reason or "")
