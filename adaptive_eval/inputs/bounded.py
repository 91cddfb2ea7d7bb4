"""Input files are read only when they are regular files, and never past a bound.

``validate --set 'models[0].path=/dev/zero'`` used to hang at 9.7 GB of memory: a device, a
named pipe or a socket has no end, and a file of any size was read whole before it was parsed.
Every reader of a user's file (the config, scenario / replay / prior npz files, datasets, chat
templates, imported harness logs, the members of a zip) goes through :func:`check` first: a
folder, a device, a pipe or a socket is refused, and so is a file larger than what that kind of
input may be, each in one line naming the file. Standard library only.

Numbers have bounds too (issue 48): Python converts at most 4,300 digits of an integer, and a
5,000-digit one in a config ended "unexpected error: ValueError: Exceeds the limit (4300
digits)", raised inside the parser. The config's YAML reader refuses an integer of more than
:data:`MAX_INT_DIGITS` digits before it is built (:mod:`adaptive_eval.config.reader`), and
:func:`parse_json` does so for JSON, with what else JSON's parser takes silently or chokes on:
``NaN`` and ``Infinity`` (not JSON), a number past the float range (``1e999`` becomes
infinity), nesting too deep for its recursion.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from adaptive_eval.base.errors import InputError, printable

#: The most read of each kind of input (far above real use; a value past it is a mistake).
MAX_CONFIG_BYTES = 4 << 20
MAX_TEXT_BYTES = 1 << 30  # datasets, harness logs, chat templates
MAX_ARRAY_BYTES = 4 << 30  # an npz's arrays, uncompressed, all together
MAX_MEMBER_BYTES = 64 << 20  # one sample (or header) of an inspect_ai .eval zip
#: The most digits an integer in an input may be written with: a seed, a count or a bound needs
#: at most 20, and Python refuses to convert more than 4,300 (a ValueError inside the parser).
MAX_INT_DIGITS = 100


def size_text(count: int) -> str:
    """``count`` bytes for a person: "312 MB".

    >>> size_text(300 << 20), size_text(2048), size_text(5 << 30)
    ('300 MB', '2 KB', '5.0 GB')
    """
    if count >= 1 << 30:
        return f"{count / (1 << 30):.1f} GB"
    if count >= 1 << 20:
        return f"{count / (1 << 20):.0f} MB"
    return f"{max(count, 0) / 1024:.0f} KB"


def kind_of(mode: int) -> str | None:
    """What a non-regular, non-folder file is ("a device", ...), None for a file or folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check(
    path: str | Path,
    *,
    limit: int,
    what: str = "file",
    source: str | None = None,
    field: str | None = None,
) -> int:
    """The size of ``path`` once it is known to be a regular file of at most ``limit`` bytes;
    else an :class:`InputError` naming it (``source``/``field`` default to the path itself)."""
    where = source or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"cannot read {what}: file not found", source=where, field=field) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise InputError(f"cannot read {what}: {reason}", source=where, field=field) from None
    shown = f"{path} " if source and source != str(path) else ""
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"cannot read {what}: {shown}is a folder", source=where, field=field)
    kind = kind_of(info.st_mode)
    if kind is not None:
        raise InputError(
            f"cannot read {what}: {shown}is {kind}, not a regular file (it could be endless); "
            "give a file",
            source=where,
            field=field,
        )
    if info.st_size > limit:
        raise InputError(
            f"{shown}is {size_text(info.st_size)}, more than the {size_text(limit)} a {what} "
            "may be",
            source=where,
            field=field,
        )
    return info.st_size


def read_bytes(
    path: str | Path,
    *,
    limit: int,
    what: str = "file",
    source: str | None = None,
    field: str | None = None,
) -> bytes:
    """The bytes of ``path`` after :func:`check`, never more than ``limit`` (a file that grows
    while it is read is refused too)."""
    check(path, limit=limit, what=what, source=source, field=field)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        reason = error.strerror or str(error)
        raise InputError(
            f"cannot read {what}: {reason}", source=source or str(path), field=field
        ) from None
    if len(data) > limit:
        raise InputError(
            f"grew past {size_text(limit)} while it was read", source=source or str(path)
        )
    return data


def not_a_device(path: str | Path, *, source: str, field: str) -> None:
    """Refuse a config value naming a device, a pipe or a socket (files and folders pass: what
    a backend wants is its own check), naming the config file and the field."""
    try:
        info = os.stat(path)
    except OSError:
        return  # missing or unreadable: the backend's reader says so
    kind = kind_of(info.st_mode)
    if kind is not None:
        raise InputError(
            f"{path} is {kind}, not a file or a folder (it could be endless); give a file",
            source=source,
            field=field,
        )


def int_digits(text: str) -> int:
    """The digits an integer is written with: its sign, ``_`` and ``:`` (YAML 1.1's base 60)
    and a ``0x``/``0o``/``0b`` prefix not counted.

    >>> int_digits("-1_000"), int_digits("0xff"), int_digits("190:20:30")
    (4, 2, 7)
    """
    body = text.strip().lstrip("+-").replace("_", "").replace(":", "")
    return len(body[2:] if body[:2].lower() in ("0x", "0o", "0b") else body)


def shown_number(text: str, keep: int = 20) -> str:
    """A number as written, for an error line: a long one by its first ``keep`` and last five
    characters and its length.

    >>> shown_number("1" * 5000)
    '11111111111111111111...11111 (5,000 characters)'
    """
    if len(text) <= keep + 10:
        return printable(text)
    return f"{printable(text[:keep])}...{printable(text[-5:])} ({len(text):,} characters)"


class _Refused(Exception):
    """A value :func:`parse_json` refuses (its hooks' way out of :func:`json.loads`)."""


def _integer(text: str) -> int:
    digits = int_digits(text)
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"an integer of {digits:,} digits, more than the {MAX_INT_DIGITS} a number in an "
            f"input may have: {shown_number(text)}"
        )
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{shown_number(text)} is past the largest number (about 1.8e308)")
    return value


def _constant(text: str) -> float:
    raise _Refused(f"{text} is not a number (JSON has no NaN or Infinity)")


def parse_json(
    data: str | bytes, *, source: str, field: str | None = None, finite: bool = True
) -> Any:
    """``data`` parsed as JSON, every fault one :class:`InputError` naming ``source`` (the
    file, or ``file:line`` for a line of a JSON Lines file) and ``field``: not JSON (at which
    line and column), an integer of more than :data:`MAX_INT_DIGITS` digits, nesting too deep
    to read, and unless ``finite`` is false ``NaN``, ``Infinity`` or a number past the float
    range (``1e999``).

    >>> parse_json('{"a": [1, 2.5e3]}', source="x.json")
    {'a': [1, 2500.0]}
    """
    hooks: dict[str, Any] = {"parse_int": _integer}
    if finite:
        hooks.update(parse_float=_finite, parse_constant=_constant)
    try:
        return json.loads(data, **hooks)
    except _Refused as error:
        raise InputError(str(error), source=source, field=field) from None
    except json.JSONDecodeError as error:
        raise InputError(
            f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}",
            source=source,
            field=field,
        ) from None
    except RecursionError:  # json's parser recurses: a document nested thousands deep
        raise InputError("JSON nested too deep to read", source=source, field=field) from None
    except ValueError as error:  # bytes that are not UTF-8 (or UTF-16/32)
        raise InputError(f"not readable JSON: {error}", source=source, field=field) from None


__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_INT_DIGITS",
    "MAX_MEMBER_BYTES",
    "MAX_TEXT_BYTES",
    "check",
    "int_digits",
    "not_a_device",
    "parse_json",
    "read_bytes",
    "shown_number",
    "size_text",
]
