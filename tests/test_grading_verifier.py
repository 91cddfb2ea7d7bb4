"""A verifier model behind an OpenAI-compatible endpoint feeds the verifier schemata."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adaptive_eval._testing.flaky_server import FlakyServer
from adaptive_eval.base.errors import InputError
from adaptive_eval.grading import GeneratedSample, build_grader
from adaptive_eval.grading.verifier import OpenAIVerifier, build_verifier
from adaptive_eval.inputs.datasets import Question

QUESTION = Question(id="q", problem="What is 2 + 3?", answer="5", metadata={})


class VerifierServer:
    """Loopback chat endpoint answering one letter with fixed top log-probabilities."""

    def __init__(self, top: dict[str, float], status: list[int] | None = None) -> None:
        self.top = top
        self.status = list(status or [])
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                code = outer.status.pop(0) if outer.status else 200
                letter = max(outer.top, key=outer.top.__getitem__)
                payload = {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": letter},
                            "logprobs": {
                                "content": [
                                    {
                                        "token": letter,
                                        "logprob": math.log(outer.top[letter]),
                                        "top_logprobs": [
                                            {"token": t, "logprob": math.log(p)}
                                            for t, p in outer.top.items()
                                        ],
                                    }
                                ]
                            },
                        }
                    ]
                }
                data = json.dumps(payload if code == 200 else {"error": "busy"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def server() -> Iterator[VerifierServer]:
    # " A" with a leading space is how many tokenizers spell the letter; "x" is noise.
    s = VerifierServer({"A": 0.6, " B": 0.2, "C": 0.1, "x": 0.1}, status=[503])
    yield s
    s.close()


def test_verifier_probabilities_drive_the_verifier_schema(server: VerifierServer) -> None:
    grader = build_grader(
        "math",
        schema="verifier_only",
        verifier={"base_url": server.url, "model": "judge", "backoff_s": 0.01},
    )
    sample = GeneratedSample(text="2 + 3 = \\boxed{5}", completion_tokens=9, finish_reason="stop")
    graded = grader(sample, QUESTION)
    assert not graded.invalid
    a, b, c = graded.signals.verifier
    assert (a, b, c) == pytest.approx((0.6 / 0.9, 0.2 / 0.9, 0.1 / 0.9))
    assert graded.category == 3  # A_high: the verifier is confident the answer is correct
    assert len(server.bodies) == 2  # the 503 was retried
    sent = server.bodies[-1]
    assert sent["model"] == "judge" and sent["max_tokens"] == 1 and sent["top_logprobs"] == 5
    assert "Reference answer: 5" in sent["messages"][0]["content"]


def test_an_unreachable_verifier_makes_the_attempt_invalid_not_a_crash() -> None:
    grader = build_grader(
        "math",
        schema="verifier_prob",
        verifier={
            "base_url": "http://127.0.0.1:9/v1",
            "model": "judge",
            "max_retries": 0,
            "timeout_s": 1,
        },
    )
    graded = grader(
        GeneratedSample(text="\\boxed{5}", completion_tokens=3, finish_reason="stop"), QUESTION
    )
    assert graded.invalid and "verifier unreachable" in (graded.reason or "")


def test_bad_verifier_config_is_named() -> None:
    with pytest.raises(InputError, match="verifier"):
        build_grader("math", schema="verifier_only", verifier={"model": "judge"})
    with pytest.raises(InputError, match="unknown verifier option 'url'"):
        build_grader("math", schema="verifier_only", verifier={"url": "x", "model": "m"})


# -- issue 48: one deadline for the whole exchange, headers and body included ---------------------
# httpx's read timeout restarts with every byte: a verifier sending its answer a byte every 0.05 s
# held a grading call as long as it liked (100 header bytes: 5 s with timeout_s 1; the body of
# the flaky server's answer a byte at a time: ~30 s).
SAMPLE = GeneratedSample(text="\\boxed{5}", completion_tokens=3, finish_reason="stop")


@pytest.mark.parametrize("step", ["trickle-headers", "trickle"])
def test_a_verifier_trickling_its_answer_is_cut_at_timeout_s(step: str) -> None:
    with FlakyServer(script=[step], trickle_s=0.05, header_bytes=100) as server:
        grader = build_grader(
            "math",
            schema="verifier_only",
            verifier={"base_url": server.url, "model": "judge", "max_retries": 0, "timeout_s": 1},
        )
        started = time.perf_counter()
        graded = grader(SAMPLE, QUESTION)
        elapsed = time.perf_counter() - started
    assert graded.invalid and "gave no answer within timeout_s = 1 s" in (graded.reason or "")
    assert elapsed < 2.0, f"one verifier call held {elapsed:.1f} s with timeout_s = 1"


def test_each_retry_of_a_trickling_verifier_has_its_own_deadline() -> None:
    """A trickled attempt is cut and retried; the retry is answered (the flaky server answers a
    completion, not a letter, which is what the error then says)."""
    with FlakyServer(script=["trickle-headers"], trickle_s=0.05, header_bytes=100) as server:
        verifier = OpenAIVerifier(
            base_url=server.url, model="judge", timeout_s=0.6, max_retries=1, backoff_s=0.01
        )
        started = time.perf_counter()
        with pytest.raises(RuntimeError, match="verifier answered 'T', not one of A, B, C"):
            verifier(SAMPLE, QUESTION)
        elapsed = time.perf_counter() - started
        assert server.requests == 2
    assert elapsed < 0.6 + 1.0, f"two attempts held {elapsed:.1f} s"


def test_a_verifier_called_from_async_code_still_answers(server: VerifierServer) -> None:
    """A grader called inside a running event loop: the exchange gets a loop of its own."""
    verifier = build_verifier({"base_url": server.url, "model": "judge", "backoff_s": 0.01})

    async def grade() -> tuple[float, float, float]:
        return verifier(SAMPLE, QUESTION)

    assert asyncio.run(grade()) == pytest.approx((0.6 / 0.9, 0.2 / 0.9, 0.1 / 0.9))


@pytest.mark.parametrize(
    ("key", "value", "expect"),
    [
        ("timeout_s", 1e10, "at most 86400 (a day), got 10000000000.0"),
        ("timeout_s", 0, "> 0 and at most 86400"),
        ("timeout_s", float("nan"), "got nan"),
        ("timeout_s", "soon", "got 'soon'"),
        ("backoff_s", -1, ">= 0 and at most 86400"),
        ("max_retries", -1, "must be a whole number >= 0, got -1"),
        ("max_retries", 2.5, "got 2.5"),
    ],
)
def test_verifier_waits_are_numbers_within_a_day(key: str, value: object, expect: str) -> None:
    with pytest.raises(InputError) as info:
        build_verifier({"base_url": "http://127.0.0.1:9/v1", "model": "judge", key: value})
    assert info.value.field == f"verifier.{key}" and expect in str(info.value)
