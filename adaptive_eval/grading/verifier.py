"""A verifier model behind an OpenAI-compatible endpoint, giving the paper's A/B/C probabilities.

The verifier schemata (Verifier-Only, Verifier Prob) need, per attempt, the probabilities that a
verifier model judges it correct (A), wrong (B) or off-task (C). The verifier is any
OpenAI-compatible chat endpoint (a vLLM server holding the verifier model, or a hosted API): it
is asked for one letter with ``logprobs`` and ``top_logprobs``, and the three letters'
probabilities are renormalised over {A, B, C}. A server that returns no log-probabilities gives a
one-hot vector on the letter it answered. Errors propagate, so the grader records the attempt as
invalid with the reason, never as a silent guess.

Config (inside the grader's parameters)::

    grader: {name: math, schema: verifier_only,
             verifier: {base_url: "http://127.0.0.1:8001/v1", model: verifier-7b}}
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.base.redact import remember_secret, scrub
from adaptive_eval.grading.signals import GeneratedSample
from adaptive_eval.inputs.datasets import Question

LETTERS = ("A", "B", "C")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})

DEFAULT_PROMPT = (
    "You are grading a solution to a math problem.\n\n"
    "Problem:\n{problem}\n\nReference answer: {answer}\n\n"
    "Candidate solution (its last {tail_chars} characters):\n{completion}\n\n"
    "Reply with one letter: A if the candidate's final answer is correct, B if it is wrong, "
    "C if the candidate does not attempt the problem."
)


@dataclass(frozen=True)
class OpenAIVerifier:
    """Callable ``(sample, question) -> (A, B, C)`` backed by a chat completions endpoint."""

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    tail_chars: int = 4000
    prompt: str = DEFAULT_PROMPT

    def messages(self, sample: GeneratedSample, question: Question) -> list[dict[str, str]]:
        text = self.prompt.format(
            problem=question.problem,
            answer=question.answer,
            completion=sample.text[-self.tail_chars :],
            tail_chars=self.tail_chars,
        )
        return [{"role": "user", "content": text}]

    def __call__(self, sample: GeneratedSample, question: Question) -> tuple[float, float, float]:
        import httpx

        headers = {}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise RuntimeError(f"verifier API key variable {self.api_key_env} is not set")
            remember_secret(key)  # a server echoing it is scrubbed from the reason recorded
            headers["Authorization"] = f"Bearer {key}"
        body = {
            "model": self.model,
            "messages": self.messages(sample, question),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": 5,
        }
        url = self.base_url.rstrip("/") + "/chat/completions"
        for attempt in range(self.max_retries + 1):
            try:
                response = httpx.post(url, json=body, headers=headers, timeout=self.timeout_s)
            except httpx.TransportError as error:
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"verifier unreachable at {url}: {scrub(str(error))}"
                    ) from error
            else:
                if response.status_code == 200:
                    return letter_probabilities(response.json())
                if response.status_code not in RETRY_STATUS or attempt == self.max_retries:
                    raise RuntimeError(
                        f"verifier at {url} answered HTTP "
                        f"{response.status_code}: {scrub(response.text)[:200]}"
                    )
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")


def letter_probabilities(payload: Mapping[str, Any]) -> tuple[float, float, float]:
    """(A, B, C) from a chat completion: renormalised top log-probs of the first token, or
    one-hot on the answered letter when the server gave no log-probabilities.

    >>> letter_probabilities({"choices": [{"message": {"content": "B"}}]})
    (0.0, 1.0, 0.0)
    """
    choice = payload["choices"][0]
    first = ((choice.get("logprobs") or {}).get("content") or [None])[0]
    weights = dict.fromkeys(LETTERS, 0.0)
    if first is not None:
        for entry in first.get("top_logprobs") or [first]:
            letter = str(entry.get("token", "")).strip().upper()
            if letter in weights:
                weights[letter] = max(weights[letter], math.exp(float(entry["logprob"])))
    total = sum(weights.values())
    if total == 0:
        answered = str((choice.get("message") or {}).get("content") or "").strip().upper()[:1]
        if answered not in weights:
            raise RuntimeError(f"verifier answered {answered!r}, not one of A, B, C")
        weights[answered], total = 1.0, 1.0
    a, b, c = (weights[letter] / total for letter in LETTERS)
    return a, b, c


def build_verifier(spec: Mapping[str, Any]) -> OpenAIVerifier:
    """A verifier from the grader's ``verifier:`` mapping; unknown keys are errors."""
    allowed = set(OpenAIVerifier.__dataclass_fields__)
    unknown = sorted(set(spec) - allowed - {"backend"})
    if unknown:
        raise InputError(
            f"unknown verifier option {unknown[0]!r} (allowed: backend, "
            f"{', '.join(sorted(allowed))})",
            field="verifier",
        )
    if spec.get("backend", "openai") != "openai":
        raise InputError(
            f"verifier backend {spec['backend']!r} is not supported; use an "
            "OpenAI-compatible endpoint (backend: openai), e.g. a vLLM server",
            field="verifier.backend",
        )
    for key in ("base_url", "model"):
        if not spec.get(key):
            raise InputError(f"verifier needs {key}", field=f"verifier.{key}")
    return OpenAIVerifier(**{k: v for k, v in spec.items() if k != "backend"})
