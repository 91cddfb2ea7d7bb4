"""Credentials never reach a file or the console.

A config may carry a credential: an HTTP header (``Authorization``, ``x-api-key``), an option
(``api_key``, ``hf_token``, ``password``), a password in a URL (``https://user:pw@host``), a
``Bearer ...`` value. Wherever the config is persisted (``RUN/config.yaml``) or printed
(``validate``, error messages, logs), such values are replaced by :data:`REDACTED`. The run's
identity (its fingerprint, kept in the store) leaves them out, so a rotated key resumes the same
campaign and the store never holds one.

Which keys hold a credential is decided by their words (``x-api-key`` -> x, api, key): any key
with a credential word in it (``token``, ``secret``, ``password``, ``key``, ``auth``,
``cookie``, ...; ``extra_body.user_token`` was stored in plain text when only ``token`` after
``auth``, ``hf``, ... counted). Counts, descriptions and names are not credentials:
``max_tokens`` (plural), ``key`` alone (an npz array name), keys whose last word points at or
describes one (``api_key_env``, ``token_file``, ``auth_type``), a tokenizer's ``eos_token``.

HTTP headers are judged by a list of safe names instead: every value under a ``headers`` mapping
is a credential (``api-subscription``, ``X-Access`` were stored in plain text when names
decided) unless its header is listed in :data:`SAFE_HEADERS` (``Content-Type``, ``Accept``,
tracing ids). Values a process reads at run time (an API key from the environment named by
``api_key_env``, a URL's user-info) are noted with :func:`remember_secret`, so that a server
echoing the bare key in an error or a page never reaches the console or a file.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

#: Words that make a key a credential's wherever they stand in it (``user_token``,
#: ``extra_body.session_secret``, ``x-api-key``): a list of credential words, not of keys.
_CREDENTIAL_WORDS = frozenset(
    {
        *("token", "secret", "secrets", "password", "passwd", "passphrase", "pwd", "pin"),
        *("key", "apikey", "privatekey", "accesskey", "secretkey", "jwt", "otp"),
        *("auth", "authorization", "credential", "credentials", "cookie", "cookies"),
        *("bearer", "signature", "sessionid", "sas"),
    }
)
#: The same words glued to others (``usertoken``, ``xapikey``).
_CREDENTIAL_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "privatekey")
#: Last words of keys that describe or point at a credential rather than hold it
#: (``api_key_env``, ``token_file``, ``auth_type``, ``stop_token_ids``, ``key_size``).
_POINTERS = frozenset(
    {
        *("env", "var", "file", "path", "name", "header", "id", "ids", "url", "uri"),
        *("type", "kind", "mode", "method", "scheme", "format", "prefix", "field"),
        *("count", "size", "length", "limit", "timeout", "enabled", "required", "version"),
    }
)
#: Words before ``token`` that make it a tokenizer's token, not a credential (``eos_token``).
_TOKEN_NAMES = frozenset(
    {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "start", "end", "stop"}
    | {"max", "min", "num", "image", "audio", "video"}
)
#: Header names whose values are not credentials (compared lower-case); every other header's
#: value is one.
SAFE_HEADERS = frozenset(
    {
        *("content-type", "accept", "accept-encoding", "accept-language", "user-agent"),
        *("x-request-id", "x-trace", "x-trace-id", "traceparent", "tracestate"),
        *("openai-beta", "cache-control"),
    }
)
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
#: A URL's user-info (``user:password@``, or a bare key as ``key@``), redacted whole.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
_URL_USERINFO = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://([^/\s@]+)@")
_BEARER = re.compile(r"\b(Bearer)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)

#: Credential values seen in configs loaded by this process, scrubbed from any text printed.
_known: set[str] = set()


def _words(key: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", _CAMEL.sub(r"\1_\2", key).lower())


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential: any credential word in it (token, secret,
    password, key, auth, ...), unless its last word says it describes or points at one.

    >>> [is_secret_key(k) for k in ("Authorization", "x-api-key", "hf_token", "max_tokens")]
    [True, True, True, False]
    >>> [is_secret_key(k) for k in ("api_key_env", "key", "tokens_median", "password")]
    [False, False, False, True]
    >>> [is_secret_key(k) for k in ("user_token", "usertoken", "cache_key", "eos_token_id")]
    [True, True, True, False]
    """
    words = _words(key)
    if not words or words[-1] in _POINTERS or words == ["key"]:
        return False
    for before, word in zip([None, *words], words, strict=False):
        if word == "token" and before in _TOKEN_NAMES:
            continue
        if word in _CREDENTIAL_WORDS or word.endswith(_CREDENTIAL_ENDINGS):
            return True
    return False


def _is_secret(key: str, in_headers: bool) -> bool:
    """Whether the value under ``key`` is a credential; ``in_headers``: ``key`` names an HTTP
    header (a key of a ``headers`` mapping), a credential unless listed safe."""
    if in_headers:
        return key.strip().lower() not in SAFE_HEADERS
    return is_secret_key(key)


def _secret_text(value: str) -> str:
    """``value`` with a URL's password or a ``Bearer`` credential in it redacted."""
    value = _URL_PASSWORD.sub(rf"\1{REDACTED}@", value)
    return _BEARER.sub(rf"\1 {REDACTED}", value)


def redact(data: Any) -> Any:
    """A copy of ``data`` (mappings, lists, scalars) with every credential replaced by
    :data:`REDACTED`: values under a secret key, URL passwords, ``Bearer`` values."""
    return _cleaned(data, drop_keys=False)


def without_secrets(data: Any) -> Any:
    """A copy of ``data`` with credential keys left out and credentials in values redacted:
    what a run's identity is made of, so that its fingerprint never depends on a key."""
    return _cleaned(data, drop_keys=True)


def _cleaned(data: Any, drop_keys: bool, in_headers: bool = False) -> Any:
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if not _is_secret(str(key), in_headers):
                out[key] = _cleaned(value, drop_keys, str(key).lower() == "headers")
            elif not drop_keys:
                out[key] = None if value is None else REDACTED
        return out
    if isinstance(data, list):
        return [_cleaned(item, drop_keys) for item in data]
    if isinstance(data, str):
        return _secret_text(data)
    return data


def remember_secret(value: object) -> None:
    """Note one credential value (an API key read from the environment, a URL's password), so
    that :func:`scrub` removes it, and each long word of it, from any text this process
    writes. Values shorter than 4 characters are not noted (they would redact ordinary text)."""
    text = str(value)
    if len(text) >= 4:
        _known.add(text)
        _known.update(part for part in text.split() if len(part) >= 8)


def remember(data: Any, in_headers: bool = False) -> None:
    """Note the credentials in a config mapping (values under credential keys, every header
    value not listed safe, URL passwords), so :func:`scrub` removes them from any text."""
    if isinstance(data, dict):
        for key, value in data.items():
            if _is_secret(str(key), in_headers) and isinstance(value, str | int):
                # A header that is no credential by name is noted only when long enough to be
                # one, so that a short value ("json", a region) is not scrubbed from all text.
                if is_secret_key(str(key)) or len(str(value)) >= 8:
                    remember_secret(value)
            else:
                remember(value, str(key).lower() == "headers")
    elif isinstance(data, list):
        for item in data:
            remember(item)
    elif isinstance(data, str):
        for match in _URL_USERINFO.finditer(data):
            user, _, password = match.group(1).partition(":")
            for part in (password, user if len(user) >= 8 else ""):
                remember_secret(part)


def scrub(text: str) -> str:
    """``text`` with every remembered credential, URL password and ``Bearer`` value redacted."""
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _secret_text(text)


def redacted_fields(data: Any, path: str = "") -> list[str]:
    """Dotted paths of values that are :data:`REDACTED` (a config copied from a run folder)."""
    if isinstance(data, dict):
        found: list[str] = []
        for key, value in data.items():
            found += redacted_fields(value, f"{path}.{key}" if path else str(key))
        return found
    if isinstance(data, list):
        return [f for i, item in enumerate(data) for f in redacted_fields(item, f"{path}[{i}]")]
    return [path] if isinstance(data, str) and REDACTED in data else []


__all__ = [
    "REDACTED",
    "SAFE_HEADERS",
    "is_secret_key",
    "redact",
    "redacted_fields",
    "remember",
    "remember_secret",
    "scrub",
    "without_secrets",
]
