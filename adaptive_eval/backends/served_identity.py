"""What an OpenAI-compatible server says it serves: part of an ``openai`` model's identity.

A server's weights cannot be hashed from here, but it says what it serves. When a campaign is
planned, :func:`server_identity` asks the server

- ``GET {base_url}/models``: the entry whose ``id`` is the served model name, its ``id``,
  ``root`` (vLLM: the path or hub name the weights were loaded from), ``parent`` (vLLM: a LoRA
  adapter's base model), ``owned_by`` and ``max_model_len`` where given;
- ``GET /version`` at the server's root, outside ``/v1`` (vLLM: ``{"version": "0.6.3"}``), where
  it answers,

and describes the answer in one line (``id tiny; root /models/a; owned_by vllm; max_model_len
256; version 0.6.3``), which joins the model's identity (``files.server``: library cells, the
run's fingerprint). So a server now serving other weights under the same name (another
``root``, another vLLM version) gives new cells and nothing sampled from the old model is reused;
the library names the change in one line. A server that does not answer ``/models`` (or does not
list the name) is described as ``card not reported``, and one line on stderr says, once per
process, that the model's identity then rests on its stated ``revision`` (or its name) alone.

A card that could not be read is no identity: a run planned while ``/models`` failed once, and
resumed once it answers (or the reverse), is the same campaign (:func:`reconcile_servers`); a
resume is refused only where both reports name a different model (its ``id``, ``root`` or
``parent``: :data:`IDENTITY_FIELDS`), and the refusal says which. What was reported is kept.

What this cannot see: weights replaced in place at the same ``root`` behind an unchanged server
version. ``options.revision``, stated by the user, covers that.

Only the standard library is used (the driver need not have httpx); the server's values are
untrusted text: control characters are escaped, ``;`` is replaced and each is cut to
:data:`MAX_VALUE` characters. Each query has one deadline for the whole exchange, headers
included (:class:`_Deadline`): a socket timeout restarts with every byte, so a server sending its
headers a byte a second held planning 165 s on an 83-byte answer (issue 48).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from adaptive_eval.base.errors import printable

#: The fields of a ``/models`` entry that are part of the identity (``created`` is not: vLLM
#: sets it to the time of the request).
CARD_FIELDS = ("id", "root", "parent", "owned_by", "max_model_len")
#: Seconds to wait for each query (a campaign's requests use their own ``timeout_s``).
TIMEOUT_S = 10.0
#: Largest answer read (OpenAI's own list of every model is ~100 KB).
MAX_BYTES = 8 << 20
MAX_VALUE = 200
NOT_REPORTED = "card not reported"
#: The card's fields that name the weights served: only a difference in one of them refuses a
#: resume (another ``owned_by``, ``max_model_len`` or server version does not).
IDENTITY_FIELDS = ("id", "root", "parent")
_said: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class ServerReport:
    """What the server answered: the model's ``/models`` entry (or None and why not) and its
    ``/version`` (None where it did not answer)."""

    card: dict[str, str] | None
    version: str | None
    problem: str | None = None

    def describe(self) -> str:
        if self.card is None:
            parts = [NOT_REPORTED]
        else:
            parts = [f"{key} {self.card[key]}" for key in CARD_FIELDS if key in self.card]
        parts.append(f"version {self.version or 'none'}")
        return "; ".join(parts)


def _clean(value: Any) -> str:
    return printable(str(value)).replace(";", ",")[:MAX_VALUE]


def reported_card(description: str) -> dict[str, str] | None:
    """The card fields in a description made by :meth:`ServerReport.describe`; None where the
    server reported none (``card not reported``, ``card not asked: ...``).

    >>> reported_card("id tiny; root /models/a; version 0.6.3")
    {'id': 'tiny', 'root': '/models/a', 'version': '0.6.3'}
    >>> reported_card("card not reported; version none") is None
    True
    """
    if description.startswith("card not"):
        return None
    card: dict[str, str] = {}
    for part in description.split("; "):
        key, _, value = part.partition(" ")
        card[key] = value
    return card


def server_change(old: str, new: str) -> str | None:
    """What makes two descriptions of the server's model another model (its ``id``, ``root``
    or ``parent`` differ), in words; None where they may be the same one, including where
    either server reported no card (an unreachable card is not an identity).

    >>> server_change("id m; root /a; version 1", "id m; root /b; version 2")
    "the server now serves root '/b' where it served '/a'"
    >>> server_change("card not reported; version none", "id m; root /a; version 1") is None
    True
    """
    before, after = reported_card(old), reported_card(new)
    if before is None or after is None:
        return None
    changed = [
        f"{key} {after.get(key)!r} where it served {before.get(key)!r}"
        for key in IDENTITY_FIELDS
        if before.get(key) != after.get(key)
    ]
    return f"the server now serves {', '.join(changed)}" if changed else None


def reconcile_servers(
    stored: Any, identity: dict[str, Any]
) -> tuple[Any, dict[str, Any], list[str]]:
    """A stored identity and a campaign's (``files[i].server`` per entry) made to agree
    wherever the two server reports may describe the same model, both keeping the report that
    names a card (the stored one where both do); and a line per entry whose server serves
    another model (both left as they are). Identities without ``files`` lists of one length are
    returned unchanged."""
    old_files = stored.get("files") if isinstance(stored, dict) else None
    new_files = identity.get("files")
    if not isinstance(old_files, list) or not isinstance(new_files, list):
        return stored, identity, []
    if len(old_files) != len(new_files):
        return stored, identity, []
    old_kept: list[Any] = []
    new_kept: list[Any] = []
    changes: list[str] = []
    for index, (old, new) in enumerate(zip(old_files, new_files, strict=True)):
        before = old.get("server") if isinstance(old, dict) else None
        after = new.get("server") if isinstance(new, dict) else None
        if not isinstance(before, str) or not isinstance(after, str) or before == after:
            old_kept.append(old)
            new_kept.append(new)
            continue
        change = server_change(before, after)
        if change is not None:
            changes.append(f"files[{index}].server: {change}")
            old_kept.append(old)
            new_kept.append(new)
        else:
            kept = after if reported_card(before) is None else before
            old_kept.append({**old, "server": kept})
            new_kept.append({**new, "server": kept})
    return {**stored, "files": old_kept}, {**identity, "files": new_kept}, changes


def version_url(base_url: str) -> str:
    """vLLM's ``/version``: beside ``/v1`` (``http://h:8000/v1`` -> ``http://h:8000/version``),
    or at the server's root where the base URL does not end in ``/v1``."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else ""
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/version", "", ""))


class _NoAnswer(Exception):
    """The server could not be reached at all (no point asking it anything else)."""


class _Deadline:
    """One query's deadline, kept on its connections: when it passes, a timer shuts down every
    socket the query opened (a redirect opens another), which ends a read blocked on a server
    that sends a byte now and then. A socket's own timeout restarts with every byte, so it
    cannot bound the whole. Each socket is watched through a duplicate of its descriptor, so
    shutting it down never touches a descriptor the system has since handed to someone else."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._watched: list[socket.socket] = []
        self._lock = threading.Lock()
        self.passed = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return max(self._end - time.monotonic(), 0.001)

    def watch(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            try:
                twin = sock.dup()
            except OSError:
                return sock
            self._watched.append(twin)
            if self.passed:
                _shut(twin)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            for twin in self._watched:
                _shut(twin)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for twin in self._watched:
                twin.close()
            self._watched.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the other side
        sock.shutdown(socket.SHUT_RDWR)


def _watched_handler(base: type[urllib.request.AbstractHTTPHandler], deadline: _Deadline) -> Any:
    """``base`` (urllib's HTTP or HTTPS handler) whose connections connect within what is left
    of ``deadline`` and are watched by it from the moment their socket exists (before TLS)."""

    class Handler(base):  # type: ignore[valid-type,misc]
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            class Watched(http_class):  # type: ignore[valid-type,misc]
                _create_connection: Callable[..., socket.socket]  # http.client's, per connection

                def connect(self) -> None:
                    self.timeout = deadline.remaining()
                    create = self._create_connection

                    def watched(*args: Any, **kw: Any) -> socket.socket:
                        return deadline.watch(create(*args, **kw))

                    self._create_connection = watched
                    super().connect()

            return super().do_open(Watched, req, **kwargs)

    return Handler()


def _get(url: str, headers: Mapping[str, str], timeout: float) -> Any:
    """The JSON answer to ``GET url`` within ``timeout`` seconds in all; ValueError for an
    answer that is not one (an HTTP error, not JSON, too large); :class:`_NoAnswer` where
    nothing answered, or not within the deadline."""
    request = urllib.request.Request(url, headers=dict(headers), method="GET")
    deadline = _Deadline(timeout)
    opener = urllib.request.build_opener(
        _watched_handler(urllib.request.HTTPHandler, deadline),
        _watched_handler(urllib.request.HTTPSHandler, deadline),
    )
    try:
        with opener.open(request, timeout=timeout) as response:
            data = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as error:
        if deadline.passed:
            raise _NoAnswer(f"no answer within {timeout:g} s") from None
        raise ValueError(f"HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        if deadline.passed:  # whatever the shut socket made of it
            raise _NoAnswer(f"no answer within {timeout:g} s") from None
        reason = getattr(error, "reason", None) or error
        raise _NoAnswer(f"no answer: {_clean(reason)}") from None
    except ValueError:  # an SSL socket read after it was shut, say
        if deadline.passed:
            raise _NoAnswer(f"no answer within {timeout:g} s") from None
        raise
    finally:
        deadline.close()
    if deadline.passed:  # a body cut short can still end in a complete read
        raise _NoAnswer(f"no answer within {timeout:g} s")
    if len(data) > MAX_BYTES:
        raise ValueError(f"answer larger than {MAX_BYTES >> 20} MiB")
    try:
        return json.loads(data)
    except ValueError:
        raise ValueError("answer is not JSON") from None


def query_server(
    base_url: str, model: str, headers: Mapping[str, str], timeout: float = TIMEOUT_S
) -> ServerReport:
    """Ask the server what it serves under ``model``; never raises for what the server does."""
    card: dict[str, str] | None = None
    problem: str | None = None
    try:
        listing = _get(f"{base_url.rstrip('/')}/models", headers, timeout)
    except _NoAnswer as error:
        return ServerReport(None, None, f"GET /models: {error}")
    except ValueError as error:
        problem = f"GET /models: {error}"
    else:
        entries = listing.get("data") if isinstance(listing, dict) else None
        found = next(
            (e for e in entries or () if isinstance(e, dict) and e.get("id") == model), None
        )
        if found is None:
            problem = (
                f"its /models does not list {_clean(model)!r}"
                if isinstance(entries, list)
                else "GET /models: no 'data' list in the answer"
            )
        else:
            card = {
                key: _clean(found[key])
                for key in CARD_FIELDS
                if isinstance(found.get(key), str | int) and not isinstance(found[key], bool)
            }
    try:
        answer = _get(version_url(base_url), headers, timeout)
    except (_NoAnswer, ValueError):
        answer = None
    version = answer.get("version") if isinstance(answer, dict) else None
    return ServerReport(card, _clean(version) if isinstance(version, str) else None, problem)


#: Tries, and seconds between them, before a server that does not answer is reported down.
ANSWER_TRIES = 3
ANSWER_PAUSE_S = 1.0


def server_answers(
    base_url: str, headers: Mapping[str, str], label: str, timeout: float = TIMEOUT_S
) -> str | None:
    """None where the server answers ``GET /models`` at all (any HTTP status is an answer),
    else one line naming it: checked before the workers start, so that a server down for the
    whole run fails it at once instead of after every request's retries."""
    last: _NoAnswer | None = None
    for attempt in range(ANSWER_TRIES):
        if attempt:
            time.sleep(ANSWER_PAUSE_S)
        try:
            _get(f"{base_url.rstrip('/')}/models", headers, timeout)
        except ValueError:
            return None  # it answered, if not with a listing
        except _NoAnswer as error:
            last = error
        else:
            return None
    return (
        f"{label}: the server at {printable(base_url)} does not answer ({last}; tried "
        f"{ANSWER_TRIES} times); start it, or correct options.base_url"
    )


def server_identity(
    base_url: str,
    model: str,
    headers: Mapping[str, str],
    *,
    label: str,
    revision: str | None,
    timeout: float = TIMEOUT_S,
) -> str:
    """The server's description for the model's identity; where it reports no card, one line
    on stderr (once per process for the server and model) says what the identity rests on.
    ``label`` names the entry (``models[0] (srv)``)."""
    report = query_server(base_url, model, headers, timeout)
    if report.card is None and (base_url, model) not in _said:
        _said.add((base_url, model))
        rests = (
            f"its stated revision {printable(revision)!r} and the name {printable(model)!r}"
            if revision is not None
            else f"the served model name {printable(model)!r} (state options.revision, and "
            "change it when the weights behind the name change)"
        )
        besides = f" and the server version {report.version}" if report.version else ""
        print(
            f"{label}: the server at {printable(base_url)} reports no model card "
            f"({report.problem}); the model's identity rests on {rests}{besides} only",
            file=sys.stderr,
            flush=True,
        )
    return report.describe()


__all__ = [
    "CARD_FIELDS",
    "IDENTITY_FIELDS",
    "ServerReport",
    "query_server",
    "reconcile_servers",
    "reported_card",
    "server_answers",
    "server_change",
    "server_identity",
    "version_url",
]
