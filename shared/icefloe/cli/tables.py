"""``init`` and ``table create|list|show|drop|alter``: the meta store's schema and the tables'
specs."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from typing import Any, TextIO

from icefloe.cli.output import emit, text_table
from icefloe.errors import TableExistsError
from icefloe.janitor import format_duration
from icefloe.lake import Lake
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import (
    add_column,
    check_spec_sql,
    drop_column,
    rename_column,
    widen_column,
)
from icefloe.metastore.models import TableInfo
from icefloe.spec import TableSpec, format_partition_by, format_schema
from icefloe.spec.evolution import SchemaChange
from icefloe.spec.presets import preset


def init_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    report = lake.meta.migrate()
    applied = ", ".join(str(v) for v in report.applied) or "none"
    row = {**asdict(report), "warehouse": lake.core.warehouse.uri}
    emit(
        out,
        args.format,
        row,
        lambda: (
            f"meta store schema {report.schema!r} at version {report.current_version}"
            f" (applied now: {applied}); warehouse {lake.core.warehouse.uri}"
        ),
    )
    return 0


def table_create_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    # The parser saw to it: --schema or --preset, and a preset with no layout flag.
    if args.preset is not None:
        spec = preset(args.preset, name=args.name)
    else:
        spec = TableSpec.create(
            name=args.name,
            schema=args.schema,
            partition_by=args.partition_by or "",
            sort_by=args.sort_by or "",
            row_group_by=args.row_group_by,
            merge=args.merge if args.merge is not None else "append",
            tenant_column=args.tenant_column,
        )
    spec = dataclasses.replace(spec, publish=args.publish)
    check_spec_sql(spec)
    try:
        info = lake.meta.create_table(spec)
        verb = "created"
    except TableExistsError:
        if not args.if_not_exists:
            raise
        info = lake.meta.get_table(spec.name)
        verb = "kept existing"
    emit(out, args.format, _table_row(info), lambda: f"{verb} table {info.name}")
    return 0


def _table_row(info: TableInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "head_snapshot_id": info.head_snapshot_id,
        "created_at": info.created_at,
        "spec": info.spec.to_dict(),
        "stats_leaves": list(info.spec.stats_leaves),
    }


def table_list_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    tables = lake.meta.list_tables()
    rows = [_table_row(t) for t in tables]
    emit(
        out,
        args.format,
        rows,
        lambda: text_table(
            ["name", "head", "partition_by", "sort_by"],
            [
                [
                    t.name,
                    t.head_snapshot_id,
                    format_partition_by(t.spec.partition_by),
                    ", ".join(t.spec.sort_by),
                ]
                for t in tables
            ],
        ),
    )
    return 0


def table_show_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    info = lake.meta.get_table(args.name)
    emit(out, args.format, _table_row(info), lambda: _describe(info))
    return 0


def table_paths_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    report = lake.json_paths(
        args.name, column=args.column, max_files=args.files, max_rows=args.rows
    )
    rows = [
        {
            "path": p.path,
            "rows": p.rows,
            "share": p.share,
            "types": p.types,
            "type": p.type,
            "declaration": p.declaration,
        }
        for p in report.paths
    ]
    emit(
        out,
        args.format,
        rows,
        lambda: (
            f"{report.table}.{report.column}: {report.rows_read:,} rows of the newest"
            f" {report.files_read} files\n"
            + text_table(
                ["path", "rows", "share", "type", "declaration"],
                [
                    [p.path, p.rows, f"{p.share:.0%}", p.type or "(null)", p.declaration or ""]
                    for p in report.paths
                ],
            )
        ),
    )
    return 0


def table_drop_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    info = lake.meta.drop_table(args.name)
    retention = timedelta(seconds=info.spec.retention.snapshot_retention_seconds)
    row = {**_table_row(info), "purged_after": format_duration(retention)}
    emit(
        out,
        args.format,
        row,
        lambda: (
            f"dropped table {info.name}; gc deletes its objects once {format_duration(retention)}"
            " (its retention) have passed; a table of that name can be created now"
        ),
    )
    return 0


_CHANGE_PARSERS: dict[str, Callable[[str], SchemaChange]] = {
    "add": add_column,
    "drop": drop_column,
    "rename": rename_column,
    "widen": widen_column,
}


def table_alter_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if not args.changes:  # then --publish (the parser saw to one or the other)
        info = lake.meta.set_publish(args.name, args.publish)
        emit(
            out,
            args.format,
            _table_row(info),
            lambda: f"altered {info.name}: publish {info.spec.publish}",
        )
        return 0
    changes = [_CHANGE_PARSERS[kind](text) for kind, text in args.changes]
    result = alter_table(
        meta=lake.meta,
        table=args.name,
        changes=changes,
        objects=lake.objects,
        configure=lake.duckdb_configure,
    )
    if args.publish is not None:
        lake.meta.set_publish(args.name, args.publish)
    row = {
        "table": result.table,
        "snapshot_id": result.snapshot_id,
        "spec_version": result.spec_version,
        "changes": list(result.changes),
        "schema": format_schema(result.spec.columns),
    }
    emit(
        out,
        args.format,
        row,
        lambda: (
            f"altered {result.table} (schema version {result.spec_version}, snapshot"
            f" {result.snapshot_id}): {'; '.join(result.changes)}\n"
            f"schema: {format_schema(result.spec.columns)}"
        ),
    )
    return 0


def _describe(info: TableInfo) -> str:
    spec = info.spec
    lines = [
        ("table", info.name),
        ("head snapshot", str(info.head_snapshot_id)),
        ("created at", info.created_at.isoformat(timespec="seconds")),
        ("schema", format_schema(spec.columns)),
        ("schema version", str(spec.version)),
        ("partition by", format_partition_by(spec.partition_by) or "(none)"),
        ("sort by", ", ".join(spec.sort_by) or "(none)"),
        ("row groups by", spec.row_group_by or "(none)"),
        *([("leaf statistics", ", ".join(spec.stats_leaves))] if spec.stats_leaves else []),
        ("merge", spec.merge.to_text()),
        ("target file size", f"{spec.sizes.target_file_bytes:,} bytes"),
        ("snapshot retention", f"{spec.retention.snapshot_retention_seconds:,} s"),
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)
