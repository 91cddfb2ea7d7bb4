"""Issue 40, section 2: servers that trickle, flood, lie about usage, ask for long waits or are
down, and the same batch retries inline as under Ray."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_DISPATCH, served_campaign, write_config

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.backends import served_identity
from adaptive_eval.backends.openai import OpenAISettings, OpenAIWorker
from adaptive_eval.base.errors import BackendError, InputError
from adaptive_eval.base.types import Batch, WorkItem
from adaptive_eval.campaign.build import build_campaign
from adaptive_eval.command_line.cli import main
from adaptive_eval.config.schema import parse_config

ONE = Batch(1, 0, 0, (WorkItem(0, 0, 0, 1),))


def _data(url: str, **options: Any) -> dict[str, Any]:
    return served_campaign(
        url,
        "faults",
        3,
        {
            "backoff": 0.001,
            "backoff_max": 0.01,
            "max_retries": 0,
            "timeout_s": 5,
            "max_concurrency": 1,
            **options,
        },
        batch_size=2,
    )


def _worker(url: str, **options: Any) -> OpenAIWorker:
    worker = build_campaign(parse_config(_data(url, **options))).run.plans[0].make_worker(0)()
    assert isinstance(worker, OpenAIWorker)
    return worker


def test_timeout_bounds_the_whole_request_not_each_read() -> None:
    """A server sending a byte every 0.1 s never trips a 1 s read timeout: the request took as
    long as the server liked (about 60 s per request with a byte every 4 s)."""
    with FlakyServer(script=["trickle"], trickle_s=0.1) as server:
        worker = _worker(server.url, timeout_s=1.0)
        started = time.perf_counter()
        with pytest.raises(BackendError, match=r"took longer than timeout_s = 1 s"):
            worker.run(ONE)
        elapsed = time.perf_counter() - started
        worker.close()
    assert elapsed < 2.5


def test_a_huge_response_is_abandoned_at_the_cap_in_bounded_memory() -> None:
    """A 300 MB answer took the process to 2.5 GB; here 40 MB against a 1 MiB cap."""
    cap = 1 << 20
    with FlakyServer(script=["huge"], huge_bytes=40 << 20) as server:
        worker = _worker(server.url, max_response_bytes=cap)
        tracemalloc.start()
        try:
            with pytest.raises(BackendError, match=r"larger than max_response_bytes = 1,048,576"):
                worker.run(ONE)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        worker.close()
    assert peak < 3 * cap + (2 << 20), f"peak {peak:,} bytes"


def test_a_huge_response_is_retried_as_a_transient_fault() -> None:
    with FlakyServer(script=["huge"], huge_bytes=4 << 20) as server:
        worker = _worker(server.url, max_response_bytes=1 << 20, max_retries=1)
        result = worker.run(ONE)
        retried = worker.drain_diagnostics()
        worker.close()
    assert len(result.trials) == 1
    assert retried == {"request_retries": 1, "reasons": {"response too large": 1}}


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"completion_tokens": 1e30, "prompt_tokens": 3}, "usage.completion_tokens"),
        ({"completion_tokens": 2**62, "prompt_tokens": 3}, "usage.completion_tokens"),
        ({"completion_tokens": 4, "prompt_tokens": -7}, "usage.prompt_tokens"),
        ({"completion_tokens": "12"}, "usage.completion_tokens"),
        ("lots", "usage"),
    ],
)
def test_usage_out_of_range_or_mistyped_is_one_line_naming_server_and_field(
    usage: Any, field: str
) -> None:
    with FlakyServer(usage=usage) as server:
        worker = _worker(server.url)
        with pytest.raises(BackendError) as caught:
            worker.run(ONE)
        worker.close()
    message = str(caught.value)
    assert f"{server.url}/chat/completions: malformed response: {field} = " in message
    assert "\n" not in message


def test_a_mistyped_message_names_the_field(tmp_path: Path) -> None:
    with FlakyServer() as server:
        worker = _worker(server.url)
        with pytest.raises(BackendError, match=r"malformed response: choices\.0\.message = 'hi'"):
            from adaptive_eval.backends.openai import parse_response

            parse_response({"choices": [{"message": "hi"}]}, "chat", False, source=server.url)
        worker.close()


def test_absurd_usage_ends_the_run_in_one_line_not_an_overflow(
    tmp_path: Path, no_ray: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with FlakyServer(usage={"completion_tokens": 2**62, "prompt_tokens": 1}) as server:
        config = write_config(tmp_path / "c.yaml", _data(server.url))
        code = main(["run", str(config), "--out", str(tmp_path / "run"), *TEST_DISPATCH])
    err = capsys.readouterr().err
    assert code == 1
    assert "usage.completion_tokens" in err and "unexpected error" not in err


def test_inline_dispatch_retries_a_failed_batch_as_ray_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``execution.max_batch_retries`` was ignored inline: the first exhausted request failed
    the run, where Ray dispatch re-ran the batch and finished."""
    data = _data("", max_retries=0)
    data["execution"]["max_batch_retries"] = 2
    with FlakyServer(script=[503, "drop"]) as server:
        data["models"][0]["options"]["base_url"] = server.url
        config = write_config(tmp_path / "c.yaml", data)
        run_dir = tmp_path / "run"
        code = main(
            ["run", str(config), "--out", str(run_dir), "--set", "execution.dispatch=inline"]
        )
    assert code == 0, capsys.readouterr().err
    events = (run_dir / "events.jsonl").read_text()
    assert events.count('"batch_failed"') >= 1  # failed, then run again


def test_retry_after_longer_than_backoff_max_is_waited_in_full() -> None:
    with FlakyServer(script=[429], retry_after=0.6) as server:
        worker = _worker(server.url, max_retries=1, backoff_max=0.01)
        started = time.perf_counter()
        worker.run(ONE)
        worker.close()
    assert time.perf_counter() - started >= 0.6


def test_a_server_that_is_down_fails_the_run_before_the_workers_start(
    tmp_path: Path,
    no_ray: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(served_identity, "ANSWER_PAUSE_S", 0.01)
    with FlakyServer() as server:
        url = server.url
    config = write_config(tmp_path / "c.yaml", _data(url, max_retries=3))
    run_dir = tmp_path / "run"
    started = time.perf_counter()
    code = main(["run", str(config), "--out", str(run_dir), *TEST_DISPATCH])
    err = capsys.readouterr().err
    assert code == 1 and time.perf_counter() - started < 10
    lines = [line for line in err.splitlines() if line.startswith("adaptive-eval: ")]
    assert len(lines) == 1 and url in lines[0] and "does not answer" in lines[0]
    assert not no_ray, "the workers must not start"
    assert not run_dir.exists()


# -- issue 48, item 1: one deadline for the whole exchange, headers included ----------------------
# 100 header bytes, one every 0.05 s: 5 s of headers, each byte well inside any read timeout.
HEADER_TRICKLE: dict[str, Any] = {"trickle_s": 0.05, "header_bytes": 100}


def test_a_server_trickling_its_headers_is_cut_at_timeout_s() -> None:
    """httpx's read timeout restarts with every byte, so headers sent a byte at a time held each
    attempt as long as the server liked (101 s with ``timeout_s: 3``)."""
    with FlakyServer(script=["trickle-headers"], **HEADER_TRICKLE) as server:
        worker = _worker(server.url, timeout_s=1.0)
        started = time.perf_counter()
        with pytest.raises(BackendError, match=r"timed out.*timeout_s = 1 s"):
            worker.run(ONE)
        elapsed = time.perf_counter() - started
        worker.close()
    assert elapsed < 2.0, f"one attempt held {elapsed:.1f} s with timeout_s = 1"


def test_each_retry_of_a_header_trickle_has_its_own_deadline() -> None:
    """Two trickled attempts, then a good answer: each attempt is cut, and the third succeeds."""
    script = ["trickle-headers", "trickle-headers"]
    with FlakyServer(script=script, **HEADER_TRICKLE) as server:
        worker = _worker(server.url, timeout_s=0.6, max_retries=2)
        started = time.perf_counter()
        result = worker.run(ONE)
        elapsed = time.perf_counter() - started
        worker.close()
        assert server.requests == 3
    assert result.error is None and len(result.trials) == 1
    assert elapsed < 2 * 2 * 0.6 + 1.0, f"two attempts held {elapsed:.1f} s"


def test_models_trickling_its_headers_is_cut_at_planning() -> None:
    """``/models`` (and ``/version``) at planning: an 83-byte answer held planning 165 s."""
    with FlakyServer(trickle_get=True, version="0.6.3", **HEADER_TRICKLE) as server:
        started = time.perf_counter()
        report = served_identity.query_server(server.url, server.model, {}, timeout=1.0)
        elapsed = time.perf_counter() - started
    assert report.card is None and "1 s" in str(report.problem), report
    assert elapsed < 2.0, f"GET /models held {elapsed:.1f} s with a 1 s deadline"


def test_planning_a_campaign_against_a_header_trickle_takes_at_most_twice_timeout_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FlakyServer(trickle_get=True, **HEADER_TRICKLE) as server:
        started = time.perf_counter()
        build_campaign(parse_config(_data(server.url, timeout_s=1.0)))
        elapsed = time.perf_counter() - started
    assert elapsed < 2.0, f"planning held {elapsed:.1f} s with timeout_s = 1"
    assert "reports no model card" in capsys.readouterr().err


def test_a_server_trickling_its_headers_does_not_answer_before_the_workers_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(served_identity, "ANSWER_PAUSE_S", 0.01)
    with FlakyServer(trickle_get=True, **HEADER_TRICKLE) as server:
        started = time.perf_counter()
        problem = served_identity.server_answers(server.url, {}, "models[0] (faults)", 0.5)
        elapsed = time.perf_counter() - started
    tries = served_identity.ANSWER_TRIES
    assert problem is not None and "does not answer" in problem, problem
    assert elapsed < tries * 2 * 0.5 + 0.5, f"{tries} tries held {elapsed:.1f} s"


@pytest.mark.parametrize("option", ["timeout_s", "backoff", "backoff_max"])
@pytest.mark.parametrize("value", [1e10, 1e308])
def test_a_wait_past_a_day_is_refused_before_sampling(option: str, value: float) -> None:
    """``timeout_s: 1e10`` (or such a backoff) failed every batch after sampling had started:
    "OverflowError: timestamp out of range for platform time_t"."""
    data = _data("http://127.0.0.1:9/v1", **{option: value})
    with pytest.raises(InputError, match=rf"models\[0\]\.options\.{option}: must be <= 86400"):
        build_campaign(parse_config(data))


def test_a_long_run_of_retries_waits_backoff_max_not_an_overflow() -> None:
    """``2**attempt`` past 1,023 retries (``max_retries`` is unbounded) overflowed a float."""
    worker = OpenAIWorker.__new__(OpenAIWorker)  # the delay reads the settings alone
    worker.settings = OpenAISettings("models[0]", "http://127.0.0.1:9/v1", "m", backoff_max=60.0)
    assert worker._delay(5_000, None) == 60.0
