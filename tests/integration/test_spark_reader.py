"""Reading a table from Spark: the same rows and schema as the query engine, at the head, at a
pinned older snapshot, and in a time range (issue: interop)."""

from __future__ import annotations

from datetime import datetime
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
