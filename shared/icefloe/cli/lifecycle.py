"""``delete``, ``deletes``, ``rollback`` and ``snapshots``: changing a table's history, and
listing it."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TextIO

from icefloe.cli.output import emit, text_table
from icefloe.lake import Lake
from icefloe.lifecycle import rollback_table
from icefloe.metastore.deletes import DeleteJobStore


def delete_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    result = lake.delete(args.name, args.where, dry_run=args.dry_run)

    def text() -> str:
        counts = (
            f"{result.rows_deleted:,} rows in {len(result.changes)} of"
            f" {result.files_scanned} files read ({result.files_rewritten} rewritten,"
            f" {result.files_removed} removed; {result.files_considered} considered)"
        )
        if result.dry_run:
            lines = [f"{result.table}: would delete {counts}"]
            lines += [
                f"  {c.action:<7}  {c.path}  {c.rows_deleted:,} of {c.rows:,} rows"
                for c in result.changes
            ]
            return "\n".join(lines)
        if result.snapshot_id is None:
            return f"{result.table}: no row matches; nothing committed"
        return f"{result.table}: snapshot {result.snapshot_id} deleted {counts}"

    emit(out, args.format, result.to_json(), text)
    return 0


def deletes_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.name is not None:
        lake.meta.get_table(args.name)  # an unknown table is refused, as by every command
    jobs = DeleteJobStore(lake.meta).jobs(args.name)
    emit(
        out,
        args.format,
        [job.to_json() for job in jobs],
        lambda: text_table(
            ["job_id", "table", "state", "parts", "rows_deleted", "snapshot", "where"],
            [
                [
                    job.job_id,
                    job.table,
                    job.state if job.error is None else f"{job.state}: {job.error}",
                    f"{job.parts_done}/{job.parts}",
                    job.rows_deleted,
                    job.snapshot_id,
                    job.predicate,
                ]
                for job in jobs
            ],
        ),
    )
    return 0


def rollback_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    result = rollback_table(
        meta=lake.meta, objects=lake.objects, table=args.name, to_snapshot=args.to_snapshot
    )

    def text() -> str:
        if result.snapshot_id is None:
            return (
                f"{result.table}: the live files are those of snapshot {result.to_snapshot}"
                " already; nothing committed"
            )
        return (
            f"rolled {result.table} back to snapshot {result.to_snapshot}: snapshot"
            f" {result.snapshot_id} holds its {result.files_kept + result.files_restored} files"
            f" ({result.rows:,} rows): {result.files_kept} kept, {result.files_removed} removed,"
            f" {result.files_restored} restored by copy ({result.bytes_copied:,} bytes)"
        )

    emit(out, args.format, result.to_json(), text)
    return 0


def snapshots_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    snaps = lake.meta.snapshots(args.name)
    rows = [asdict(s) for s in snaps]
    emit(
        out,
        args.format,
        rows,
        lambda: text_table(
            ["snapshot_id", "operation", "committed_at", "files +/-", "rows +/-"],
            [
                [
                    s.snapshot_id,
                    s.operation
                    if s.rolled_back_to is None
                    else f"{s.operation} to {s.rolled_back_to}",
                    s.committed_at.isoformat(timespec="seconds"),
                    f"+{s.files_added}/-{s.files_removed}",
                    f"+{s.rows_added}/-{s.rows_removed}",
                ]
                for s in snaps
            ],
        ),
    )
    return 0
