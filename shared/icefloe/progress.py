"""One-line progress for long CLI commands, on a terminal only.

:class:`Progress` is a bar with rate and ETA over countable steps (events, merge groups,
partitions, tables); :class:`StageProgress` is a status line for one long call that cannot
count its steps (an insert): its stage, bytes and elapsed time. Both write to stderr (so stdout
stays the command's result), redraw at most ten times a second (a stage change is drawn at
once), and are silent when stderr is not a terminal (a pipe, a log file, CI) or when the
command's output is JSON.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import TextIO

WIDTH = 30
REDRAW_S = 0.1
SPINNER = "|/-\\"


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
        self._note = ""
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

    def note(self, text: str) -> None:
        """Show ``text`` after the bar (gc's "1,234 files deleted"), redrawn when due."""
        self._note = text
        now = time.monotonic()
        if self.enabled and now - self._drawn >= REDRAW_S:
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
        note = f" {self._note}" if self._note else ""
        self._stream.write(
            f"\r{self._label} [{'#' * filled}{' ' * (WIDTH - filled)}] {share:4.0%}"
            f" {self._done:,}/{self._total:,}{unit} {rate:,.0f}{unit}/s ETA {left:,.0f}s{note} "
        )
        self._stream.flush()


class StageProgress:
    """``with StageProgress("inserting big.ndjson", stages=("loading", "writing",
    "committing"), total_bytes=size) as line: ...; line.stage("writing")``.

    For one long call that reports stages, not steps (an insert's load is one pyarrow/DuckDB
    call): the line shows the stage (``loading, step 1/3``), the input's size and the time
    elapsed, which a ticker thread redraws ten times a second while the call blocks. Bytes
    counted with :meth:`read` (stdin being staged) show with their rate, and with a bar and an
    ETA when ``total_bytes`` is known. Nothing is drawn while fewer than ``quiet_below_bytes``
    bytes are known (a small input is done before a line would help); once drawn it stays.
    It ends with ``done in 3.1 s, 82.6 MB/s``, or ``stopped while loading`` on an error.
    """

    def __init__(
        self,
        label: str,
        *,
        stages: Sequence[str],
        total_bytes: int | None = None,
        quiet_below_bytes: int = 0,
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and bool(stages) and _is_terminal(self._stream)
        self._label, self._stages = label, tuple(stages)
        self._total, self._quiet_below = total_bytes, quiet_below_bytes
        self._stage = 0
        self._bytes_read = 0
        self._reading = False  # bytes were counted in the current stage
        self._shown = False
        self._frames = 0
        self._last_width = 0
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled:
            self._ticker = threading.Thread(target=self._tick, name="icefloe-progress", daemon=True)
            self._ticker.start()

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(failed=kind is not None)

    @property
    def size_bytes(self) -> int:
        """The input's size: the total when known, else the bytes counted so far."""
        return self._total if self._total is not None else self._bytes_read

    def read(self, n: int) -> None:
        """Count ``n`` more bytes read in the current stage."""
        with self._lock:
            self._bytes_read += n
            self._reading = True

    def stage(self, name: str) -> None:
        """Enter the stage ``name`` (one of ``stages``); drawn at once."""
        with self._lock:
            self._stage = self._stages.index(name)
            self._reading = False
            if self._due():
                self._draw(self._frame(time.monotonic()))

    def close(self, *, failed: bool = False) -> None:
        if not self.enabled:
            return
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self._due():
                now = time.monotonic()
                self._draw(self._stopped_frame(now) if failed else self._done_frame(now))
                self._stream.write("\n")
                self._stream.flush()
            self.enabled = False

    def _tick(self) -> None:
        while not self._stopped.wait(REDRAW_S):
            with self._lock:
                if self._due():
                    self._draw(self._frame(time.monotonic()))

    def _due(self) -> bool:
        """Whether the line is drawn: enabled, and the input known to be big enough."""
        self._shown = self._shown or (self.enabled and self.size_bytes >= self._quiet_below)
        return self._shown

    def _frame(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        spin = SPINNER[self._frames % len(SPINNER)]
        step = f"{self._stages[self._stage]}, step {self._stage + 1}/{len(self._stages)}"
        if not self._reading:
            return f"{self._label} ({_megabytes(self.size_bytes)}): {step}, {elapsed:.1f} s {spin}"
        rate = self._bytes_read / elapsed
        if self._total:
            share = min(1.0, self._bytes_read / self._total)
            filled = int(share * WIDTH)
            left = (self._total - self._bytes_read) / rate if rate > 0 else 0.0
            return (
                f"{self._label}: {step} [{'#' * filled}{' ' * (WIDTH - filled)}] {share:4.0%}"
                f" {self._bytes_read / 1e6:,.1f}/{_megabytes(self._total)}"
                f" {_megabytes(rate)}/s ETA {max(left, 0.0):,.0f}s"
            )
        return (
            f"{self._label}: {step}, {_megabytes(self._bytes_read)} at {_megabytes(rate)}/s,"
            f" {elapsed:.1f} s {spin}"
        )

    def _done_frame(self, now: float) -> str:
        elapsed = max(now - self._started, 1e-9)
        return (
            f"{self._label} ({_megabytes(self.size_bytes)}): done in {elapsed:.1f} s,"
            f" {_megabytes(self.size_bytes / elapsed)}/s"
        )

    def _stopped_frame(self, now: float) -> str:
        return (
            f"{self._label} ({_megabytes(self.size_bytes)}): stopped while"
            f" {self._stages[self._stage]}, after {now - self._started:.1f} s"
        )

    def _draw(self, frame: str) -> None:
        """Overwrite the line: pad over what a longer previous frame left."""
        self._frames += 1
        self._stream.write(f"\r{frame}{' ' * max(0, self._last_width - len(frame))}")
        self._stream.flush()
        self._last_width = len(frame)


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
