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

from adaptive_eval.base.redact import scrub


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

    def say(self, line: str) -> None:
        """Write ``line`` as a line of its own."""
        self.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


#: Console wording of events a user meets (the file keeps the raw event): ``kind -> (text of
#: the event, or None to keep it off the console)``.
CONSOLE_TEXT: dict[str, Callable[[dict[str, Any]], str | None]] = {
    # The loop's own work (planning, deciding) taking long: 0.05 s is crossed routinely on a
    # loaded machine, so the console hears of it from a second on (events.jsonl always).
    "slow_policy": lambda e: (
        None
        if float(e.get("seconds") or 0) < SLOW_POLICY_CONSOLE_S
        else f"the {e.get('phase')} step of the decision loop took {float(e['seconds']):.1f} s "
        "(its own work, not sampling)"
    ),
    "campaign_start": lambda e: (
        "this folder holds the finished campaign: nothing is left to sample; its outputs are "
        "written again (raise a budget.* or policy.max_trials_per_question to extend it)"
        if e.get("resumed") and e.get("finished")
        else "resuming the campaign recorded in this folder: its trials "
        "are kept and sampling continues where it stopped"
        if e.get("resumed")
        else None
    ),
    "late_result_ignored": lambda e: (
        f"a result of round {e.get('round')} came after its round "
        "closed; it is ignored (its trials are sampled again)"
    ),
    "config_ignored": lambda e: str(e.get("message")),
    "ray_already_connected": lambda e: (
        "this process is already connected to Ray: the campaign runs on that cluster, not on "
        f"execution.ray_address {e.get('ray_address')}"
    ),
}
SLOW_POLICY_CONSOLE_S = 1.0
#: Events shown on the console whatever its level (a resumed run said nothing).
ALWAYS_SHOWN = frozenset({"campaign_start"})


class _Readable:
    """structlog processor: known events as a sentence on the console (``warning: ...``), or
    dropped from it; others as structlog renders them."""

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> Any:
        wording = CONSOLE_TEXT.get(str(event.get("event")))
        if wording is None:
            return event
        text = wording(event)
        if text is None:
            raise structlog.DropEvent
        label = "note" if method in ("info", "debug") else method
        return f"{label}: {text}"


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
        if event.get("event") in ALWAYS_SHOWN and self.level < self.LEVELS["error"]:
            return event
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
        _Readable(),
        _Rendered(structlog.processors.TimeStamper(fmt="%H:%M:%S")),
        _Rendered(structlog.dev.ConsoleRenderer(colors=stream.isatty())),
    ]
    logger = structlog.wrap_logger(
        structlog.PrintLogger(stream), processors=processors, wrapper_class=structlog.BoundLogger
    )
    return logger.bind(campaign=campaign_id), handle


class _Rendered:
    """A processor that leaves a line already worded by :class:`_Readable` as it is."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, logger: Any, method: str, event: Any) -> Any:
        return event if isinstance(event, str) else self.inner(logger, method, event)


class SilentLog:
    """A logger that drops everything (offline re-reads of a finished run)."""

    def __getattr__(self, level: str) -> Any:
        return lambda *args, **kwargs: None


#: ``on_event(level, kind, payload)``: diagnostics as they happen (batch failures and retries,
#: worker deaths and restarts), for the run's events.jsonl.
EventSink = Callable[[str, str, dict[str, Any]], None]


def no_events(level: str, kind: str, payload: dict[str, Any]) -> None:
    pass
