"""Partitioning sorts in Arrow: for every orderable type it gives the order DuckDB's ORDER BY
gives (nulls first), so files are written exactly as they were when DuckDB sorted them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.ingest.layout import (
    arrow_partition_keys,
    duckdb_partition_keys,
    sorted_rows,
    split_partitions,
)
from icefloe.ingest.row_ids import ROW_ID_COLUMN, ROW_ID_TYPE, new_row_ids
from icefloe.spec import TableSpec

# Each orderable type with a DuckDB expression drawing from few values (so ties are common,
# and _row_id must break them), extremes and non-ASCII text included.
VALUES = {
    "TINYINT": "CAST(floor(random() * 256) - 128 AS TINYINT)",
    "SMALLINT": "CAST(floor(random() * 40) - 20 AS SMALLINT)",
    "INTEGER": "CAST(floor(random() * 40) - 20 AS INTEGER)",
    "BIGINT": "(CAST(floor(random() * 40) - 20 AS BIGINT) * 461168601842738790)",
    "HUGEINT": "(CAST(floor(random() * 40) - 20 AS HUGEINT) * 1000000000000000000000)",
    "UTINYINT": "CAST(floor(random() * 256) AS UTINYINT)",
    "USMALLINT": "CAST(floor(random() * 65536) AS USMALLINT)",
    "UINTEGER": "CAST(floor(random() * 40) * 100000000 AS UINTEGER)",
    "UBIGINT": "(CAST(floor(random() * 40) AS UBIGINT) * 461168601842738790)",
    "FLOAT": "CAST((random() - 0.5) * 1e30 AS FLOAT)",
    "DOUBLE": "CASE WHEN random() < 0.1 THEN -0.0 ELSE (random() - 0.5) * 1e300 END",
    "DECIMAL(18,3)": "CAST((random() - 0.5) * 1e12 AS DECIMAL(18,3))",
    "DATE": "DATE '2026-01-01' + CAST(floor(random() * 30) - 15 AS INTEGER)",
    "TIMESTAMP": "TIMESTAMP '2026-01-01' + to_microseconds(CAST(random() * 1e11 AS BIGINT))",
    "TIMESTAMPTZ": "CAST(TIMESTAMP '2026-01-01' + to_seconds(CAST(random() * 1e6 AS BIGINT))"
    " AS TIMESTAMPTZ)",
    "TIME": "TIME '00:00:00' + to_microseconds(CAST(random() * 8.64e10 AS BIGINT))",
    "BOOLEAN": "random() < 0.5",
    "VARCHAR": "list_reduce(['', 'a', 'B', 'é', '日', 'z', 'aa', 'ß', ' '][1:CAST(floor(random()"
    " * 4) AS INTEGER) + 1], (a, b) -> a || b)",
    "UUID": "CAST(md5(CAST(floor(random() * 50) AS VARCHAR)) AS UUID)",
}


@pytest.mark.parametrize("column_type", sorted(VALUES))
def test_rows_are_ordered_as_duckdb_orders_them(column_type: str) -> None:
    # Given 2,000 rows over three days, a sort key of this type with ties and NULLs
    spec = TableSpec.create(
        name="t",
        schema=f"ts TIMESTAMP NOT NULL, k {column_type}, n INTEGER",
        partition_by="day(ts)",
        sort_by="k",
    )
    con = duck.connect(threads=1)
    con.execute("SELECT setseed(0.42)")
    rows = con.execute(
        "SELECT TIMESTAMP '2026-01-01' + to_seconds(CAST(floor(random() * 259200) AS BIGINT))"
        f" AS ts, CASE WHEN random() < 0.1 THEN NULL ELSE {VALUES[column_type]} END AS k,"
        " CAST(range AS INTEGER) AS n FROM range(2000)"
    ).to_arrow_table()
    rows = rows.append_column(ROW_ID_COLUMN, new_row_ids(rows.num_rows))

    # When they are partitioned and sorted
    parts = split_partitions(con, spec, rows)
    ordered = [sorted_rows(spec, rows, p) for p in parts]

    # Then each part holds its day's rows, and the concatenation is DuckDB's order
    assert [p.path for p in parts] == [f"day=2026-01-0{d}" for d in (1, 2, 3)]
    con.register("batch", rows)
    expected = con.execute(
        "SELECT n FROM batch ORDER BY CAST(date_trunc('day', ts) AS TIMESTAMP),"
        f" k ASC NULLS FIRST, {ROW_ID_COLUMN}"
    ).to_arrow_table()
    got = pa.concat_tables([part.select(["n"]) for part in ordered])
    assert got.column("n").to_pylist() == expected.column("n").to_pylist()
    # And the row id stays 16 fixed bytes, as merges write it
    assert all(part.schema.field(ROW_ID_COLUMN).type == ROW_ID_TYPE for part in ordered)


# Partition sources whose keys Arrow computes, with values from far before 1970 to 9999, so
# that flooring negative epochs, leap days and year ends are all met.
KEY_SOURCES = {
    "TIMESTAMP": "TIMESTAMP '0001-01-01' + to_microseconds(CAST(random() * 3.1e17 AS BIGINT))",
    "DATE": "DATE '0001-01-01' + CAST(floor(random() * 3650000) AS INTEGER)",
    "VARCHAR": VALUES["VARCHAR"],
    "BIGINT": VALUES["BIGINT"],
    "UTINYINT": VALUES["UTINYINT"],
    "BOOLEAN": VALUES["BOOLEAN"],
}
KEY_FIELDS = {
    "TIMESTAMP": ("year(k)", "month(k)", "day(k)", "hour(k)", "k"),
    "DATE": ("year(k)", "month(k)", "day(k)", "k"),
}


@pytest.mark.parametrize(
    ("column_type", "partition_by"),
    [(t, f) for t in KEY_SOURCES for f in KEY_FIELDS.get(t, ("k",))],
)
def test_arrow_computes_the_partition_keys_duckdb_computes(
    column_type: str, partition_by: str
) -> None:
    # Given 3,000 random values (a tenth null) of a partition source
    spec = TableSpec.create(
        name="t", schema=f"k {column_type}, ts TIMESTAMP", partition_by=partition_by
    )
    con = duck.connect(threads=1)
    con.execute("SELECT setseed(0.17)")
    rows = con.execute(
        f"SELECT CASE WHEN random() < 0.1 THEN NULL ELSE {KEY_SOURCES[column_type]} END AS k"
        " FROM range(3000)"
    ).to_arrow_table()

    # When Arrow computes the keys, and DuckDB does
    in_arrow = arrow_partition_keys(spec, rows)
    in_duckdb = duckdb_partition_keys(con, spec, rows)

    # Then they are the same keys, of the same type
    assert in_arrow is not None
    assert in_arrow.schema == in_duckdb.schema
    assert in_arrow.column(0).to_pylist() == in_duckdb.column(0).to_pylist()


def test_transforms_arrow_lacks_are_left_to_duckdb() -> None:
    rows = pa.table({"k": pa.array(["ab", "cd"]), "n": pa.array([1, 2])})
    for partition_by in ("truncate[1](k)", "bucket[4](k)"):
        spec = TableSpec.create(name="t", schema="k VARCHAR, n BIGINT", partition_by=partition_by)
        assert arrow_partition_keys(spec, rows) is None
    zoned = TableSpec.create(name="t", schema="k TIMESTAMPTZ", partition_by="day(k)")
    assert (
        arrow_partition_keys(zoned, pa.table({"k": pa.array([0], pa.timestamp("us", "UTC"))}))
        is None
    )
