"""``openai``: generation through any OpenAI-compatible HTTP server (vLLM, SGLang, TGI, OpenAI).

One concept, kept whole (~560 lines): the HTTP worker, its retries and its response parsing.

Each trial is one request with ``n=1`` and ``seed`` = its trial seed, sent to
``/v1/chat/completions`` with the rendered question as the user message (the server applies the
model's chat template), or, with ``endpoint: completions``, to ``/v1/completions`` with the
rendered question as a raw prompt (no template: use it for base models). A worker sends up to
``max_concurrency`` requests at once from a thread pool sharing one ``httpx.AsyncClient``; the
pool is the worker's, shared by every batch queued at it, so it stays full across batch
boundaries.

Each attempt has one deadline, ``timeout_s``, for the whole exchange: waiting for a connection,
connecting, sending, the status line and headers, and the body. httpx's own timeouts bound each
network operation, and a read timeout restarts with every byte, so a server sending its headers
a byte a second held an attempt ~101 s with ``timeout_s: 3`` (issue 48). The exchange therefore
runs on an event loop of the worker's own (one thread, beside the pool) under
``asyncio.timeout``, which cancels it wherever it is when the deadline passes and closes its
connection; the pool's thread waits for it (the total timeout httpx's maintainers point to:
encode/httpx#776).

Failures: 429, 5xx, 408, dropped connections and timeouts are retried with exponential backoff
(``backoff * 2**attempt`` seconds, capped at ``backoff_max``, or at least ``Retry-After`` where
the server sends one, up to :data:`MAX_RETRY_AFTER_S`), up to
``max_retries`` times; a request that still fails, or any other error status, raises
:class:`~adaptive_eval.base.errors.BackendError`, so the whole batch is re-dispatched later and
nothing
of it is recorded (never a silent wrong answer). So does a response with more than one choice
(``n=1`` is asked for). Every retry is counted by reason; the dispatcher collects the counts after
each batch (``request_retries`` events, ``dispatch.request_retries`` in summary.json).

Log-probabilities (``sampling.logprobs``) are asked for and used when the server returns them; a
server that rejects the parameter (HTTP 400 naming ``logprobs``) is asked again without it, once
per worker. Prompt log-probabilities are a vLLM extension: ``prompt_logprobs: true`` in options.

The model's identity carries what the server reports serving when the campaign is planned
(:mod:`adaptive_eval.backends.served_identity`). httpx is imported only inside the worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import math
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from adaptive_eval.backends.base import BackendContext, BackendPlan
from adaptive_eval.backends.generation import (
    COMMON_OPTIONS,
    EXECUTION_OPTIONS,
    GenerationSetup,
    Options,
    prepare_generation,
)
from adaptive_eval.backends.generation_worker import (
    Generated,
    GenerationWorker,
    TrialRequest,
    Window,
)
from adaptive_eval.backends.served_identity import TIMEOUT_S, server_answers, server_identity
from adaptive_eval.base.errors import BackendError, InputError, printable
from adaptive_eval.base.redact import REDACTED, remember, remember_secret, scrub
from adaptive_eval.config.registry import BackendTraits, backends
from adaptive_eval.config.schema import ModelEntry
from adaptive_eval.grading import GeneratedSample, Graded

INSTALL_HINT = "pip install 'adaptive-eval[openai]'"
_T = TypeVar("_T")
#: The longest ``Retry-After`` honoured, in seconds (a longer one is waited this long).
MAX_RETRY_AFTER_S = 600.0
#: The longest ``timeout_s``, ``backoff`` and ``backoff_max``, in seconds (a day): the
#: operating system's waits end near 9.2e9 s, so ``timeout_s: 1e10`` failed every batch with
#: "OverflowError: timestamp out of range" after sampling had started.
MAX_WAIT_S = 86_400.0
#: Seconds a request's thread waits past ``timeout_s`` for the event loop to hand back a
#: cancelled exchange before it gives up on it (a backstop: cancelling takes milliseconds).
CANCEL_GRACE_S = 5.0
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Where the server lives decides nothing about the trials: a resume may point at a moved server.
OPENAI_EXECUTION_OPTIONS = EXECUTION_OPTIONS | {"base_url"}

BACKEND_OPTIONS = {
    **COMMON_OPTIONS,
    "base_url": "server URL, e.g. http://127.0.0.1:8000/v1 (required)",
    "model": "model name the server serves (default: the entry's name)",
    "endpoint": "chat (default: /chat/completions with messages) or completions (raw prompt)",
    "api_key_env": "environment variable holding the API key (read in the worker)",
    "max_concurrency": "requests in flight per worker (default 8)",
    "timeout_s": "seconds a request may take in all, however slowly the server sends its answer "
    "(headers included: a trickling server does not hold it longer; default 600, at most "
    "86400): past it the request is retried",
    "max_response_bytes": "largest response read, in bytes (default 32 MiB): a larger one is "
    "abandoned as it arrives and retried, so memory stays near this size",
    "max_retries": "retries of a failing request before the batch fails (default 5)",
    "backoff": "first retry delay in seconds, doubled each retry (default 1, at most 86400)",
    "backoff_max": "longest retry delay of our own backoff in seconds (default 60, at most "
    "86400); a server's "
    "Retry-After is waited in full (up to 600 s)",
    "prompt_logprobs": "ask for prompt log-probs (vLLM servers only; default false)",
    "extra_body": "more request fields (top_k, stop, ...), sent as they are",
    "headers": "more HTTP headers",
    "revision": "the served model's revision as you state it (a server's weights cannot be "
    "hashed): part of the model's identity with what the server reports serving (/models, "
    "/version), so change it when the weights behind the name change",
}


@dataclass(frozen=True)
class OpenAISettings:
    entry_field: str
    base_url: str
    model: str
    endpoint: str = "chat"
    api_key_env: str | None = None
    max_concurrency: int = 8
    timeout_s: float = 600.0
    max_response_bytes: int = 32 << 20
    max_retries: int = 5
    backoff: float = 1.0
    backoff_max: float = 60.0
    prompt_logprobs: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        path = "chat/completions" if self.endpoint == "chat" else "completions"
        return f"{self.base_url.rstrip('/')}/{path}"


class _Retryable(Exception):
    """A failure worth another attempt; ``reason`` is its short kind ("HTTP 503", "timeout",
    ...), counted per worker (:meth:`OpenAIWorker.drain_diagnostics`)."""

    def __init__(self, message: str, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class _LogprobsRejected(Exception):
    pass


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _sum_logprobs(values: Sequence[Any]) -> float | None:
    total = 0.0
    for value in values:
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None
        total += float(value)
    return total


def _prompt_logprob_sum(entries: Any) -> float | None:
    """vLLM's ``prompt_logprobs``: [None, {token_id: {logprob, rank, decoded_token}}, ...]."""
    if not isinstance(entries, list) or not entries:
        return None
    values = []
    for position in entries:
        if position is None:
            continue
        if not isinstance(position, dict) or not position:
            return None
        first = next(iter(position.values()))
        values.append(first.get("logprob") if isinstance(first, dict) else None)
    return _sum_logprobs(values)


class _Lenient(BaseModel):
    """The fields of a response that are read, typed; any other field is ignored."""

    model_config = ConfigDict(extra="ignore")


#: The most tokens one response may claim (``usage``): a count above it is a broken or hostile
#: server, not a completion (``2**62`` made summary.json's ``tokens_used`` negative).
MAX_TOKEN_COUNT = 1 << 30
_Count = Annotated[StrictInt, Field(ge=0, le=MAX_TOKEN_COUNT)]


class _Message(_Lenient):
    content: str | None = None
    reasoning_content: Any = None
    reasoning: Any = None


class _ChoiceLogprobs(_Lenient):
    content: list[Any] | None = None  # chat: [{"logprob": ...}, ...]
    token_logprobs: list[Any] | None = None  # completions


class _Choice(_Lenient):
    message: _Message | None = None
    text: str | None = None
    finish_reason: str | None = None
    logprobs: _ChoiceLogprobs | None = None
    prompt_logprobs: Any = None


class _Usage(_Lenient):
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None


class _Response(_Lenient):
    id: Any = None
    model: Any = None
    system_fingerprint: Any = None
    choices: list[_Choice]
    usage: _Usage | None = None
    prompt_logprobs: Any = None


def _short(value: Any, most: int = 200) -> str | None:
    """A server's descriptive value (id, model) as text cut to ``most`` characters; None for
    anything that is not a string."""
    return value[:most] if isinstance(value, str) else None


def _validated(data: Any, source: str) -> _Response:
    if not isinstance(data, dict):
        raise BackendError(f"{source}: malformed response: not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BackendError(f"{source}: malformed response: no choices")
    if len(choices) != 1:
        # n=1 was asked for: several choices mean the server ignored the request, and taking
        # the first would record a sample that was not drawn with this trial's seed alone.
        raise BackendError(
            f"{source}: response has {len(choices)} choices where n=1 was asked for; the "
            f"server does not honour n (id {printable(str(data.get('id')))[:100]!r})"
        )
    try:
        return _Response.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        shown = printable(repr(first.get("input")))
        shown = shown if len(shown) <= 80 else f"{shown[:80]}..."
        raise BackendError(
            f"{source}: malformed response: {where} = {shown}: {first['msg']}"
        ) from None


def parse_response(
    data: Any, endpoint: str, logprobs: bool, source: str = "server"
) -> tuple[GeneratedSample, dict[str, Any]]:
    """A chat or text completion response -> (sample without latency, extra signals).

    The fields read are validated first (:class:`_Response`): a wrong type, a negative or
    absurd token count (above :data:`MAX_TOKEN_COUNT`) is a :class:`BackendError` naming
    ``source`` (the server's URL), the field and its value."""
    response = _validated(data, source)
    choice = response.choices[0]
    usage = response.usage or _Usage()
    chat_logprobs = choice.logprobs or _ChoiceLogprobs()
    if endpoint == "chat":
        message = choice.message or _Message()
        text = message.content or ""
        token_logprobs = [
            entry.get("logprob") if isinstance(entry, dict) else None
            for entry in chat_logprobs.content or []
        ]
    else:
        text = choice.text or ""
        token_logprobs = list(chat_logprobs.token_logprobs or [])
    completion_tokens = usage.completion_tokens
    if completion_tokens is None:
        completion_tokens = len(token_logprobs) if token_logprobs else 0
    cumulative = _sum_logprobs(token_logprobs) if logprobs and token_logprobs else None
    sample = GeneratedSample(
        text=text,
        completion_tokens=completion_tokens,
        prompt_tokens=usage.prompt_tokens or 0,
        finish_reason=choice.finish_reason,
        cumulative_logprob=cumulative,
        # vLLM puts them on the response (chat) or on the choice (completions).
        prompt_logprob_sum=_prompt_logprob_sum(choice.prompt_logprobs or response.prompt_logprobs),
    )
    extra: dict[str, Any] = {
        "response_id": _short(response.id),
        "served_model": _short(response.model),
        "system_fingerprint": _short(response.system_fingerprint),
        "logprob_tokens": len(token_logprobs) if cumulative is not None else None,
    }
    if endpoint == "chat":
        message = choice.message or _Message()
        reasoning = message.reasoning_content or message.reasoning
        if isinstance(reasoning, str) and reasoning:
            extra["reasoning_chars"] = len(reasoning)
    return sample, extra


class OpenAIWorker(GenerationWorker):
    """Sends a batch's requests concurrently; retries transient failures; fails the batch on a
    request that keeps failing."""

    device_factor = 0.0  # device time is the server's, unknown here

    def __init__(
        self,
        setup: GenerationSetup,
        settings: OpenAISettings,
        offset: int,
        worker_id: str = "openai",
    ) -> None:
        super().__init__(setup, offset, worker_id)
        self.settings = settings
        try:
            import httpx
        except ImportError as error:
            raise ImportError(
                f"the openai backend needs httpx: {INSTALL_HINT} ({error})"
            ) from error
        self._httpx = httpx
        headers = {"Content-Type": "application/json", **settings.headers}
        remember(settings.headers, in_headers=True)  # this process may be a Ray worker's
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise BackendError(
                    f"{settings.entry_field}.options.api_key_env names "
                    f"{settings.api_key_env}, which is not set in the worker's "
                    "environment"
                )
            remember_secret(key)  # a server echoing it is scrubbed from every message
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(
            max_connections=settings.max_concurrency,
            max_keepalive_connections=settings.max_concurrency,
        )
        # httpx's timeouts bound each network operation (never longer than the whole); the
        # exchange's deadline is the event loop's (:meth:`_exchange`).
        self.client = httpx.AsyncClient(headers=headers, timeout=settings.timeout_s, limits=limits)
        self._loop = asyncio.new_event_loop()
        self._io = threading.Thread(target=self._loop.run_forever, name="openai-io", daemon=True)
        self._io.start()
        self._closed = False
        self.pool = ThreadPoolExecutor(settings.max_concurrency, thread_name_prefix="openai")
        self.use_logprobs = setup.sampling.logprobs
        self.retries = 0  # retried requests since the worker started
        self._retried: Counter[str] = Counter()  # since the last drain_diagnostics, by reason
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def drain_diagnostics(self) -> dict[str, Any] | None:
        """Request retries since the last call, by reason (None: none); the dispatcher asks
        after every batch and writes them to events.jsonl and summary.json."""
        with self._lock:
            retried, self._retried = self._retried, Counter()
        if not retried:
            return None
        return {"request_retries": sum(retried.values()), "reasons": dict(retried)}

    def close(self) -> None:
        super().close()
        self._stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self._closed:
            return
        self._closed = True
        # Exchanges in flight are cancelled (their threads see the worker closed), then the
        # client's connections are closed and the loop stops.
        with contextlib.suppress(Exception):  # closing whatever became of the last exchanges
            asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(CANCEL_GRACE_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._io.join(CANCEL_GRACE_S)
        if not self._io.is_alive():
            self._loop.close()

    async def _shut(self) -> None:
        current = asyncio.current_task()
        exchanges = [task for task in asyncio.all_tasks() if task is not current]
        for task in exchanges:
            task.cancel()
        await asyncio.gather(*exchanges, return_exceptions=True)
        await self.client.aclose()

    # -- one request --------------------------------------------------------------------------
    def body(self, request: TrialRequest) -> dict[str, Any]:
        sampling = self.setup.sampling
        body: dict[str, Any] = {
            "model": self.settings.model,
            "n": 1,
            "seed": request.seed,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream": False,
        }
        if self.settings.endpoint == "chat":
            body["messages"] = self.setup.messages(request.question)
            if self.use_logprobs:
                body.update(logprobs=True, top_logprobs=0)
        else:
            prompt = self.setup.prompts[request.question]
            if self.setup.system_prompt:
                prompt = f"{self.setup.system_prompt}\n\n{prompt}"
            body["prompt"] = prompt
            if self.use_logprobs:
                body["logprobs"] = 0
        if sampling.ignore_eos:
            body["ignore_eos"] = True  # vLLM extension
        if self.settings.prompt_logprobs and sampling.prompt_logprobs:
            body["prompt_logprobs"] = 0  # vLLM extension
        body.update(self.settings.extra_body)
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        settings = self.settings
        # 2.0**60 s is past any backoff_max; 2**attempt past 1,023 was too large for a float.
        backoff = settings.backoff * 2.0 ** min(attempt, 60) * (1 + 0.1 * random.random())
        delay = min(backoff, settings.backoff_max)
        if retry_after is not None:
            # At least what the server asks for (``backoff_max`` bounds our own backoff only),
            # up to MAX_RETRY_AFTER_S: a server asking for hours is treated as asking for that.
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S))
        return float(delay)

    async def _read_body(self, response: Any, body: bytearray) -> None:
        """The response's body, read into ``body`` as it arrives: abandoned (retryable) once it
        is larger than ``max_response_bytes``."""
        cap = self.settings.max_response_bytes
        declared = str(response.headers.get("content-length") or "")
        if declared.isdigit() and int(declared) > cap:
            raise _Retryable(
                f"response of {int(declared):,} bytes is larger than max_response_bytes = {cap:,}",
                "response too large",
            )
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > cap:
                raise _Retryable(
                    f"response larger than max_response_bytes = {cap:,} (abandoned at "
                    f"{len(body):,} bytes)",
                    "response too large",
                )

    def _timed_out(self, received: int | None) -> _Retryable:
        got = (
            "its headers not yet complete"
            if received is None
            else f"{received:,} bytes of its body received"
        )
        return _Retryable(
            f"timed out: the answer took longer than timeout_s = {self.settings.timeout_s:g} s "
            f"({got})",
            "timeout",
        )

    async def _exchange(self, body: dict[str, Any]) -> tuple[int, float | None, bytearray]:
        """One attempt on the worker's event loop: (status, Retry-After, body), the whole
        exchange (connection, headers, body) within ``timeout_s`` however slowly the server
        sends any part of it."""
        httpx = self._httpx
        settings = self.settings
        content = bytearray()
        status: int | None = None
        try:
            async with asyncio.timeout(settings.timeout_s):
                async with self.client.stream("POST", settings.url, json=body) as response:
                    status = response.status_code
                    retry_after = _retry_after(response.headers.get("retry-after"))
                    await self._read_body(response, content)
        except TimeoutError:  # the deadline (asyncio.timeout), not a network operation's
            raise self._timed_out(None if status is None else len(content)) from None
        except httpx.TimeoutException as error:
            raise _Retryable(
                f"timed out after {settings.timeout_s:g} s ({type(error).__name__})", "timeout"
            ) from error
        except httpx.TransportError as error:
            raise _Retryable(
                f"connection error: {type(error).__name__}: {scrub(str(error))}",
                "connection error",
            ) from error
        return status, retry_after, content

    def _post_once(self, body: dict[str, Any]) -> Any:
        settings = self.settings
        exchange = asyncio.run_coroutine_threadsafe(self._exchange(body), self._loop)
        try:
            status, retry_after, content = exchange.result(settings.timeout_s + CANCEL_GRACE_S)
        except concurrent.futures.CancelledError:
            raise BackendError("request abandoned: the worker closed") from None
        except concurrent.futures.TimeoutError:
            exchange.cancel()  # the loop did not hand it back: never the case, bounded all the same
            raise self._timed_out(None) from None

        def text(most: int) -> str:
            # Scrubbed before it is cut, so a key the server echoes is never left in part.
            return scrub(content.decode("utf-8", errors="replace"))[:most]

        if status in RETRY_STATUS or status >= 500:
            raise _Retryable(f"HTTP {status}: {text(200)}", f"HTTP {status}", retry_after)
        if (
            status == 400
            and self.use_logprobs
            and b"logprob" in content.lower()
            and ("logprobs" in body or "top_logprobs" in body)
        ):
            with self._lock:
                self.use_logprobs = False  # this server offers no log-probs
            raise _LogprobsRejected(text(200))
        if status >= 400:
            raise BackendError(f"{settings.url}: HTTP {status}: {text(500)}")
        try:
            return json.loads(content)
        except ValueError as error:
            raise _Retryable(f"response is not JSON: {text(200)!r}", "not JSON") from error

    def request(self, request: TrialRequest, abort: threading.Event | None = None) -> Generated:
        settings = self.settings
        abort = abort or threading.Event()
        started = time.perf_counter()
        last = ""
        attempt = 0
        while True:
            if self._stop.is_set() or abort.is_set():
                raise BackendError(
                    "request abandoned: another request of the batch failed or the worker closed"
                )
            body = self.body(request)
            try:
                data = self._post_once(body)
                sample, extra = parse_response(
                    data,
                    settings.endpoint,
                    "logprobs" in body or "top_logprobs" in body,
                    source=settings.url,
                )
            except _LogprobsRejected:
                continue  # asked again at once, without log-probs; not a failed attempt
            except _Retryable as error:
                last = str(error)
                if attempt >= settings.max_retries:
                    break
                attempt += 1
                with self._lock:
                    self.retries += 1
                    self._retried[error.reason] += 1
                abort.wait(self._delay(attempt - 1, error.retry_after))
                continue
            extra["attempts"] = attempt + 1
            return Generated(
                GeneratedSample(
                    text=sample.text,
                    completion_tokens=sample.completion_tokens,
                    prompt_tokens=sample.prompt_tokens,
                    finish_reason=sample.finish_reason,
                    cumulative_logprob=sample.cumulative_logprob,
                    prompt_logprob_sum=sample.prompt_logprob_sum,
                    latency_s=time.perf_counter() - started,
                ),
                extra,
            )
        raise BackendError(
            f"{settings.url}: request for question "
            f"{self.setup.question_ids[request.question]!r} trial "
            f"{request.trial} failed {attempt + 1} times "
            f"(max_retries={settings.max_retries}); last: {last}"
        )

    def _gather(
        self, work: Callable[[TrialRequest, threading.Event], _T], requests: Sequence[TrialRequest]
    ) -> list[_T]:
        """Run ``work`` for every request on the pool; the first failure fails them all."""
        abort = threading.Event()
        futures = [self.pool.submit(work, request, abort) for request in requests]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f.done() and f.exception() is not None), None)
        if failed is not None:
            abort.set()
            for future in futures:
                future.cancel()
            error = failed.exception()
            assert error is not None
            if isinstance(error, BackendError):
                raise error
            raise BackendError(f"{type(error).__name__}: {error}") from error
        return [future.result() for future in futures]

    def generate(self, requests: Sequence[TrialRequest]) -> list[Generated]:
        return self._gather(self.request, requests)

    def generate_and_grade(
        self, requests: Sequence[TrialRequest], label: Any = None
    ) -> tuple[list[Generated], list[Future[Graded]], Window]:
        """Each response is graded as soon as it arrives, while other requests are in flight.

        The request pool (``max_concurrency`` threads) belongs to the worker, not the batch,
        and the actor runs every batch queued at it at once: the next batches' requests wait in
        the pool's queue and are sent the moment a slot frees, so ``max_concurrency`` requests
        stay in flight across batch boundaries (the queue is first in, first out, so an
        earlier batch's requests go first)."""

        def fetch(
            request: TrialRequest, abort: threading.Event
        ) -> tuple[Generated, Future[Graded]]:
            generated = self.request(request, abort)
            return generated, self.grade_async(request, generated)

        wall_start = time.time()
        started = time.perf_counter()
        done = self._gather(fetch, requests)
        generate_s = time.perf_counter() - started
        # This batch's share of the pool: its requests' seconds over the pool's slots.
        share = sum(g.sample.latency_s or 0.0 for g, _ in done) / self.settings.max_concurrency
        window = Window(wall_start, time.time(), generate_s, min(share, generate_s))
        return [g for g, _ in done], [f for _, f in done], window


@backends.register(
    "openai",
    traits=BackendTraits(
        module="httpx",
        install=INSTALL_HINT,
        packages=("math-verify", "httpx"),  # the grader's, the client's
        deployment="externally_managed",
        served=True,
    ),
)
def openai_backend(entry: ModelEntry, context: BackendContext) -> BackendPlan:
    options = Options(entry, context, "openai")
    base_url = options.string("base_url")
    if not base_url:
        raise InputError(
            "the openai backend needs options.base_url, e.g. http://127.0.0.1:8000/v1",
            source=context.source,
            field=f"{context.field}.options.base_url",
        )
    if not base_url.startswith(("http://", "https://")):
        raise options.error("base_url", f"must start with http:// or https://, got {base_url!r}")
    if "@" in urlsplit(base_url).netloc:
        # httpx would send Basic auth built from it, silently replacing a configured
        # Authorization header, and the URL is printed in messages: refused, never shown.
        remember(base_url)
        raise options.error(
            "base_url",
            "holds user-info (user:password@host); it is not shown. Give the credential in "
            "options.api_key_env or options.headers instead",
        )
    model = options.string("model") or entry.name
    if not model:
        raise InputError(
            "the openai backend needs options.model (the served model name) or a name",
            source=context.source,
            field=f"{context.field}.options.model",
        )
    api_key_env = options.string("api_key_env")
    if api_key_env and context.execution.ray_address is None and not os.environ.get(api_key_env):
        raise options.error("api_key_env", f"environment variable {api_key_env} is not set")
    headers = {str(k): str(v) for k, v in options.mapping("headers").items()}
    revision = options.string("revision")  # in the run's identity with the entry's options
    settings = OpenAISettings(
        entry_field=context.field,
        base_url=base_url,
        model=model,
        endpoint=options.string("endpoint", "chat", choices=("chat", "completions")) or "chat",
        api_key_env=api_key_env,
        max_concurrency=options.integer("max_concurrency", 8, minimum=1) or 8,
        timeout_s=float(
            options.number(
                "timeout_s", 600.0, minimum=0, exclusive_minimum=True, maximum=MAX_WAIT_S
            )
            or 600.0
        ),
        max_response_bytes=options.integer("max_response_bytes", 32 << 20, minimum=1024)
        or 32 << 20,
        max_retries=options.integer("max_retries", 5, minimum=0) or 0,
        backoff=float(options.number("backoff", 1.0, minimum=0, maximum=MAX_WAIT_S) or 0.0),
        backoff_max=float(
            options.number("backoff_max", 60.0, minimum=0, maximum=MAX_WAIT_S) or 0.0
        ),
        prompt_logprobs=bool(options.boolean("prompt_logprobs", False)),
        extra_body=options.mapping("extra_body"),
        headers=headers,
    )
    name = entry.name or model
    prepared = prepare_generation(entry, context, options, name)
    options.finish(known=BACKEND_OPTIONS)
    # The model's identity: what the server says it serves under the name (its /models card and
    # version), besides a stated revision; asked once the entry is known to be well-formed.
    auth = (
        {"Authorization": f"Bearer {key}"}
        if api_key_env and (key := os.environ.get(api_key_env))
        else {}
    )
    if auth:
        remember_secret(auth["Authorization"])  # and the bare key, scrubbed wherever echoed
    sent = {**headers, **auth}
    if any(REDACTED in str(value) for value in sent.values()):
        # A config copied from a run folder: the marker is no credential, and preflight refuses
        # the config (naming the field) before anything is sampled; nothing to ask the server.
        server = "card not asked: a credential is redacted"
    else:
        server = server_identity(
            base_url,
            model,
            sent,
            label=f"{context.field} ({name})",
            revision=revision,
            timeout=min(settings.timeout_s, TIMEOUT_S),
        )
    # Batches share the worker's request pool.
    return prepared.plan(
        entry,
        context,
        backend="openai",
        worker=OpenAIWorker,
        settings=settings,
        files={"server": server},
        describe=f"openai {model} at {base_url} ({settings.endpoint})",
        cpus=0.25,
        execution_options=OPENAI_EXECUTION_OPTIONS,
        reachable=partial(
            server_answers,
            base_url,
            sent,
            f"{context.field} ({name})",
            min(settings.timeout_s, TIMEOUT_S),
        ),
    )
