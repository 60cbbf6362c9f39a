"""Reading a table from Spark: the same rows and schema as the query engine, at the head, at a
pinned older snapshot, and in a time range (issue: interop)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spark import read_table
from icefloe.spark_files import spark_type
from support.merge_lake import START, Lake

pytestmark = pytest.mark.integration

ROWS = "SELECT ts, event, user_id, CAST(properties AS VARCHAR) AS properties FROM events"


def canonical(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(tuple(None if v is None else str(v) for v in row)) for row in rows)


def engine_rows(lake: Lake, sql: str, snapshot_id: int | None = None) -> list[str]:
    table = lake.engine.query(sql, snapshot_id=snapshot_id).rows
    return canonical([tuple(r.values()) for r in table.to_pylist()])


def spark_rows(frame: Any) -> list[str]:
    return canonical([tuple(row) for row in frame.collect()])


def test_spark_reads_exactly_the_snapshot_the_engine_reads(
    lake: Lake, spark: Any, tmp_path: Path
) -> None:
    # Given a table with merged and unmerged files, and an older snapshot
    lake.create()
    lake.insert_batches("events", batches=4, rows=40, days=3)
    older = lake.head()
    lake.merge("events")
    lake.insert_batches("events", batches=2, rows=20, days=3, seed=30)
    runtime = Runtime(
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        meta=lake.meta,
        objects=lake.objects,
    )

    # When Spark reads it at the head, at the older snapshot and in one day
    head = read_table(spark, "events", runtime=runtime)
    then = read_table(spark, "events", snapshot_id=older, runtime=runtime)
    day = read_table(spark, "events", start=START, end=datetime(2026, 3, 2), runtime=runtime)

    # Then each holds the rows the engine answers, with the table's columns and types
    assert spark_rows(head) == engine_rows(lake, ROWS)
    assert spark_rows(then) == engine_rows(lake, ROWS, snapshot_id=older)
    assert spark_rows(then) != spark_rows(head)
    assert spark_rows(day) == engine_rows(
        lake, ROWS + " WHERE ts >= '2026-03-01' AND ts < '2026-03-02'"
    )
    assert 0 < day.count() < head.count()
    spec = lake.meta.get_table("events").spec
    assert [(f.name, f.dataType.simpleString()) for f in head.schema.fields] == [
        (c.name, spark_type(c.type)) for c in spec.columns
    ]


@pytest.mark.parametrize("column_type", ["TIMESTAMP", "TIMESTAMPTZ", "DATE"])
def test_a_window_is_read_as_utc_instants_whatever_the_sessions_time_zone(
    lake: Lake, spark: Any, tmp_path: Path, column_type: str
) -> None:
    # Given a table of one row an hour over three days, time-partitioned by day
    lake.create(schema=f"ts {column_type} NOT NULL, n INTEGER", sort_by="n")
    lake.inserter.insert_rows(
        "events",
        [
            {
                "ts": f"2026-03-0{1 + h // 24}"
                + ("" if column_type == "DATE" else f"T{h % 24:02d}:00:00Z"),
                "n": h,
            }
            for h in range(72)
        ],
    )
    runtime = Runtime(
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        meta=lake.meta,
        objects=lake.objects,
    )
    # When Spark reads a window with a naive and an aware bound, in a session far from UTC
    start, end = (
        datetime(2026, 3, 1, 10),
        datetime(2026, 3, 2, 12, tzinfo=timezone(timedelta(hours=2))),
    )
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        frame = read_table(spark, "events", start=start, end=end, runtime=runtime)
        got = sorted(row["n"] for row in frame.collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    # Then it holds the rows the engine keeps for that window (UTC 2026-03-01 10:00 to
    # 2026-03-02 10:00; a DATE at its midnight)
    window = "ts >= TIMESTAMP '2026-03-01 10:00:00' AND ts < TIMESTAMP '2026-03-02 10:00:00'"
    expected = lake.engine.query(f"SELECT n FROM events WHERE {window} ORDER BY n").rows
    assert got == expected.column("n").to_pylist() and got


def test_an_empty_table_is_an_empty_frame_with_the_schema(
    lake: Lake, spark: Any, tmp_path: Path
) -> None:
    lake.create()
    runtime = Runtime(
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        meta=lake.meta,
        objects=lake.objects,
    )
    frame = read_table(spark, "events", runtime=runtime)
    assert frame.count() == 0 and frame.columns == ["ts", "event", "user_id", "properties"]


@pytest.mark.parametrize(
    ("duckdb_type", "expected"),
    [("BIGINT", "bigint"), ("DECIMAL(10,2)", "decimal(10,2)"), ("VARCHAR[]", "array<string>"),
     ("TIMESTAMP", "timestamp_ntz"), ("TIMESTAMPTZ", "timestamp"), ("JSON", "string"),
     ('STRUCT(ip VARCHAR, "order" INTEGER)', "struct<`ip`:string,`order`:int>"),
     ("MAP(VARCHAR, DECIMAL(10,2))", "map<string,decimal(10,2)>"),
     ("STRUCT(k VARCHAR, v TIMESTAMP[])[]", "array<struct<`k`:string,`v`:array<timestamp_ntz>>>")],
)  # fmt: skip
def test_column_types_map_to_spark_types(duckdb_type: str, expected: str) -> None:
    assert spark_type(duckdb_type) == expected
