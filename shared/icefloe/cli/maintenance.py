"""``merge``, ``compact``, ``gc`` and ``status``: keeping a table's files few and its dead files
gone, and showing its shape."""

from __future__ import annotations

import argparse
import difflib
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TextIO

from icefloe.cli.output import EXIT_ERROR, counted, emit, text_table
from icefloe.cli.publish import publication_text
from icefloe.errors import InvalidInputError
from icefloe.janitor import format_duration, parse_duration
from icefloe.lake import Lake
from icefloe.merge import merge_locally
from icefloe.merge.orchestrator import OrchestratorSummary
from icefloe.metastore.models import FILE_SIZE_BUCKETS, PartitionShape
from icefloe.metastore.publications import PublicationStore
from icefloe.progress import Progress


def merge_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.name is not None:
        lake.meta.get_table(args.name)  # a clear error for a wrong name
    # The same ICEFLOE_MERGE_* settings as the worker function (limits, lease).
    worker = lake.merge_worker()
    started = time.perf_counter()
    bars: list[Progress] = []

    def round_planned(summary: OrchestratorSummary) -> None:
        if bars:
            bars[-1].close()
        label = f"merging (round {len(bars) + 1})"
        bars.append(
            Progress(summary.groups_sent, label, unit="groups", enabled=args.format != "json")
        )

    try:
        report = merge_locally(
            meta=lake.meta,
            worker=worker,
            table=args.name,
            until_quiet=args.wait,
            workers=lake.settings.merge.local_workers,
            on_round=round_planned,
            on_outcome=lambda _: bars[-1].advance(),
        )
    finally:
        for bar in bars:
            bar.close()
    elapsed = time.perf_counter() - started
    # Once quiet, the opted-in tables are published (their heads moved with the merges).
    published = lake.keep_published(args.name) if args.wait else None
    committed = [o for o in report.outcomes if o.status == "committed"]
    row = {
        "rounds": len(report.rounds),
        "merges": len(committed),
        "files_in": sum(o.files_in for o in committed),
        "files_out": sum(o.files_out for o in committed),
        "rows_in": sum(o.rows_in for o in committed),
        "rows_out": sum(o.rows_out for o in committed),
        "bytes_in": sum(o.bytes_in for o in committed),
        "bytes_out": sum(o.bytes_out for o in committed),
        "skipped": len(report.outcomes) - len(committed),
        "failed": len(report.dead_letters),
        "seconds": round(elapsed, 3),
    }
    # Files another merge holds (or held when it died) are not merged until their lease ends.
    names = [args.name] if args.name is not None else [t.name for t in lake.meta.list_tables()]
    statuses = [lake.meta.status(name) for name in names]
    claimed = sum(s.claimed_files for s in statuses)
    until = max((s.claimed_until for s in statuses if s.claimed_until), default=None)
    claims = {
        "claimed_files": claimed,
        "claimed_until": until.isoformat(timespec="seconds") if until else None,
    }

    def text() -> str:
        line = (
            f"{counted(int(row['merges']), 'merge')} in {counted(int(row['rounds']), 'round')}:"
            f" {row['files_in']:,} files -> {row['files_out']:,},"
            f" {row['bytes_in'] / 1e6:,.1f} MB -> {row['bytes_out'] / 1e6:,.1f} MB,"
            f" {row['rows_in']:,} rows -> {row['rows_out']:,} in {elapsed:.1f} s"
        )
        if row["skipped"]:
            line += f"; {row['skipped']} skipped (claimed or merged elsewhere)"
        if row["failed"]:
            line += f"; {row['failed']} FAILED (see the log)"
        if claimed and until is not None:
            line += (
                f"; {counted(claimed, 'file')} still claimed by another merge (or one that"
                f" died) until {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            )
        if published is not None:
            line += "\n" + publication_text(published)
        return line

    publication = {"published": published.to_json() if published is not None else None}
    emit(out, args.format, {**row, **claims, **publication}, text)
    return EXIT_ERROR if report.dead_letters or (published and published.failed) else 0


def compact_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    from icefloe.compaction.local import compact_locally

    spec = lake.meta.get_table(args.name).spec
    if args.partition:
        _check_partitions(lake, args.name, args.partition, partitioned=bool(spec.partition_by))
    started = time.perf_counter()
    bars: list[Progress] = []
    try:
        result = compact_locally(
            meta=lake.meta,
            objects=lake.objects,
            settings=lake.core,
            table=args.name,
            partitions=args.partition,
            engine=args.engine,
            worker=lake.merge_worker(),
            on_claimed=lambda manifest: bars.append(
                Progress(
                    len(manifest.groups),
                    f"compacting ({args.engine})",
                    unit="partitions",
                    enabled=args.format != "json",
                )
            ),
            on_partition=lambda _: bars[-1].advance(),
        )
    finally:
        for bar in bars:
            bar.close()
    elapsed = time.perf_counter() - started
    outcomes = result.partitions if result is not None else ()
    data = {
        "job_id": result.job_id if result is not None else None,
        "engine": args.engine,
        "seconds": round(elapsed, 3),
        "partitions": [asdict(o) for o in outcomes],
    }

    def text() -> str:
        if not outcomes:
            return "nothing to compact (no partition with two or more unclaimed files)"
        lines = [
            f"{o.partition_path}: {o.status}"
            + (
                f", {o.files_in:,} files -> {o.files_out:,}, {o.rows_in:,} rows -> {o.rows_out:,}"
                if o.status == "committed"
                else f" ({o.reason})"
                if o.reason
                else ""
            )
            for o in outcomes
        ]
        lines.append(f"{args.engine}: {counted(len(outcomes), 'partition')} in {elapsed:.1f} s")
        return "\n".join(lines)

    emit(out, args.format, data, text)
    failed = [o for o in outcomes if o.status not in ("committed", "already_committed")]
    return EXIT_ERROR if failed else 0


def _check_partitions(lake: Lake, table: str, wanted: list[str], *, partitioned: bool) -> None:
    """Refuse a --partition the table does not have (live files at its head), naming it: a
    mistyped one would otherwise be "nothing to compact"."""
    if not partitioned:
        raise InvalidInputError(
            f"--partition {wanted[0]!r}: table {table!r} is not partitioned (leave out"
            " --partition to compact it whole)"
        )
    live = [shape.partition_path for shape in lake.meta.partition_shapes(table)]
    for partition in wanted:
        if partition not in live:
            close = difflib.get_close_matches(partition, live, n=1, cutoff=0.6)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (`icefloe status {table}` lists its partitions)"
            )
            raise InvalidInputError(
                f"--partition {partition!r}: table {table!r} has no such partition with live"
                f" files{hint}"
            )


def gc_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    retention = parse_duration(args.retention) if args.retention is not None else None
    grace = parse_duration(args.orphan_grace) if args.orphan_grace is not None else None
    if args.name is not None:
        lake.meta.get_table(args.name)
    # Opted-in tables are published first: that expires their Iceberg snapshots past the
    # retention, so this collection may take the files only those kept.
    published = None if args.dry_run else lake.keep_published(args.name, retention=retention)
    bars: list[Progress] = []
    deleted = 0

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(Progress(total, "collecting", unit="tables", enabled=args.format != "json"))
        elif done:
            bars[0].advance()

    def files_deleted(n: int) -> None:
        nonlocal deleted
        deleted += n
        if bars:
            bars[0].note(f"{counted(deleted, 'file')} deleted")

    try:
        report = lake.janitor().run(
            table=args.name,
            retention=retention,
            orphan_grace=grace,
            dry_run=args.dry_run,
            max_files=args.max_files,
            on_progress=progress,
            on_deleted=files_deleted,
        )
    finally:
        for bar in bars:
            bar.close()

    def text() -> str:
        verb = "would delete" if report.dry_run else "deleted"
        lines = []
        for t in report.tables:
            lines.append(
                f"{t.table}: {counted(t.snapshots_expired, 'snapshot')}"
                f" {'would expire' if report.dry_run else 'expired'}; {verb}"
                f" {counted(t.files_deleted, 'dead file')} ({t.bytes_deleted / 1e6:,.1f} MB) and"
                f" {counted(t.orphans_found, 'orphan')} ({t.orphan_bytes / 1e6:,.1f} MB)"
                f" [retention {format_duration(t.retention)},"
                f" orphan grace {format_duration(t.orphan_grace)}]"
            )
            if report.dry_run:
                lines.extend(f"  dead   {p}" for p in t.dead_paths)
                lines.extend(f"  orphan {p}" for p in t.orphan_paths)
        lines.append(
            f"{counted(report.claims_freed, 'expired claim')}"
            f" {'to free' if report.dry_run else 'freed'},"
            f" {counted(report.receipts_pruned, 'old receipt')}"
            f" {'to prune' if report.dry_run else 'pruned'}"
        )
        lines.extend(f"{name}: FAILED: {error}" for name, error in report.failed_tables.items())
        lines.extend(
            f"{name}: purge held until its Iceberg table is dropped (publish iceberg --all with"
            " its catalog)"
            for name in report.purges_held
        )
        if published is not None:
            lines.append(publication_text(published))
        return "\n".join(lines)

    row = {**report.to_json(), "published": published.to_json() if published else None}
    emit(out, args.format, row, text)
    return EXIT_ERROR if report.failed_tables or (published and published.failed) else 0


def status_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    # A name given, even "", is looked up (and refused when no table has it).
    names = [args.name] if args.name is not None else [t.name for t in lake.meta.list_tables()]
    statuses = [lake.meta.status(name) for name in names]
    rows = [asdict(s) for s in statuses]
    publications = PublicationStore(lake.meta)
    now = datetime.now(UTC)
    published = {name: publications.states(name) for name in names}
    for row in rows:
        row["published"] = [
            {**asdict(p), "lag_seconds": round(p.lag(now).total_seconds(), 3)}
            for p in published[row["table"]]
        ]
    shapes = lake.meta.partition_shapes(args.name) if args.name is not None else []
    if args.name is not None:
        rows[0]["by_partition"] = [asdict(shape) for shape in shapes]
        rows[0]["size_buckets_bytes"] = list(FILE_SIZE_BUCKETS)

    def text() -> str:
        summary = text_table(
            ["table", "head", "live_files", "partitions", "rows", "bytes"],
            [
                [s.table, s.head_snapshot_id, s.live_files, s.partitions, s.rows, s.bytes]
                for s in statuses
            ],
        )
        lines = [
            f"{name}: published to {p.catalog} at snapshot {p.snapshot_id}"
            + (
                " (current)"
                if p.behind_since is None
                else f" ({counted(p.snapshots_behind, 'snapshot')} behind, lag"
                f" {format_duration(p.lag(now))})"
            )
            for name, states in published.items()
            for p in states
        ]
        summary = "\n".join([summary, *lines])
        if args.name is None:
            return summary
        return f"{summary}\n\n{_shape_text(shapes)}"

    emit(out, args.format, rows, text)
    return 0


_BARS = "·▁▂▃▄▅▆▇█"  # a dot for none, then eighths of the busiest bucket


def _shape_text(shapes: Sequence[PartitionShape]) -> str:
    """Each partition's files, rows and bytes, and a histogram of the whole table's file sizes
    (people would rather see the shape of a table than read a column of numbers)."""
    labels = [f"<{_size(b)}" for b in FILE_SIZE_BUCKETS] + [f">={_size(FILE_SIZE_BUCKETS[-1])}"]
    peak = max((max(s.size_buckets) for s in shapes), default=0) or 1
    per_partition = text_table(
        ["partition", "files", "rows", "bytes", "sizes " + " ".join(["<64K", "..", ">=256M"])],
        [
            [
                s.partition_path or "(unpartitioned)",
                s.files,
                s.rows,
                s.bytes,
                "".join(_BARS[-(-count * (len(_BARS) - 1) // peak)] for count in s.size_buckets),
            ]
            for s in shapes
        ],
    )
    totals = [sum(s.size_buckets[i] for s in shapes) for i in range(len(labels))]
    top = max(totals, default=0) or 1
    histogram = "\n".join(
        f"  {label:>8}  {'█' * -(-count * 40 // top) if count else ''} {count}"
        for label, count in zip(labels, totals, strict=True)
    )
    return f"{per_partition}\n\nlive file sizes:\n{histogram}"


def _size(n: int) -> str:
    for unit in ("", "K", "M", "G"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}T"
