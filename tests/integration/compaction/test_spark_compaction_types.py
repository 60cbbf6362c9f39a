"""Spark compaction at the edges of the column types: wide DECIMAL and FLOAT sums and ``any``
over NULLs give the merge worker's rows; tables Spark cannot compact as the worker does (a
TIME or HUGEINT column, a MAP key) are refused before anything is read, naming the DuckDB
engine, and the Spark reader refuses a TIME column plainly."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_spark_compaction import clone

from icefloe.compaction import SparkMergeUnsupportedError
from icefloe.compaction.local import compact_locally
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import drop_column
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spark import read_table
from icefloe.spark_files import SparkUnreadableTableError
from icefloe.spec import SizeTargets
from support.engines import spark_compact
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

TS = "2026-03-01T00:00:00"
DAY = datetime(2026, 3, 1)
NINES_38 = Decimal("9" * 38)
ARROW = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("id", pa.string()),
        ("d38", pa.decimal128(38, 0)),
        ("d29", pa.decimal128(38, 9)),
        ("d37", pa.decimal128(37, 1)),
        ("f", pa.float32()),
        ("plan", pa.string()),
    ]
)


def rows_of(lake: Lake, table: str, *, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in lake.rows(sql.format(table=table)))


def test_spark_sums_wide_decimals_and_floats_and_keeps_any_non_null_as_the_worker_does(
    lake: Lake, spark: Any
) -> None:
    # Given an aggregate table summing DECIMALs of 38 and 37 digits (more than a Java long
    # holds) and a FLOAT, and keeping any plan (NULL in most rows, and first in every file)
    for name in ("by_spark", "by_worker"):
        lake.create(
            name=name,
            schema="ts TIMESTAMP NOT NULL, id VARCHAR, d38 DECIMAL(38,0), d29 DECIMAL(38,9),"
            " d37 DECIMAL(37,1), f FLOAT, plan VARCHAR",
            partition_by="day(ts)",
            sort_by="id",
            merge="aggregate(id; ts:max, d38:sum, d29:sum, d37:sum, f:sum, plan:any)",
            sizes=SizeTargets(min_files_to_merge=2),
        )
    small = {"d38": Decimal(1), "d29": Decimal("1.5"), "d37": Decimal("2.5"), "f": 1.0}
    for n in range(2):
        batch: list[dict[str, Any]] = [
            {"ts": DAY, "id": f"any{k}", **small, "plan": None} for k in range(8) for _ in range(2)
        ]
        batch += [{"ts": DAY, "id": f"any{k}", **small, "plan": f"p{k}"} for k in range(8)]
        batch += [
            {"ts": DAY, "id": "d38", **small, "d38": NINES_38},  # overflows DECIMAL(38,0)
            {"ts": DAY, "id": "d29", **small, "d29": Decimal("9" * 29 + ".5")},  # (38,9)
            {"ts": DAY, "id": "d37", **small, "d37": Decimal("9" * 36 + ".9")},  # (37,1)
            {"ts": DAY, "id": "d37fit", **small, "d37": Decimal("4" * 36)},  # fits (37,1)
            # FLOAT_MAX plus less than half its ulp: DuckDB rounds the sum to FLOAT_MAX
            {"ts": DAY, "id": "fmax", **small, "f": [3.4028234e38, 1e31][n]},
            {"ts": DAY, "id": "finf", **small, "f": [3.4028234e38, 3.4028234e38][n]},
        ]
        lake.inserter.insert_arrow("by_spark", pa.Table.from_pylist(batch, schema=ARROW))
    clone(lake, "by_spark", "by_worker")

    # When Spark compacts one and the DuckDB engine (the merge worker) the other
    result = spark_compact(lake, spark, "by_spark")
    settings = load_settings({"ICEFLOE_WAREHOUSE": str(lake.objects.root)}).core
    by_worker = compact_locally(
        meta=lake.meta, objects=lake.objects, settings=settings, table="by_worker", engine="duckdb"
    )
    assert by_worker is not None and by_worker.count("committed") == 1

    # Then both hold the same rows, 'any' picking the non-NULL plan of each group
    assert result.count("committed") == 1
    sql = "SELECT id, ts, d38::VARCHAR, d29::VARCHAR, d37::VARCHAR, f, plan, _row_id FROM {table}"
    assert rows_of(lake, "by_spark", sql=sql) == rows_of(lake, "by_worker", sql=sql)
    counts = "SELECT id, count(*) AS c, min(plan) AS plan FROM {table} GROUP BY id ORDER BY id"
    merged = lake.rows(counts.format(table="by_spark"))
    assert merged == lake.rows(counts.format(table="by_worker"))
    kept = {r["id"]: r["c"] for r in merged}
    assert kept == {
        **{f"any{k}": 1 for k in range(8)},
        **{"d38": 2, "d29": 2, "d37": 2, "d37fit": 1, "fmax": 1, "finf": 2},
    }
    assert [r["plan"] for r in merged if str(r["id"]).startswith("any")] == [
        f"p{k}" for k in range(8)
    ]


@pytest.mark.parametrize(
    ("schema", "merge", "row", "refusal"),
    [
        ("opens TIME", "append", {"opens": "09:30:00"}, "'opens' .*TIME"),
        (
            "hours STRUCT(opens TIME)[]",
            "append",
            {"hours": [{"opens": "09:30:00"}]},
            "'hours' .*TIME",
        ),
        ("h HUGEINT", "append", {"h": 2**127 - 1}, "'h' .*HUGEINT"),
        ("m MAP(VARCHAR, INTEGER)", "replace(m)", {"m": {"a": 1}}, "key 'm' .*MAP"),
        (
            "m STRUCT(tags MAP(VARCHAR, INTEGER))",
            "aggregate(m; ts:max)",
            {"m": {"tags": {"a": 1}}},
            "key 'm' .*MAP",
        ),
    ],
)
def test_spark_refuses_what_it_cannot_compact_as_the_worker_does_naming_the_duckdb_engine(
    lake: Lake, spark: Any, schema: str, merge: str, row: dict[str, Any], refusal: str
) -> None:
    lake.create(
        name="t",
        schema=f"ts TIMESTAMP NOT NULL, {schema}",
        partition_by="day(ts)",
        sort_by="ts",
        merge=merge,
        sizes=SizeTargets(min_files_to_merge=2),
    )
    for _ in range(2):
        lake.inserter.insert_rows("t", [{"ts": TS, **row}])
    with pytest.raises(SparkMergeUnsupportedError, match=f"table 't'.*{refusal}.*DuckDB engine"):
        spark_compact(lake, spark, "t")


def test_a_time_column_dropped_since_is_refused_by_spark_compaction_and_the_reader(
    lake: Lake, spark: Any, tmp_path: Path
) -> None:
    # Given files holding a TIME column that the table has dropped since
    lake.create(
        name="t",
        schema="ts TIMESTAMP NOT NULL, opens TIME",
        partition_by="day(ts)",
        sort_by="ts",
        sizes=SizeTargets(min_files_to_merge=2),
    )
    lake.inserter.insert_rows("t", [{"ts": TS, "opens": "09:30:00"}])
    before = lake.head("t")
    alter_table(meta=lake.meta, table="t", changes=[drop_column("opens")])
    lake.inserter.insert_rows("t", [{"ts": TS}])
    runtime = Runtime(
        settings=load_settings({"ICEFLOE_HOME": str(tmp_path)}).core,
        meta=lake.meta,
        objects=lake.objects,
    )

    # Then the Spark reader refuses the head and the older snapshot, naming the column
    for snapshot in (None, before):
        with pytest.raises(SparkUnreadableTableError, match=r"table 't': column 'opens'.*DuckDB"):
            read_table(spark, "t", snapshot_id=snapshot, runtime=runtime)
    # And Spark compaction refuses the table, naming the DuckDB engine
    with pytest.raises(SparkMergeUnsupportedError, match=r"'opens' .*TIME.*DuckDB engine"):
        spark_compact(lake, spark, "t")
