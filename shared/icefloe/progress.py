"""A one-line progress bar with rate and ETA for long CLI commands, on a terminal only.

It writes to stderr (so stdout stays the command's result), redraws at most ten times a second,
and is silent when stderr is not a terminal (a pipe, a log file, CI) or when the command's
output is JSON.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
REDRAW_S = 0.1


class Progress:
    """``with Progress(total, "inserting", unit="events") as bar: bar.advance(n)``."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "",
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0 and _is_terminal(self._stream)
        self._total, self._label, self._unit = total, label, unit
        self._done = 0
        self._started = self._drawn = time.monotonic()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self._done = min(self._total, self._done + n)
        now = time.monotonic()
        if self.enabled and (now - self._drawn >= REDRAW_S or self._done == self._total):
            self._drawn = now
            self._draw(now)

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()
            self.enabled = False

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        share = self._done / self._total
        filled = int(share * WIDTH)
        rate = self._done / elapsed
        left = (self._total - self._done) / rate if rate > 0 else 0.0
        unit = f" {self._unit}" if self._unit else ""
        self._stream.write(
            f"\r{self._label} [{'#' * filled}{' ' * (WIDTH - filled)}] {share:4.0%}"
            f" {self._done:,}/{self._total:,}{unit} {rate:,.0f}{unit}/s ETA {left:,.0f}s "
        )
        self._stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
