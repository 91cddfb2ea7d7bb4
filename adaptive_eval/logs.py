"""Structured logging: JSON lines to ``DIR/events.jsonl``, readable lines on the console.

Every event carries the campaign id; decision events are also written to the trial store so a
resumed run does not log them twice.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar

import structlog

from adaptive_eval.redact import scrub


class _JsonlTee:
    """structlog processor: append the event as one JSON line, then pass it on."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        record = {"ts": time.time(), "level": method, **event}
        self.handle.write(scrub(json.dumps(record, default=str, sort_keys=True)) + "\n")
        self.handle.flush()
        return event


def _scrubbed(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: credentials redacted from the text values shown on the console."""
    return {key: scrub(value) if isinstance(value, str) else value for key, value in event.items()}


class ConsoleLines:
    """A text stream for console log lines that never runs into a live progress bar.

    Whole lines are passed to ``tqdm.write`` while a bar is shown (it clears the bar, prints the
    line and redraws the bar), straight to the stream otherwise.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.bar_active = False
        self._partial = ""

    def isatty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if self.bar_active:
                from tqdm import tqdm

                tqdm.write(line, file=self.stream)
            else:
                self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class _QuietBelow:
    """Drop console output below a level (the JSON file already has the event)."""

    LEVELS: ClassVar[dict[str, int]] = {
        "debug": 10,
        "info": 20,
        "warning": 30,
        "error": 40,
        "critical": 50,
    }

    def __init__(self, level: str) -> None:
        self.level = self.LEVELS[level]

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        if self.LEVELS.get(method, 20) < self.level:
            raise structlog.DropEvent
        return event


def open_event_log(
    run_dir: Path,
    campaign_id: str,
    console_level: str = "info",
    console: IO[str] | ConsoleLines | None = None,
) -> tuple[structlog.BoundLogger, IO[str]]:
    """A logger bound to ``campaign_id`` writing to ``run_dir/events.jsonl`` and the console."""
    handle = (run_dir / "events.jsonl").open("a", encoding="utf-8")
    stream: Any = console or sys.stderr
    processors: list[Any] = [
        structlog.processors.add_log_level,
        _JsonlTee(handle),
        _QuietBelow(console_level),
        _scrubbed,
        structlog.processors.TimeStamper(fmt="%H:%M:%S"),
        structlog.dev.ConsoleRenderer(colors=stream.isatty()),
    ]
    logger = structlog.wrap_logger(
        structlog.PrintLogger(stream), processors=processors, wrapper_class=structlog.BoundLogger
    )
    return logger.bind(campaign=campaign_id), handle


class SilentLog:
    """A logger that drops everything (offline re-reads of a finished run)."""

    def __getattr__(self, level: str) -> Any:
        return lambda *args, **kwargs: None


#: ``on_event(level, kind, payload)``: diagnostics as they happen (batch failures and retries,
#: worker deaths and restarts), for the run's events.jsonl.
EventSink = Callable[[str, str, dict[str, Any]], None]


def no_events(level: str, kind: str, payload: dict[str, Any]) -> None:
    pass
