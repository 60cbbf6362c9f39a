"""Read a table from Spark: a DataFrame over exactly one snapshot's files.

    from icefloe.spark import read_table
    events = read_table(spark, "events")                          # the head
    week = read_table(spark, "events", start=datetime(2026, 11, 1), end=datetime(2026, 11, 8))
    then = read_table(spark, "events", snapshot_id=42)            # or as_of=datetime(...)
    new = read_changes(spark, "events", since_snapshot=41)        # the change feed

The snapshot is pinned and its files listed by the meta store (pruned to the time partitions of
``[start, end)`` when given, and the rows filtered to it, as a query's time range is), and
Spark reads those files and nothing else, with the columns cast to the table's types. Works
with local Spark and inside EMR Serverless jobs (whose environment ships icefloe): the lake is
the environment's (``ICEFLOE_*``), or the ``runtime`` given. On EMR, ``s3://`` paths are read
by EMRFS; local Spark reads local warehouses (it has no S3 connector of its own here).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from icefloe.errors import InvalidInputError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.lake import Lake
from icefloe.query import QueryEngine
from icefloe.query.changes import CHANGE_COLUMN, SNAPSHOT_COLUMN
from icefloe.query.changes import read_changes as read_changes_duckdb
from icefloe.query.output import columns_as_text
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.query.sql_refs import analyze
from icefloe.query.views import TimeRange, window_conditions
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spark_files import check_spark_readable, read_files, spark_type
from icefloe.spec import TableSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from icefloe.emr_query import SparkQueryRequest


def open_lake(*, max_connections: int = 1) -> Lake:
    """The lake the Spark reader opens when not given a runtime: the environment's, its meta
    store's secret resolved, as every front door's is."""
    return Lake.open(load_settings(), max_connections=max_connections)


def read_table(
    spark: SparkSession,
    table: str,
    *,
    snapshot_id: int | None = None,
    as_of: datetime | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    runtime: Runtime | None = None,
) -> DataFrame:
    """``table`` at a snapshot (the head, ``snapshot_id``, or the last at ``as_of``), rows of
    ``[start, end)`` of its time partition column when given."""
    own = open_lake() if runtime is None else None
    lake = own.runtime if own is not None else runtime
    assert lake is not None
    try:
        current = lake.meta.get_table(table).spec
        window = TimeRange(start, end) if start or end else None
        if window is not None and current.time_partition_field is None:
            raise InvalidInputError(
                f"table {table!r} has no time partition: start/end do not apply"
            )
        engine = QueryEngine(meta=lake.meta, objects=lake.objects)
        try:
            plan = engine.plan(table, snapshot_id=snapshot_id, as_of=as_of, time_range=window)
        finally:
            engine.close()
        spec = (
            current
            if plan.spec_version == current.version
            else lake.meta.table_spec(table, version=plan.spec_version)
        )
        files = [
            (lake.objects.uri(path), version)
            for path, version in zip(plan.paths, plan.file_versions, strict=True)
        ]
        # The files' own specs too: a column dropped since is still in their files.
        versions = set(plan.file_versions) - {spec.version}
        check_spark_readable(
            [spec, *(lake.meta.table_spec(table, version=v) for v in sorted(versions))],
            table=table,
        )
    finally:
        if own is not None:
            own.close()
    return _frame(spark, spec, files, window)


def read_changes(
    spark: SparkSession,
    table: str,
    *,
    since_snapshot: int,
    until_snapshot: int | None = None,
    table_id: int | None = None,
    runtime: Runtime | None = None,
) -> DataFrame:
    """The change feed of ``table`` after ``since_snapshot`` up to ``until_snapshot`` (the
    head) as a DataFrame: the columns of ``until``'s schema, ``_row_id``, ``_change`` and
    ``_snapshot`` (see :mod:`icefloe.query.changes`). ``table_id``, when given, must be the
    table's (a position of another table, or of one dropped and created again under this
    name, is refused) as in :meth:`icefloe.lake.Lake.changes`. The feed is computed by DuckDB in this
    process (the driver), reading only the files that changed, and handed to Spark whole: it
    holds the changed rows only, so a window of one day's changes fits; for a backfill of a
    whole table, read the table with :func:`read_table` instead."""
    own = open_lake() if runtime is None else None
    lake = own.runtime if own is not None else runtime
    assert lake is not None
    core = lake.settings
    try:
        feed = read_changes_duckdb(
            meta=lake.meta,
            objects=lake.objects,
            table=table,
            since_snapshot=since_snapshot,
            until_snapshot=until_snapshot,
            table_id=table_id,
            configure=lambda con: configure_s3_from_settings(con, core),
        )
    finally:
        if own is not None:
            own.close()
    spec = feed.spec
    ddl = ", ".join(
        [f"`{c.name}` {spark_type(c.type)}" for c in spec.columns]
        + [f"`{ROW_ID_COLUMN}` binary", f"`{CHANGE_COLUMN}` string", f"`{SNAPSHOT_COLUMN}` bigint"]
    )
    rows = feed.rows
    texts = [c.name for c in spec.columns if c.type in ("TIME", "UUID")]
    if texts:  # Spark holds these as text: DuckDB's, as every other reader prints them
        rows = columns_as_text(rows, texts)
    return spark.createDataFrame(rows, ddl)


def _frame(
    spark: SparkSession, spec: TableSpec, files: list[tuple[str, int]], window: TimeRange | None
) -> DataFrame:
    ddl = ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in spec.columns)
    if not files:
        return spark.createDataFrame([], ddl)
    frame = read_files(spark, spec, files).select(*(f"`{c.name}`" for c in spec.columns))
    from pyspark.sql import functions as F

    field = spec.time_partition_field
    if window is not None and field is not None:
        source = spec.column(field.source)
        for condition in window_conditions(source.name, source.type, window, spark=True):
            frame = frame.filter(F.expr(condition))
    return frame


def query_with_spark(
    spark: SparkSession,
    sql: str,
    *,
    runtime: Runtime,
    snapshot_id: int | None = None,
    as_of: datetime | None = None,
) -> pa.Table:
    """Run one SELECT in Spark over snapshot-pinned views of the tables it names (each read
    with :func:`read_table`), and return the result as Arrow.

    Spark SQL is not sandboxed as DuckDB queries are: it can read files by path
    (``parquet.`/path` ``) and has no result caps. It is for trusted users on their own
    machine or job, where Spark's memory and scale are the point."""
    from icefloe.emr_query import pin_snapshots

    snapshots = pin_snapshots(runtime.meta, sql, snapshot_id=snapshot_id, as_of=as_of)
    result: pa.Table = query_frame(spark, sql, runtime=runtime, snapshots=snapshots).toArrow()
    return result


def query_frame(
    spark: SparkSession, sql: str, *, runtime: Runtime, snapshots: dict[str, int]
) -> DataFrame:
    """One SELECT over views of the tables it names, each at its snapshot in ``snapshots``
    (see :func:`icefloe.emr_query.pin_snapshots`), as a Spark DataFrame."""
    from icefloe.emr_query import select_statement

    statement = select_statement(sql)
    for name in sorted(analyze(statement).tables):
        if name not in snapshots:
            raise InvalidInputError(f"table {name!r} has no pinned snapshot")
        frame = read_table(spark, name, snapshot_id=snapshots[name], runtime=runtime)
        frame.createOrReplaceTempView(name)
    return spark.sql(statement)


def run_query_request(spark: SparkSession, request: SparkQueryRequest, *, runtime: Runtime) -> int:
    """Run a query job's request and write its result as Parquet at ``request.result_uri``
    (which must not exist yet: a job run again fails rather than mixing results); returns
    the result's row count."""
    frame = query_frame(spark, request.sql, runtime=runtime, snapshots=request.snapshots)
    frame.write.mode("errorifexists").parquet(request.result_uri)
    rows: int = spark.read.parquet(request.result_uri).count()
    return rows
