r"""A loopback OpenAI-compatible server that fails on purpose, for retry tests.

It answers ``POST /v1/chat/completions`` and ``POST /v1/completions`` (and ``GET /health``).
The first requests follow ``script``, one entry per request: an HTTP status to fail with (``429``,
``500``, ``503``, ...), ``"drop"`` (close the connection without an answer) or ``"hang"`` (wait
``hang_s`` before answering, to trip a client timeout); every later request gets a valid
completion. ``fail_forever`` fails every request with ``fail_status``; ``reject_logprobs``
answers 400 to a request that asks for log-probs (as servers without them do); ``choices`` > 1
answers with that many choices, as a server that ignores ``n=1`` would.

Hostile steps (issue 40): ``"echo-401"`` answers 401 "Incorrect API key provided: <key>" with the
bare key of the request's ``Authorization`` header and ``"echo-html"`` a 502 HTML page holding it
and every other header value, as gateways do; ``"trickle"`` sends a valid answer one byte every
``trickle_s`` seconds, and ``"trickle-headers"`` its status line and headers (``header_bytes`` of
them, padded) one byte every ``trickle_s`` seconds before the body at once (issue 48: an HTTP
client's read timeout restarts with every byte); ``trickle_get`` does the same to every ``GET``
answer (``/v1/models``, ``/version``); ``"huge"`` answers 200 with ``huge_bytes`` of body,
written as it goes (the server never holds it); a valid answer's ``usage`` is replaced by
``usage`` where given (``{"completion_tokens": 2**62}``), its ``model`` by ``served_model``, and
``suffix`` is added to every completion's text (terminal escapes, say).

``GET /v1/models`` lists the model as ``{"id": model, **card}`` (``card``: vLLM's ``root``,
``owned_by``, ``max_model_len``, ...; ``models=False`` answers 404 instead) and ``GET /version``
answers ``{"version": version}`` where ``version`` is set (else 404), as a vLLM server does;
both may be changed while the server runs.

A valid answer is a pure function of the request's seed and prompt, so a retried request gets the
same text: ``"<seed> ... \boxed{<answer>}"`` with ``answer`` from ``answers`` (question prompt ->
gold answer) when the prompt matches one, else the seed modulo 100. Log-probs are returned when
asked for (one entry per whitespace-separated word).

Bounded by design: it binds 127.0.0.1 only, on a free port, serves at most ``max_requests``
requests (later ones get 503), and :meth:`FlakyServer.close` (or leaving the ``with`` block)
stops it.

>>> with FlakyServer(script=[429]) as server:
...     server.url.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = int | str


def completion_text(seed: int, prompt: str, answers: Mapping[str, str]) -> str:
    answer = next((gold for key, gold in answers.items() if key in prompt), str(seed % 100))
    return f"Trial {seed}. The answer is \\boxed{{{answer}}}"


class FlakyServer:
    """The server; ``requests`` counts requests seen, ``failures`` those failed on purpose."""

    def __init__(
        self,
        script: Sequence[Step] = (),
        *,
        fail_forever: bool = False,
        fail_status: int = 500,
        hang_s: float = 2.0,
        retry_after: float | None = None,
        answers: Mapping[str, str] | None = None,
        max_requests: int = 10_000,
        model: str = "flaky",
        reject_logprobs: bool = False,
        choices: int = 1,
        card: Mapping[str, Any] | None = None,
        models: bool = True,
        version: str | None = None,
        trickle_s: float = 0.2,
        huge_bytes: int = 50 << 20,
        usage: Any = None,
        served_model: str | None = None,
        suffix: str = "",
        header_bytes: int = 100,
        trickle_get: bool = False,
    ) -> None:
        self.suffix = suffix
        self.header_bytes = header_bytes
        self.trickle_get = trickle_get
        self.trickle_s = trickle_s
        self.huge_bytes = huge_bytes
        self.usage = usage
        self.served_model = served_model
        self.choices = choices
        self.card = dict(card or {})
        self.models = models
        self.version = version
        self.script = list(script)
        self.fail_forever = fail_forever
        self.fail_status = fail_status
        self.hang_s = hang_s
        self.retry_after = retry_after
        self.answers = dict(answers or {})
        self.max_requests = max_requests
        self.model = model
        self.reject_logprobs = reject_logprobs
        self.requests = 0
        self.failures = 0
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="flaky-server",
        )
        self.thread.start()

    def next_step(self, body: dict[str, Any], headers: Mapping[str, str]) -> Step | None:
        """What to do with the next request: a failure step, or None to answer."""
        with self._lock:
            index = self.requests
            self.requests += 1
            self.bodies.append(body)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            if index >= self.max_requests:
                self.failures += 1
                return 503
            if self.fail_forever:
                self.failures += 1
                return self.fail_status
            if index < len(self.script):
                self.failures += 1
                return self.script[index]
            return None

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(timeout=5)

    def __enter__(self) -> FlakyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prompt_text(body: dict[str, Any], chat: bool) -> str:
    if not chat:
        return str(body.get("prompt", ""))
    messages = body.get("messages") or []
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left: expected here


def _response(body: dict[str, Any], chat: bool, text: str, model: str) -> dict[str, Any]:
    words = text.split(" ")
    want_logprobs = body.get("logprobs") is not None and body.get("logprobs") is not False
    prompt = _prompt_text(body, chat)
    prompt_tokens = max(1, len(prompt.split()))
    logprobs_value = [-0.5 - 0.01 * i for i in range(len(words))]
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
        if want_logprobs:
            choice["logprobs"] = {
                "content": [
                    {"token": w, "logprob": lp, "bytes": list(w.encode()), "top_logprobs": []}
                    for w, lp in zip(words, logprobs_value, strict=True)
                ]
            }
    else:
        choice["text"] = text
        if want_logprobs:
            choice["logprobs"] = {
                "tokens": words,
                "token_logprobs": logprobs_value,
                "top_logprobs": None,
                "text_offset": [],
            }
    out: dict[str, Any] = {
        "id": f"flaky-{body.get('seed')}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words),
            "total_tokens": prompt_tokens + len(words),
        },
    }
    if body.get("prompt_logprobs") is not None:  # where vLLM puts them
        entries = [None] + [{"7": {"logprob": -1.0, "rank": 1, "decoded_token": "x"}}] * (
            prompt_tokens - 1
        )
        (out if chat else choice)["prompt_logprobs"] = entries
    return out


class _Handler(BaseHTTPRequestHandler):
    server_state: FlakyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(
        self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        if self.command == "GET" and self.server_state.trickle_get:
            self._trickle_headers(status, data)
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        state = self.server_state
        if self.path == "/health" or (self.path == "/v1/models" and state.models):
            card = {"id": state.model, "object": "model", "created": int(time.time()), **state.card}
            self._send(200, {"object": "list", "data": [card]})
        elif self.path == "/version" and state.version is not None:
            self._send(200, {"version": state.version})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        state = self.server_state
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        chat = self.path.endswith("/chat/completions")
        if not chat and not self.path.endswith("/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        step = state.next_step(body, dict(self.headers.items()))
        if step is None and state.reject_logprobs and body.get("logprobs") is not None:
            self._send(400, {"error": {"message": "logprobs are not supported by this server"}})
            return
        if step == "drop":
            self.close_connection = True
            self.connection.close()
            return
        if step == "hang":
            state._closed.wait(state.hang_s)
            step = None
        if step in ("echo-401", "echo-html"):
            self._echo(str(step))
            return
        if step == "huge":
            self._huge(state.huge_bytes)
            return
        trickle = step == "trickle"
        trickle_headers = step == "trickle-headers"
        if trickle or trickle_headers:
            step = None
        if isinstance(step, int):
            headers = {}
            if state.retry_after is not None:
                headers["Retry-After"] = f"{state.retry_after:g}"
            self._send(
                step,
                {
                    "error": {
                        "message": f"flaky server: failing with {step} on purpose",
                        "code": step,
                    }
                },
                headers,
            )
            return
        prompt = _prompt_text(body, chat)
        seed = int(body.get("seed") or 0)
        text = completion_text(seed, prompt, state.answers) + state.suffix
        answer = _response(body, chat, text, state.model)
        answer["choices"] = [{**answer["choices"][0], "index": i} for i in range(state.choices)]
        if state.usage is not None:
            answer["usage"] = state.usage
        if state.served_model is not None:
            answer["model"] = state.served_model
        if trickle:
            self._trickle(answer)
            return
        if trickle_headers:
            self._trickle_headers(200, json.dumps(answer).encode())
            return
        self._send(200, answer)

    def _echo(self, step: str) -> None:
        """A gateway's error holding the credentials it was sent."""
        bearer = self.headers.get("Authorization") or ""
        key = bearer.removeprefix("Bearer ").strip()
        if step == "echo-401":
            message = f"Incorrect API key provided: {key}. You can find your API key at ..."
            self._send(401, {"error": {"message": message, "code": "invalid_api_key"}})
            return
        values = " ".join(f"<li>{k}: {v}</li>" for k, v in self.headers.items())
        page = f"<html><body><h1>502 Bad Gateway</h1><p>key {key}</p><ul>{values}</ul></body>"
        data = page.encode()
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.flush()
        state = self.server_state
        for i in range(len(data)):
            if state._closed.wait(state.trickle_s):
                return
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:
                return  # the client gave up

    def _trickle_headers(self, status: int, data: bytes) -> None:
        """The status line and headers, ``header_bytes`` in all (an ``X-Pad`` header fills
        them up), one byte every ``trickle_s`` seconds; then ``data`` at once."""
        state = self.server_state
        head = (
            f"HTTP/1.1 {status} {self.responses[status][0]}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n"
        )
        pad = max(0, state.header_bytes - len(head) - len("X-Pad: \r\n\r\n"))
        block = f"{head}X-Pad: {'a' * pad}\r\n\r\n".encode()
        try:
            for i in range(len(block)):
                if state._closed.wait(state.trickle_s):
                    return
                self.wfile.write(block[i : i + 1])
                self.wfile.flush()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client gave up

    def _huge(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")  # no Content-Length to refuse it by
        self.end_headers()
        block = b'{"pad": "' + b"x" * (1 << 20)
        sent = 0
        try:
            while sent < size:
                chunk = block[: min(len(block), size - sent)]
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return  # the client gave up, as it should


def main() -> None:
    """``python -m adaptive_eval._testing.flaky_server [K]``: serve, failing the first K requests
    with 429/500 alternately, until Ctrl-C."""
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with FlakyServer(script=[429 if i % 2 == 0 else 500 for i in range(count)]) as server:
        print(server.url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
