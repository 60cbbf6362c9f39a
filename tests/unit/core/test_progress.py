"""The CLI's progress bar: drawn on a terminal, silent on a pipe and for JSON output."""

from __future__ import annotations

import io
import re
import time

import pytest

from icefloe import progress
from icefloe.progress import Progress, StageProgress


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


def test_a_note_follows_the_bar() -> None:
    stream = Terminal()
    with Progress(2, "collecting", unit="tables", stream=stream) as bar:
        bar.advance()
        bar.note("1,000 files deleted")
        bar.advance()
    assert stream.getvalue().rstrip("\n").split("\r")[-1].endswith(" 1,000 files deleted ")


STAGES = ("loading", "writing", "committing")


def last_frame(stream: io.StringIO) -> str:
    return stream.getvalue().split("\r")[-1]


def wait_for_a_frame(stream: io.StringIO, text: str) -> str:
    """The ticker thread draws ten times a second: the newest frame once it holds ``text``."""
    deadline = time.monotonic() + 5
    while text not in last_frame(stream) and time.monotonic() < deadline:
        time.sleep(0.01)
    return last_frame(stream)


def test_a_stage_line_draws_each_stage_at_once_then_done_with_size_and_rate() -> None:
    stream = Terminal()
    with StageProgress(
        "inserting big.ndjson", stages=STAGES, total_bytes=18_000_000, stream=stream
    ) as line:
        for stage in STAGES:
            line.stage(stage)
    frames = stream.getvalue().split("\r")[1:]
    assert [f.split(", ")[0] for f in frames[:3]] == [
        "inserting big.ndjson (18.0 MB): loading",
        "inserting big.ndjson (18.0 MB): writing",
        "inserting big.ndjson (18.0 MB): committing",
    ]
    assert "step 2/3" in frames[1]
    assert re.fullmatch(
        r"inserting big\.ndjson \(18\.0 MB\): done in \d+\.\d s, [\d,.]+ MB/s *\n", frames[-1]
    )


def test_bytes_read_show_their_rate_and_with_a_known_total_a_bar_and_an_eta() -> None:
    piped, redirected = Terminal(), Terminal()
    stages = ("reading", *STAGES)
    with (
        StageProgress("inserting stdin", stages=stages, stream=piped) as from_a_pipe,
        StageProgress(
            "inserting stdin", stages=stages, total_bytes=100_000_000, stream=redirected
        ) as from_a_file,
    ):
        from_a_pipe.read(25_000_000)
        from_a_file.read(25_000_000)
        unknown_total = wait_for_a_frame(piped, "MB/s")
        known_total = wait_for_a_frame(redirected, "ETA")
        from_a_pipe.stage("loading")
        assert "(25.0 MB): loading, step 2/4" in last_frame(piped)
    assert unknown_total.startswith("inserting stdin: reading, step 1/4, 25.0 MB at ")
    assert known_total.startswith(
        "inserting stdin: reading, step 1/4 [" + "#" * (progress.WIDTH // 4) + " "
    )
    assert " 25% 25.0/100.0 MB " in known_total and "MB/s ETA " in known_total


def test_a_stage_line_stays_quiet_under_its_threshold_off_a_terminal_and_for_json() -> None:
    small, pipe, quiet = Terminal(), io.StringIO(), Terminal()
    with StageProgress(
        "inserting stdin", stages=STAGES, quiet_below_bytes=16_000_000, stream=small
    ) as under:
        under.read(15_999_999)
        under.stage("writing")
        time.sleep(3 * progress.REDRAW_S)  # the ticker runs, and draws nothing
    with StageProgress("x", stages=STAGES, total_bytes=10**9, stream=pipe) as off_terminal:
        off_terminal.stage("writing")
    with StageProgress("x", stages=STAGES, stream=quiet, enabled=False) as disabled:
        disabled.stage("writing")
    assert small.getvalue() == "" and pipe.getvalue() == "" and quiet.getvalue() == ""
    assert not off_terminal.enabled and not disabled.enabled


def test_a_stage_line_appears_once_the_bytes_read_pass_its_threshold() -> None:
    stream = Terminal()
    with StageProgress(
        "inserting stdin", stages=("reading", *STAGES), quiet_below_bytes=10, stream=stream
    ) as line:
        line.read(9)
        line.stage("reading")
        assert stream.getvalue() == ""
        line.read(1)
        line.stage("loading")
        assert last_frame(stream).startswith("inserting stdin (0.0 MB): loading, step 2/4, ")
    assert last_frame(stream).startswith("inserting stdin (0.0 MB): done in ")


def test_an_error_leaves_the_stage_it_stopped_in() -> None:
    stream = Terminal()
    with (
        pytest.raises(RuntimeError),
        StageProgress("inserting big.ndjson", stages=STAGES, stream=stream) as line,
    ):
        line.stage("writing")
        raise RuntimeError("the store is gone")
    assert re.fullmatch(
        r"inserting big\.ndjson \(0\.0 MB\): stopped while writing, after \d+\.\d s *\n",
        last_frame(stream),
    )


def test_the_ticker_redraws_at_most_ten_times_a_second() -> None:
    stream = Terminal()
    with StageProgress("x", stages=STAGES, stream=stream) as line:
        line.stage("loading")
        time.sleep(0.5)
        drawn = stream.getvalue().count("\r")
    assert 2 <= drawn <= 1 + 0.5 / progress.REDRAW_S + 1  # the stage, then the ticks
