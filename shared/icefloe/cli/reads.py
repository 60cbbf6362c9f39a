"""``query`` (DuckDB, local Spark, or a job on EMR Serverless) and ``files``: reading a table at a
snapshot; ``changes``: what a table gained and lost between two."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from icefloe.cli.output import emit, text_table
from icefloe.errors import InvalidInputError
from icefloe.lake import Lake
from icefloe.query.output import check_output_path, write_result


def query_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    """The parser saw to how the options combine (--output for parquet, --stats and --tenant
    with duckdb, what --engine emr takes)."""
    args.sql = query_text(sql=args.sql, sql_file=args.sql_file)
    check_output_path(args.output)
    try:
        return _query(lake, args, out)
    except InvalidInputError as e:
        # The engines' words are the Python API's (snapshot_id, as_of): the CLI's is --snapshot.
        if args.snapshot is not None and str(e).startswith(_ONE_TABLE_ONLY):
            raise InvalidInputError(
                f"--snapshot {args.snapshot} pins the one table a query reads, and this query"
                " reads none or several (leave out --snapshot to read each table's head)"
            ) from e
        raise


# How every engine refuses a snapshot id for a query that names no table or several.
_ONE_TABLE_ONLY = "a snapshot id pins one table"


def _query(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    if args.engine == "emr":
        return _query_on_emr(lake, args, out)
    if args.engine == "spark":
        from icefloe.compaction.session import local_spark_session
        from icefloe.spark import query_with_spark

        rows = query_with_spark(
            local_spark_session(), args.sql, runtime=lake.runtime, snapshot_id=args.snapshot
        )
        write_result(rows, fmt=args.format, out=out, output=args.output)
        return 0
    result = lake.query_engine().query(args.sql, snapshot_id=args.snapshot, tenant=args.tenant)
    write_result(result.rows, fmt=args.format, out=out, output=args.output)
    if args.stats:
        out.flush()  # the result first, then what it read
        for stats in result.stats:
            print(json.dumps(stats.to_dict()), file=sys.stderr, flush=True)
    return 0


def query_text(*, sql: str | None, sql_file: str | None) -> str:
    """The SELECT given on the command line, or read from ``sql_file`` (``-``: stdin)."""
    if sql is not None and sql_file is not None:
        raise InvalidInputError("give the SELECT as an argument or with -f FILE, not both")
    if sql_file is None:
        if sql is None:
            raise InvalidInputError("give the SELECT as an argument, or with -f FILE")
        return sql
    where = "stdin" if sql_file == "-" else sql_file
    try:
        text = sys.stdin.read() if sql_file == "-" else Path(sql_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"cannot read the query from {where}: {e}") from e
    if not text.strip():
        raise InvalidInputError(f"the query file {where} is empty")
    return text


def changes_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    """The rows, then on stderr where they end: the snapshot to ask from next time."""
    check_output_path(args.output)
    feed = lake.changes(
        args.name, since_snapshot=args.since, until_snapshot=args.until, table_id=args.table_id
    )
    write_result(feed.rows, fmt=args.format, out=out, output=args.output)
    out.flush()
    summary = {
        "table": feed.table,
        "table_id": feed.table_id,
        "since_snapshot": feed.since_snapshot,
        "until_snapshot": feed.until_snapshot,
        "inserts": feed.inserts,
        "deletes": feed.deletes,
        "files_read_whole": feed.files_read_whole,
        "files_read_filtered": feed.files_read_filtered,
        "files_row_ids_read": feed.files_row_ids_read,
        "bytes_of_files_read": feed.bytes_of_files_read,
    }
    if args.format == "table":
        print(
            f"{feed.table}: {feed.inserts} inserted, {feed.deletes} deleted after snapshot"
            f" {feed.since_snapshot} up to {feed.until_snapshot} (next: --since"
            f" {feed.until_snapshot} --table-id {feed.table_id})",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(json.dumps(summary), file=sys.stderr, flush=True)
    return 0


def _query_on_emr(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    """Start a query job on EMR Serverless (see :mod:`icefloe.emr_query`); it writes its
    result as Parquet, so only ``--format table`` or ``json`` (of the job) apply, as the parser
    saw to."""
    import boto3

    from icefloe.emr_query import EmrQueryLauncher

    config = lake.settings.emr.job_config()
    if config is None:
        raise InvalidInputError(
            "--engine emr needs ICEFLOE_EMR_APPLICATION_ID, ICEFLOE_EMR_JOB_ROLE_ARN,"
            " ICEFLOE_EMR_ENTRY_POINT and ICEFLOE_EMR_ENVIRONMENT_ARCHIVE (the stack's outputs)"
        )
    settings = lake.core
    client = boto3.client("emr-serverless", region_name=settings.aws_region)
    launched = EmrQueryLauncher(
        meta=lake.meta,
        objects=lake.objects,
        client=client,
        config=config,
        results_uri=settings.results_location.uri,
    ).launch(args.sql, snapshot_id=args.snapshot)
    data = {
        "job_id": launched.job_id,
        "job_run_id": launched.job_run_id,
        "snapshots": launched.snapshots,
        "result_uri": launched.result_uri,
    }
    emit(
        out,
        args.format,
        data,
        lambda: (
            f"started query job {launched.job_id} (EMR job run {launched.job_run_id}) over "
            + ", ".join(f"{t} at snapshot {s}" for t, s in launched.snapshots.items())
            + f"\nits result will be Parquet under {launched.result_uri}"
        ),
    )
    return 0


def files_command(lake: Lake, args: argparse.Namespace, out: TextIO) -> int:
    snapshot = lake.meta.resolve_snapshot(args.name, snapshot_id=args.snapshot)
    found = lake.meta.files(args.name, snapshot_id=snapshot) if snapshot else []
    rows = [
        {
            "path": lake.objects.uri(f.path),
            "partition": f.partition_path,
            "row_count": f.row_count,
            "size_bytes": f.size_bytes,
            "row_groups": f.row_group_count,
            "snapshot_added": f.begin_snapshot,
        }
        for f in found
    ]
    emit(
        out,
        args.format,
        rows,
        lambda: text_table(
            ["partition", "rows", "bytes", "path"],
            [[r["partition"], r["row_count"], r["size_bytes"], r["path"]] for r in rows],
        ),
    )
    return 0
