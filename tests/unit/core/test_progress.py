"""The CLI's progress bar: drawn on a terminal, silent on a pipe and for JSON output."""

from __future__ import annotations

import io

from icefloe import progress
from icefloe.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_it_draws_rate_and_eta_and_ends_the_line() -> None:
    stream = Terminal()
    with Progress(1000, "inserting", unit="events", stream=stream) as bar:
        for _ in range(10):
            bar.advance(100)
    text = stream.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    last = text.rstrip("\n").split("\r")[-1]
    assert last.startswith("inserting [" + "#" * progress.WIDTH + "] 100% 1,000/1,000 events")
    assert "events/s ETA 0s" in last


def test_on_a_pipe_or_for_json_it_writes_nothing() -> None:
    pipe = io.StringIO()
    with Progress(10, "x", stream=pipe) as bar:
        bar.advance(10)
    assert pipe.getvalue() == "" and not bar.enabled
    terminal = Terminal()
    with Progress(10, "x", stream=terminal, enabled=False) as quiet:
        quiet.advance(10)
    assert terminal.getvalue() == ""


def test_redraws_are_throttled() -> None:
    stream = Terminal()
    with Progress(10_000, "x", stream=stream) as bar:
        for _ in range(9_999):
            bar.advance()
        drawn_before_the_end = stream.getvalue().count("\r")
        bar.advance()
    assert drawn_before_the_end < 100  # ten a second at most, not one per step
