"""A verifier model behind an OpenAI-compatible endpoint feeds the verifier schemata."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adaptive_eval.base.errors import InputError
from adaptive_eval.grading import GeneratedSample, build_grader
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
