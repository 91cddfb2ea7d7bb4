"""Input files are read only when they are regular files, and never past a bound.

``validate --set 'models[0].path=/dev/zero'`` used to hang at 9.7 GB of memory: a device, a
named pipe or a socket has no end, and a file of any size was read whole before it was parsed.
Every reader of a user's file (the config, scenario / replay / prior npz files, datasets, chat
templates, imported harness logs, the members of a zip) goes through :func:`check` first: a
folder, a device, a pipe or a socket is refused, and so is a file larger than what that kind of
input may be, each in one line naming the file. Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from adaptive_eval.base.errors import InputError

#: The most read of each kind of input (far above real use; a value past it is a mistake).
MAX_CONFIG_BYTES = 4 << 20
MAX_TEXT_BYTES = 1 << 30  # datasets, harness logs, chat templates
MAX_ARRAY_BYTES = 4 << 30  # an npz's arrays, uncompressed, all together
MAX_MEMBER_BYTES = 64 << 20  # one sample (or header) of an inspect_ai .eval zip


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


__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_MEMBER_BYTES",
    "MAX_TEXT_BYTES",
    "check",
    "not_a_device",
    "read_bytes",
    "size_text",
]
