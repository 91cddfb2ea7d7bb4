"""A verifier model behind an OpenAI-compatible endpoint, giving the paper's A/B/C probabilities.

The verifier schemata (Verifier-Only, Verifier Prob) need, per attempt, the probabilities that a
verifier model judges it correct (A), wrong (B) or off-task (C). The verifier is any
OpenAI-compatible chat endpoint (a vLLM server holding the verifier model, or a hosted API): it
is asked for one letter with ``logprobs`` and ``top_logprobs``, and the three letters'
probabilities are renormalised over {A, B, C}. A server that returns no log-probabilities gives a
one-hot vector on the letter it answered. Errors propagate, so the grader records the attempt as
invalid with the reason, never as a silent guess.

Each attempt has one deadline, ``timeout_s``, for the whole exchange: connecting, sending, the
status line and headers, and the body. httpx's own timeouts bound each network operation, and a
read timeout restarts with every byte, so a verifier sending its headers a byte at a time held a
grading call as long as it liked (issue 48). The exchange therefore runs on an event loop of its
own under ``asyncio.timeout``, which cancels it wherever it is when the deadline passes and
closes its connection, as the ``openai`` backend's attempts do; a timed-out attempt is retried
like a dropped connection. The answer is read up to :data:`MAX_ANSWER_BYTES`.

Config (inside the grader's parameters)::

    grader: {name: math, schema: verifier_only,
             verifier: {base_url: "http://127.0.0.1:8001/v1", model: verifier-7b}}
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from adaptive_eval.base.errors import InputError, printable
from adaptive_eval.base.redact import remember_secret, scrub
from adaptive_eval.grading.signals import GeneratedSample
from adaptive_eval.inputs.datasets import Question

LETTERS = ("A", "B", "C")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: The longest ``timeout_s`` and ``backoff_s``, in seconds (a day), as the ``openai`` backend's:
#: the operating system's waits end near 9.2e9 s.
MAX_WAIT_S = 86_400.0
#: The most bytes of a verifier's answer read (it is asked for one token: a few KB).
MAX_ANSWER_BYTES = 8 << 20
_T = TypeVar("_T")

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
                status, data = _run(self._exchange(url, body, headers))
            except TimeoutError:  # the deadline (asyncio.timeout), not a network operation's
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"verifier at {url} gave no answer within timeout_s = {self.timeout_s:g} s"
                    ) from None
            except httpx.TransportError as error:
                if attempt == self.max_retries:
                    raise RuntimeError(
                        f"verifier unreachable at {url}: {scrub(str(error))}"
                    ) from error
            else:
                if status == 200:
                    return letter_probabilities(json.loads(data))
                if status not in RETRY_STATUS or attempt == self.max_retries:
                    text = data.decode("utf-8", "replace")
                    raise RuntimeError(
                        f"verifier at {url} answered HTTP {status}: {scrub(text)[:200]}"
                    )
            # 2.0**60 s is past any backoff; 2**attempt past 1,023 is too large for a float.
            time.sleep(min(self.backoff_s * 2.0 ** min(attempt, 60), MAX_WAIT_S))
        raise AssertionError("unreachable")

    async def _exchange(self, url: str, body: Any, headers: Mapping[str, str]) -> tuple[int, bytes]:
        """One attempt: (status, body), the whole exchange within ``timeout_s`` however slowly
        the server sends any part of it (TimeoutError past it); the body read up to
        :data:`MAX_ANSWER_BYTES`."""
        import httpx

        data = bytearray()
        async with (
            asyncio.timeout(self.timeout_s),
            httpx.AsyncClient(timeout=self.timeout_s) as client,
            client.stream("POST", url, json=body, headers=dict(headers)) as response,
        ):
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    raise RuntimeError(
                        f"verifier at {url} answered more than {MAX_ANSWER_BYTES >> 20} MiB"
                    )
            return response.status_code, bytes(data)


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``coroutine`` run to its end on an event loop of its own, from a thread of its own where
    this one runs a loop already (a grader called from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_new_loop(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="verifier") as pool:
        return pool.submit(_run_on_new_loop, coroutine).result()


def _run_on_new_loop(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """:func:`asyncio.run` without waiting for the loop's executor: a name look-up that the
    deadline cancelled may still be running there, and the answer must not wait for it."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # its executor is shut down without waiting


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
    _check_wait(spec, "timeout_s", positive=True)
    _check_wait(spec, "backoff_s", positive=False)
    retries = spec.get("max_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InputError(
            f"must be a whole number >= 0, got {_shown(retries)}", field="verifier.max_retries"
        )
    return OpenAIVerifier(**{k: v for k, v in spec.items() if k != "backend"})


def _check_wait(spec: Mapping[str, Any], key: str, *, positive: bool) -> None:
    """``spec[key]``, where given, is a number of seconds above 0 (or at least 0) and at most
    :data:`MAX_WAIT_S`."""
    if key not in spec:
        return
    value = spec[key]
    number = not isinstance(value, bool) and isinstance(value, int | float)
    above = number and (value > 0 if positive else value >= 0)
    if not above or not value <= MAX_WAIT_S:  # NaN is neither
        least = "> 0" if positive else ">= 0"
        raise InputError(
            f"must be a number of seconds {least} and at most {MAX_WAIT_S:g} (a day), got "
            f"{_shown(value)}",
            field=f"verifier.{key}",
        )


def _shown(value: Any) -> str:
    text = printable(repr(value))
    return text if len(text) <= 60 else f"{text[:50]}... ({len(text):,} characters)"
