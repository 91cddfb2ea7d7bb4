"""A small pool of checker processes that enforces a wall-clock timeout on every call.

math-verify protects its own parsing and comparison with ``signal.alarm``, which only works on the
main thread of the main interpreter; graders run inside Ray worker threads. So math-verify is called
with its timeouts disabled (``parsing_timeout=None``, ``timeout_seconds=None``) and the timeout is
enforced here instead: each check runs in a separate process, the caller waits on the socket for at
most ``timeout_s`` seconds, and a process that overruns (or dies) is killed and replaced by a fresh
one, without disturbing the other processes of the pool or the calls they are serving.

Checker processes are plain ``python -c`` subprocesses (not ``multiprocessing`` children): they are
safe to start from any thread, inherit no locks, and never re-import the caller's ``__main__``
(``spawn`` and ``forkserver`` re-run an unguarded user script in every child). A checker loads
*this file* by path and does not import the ``adaptive_eval`` package at all, so it starts fast and
only needs the standard library plus what it is asked to preload (math-verify). It receives the
caller's ``sys.path``, talks over a socket pair with pickled messages, and exits when the caller
closes its end. Functions to run are either picklable callables (standard-library ones) or
``(file path, function name)`` pairs, loaded by path in the checker (:meth:`CheckerPool.call_file`).

Checkers start lazily and are reused; one announces itself ready only after its preloads are
imported, so start-up time is never charged to a call's timeout. A pool created before ``os.fork``
is never used by the child: :func:`shared_pool` makes one per process id.

This module must stay importable on its own (standard library only, no package imports).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing.connection
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

#: Modules a checker process imports before it reports ready (heavy imports paid once).
DEFAULT_PRELOAD: tuple[str, ...] = ("math_verify",)

_BOOT = (
    "import importlib.util, json, sys\n"
    "sys.path[:0] = json.loads(sys.argv[2])\n"
    "spec = importlib.util.spec_from_file_location('_adaptive_eval_checker', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "mod.serve(int(sys.argv[3]), json.loads(sys.argv[4]))\n"
)


@dataclass(frozen=True, slots=True)
class CallResult:
    """Outcome of one call: ``ok`` (``value`` holds the return value), ``timeout`` or ``error``."""

    status: Literal["ok", "timeout", "error"]
    value: Any = None
    detail: str = ""


def _load_file(path: str, cache: dict[str, ModuleType]) -> ModuleType:
    module = cache.get(path)
    if module is None:
        import importlib.util

        name = f"_adaptive_eval_checker_{len(cache)}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        cache[path] = module
    return module


def serve(fd: int, preload: Sequence[str]) -> None:
    """Body of a checker process: import ``preload``, say ready, then answer calls until EOF.

    Messages: ``("call", fn, args)`` or ``("file", path, name, args)``; replies ``("ok", value)``
    or ``("error", text)``; ``None`` asks the process to exit.
    """
    import importlib
    import logging

    conn = multiprocessing.connection.Connection(fd)
    # math-verify warns once that its own timeout is disabled; that is on purpose here.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        for name in preload:
            importlib.import_module(name)
    except BaseException as exc:
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    files: dict[str, ModuleType] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the caller went away
            return
        if message is None:
            return
        try:
            if message[0] == "file":
                _, path, name, args = message
                fn = getattr(_load_file(path, files), name)
            else:
                _, fn, args = message
            reply: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except Exception as exc:  # e.g. an unpicklable return value
            conn.send(("error", f"cannot send result back: {type(exc).__name__}: {exc}"))


class _Worker:
    def __init__(self, preload: Sequence[str], startup_timeout_s: float):
        parent_sock, child_sock = socket.socketpair()
        try:
            child_fd = child_sock.fileno()
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOT,
                    os.path.abspath(__file__),
                    json.dumps([p for p in sys.path if isinstance(p, str)]),
                    str(child_fd),
                    json.dumps(list(preload)),
                ],
                pass_fds=(child_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        self.conn = multiprocessing.connection.Connection(parent_sock.detach())
        try:
            if not self.conn.poll(startup_timeout_s):
                raise RuntimeError(f"checker process not ready after {startup_timeout_s:g} s")
            kind, detail = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.kill()
            raise RuntimeError(
                f"checker process died while starting (exit code {self.exitcode(1.0)})"
            ) from exc
        except BaseException:
            self.kill()
            raise
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"checker process failed to start: {detail}")

    def exitcode(self, wait_s: float = 0.0) -> int | None:
        """The process's exit code, waiting up to ``wait_s`` for it; ``None`` if still running."""
        try:
            return self.process.wait(wait_s) if wait_s > 0 else self.process.poll()
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(5.0)
        with contextlib.suppress(Exception):
            self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
            self.process.wait(1.0)
        self.kill()


class CheckerPool:
    """Up to ``max_workers`` checker processes; calls never raise, they return a CallResult.

    Thread-safe: each call checks out one idle process (starting one if fewer than
    ``max_workers`` exist, else waiting for one), so concurrent callers never share a socket.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        startup_timeout_s: float = 120.0,
    ):
        self.max_workers = max(1, max_workers or min(4, os.cpu_count() or 1))
        self._preload = tuple(preload)
        self._startup_timeout_s = startup_timeout_s
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._starting = 0
        self._closed = False
        #: Processes killed after a timeout or a crash, for tests and diagnostics.
        self.replaced = 0

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("checker pool is closed")
                if self._idle:
                    worker = self._idle.pop()
                    self._busy.add(worker)
                    return worker
                if len(self._busy) + self._starting < self.max_workers:
                    self._starting += 1
                    break
                self._cond.wait()
        try:
            worker = _Worker(self._preload, self._startup_timeout_s)
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._starting -= 1
            self._busy.add(worker)
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._cond:
            self._busy.discard(worker)
            keep = healthy and not self._closed
            if keep:
                self._idle.append(worker)
            if not healthy:
                self.replaced += 1
            self._cond.notify()
        if not keep:
            worker.kill()

    def _roundtrip(self, message: tuple[Any, ...], timeout_s: float) -> CallResult:
        try:
            worker = self._acquire()
        except Exception as exc:
            return CallResult("error", detail=f"cannot start checker process: {exc}")
        healthy = False
        try:
            start = time.monotonic()
            worker.conn.send(message)
            if not worker.conn.poll(max(0.0, timeout_s)):
                return CallResult(
                    "timeout", detail=f"no result after {time.monotonic() - start:.2f} s"
                )
            kind, value = worker.conn.recv()
            healthy = True
            if kind == "ok":
                return CallResult("ok", value=value)
            return CallResult("error", detail=str(value))
        except (EOFError, OSError) as exc:
            code = worker.exitcode(1.0)
            return CallResult("error", detail=f"checker process died (exit code {code}): {exc!r}")
        except Exception as exc:
            return CallResult("error", detail=f"{type(exc).__name__}: {exc}")
        finally:
            self._release(worker, healthy)

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> CallResult:
        """Run ``fn(*args)`` in a checker process; give up (and kill it) after ``timeout_s``.

        ``fn`` and ``args`` are pickled: ``fn`` must be importable in the checker, which does not
        import this package (use :meth:`call_file` for functions defined in it).
        """
        return self._roundtrip(("call", fn, args), timeout_s)

    def call_file(self, path: str, name: str, *args: Any, timeout_s: float) -> CallResult:
        """Run function ``name`` of the Python file ``path`` (loaded by path, once per checker)."""
        return self._roundtrip(("file", path, name, args), timeout_s)

    def close(self) -> None:
        """Stop every idle process; busy ones are killed when their call returns."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            worker.stop()

    @property
    def size(self) -> int:
        """Processes alive now (idle or busy)."""
        with self._cond:
            return len(self._idle) + len(self._busy)


_shared: tuple[int, CheckerPool] | None = None
_shared_lock = threading.Lock()


def shared_pool() -> CheckerPool:
    """The process-wide pool, created on first use (a new one after ``os.fork``)."""
    global _shared
    pid = os.getpid()
    with _shared_lock:
        if _shared is None or _shared[0] != pid:
            _shared = (pid, CheckerPool())
        return _shared[1]


@atexit.register
def _close_shared() -> None:
    if _shared is not None and _shared[0] == os.getpid():
        _shared[1].close()


# ---- stand-ins for tests of the failure paths (called by path through call_file) ---------------


def sleep_then_return(seconds: float | str, *args: Any) -> tuple[bool, None]:
    """A check that hangs for ``seconds``."""
    time.sleep(float(seconds))
    return True, None


def exit_process(code: int | str, *args: Any) -> tuple[bool, None]:
    """A check whose process dies with exit code ``code``."""
    os._exit(int(code))
