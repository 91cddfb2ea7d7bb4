"""CPU cores for an engine's step loop: claimed per host, so that engines do not share them.

Why: the thread that steps an engine is the campaign's hot path (on CPU vLLM it computes; on a
GPU it schedules, launches and detokenizes). Left to float, the kernel moves it between cores
and interleaves it with the actor's other threads (Ray's, vLLM's process-group threads, the
graders'). On the 2-core project machine, held to one core it ran faster than left to float
in 15 of 19 paired runs (median 1.04x; docs/continuous-feed.md). Ray assigns no cores to
actors, so a worker claims its own.

A claim is an advisory lock (``flock``) on one file per core in a folder shared by every
process on the host (:func:`lock_dir`); the kernel drops a lock when its process ends, so a
killed worker never leaks its cores. Claims only steer engines apart: nothing stops other
threads from running on a claimed core.

Nothing here imports vllm.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Environment variable naming the claims' folder (default: ``<tmp>/adaptive-eval-cores``).
LOCK_DIR_ENV = "ADAPTIVE_EVAL_CORE_LOCKS"


def lock_dir() -> Path:
    """The host-wide folder of core claims."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "adaptive-eval-cores")


@dataclass
class CoreClaim:
    """Cores an engine holds (sorted) and the open lock files that hold them."""

    cpus: tuple[int, ...]
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor of the file drops its lock


def _claims_folder(folder: Path | None) -> Path:
    """``folder`` or the host's (:func:`lock_dir`), created if it can be (else no lock is
    taken in it: :func:`_try_lock` fails to open its files)."""
    folder = folder or lock_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def _try_lock(folder: Path, cpu: int) -> int | None:
    """The lock file's descriptor, holding core ``cpu``; None if another process holds it (or
    the folder is not writable: then no claim is possible, and none is made)."""
    try:
        # A shared folder: never through a link planted in it.
        fd = os.open(folder / f"cpu{cpu}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_cores(
    count: int, *, allowed: Iterable[int] | None = None, folder: Path | None = None
) -> tuple[CoreClaim | None, str]:
    """Claim ``count`` cores no other engine on this host holds; ``(claim, why)``.

    Cores are tried from the highest number down (core 0 takes more of the host's interrupts
    and housekeeping). No claim (``None`` and the reason) when ``count`` would take every core
    the process may use (pinning would change nothing and leave no core to the rest) or when
    fewer than ``count`` are free.
    """
    usable = sorted(set(os.sched_getaffinity(0) if allowed is None else allowed), reverse=True)
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if count >= len(usable):
        return None, (
            f"the engine uses {count} thread(s) and this process may use {len(usable)} "
            "core(s): nothing to pin"
        )
    folder = _claims_folder(folder)
    fds: list[int] = []
    cpus: list[int] = []
    for cpu in usable:
        fd = _try_lock(folder, cpu)
        if fd is None:
            continue
        fds.append(fd)
        cpus.append(cpu)
        if len(cpus) == count:
            return CoreClaim(tuple(sorted(cpus)), fds), f"claimed core(s) {sorted(cpus)}"
    CoreClaim((), fds).release()
    return None, (
        f"only {len(cpus)} of the {len(usable)} core(s) are free of other engines' claims "
        f"(lock files in {folder}), {count} needed: not pinned"
    )


def claim_listed(cpus: Sequence[int], *, folder: Path | None = None) -> CoreClaim:
    """Hold exactly ``cpus`` (a user's list): claims what is free, so that automatic claims
    keep off them; a core another engine holds is shared, as the user asked."""
    allowed = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - allowed)
    if missing:
        raise ValueError(
            f"core(s) {missing} are not available to this process (it may use {sorted(allowed)})"
        )
    folder = _claims_folder(folder)
    fds = [fd for fd in (_try_lock(folder, cpu) for cpu in cpus) if fd is not None]
    return CoreClaim(tuple(sorted(set(cpus))), fds)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Cores written as Linux lists them (``0-3,6``), sorted; ``ValueError`` if malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"not a list of cores: {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"not a list of cores: {text!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def pin_current_thread(cpus: Sequence[int]) -> None:
    """Hold the calling thread (and the threads it starts later: OpenMP's team) to ``cpus``."""
    os.sched_setaffinity(0, set(cpus))  # pid 0: the calling thread, not the whole process


__all__ = [
    "LOCK_DIR_ENV",
    "CoreClaim",
    "claim_cores",
    "claim_listed",
    "lock_dir",
    "parse_cpu_list",
    "pin_current_thread",
]
