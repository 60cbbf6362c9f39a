"""``insert`` (a file or stdin, with a progress line on a terminal) and ``demo`` (sample events)."""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import BinaryIO, TextIO, cast

from icefloe.cli.output import counted, emit
from icefloe.errors import TableExistsError
from icefloe.ingest import InputFormat, format_from_suffix
from icefloe.ingest.insert import InsertPhase
from icefloe.lake import Lake
from icefloe.progress import Progress, StageProgress
from icefloe.sample_events import sample_events, sample_events_spec

# An insert of less input draws no progress line: it is done in well under a second (NDJSON
# inserts go at 25-60 MB/s on a two-core VM), before a line would tell anyone anything; it would
# only flicker.
INSERT_PROGRESS_MIN_BYTES = 16_000_000


_INSERT_STAGES: dict[InsertPhase, str] = {
    "load": "loading",
    "write": "writing",
    "commit": "committing",
}


def insert_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    inserter = lake.inserter()
    if args.source == "-":
        fmt: InputFormat = args.input_format or "ndjson"
        line = StageProgress(
            "inserting stdin",
            stages=("reading", *_INSERT_STAGES.values()),
            total_bytes=_regular_file_size(sys.stdin),
            quiet_below_bytes=INSERT_PROGRESS_MIN_BYTES,
            enabled=args.format != "json",
        )
        with line:
            result = inserter.insert_stream(
                args.name,
                cast(BinaryIO, _CountedReads(sys.stdin.buffer, line)),
                fmt=fmt,
                idempotency_key=args.idempotency_key,
                on_phase=lambda phase: line.stage(_INSERT_STAGES[phase]),
            )
    else:
        path = Path(args.source)
        fmt = args.input_format or format_from_suffix(path)
        line = StageProgress(
            f"inserting {path.name}",
            stages=tuple(_INSERT_STAGES.values()),
            total_bytes=_regular_file_size(path),
            quiet_below_bytes=INSERT_PROGRESS_MIN_BYTES,
            enabled=args.format != "json",
        )
        with line:
            result = inserter.insert_file(
                args.name,
                path,
                fmt=fmt,
                idempotency_key=args.idempotency_key,
                on_phase=lambda phase: line.stage(_INSERT_STAGES[phase]),
            )
    row = asdict(result)
    if result.committed:
        text = (
            f"inserted {result.rows:,} rows into {result.table}: snapshot {result.snapshot_id},"
            f" {counted(len(result.files), 'file')} in {counted(result.partitions, 'partition')}"
        )
    else:
        text = f"already committed as snapshot {result.snapshot_id} of {result.table}; nothing new"
    emit(out, args.format, row, lambda: text)
    return 0


def _regular_file_size(source: Path | TextIO) -> int | None:
    """The size of a file to insert, or of stdin redirected from one (``< big.ndjson``); None
    for a pipe, or a file that cannot be read (the insert then says why)."""
    try:
        status = source.stat() if isinstance(source, Path) else os.fstat(source.fileno())
    except (OSError, ValueError):  # ValueError: a stdin without a descriptor
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


class _CountedReads:
    """stdin as the insert stages it, each read counted on the progress line."""

    def __init__(self, stream: BinaryIO, line: StageProgress) -> None:
        self._stream, self._line = stream, line

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._line.read(len(chunk))
        return chunk


def demo_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    lake.meta.migrate()
    spec = sample_events_spec("events")
    with suppress(TableExistsError):  # a second demo run adds to the same table
        lake.meta.create_table(spec)
    events = sample_events(args.events, days=args.days)
    inserter = lake.inserter()
    started = time.perf_counter()
    batches = 0
    bar = Progress(len(events), "inserting", unit="events", enabled=args.format != "json")
    with bar:
        for offset in range(0, len(events), args.batch_size):
            batch = events[offset : offset + args.batch_size]
            inserter.insert_rows("events", batch)
            batches += 1
            bar.advance(len(batch))
    elapsed = time.perf_counter() - started
    row = {
        "table": "events",
        "events": len(events),
        "batches": batches,
        "seconds": round(elapsed, 3),
        "events_per_s": round(len(events) / elapsed),
    }
    emit(
        out,
        args.format,
        row,
        lambda: (
            f"inserted {len(events):,} sample events in {counted(batches, 'batch', 'batches')} of"
            f" up to {args.batch_size:,} in {elapsed:.1f} s ({len(events) / elapsed:,.0f} events/s)"
        ),
    )
    return 0
