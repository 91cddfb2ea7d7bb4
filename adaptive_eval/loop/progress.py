"""The progress display of a run: a bar on a terminal, a status line every so often elsewhere."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from adaptive_eval.base.logs import ConsoleLines
from adaptive_eval.control.controller import Controller


def _terminal_width(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


#: Seconds between status lines when the console is not a terminal (CI logs, files).
STATUS_INTERVAL_S = 15.0
#: A new live forecast gets a status line of its own once this long after the last line (the
#: first one at once: a run shorter than the interval still shows its forecast).
FORECAST_LINE_S = 5.0


class Progress:
    """The run's progress: a tqdm bar on a terminal, a status line every ``interval_s``
    seconds elsewhere (CI logs get a line, not minutes of silence).

    The total is an upper bound the campaign cannot pass: every cell at its cap (or what it
    already planned, where that is more), and at most the trial budget. It used to count only
    the models the stopping rules needed at that moment, but a model they had set aside can be
    needed again (``configs/demo-settle-all.yaml`` ended at 95,792 trials against "at most
    90,534"). The bar never goes backwards, the total never grows, and the ETA (at the rate
    since the first recorded batch, so Ray's start-up is left out) is to that bound. Beside the
    bar: the undecided pairs, the trials recorded and the fixed-N run's trials; once the run
    has finished, the trials it saved against that run (it used to print the trials recorded
    as "trials saved").
    """

    def __init__(
        self,
        console: ConsoleLines,
        enabled: bool,
        *,
        interval_s: float = STATUS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.enabled = enabled
        self.interval_s = interval_s
        self.clock = clock
        self.bar: Any = None
        self.total: int | None = None
        self.done = 0
        self.baseline = 0  # the fixed-N run's trials
        self._first: tuple[float, int] | None = None  # (time, trials) at the first call
        self._last_line = 0.0
        self.forecast: str | None = None  # the live forecast's line, once it has one
        self._shown: object | None = None  # the live forecast the last status line showed

    @staticmethod
    def bound(controller: Controller) -> int:
        """Trials the campaign can reach at most: every cell up to its cap (what it planned,
        where that is more), within the trial budget."""
        planned = controller.state.planned
        cap = np.broadcast_to(controller.campaign.decision.capacity[:, None], planned.shape)
        bound = int(np.maximum(planned, cap).sum())
        budget = controller.campaign.run.settings.budget.trials
        return bound if budget is None else min(bound, max(budget, int(planned.sum())))

    def __call__(self, controller: Controller) -> None:
        if not self.enabled:
            return
        now = self.clock()
        self.done = max(self.done, controller.store.count_trials())
        self.baseline = controller.campaign.run.fixed_n * controller.state.planned.size
        bound = self.bound(controller)
        self.total = max(bound if self.total is None else min(self.total, bound), self.done)
        undecided = sum(not d.settled for d in controller.decisions)
        live = controller.live
        latest = live.history[-1] if live is not None and live.history else None
        if latest is not None:
            # Counted down from the forecast by what was recorded since, priced at the rate now.
            self.forecast = latest.line(self.done, controller.seconds_per_trial())
        if self._first is None:
            self._first = (now, self.done)
            self._last_line = now
        fresh = latest is not None and latest is not self._shown
        due = now - self._last_line >= self.interval_s or (
            fresh and (self._shown is None or now - self._last_line >= FORECAST_LINE_S)
        )
        if self.console.isatty():
            self._draw(undecided)
        elif due:
            self._last_line = now
            self._shown = latest
            self.console.write(self.status_line(now, undecided) + "\n")

    def eta_s(self, now: float) -> float | None:
        """Seconds to the bound at the rate since the first call (None before a rate)."""
        if self._first is None or self.total is None:
            return None
        start, trials = self._first
        rate = (self.done - trials) / (now - start) if now > start else 0.0
        return (self.total - self.done) / rate if rate > 0 else None

    def status_line(self, now: float, undecided: int) -> str:
        total = self.total or 0
        share = f"{100 * self.done / total:.1f}%" if total else "n/a"
        eta = self.eta_s(now)
        line = (
            f"progress: {self.done:,} of at most {total:,} trials ({share}; the fixed-N run: "
            f"{self.baseline:,}), {undecided} pair(s) undecided, "
            + ("ETA n/a" if eta is None else f"at most {eta:.0f} s to go at the current rate")
        )
        return line if self.forecast is None else f"{line}; forecast: {self.forecast}"

    def saved_text(self) -> str:
        """What the finished run saved against the fixed-N run, in trials."""
        saved = self.baseline - self.done
        share = f" ({100 * abs(saved) / self.baseline:.1f}%)" if self.baseline else ""
        if saved < 0:  # worded as the pages word it, never "trials saved -4,650 (-48.4%)"
            return f"trials spent {-saved:,}{share} more than the fixed-N run's {self.baseline:,}"
        return f"trials saved {saved:,}{share} of the fixed-N run's {self.baseline:,}"

    def _draw(self, undecided: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            stream = self.console.stream
            self.bar = tqdm(
                total=self.total,
                initial=self.done,
                unit="trial",
                desc="sampling (of at most)",
                # A terminal that reports no width (a bare pty) would get an empty bar.
                dynamic_ncols=_terminal_width(stream) > 0,
                file=stream,
            )
            self.console.bar_active = True
        self.bar.total = self.total
        self.bar.n = self.done
        postfix = (
            f"undecided pairs {undecided}, recorded {self.done:,} (fixed-N run {self.baseline:,})"
        )
        if self.forecast is not None:
            postfix += f"; {self.forecast}"
        self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.refresh()

    def close(self, finished: bool, reused: int = 0) -> None:
        """``reused``: trials the trial library served this campaign (they count as recorded
        but were not sampled: a night that sampled nothing says so)."""
        text = self.saved_text()
        if reused:
            sampled = max(self.done - reused, 0)
            text = f"{sampled:,} sampled, {reused:,} reused from the trial library; {text}"
        if self.bar is not None:
            if finished:
                self.bar.total = self.bar.n
                self.bar.set_postfix_str(text, refresh=False)
                self.bar.refresh()
            self.bar.close()
            self.console.bar_active = False
        elif finished and self.enabled and self._first is not None:
            self.console.write(f"progress: done, {text}\n")
