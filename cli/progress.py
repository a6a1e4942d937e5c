"""Progress with an ETA for long runs: a live bar on a terminal, one line per step in a log.

On a terminal (stderr is a TTY) it is a tqdm bar whose messages are printed above it; anywhere
else (CI, ``| tee``, nohup) every step prints one line with the count, the elapsed time and the
estimated time left, so a log shows how far a run got and how long it still needs.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def clock(seconds: float) -> str:
    """``seconds`` as ``h:mm:ss`` or ``m:ss``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts ``total`` steps of ``label``; :meth:`step` reports one with a message.

    ``bar`` forces the live bar on or off (default: on when stderr is a terminal); with
    ``lines=False`` the steps print no line (a run's many small steps: the bar only).

    The ETA assumes the work left goes as fast as the work done, in wall time (so it counts
    parallel workers in). Work is one per step unless ``work`` gives the total and each
    :meth:`step` its share (e.g. a sweep's cost estimate per point, so that long points done
    first do not make the estimate pessimistic). Steps already done before it started
    (``done``, e.g. a resumed sweep's) are shown but do not count towards the rate."""

    def __init__(
        self,
        total: int,
        label: str,
        done: int = 0,
        stream: TextIO | None = None,
        bar: bool | None = None,
        lines: bool = True,
        work: float | None = None,
    ) -> None:
        self.total = total
        self.work_total = float(total - done) if work is None else float(work)
        self.work_done = 0.0
        self.lines = lines  # without a bar: print a line per step (else stay silent)
        self.label = label
        self.done = done
        self._skipped = done
        self.stream = stream if stream is not None else sys.stdout
        self.started = time.monotonic()
        self._rate_from = self.started  # where the ETA's rate counts from (see begin_work)
        self._bar = None
        use_bar = sys.stderr.isatty() if bar is None else bar
        if use_bar:
            try:
                from tqdm import tqdm
            except ImportError:  # the runtime install has no tqdm: lines instead
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, initial=done, desc=label, unit="step", leave=False)

    def eta_s(self) -> float | None:
        """Estimated seconds until every step is done; ``None`` before the first step."""
        if self.done - self._skipped <= 0 or self.work_done <= 0:
            return None
        left = max(self.work_total - self.work_done, 0.0)
        return (time.monotonic() - self._rate_from) / self.work_done * left

    def begin_work(self) -> None:
        """The work starts now: what came before (e.g. Ray starting) counts in the elapsed
        time, not in the rate the ETA extrapolates."""
        self._rate_from = time.monotonic()

    def line(self, message: str) -> str:
        """The line a step prints: count, elapsed, ETA, then ``message``."""
        width = len(str(self.total))
        eta = self.eta_s()
        timing = f"{clock(time.monotonic() - self.started)} elapsed"
        if self.done < self.total:
            timing += f", ETA {clock(eta)}" if eta is not None else ", ETA ?"
        return f"[{self.done:>{width}}/{self.total} {timing}] {message}"

    def step(self, message: str = "", work: float = 1.0) -> None:
        """One more step done (``work`` of the total); print ``message`` with the count and
        the ETA."""
        self.done += 1
        self.work_done += work
        if self._bar is not None:
            self._bar.update(1)
            if self.lines:
                self._bar.write(self.line(message), file=self.stream)
        elif self.lines:
            print(self.line(message), file=self.stream, flush=True)

    def close(self) -> None:
        """Remove the bar (lines need no closing)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
