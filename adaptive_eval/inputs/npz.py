"""Validated reading of ``.npz`` inputs; every error names the file, the array and the value."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from adaptive_eval.base.errors import InputError
from adaptive_eval.inputs.bounded import MAX_ARRAY_BYTES, check, size_text

#: Members above this size must not pack more than MAX_PACKING to one (a zip bomb does).
BOMB_BYTES = 64 << 20
MAX_PACKING = 1000
#: The longest model or question name (a name is a label on a page, not a document).
MAX_NAME_CHARS = 256


class NpzFile:
    """The arrays of one npz file, read eagerly, with checked accessors."""

    def __init__(self, path: str | Path, field: str | None = None) -> None:
        self.path = str(path)
        self.field = field
        size = check(path, limit=MAX_ARRAY_BYTES, what="npz file", field=field)
        try:
            if not zipfile.is_zipfile(path):  # np.load would read a .npy or a pickle instead
                raise ValueError("empty file" if size == 0 else "not a zip of .npy arrays")
            with zipfile.ZipFile(path) as archive:  # arrays are read whole: bound them first
                unpacked = sum(info.file_size for info in archive.infolist())
                if unpacked > MAX_ARRAY_BYTES:
                    raise InputError(
                        f"its arrays take {size_text(unpacked)} unpacked, more than the "
                        f"{size_text(MAX_ARRAY_BYTES)} an npz input may hold",
                        source=self.path,
                        field=field,
                    )
                for info in archive.infolist():
                    self._check_member(archive, info)
            with np.load(path, allow_pickle=False) as data:
                self.arrays = {name: data[name] for name in data.files}
        except InputError:
            raise
        except FileNotFoundError:
            raise InputError("file not found", source=self.path, field=field) from None
        except MemoryError:
            raise InputError(
                "its arrays do not fit in memory", source=self.path, field=field
            ) from None
        except (
            OSError,
            ValueError,
            EOFError,
            RuntimeError,  # an encrypted member
            NotImplementedError,  # a compression method zipfile does not know
            zipfile.BadZipFile,
            zlib.error,
        ) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise InputError(
                f"not a readable npz file ({reason})", source=self.path, field=field
            ) from None

    def _check_member(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        """Before anything is decompressed whole: a member is not encrypted, not a zip bomb
        (a large member packed more than :data:`MAX_PACKING` to one), and its .npy header
        claims no more bytes than the member holds (a header claiming 160 GB over a few bytes
        made numpy allocate them: MemoryError)."""
        name = info.filename
        if info.flag_bits & 0x1:
            raise InputError(f"member {name} is encrypted", source=self.path, field=self.field)
        if info.file_size > BOMB_BYTES and info.file_size > MAX_PACKING * max(
            info.compress_size, 1
        ):
            raise InputError(
                f"member {name} unpacks {size_text(info.compress_size)} into "
                f"{size_text(info.file_size)} (more than {MAX_PACKING}:1, a zip bomb); real "
                "arrays do not pack like that",
                source=self.path,
                field=self.field,
            )
        if not name.endswith(".npy"):
            return
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)  # type: ignore[no-untyped-call]
            header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = header(member)  # type: ignore[no-untyped-call]
            offset = member.tell()
        if dtype.hasobject:
            return  # np.load refuses it (allow_pickle=False), naming it
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if claimed > info.file_size - offset:
            raise InputError(
                f"member {name}: its header claims a {'x'.join(map(str, shape))} "
                f"{dtype} array ({size_text(claimed)}) but the member holds "
                f"{size_text(max(0, info.file_size - offset))}",
                source=self.path,
                field=self.field,
            )

    def error(self, array: str, message: str) -> InputError:
        return InputError(f"array {array!r}: {message}", source=self.path, field=self.field)

    def has(self, name: str) -> bool:
        return name in self.arrays

    def get(self, name: str, *, ndim: int | tuple[int, ...], kind: str) -> np.ndarray:
        """Array ``name`` with ``ndim`` dimensions and dtype kind in ``kind`` ('i', 'f', 'U')."""
        if name not in self.arrays:
            present = ", ".join(sorted(self.arrays)) or "none"
            raise self.error(name, f"missing (arrays present: {present})")
        array: np.ndarray = self.arrays[name]
        dims = (ndim,) if isinstance(ndim, int) else ndim
        if array.ndim not in dims:
            raise self.error(
                name, f"expected {' or '.join(map(str, dims))} dimensions, got shape {array.shape}"
            )
        if array.dtype.kind not in kind:
            if "i" in kind and array.dtype.kind == "u":
                # Unsigned values past int64 would wrap to negatives (2^63 + 1 was reported as
                # "negative category -9223372036854775807"): name the value as stored.
                if array.size and int(array.max()) > np.iinfo(np.int64).max:
                    big = int(array.max())
                    index = tuple(int(i) for i in np.argwhere(array == array.max())[0])
                    raise self.error(
                        name, f"value {big} at index {index} is too large for a category"
                    )
                array = array.astype(np.int64)
                return array
            raise self.error(name, f"expected dtype kind {kind!r}, got {array.dtype}")
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
            raise self.error(name, f"non-finite value {array[bad]} at index {bad}")
        return array

    def names(self, name: str, count: int, default_prefix: str) -> tuple[str, ...]:
        """A 1-D array of ``count`` unique string names, or generated ones if absent."""
        if name not in self.arrays:
            return tuple(f"{default_prefix}{i}" for i in range(count))
        array = self.get(name, ndim=1, kind="UO")
        if len(array) != count:
            raise self.error(name, f"has {len(array)} names, expected {count}")
        names = tuple(str(x) for x in array)
        long = next((n for n in names if len(n) > MAX_NAME_CHARS), None)
        if long is not None:
            raise self.error(
                name,
                f"name {long[:40]!r}... is {len(long):,} characters; at most {MAX_NAME_CHARS}",
            )
        odd = next((n for n in names if not n.strip() or not n.isprintable()), None)
        if odd is not None:
            raise self.error(name, f"name {odd!r} is empty or holds control characters")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise self.error(name, f"duplicate name {duplicates[0]!r}")
        return names


def check_categories(array: np.ndarray, num_categories: int, *, file: NpzFile, name: str) -> None:
    """Every entry must be an integer category in ``0..num_categories-1``."""
    if array.size == 0:
        raise file.error(name, f"is empty (shape {array.shape})")
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= num_categories:
        bad_value = low if low < 0 else high
        index = tuple(int(i) for i in np.argwhere(array == bad_value)[0])
        raise file.error(
            name,
            f"category {bad_value} at index {index} is outside "
            f"0..{num_categories - 1} (C+1 = {num_categories} categories "
            "from the rubric weights)",
        )
