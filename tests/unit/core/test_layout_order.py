"""Partitioning sorts in Arrow: for every orderable type it gives the order DuckDB's ORDER BY
gives (nulls first), so files are written exactly as they were when DuckDB sorted them, whether
the sort keys pack into one integer per row or are sorted column by column."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.ingest import layout
from icefloe.ingest.layout import (
    Partition,
    arrow_partition_keys,
    duckdb_partition_keys,
    packed_sort_key,
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


def test_packed_sort_key_puts_the_first_key_highest_and_nulls_first() -> None:
    # Given a string key (a < b, 2 bits) and an integer key (1..3, 2 bits), nulls in both
    keys = [pa.array(["b", None, "a"]), pa.array([3, 1, None], pa.int64())]

    # Then each row's key is (string rank << 2) | integer rank, a null ranking 0
    packed = packed_sort_key(keys, 3)
    assert packed is not None
    assert packed.type == pa.uint64()
    assert packed.to_pylist() == [(2 << 2) | 3, (0 << 2) | 1, (1 << 2) | 0]


def test_keys_without_ranks_or_beyond_64_bits_are_not_packed() -> None:
    assert packed_sort_key([pa.array([1.5, 0.5])], 2) is None
    extremes = pa.array([-(2**63), 2**63 - 1], pa.int64())
    assert packed_sort_key([extremes], 2) is None
    assert packed_sort_key([pa.array([0, 2**32], pa.int64())] * 2, 2) is None
    # A key with no value orders nothing: it takes no bits
    assert packed_sort_key([pa.nulls(2, pa.int64()), extremes.slice(1)], 2) is not None


# Values whose range needs all 64 bits (or more), so that the ranks do not fit.
EXTREMES = {
    "BIGINT": "CAST(CASE WHEN random() < 0.4 THEN -9223372036854775808 WHEN random() < 0.5"
    " THEN 9223372036854775807 ELSE 0 END AS BIGINT)",
    "UBIGINT": "CAST(CASE WHEN random() < 0.5 THEN 0 ELSE 18446744073709551615 END AS UBIGINT)",
    "TIMESTAMP": "CASE WHEN random() < 0.5 THEN TIMESTAMP '0001-01-01' ELSE"
    " TIMESTAMP '9999-12-31 23:59:59.999999' END",
}


def _random_key(rng: random.Random) -> tuple[str, str]:
    """A sort key's type and a DuckDB expression for its values: as in VALUES, or at the
    type's extremes, or drawn from a handful of values (many ties); some or all null."""
    column_type = rng.choice(sorted(VALUES))
    values = VALUES[column_type]
    shape = rng.random()
    if shape < 0.25 and column_type in EXTREMES:
        values = EXTREMES[column_type]
    elif shape < 0.6:
        few = rng.randint(1, 6)
        values = (
            f"(SELECT list(v) FROM (SELECT {values} AS v FROM range({few})))"
            f"[CAST(floor(random() * {few}) AS INTEGER) + 1]"
        )
    null_share = rng.choice((0.0, 0.0, 0.1, 0.5, 1.0))
    return column_type, f"CASE WHEN random() < {null_share} THEN NULL ELSE {values} END"


def _random_rows(rng: random.Random) -> int:
    if rng.random() < 0.1:
        return rng.randint(0, 3)
    return int(3000 ** rng.random())


def _sorted_as_duckdb_sorts(
    con: duckdb.DuckDBPyConnection, rng: random.Random
) -> tuple[list[int], list[int], list[bool], int]:
    """One random case: the order ``sorted_rows`` gives, the order DuckDB's ORDER BY gives,
    for each partition whether its keys packed, and how many partitions were runs of rows
    (keys in order, no sort)."""
    keys = [_random_key(rng) for _ in range(rng.randint(1, 4))]
    partitioned = rng.random() < 0.7
    spec = TableSpec.create(
        name="t",
        schema=", ".join(
            ["ts TIMESTAMP NOT NULL", *(f"k{i} {t}" for i, (t, _) in enumerate(keys)), "n INTEGER"]
        ),
        partition_by="day(ts)" if partitioned else "",
        sort_by=", ".join(f"k{i}" for i in range(len(keys))),
    )
    # Some batches come in time order, as events mostly do: their partitions are runs of rows
    in_time_order = " ORDER BY ts" if rng.random() < 0.4 else ""
    rows = con.execute(
        "SELECT * FROM (SELECT TIMESTAMP '2026-01-01'"
        " + to_seconds(CAST(floor(random() * 259200) AS BIGINT)) AS ts,"
        f" {', '.join(f'{e} AS k{i}' for i, (_, e) in enumerate(keys))}"
        f" FROM range({_random_rows(rng)})){in_time_order}"
    ).to_arrow_table()
    rows = rows.append_column("n", pa.array(range(rows.num_rows), pa.int32()))
    rows = rows.append_column(ROW_ID_COLUMN, new_row_ids(rows.num_rows))

    parts = split_partitions(con, spec, rows)
    got = [n for p in parts for n in sorted_rows(spec, rows, p).column("n").to_pylist()]
    packed = [_packs(spec, rows, p) for p in parts]
    runs = sum(isinstance(p.positions, range) for p in parts)

    con.register("batch", rows)
    try:
        by_day = ["CAST(date_trunc('day', ts) AS TIMESTAMP)"] if partitioned else []
        by_keys = [f"k{i} ASC NULLS FIRST" for i in range(len(keys))]
        expected = con.execute(
            f"SELECT n FROM batch ORDER BY {', '.join([*by_day, *by_keys, ROW_ID_COLUMN])}"
        ).fetchall()
    finally:
        con.unregister("batch")
    return got, [n for (n,) in expected], packed, runs


def _packs(spec: TableSpec, rows: pa.Table, part: Partition) -> bool:
    keys = [rows.column(name) for name in spec.file_sort_keys]
    if isinstance(part.positions, range):
        keys = [key.slice(part.positions.start, len(part.positions)) for key in keys]
    elif part.positions is not None:
        keys = [key.take(part.positions) for key in keys]
    count = rows.num_rows if part.positions is None else len(part.positions)
    return count >= layout.PACKED_FROM_ROWS and packed_sort_key(keys, count) is not None


@pytest.mark.parametrize(
    "packed_from_rows", [0, layout.PACKED_FROM_ROWS], ids=["packed-when-they-fit", "as-shipped"]
)
def test_random_keys_are_ordered_as_duckdb_orders_them_packed_or_not(
    monkeypatch: pytest.MonkeyPatch, packed_from_rows: int
) -> None:
    # Given 300 random batches of 0 to 3,000 rows, with 1 to 4 sort keys of any orderable type,
    # their keys packed whenever they fit (or, as shipped, only in partitions of many rows:
    # none here, so every partition is sorted column by column)
    monkeypatch.setattr(layout, "PACKED_FROM_ROWS", packed_from_rows)
    rng = random.Random(20260101)
    con = duck.connect(threads=1)
    con.execute("SELECT setseed(0.23)")
    packed_parts = general_parts = run_parts = 0
    for case in range(300):
        # When each is partitioned and sorted, Then its order is DuckDB's
        got, expected, packed, runs = _sorted_as_duckdb_sorts(con, rng)
        assert got == expected, f"case {case}"
        packed_parts += sum(packed)
        general_parts += len(packed) - sum(packed)
        run_parts += runs

    # And batches in time order were split into runs without a sort, many times
    assert run_parts >= 100

    # And both the packed key and the multi-column sort were tried, many times
    if packed_from_rows == 0:
        assert packed_parts >= 50
        assert general_parts >= 50
    else:
        assert packed_parts == 0 and general_parts >= 300


def test_row_ids_from_several_chunks_are_sorted_by_the_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given 300 rows with ties, whose row ids increase within each chunk of 100 rows but fall
    # from one chunk to the next (as they may past 2^24 rows, the chunk size made 100 here)
    monkeypatch.setattr(layout, "ROW_ID_CHUNK_ROWS", 100)
    spec = TableSpec.create(name="t", schema="k BOOLEAN, n INTEGER", sort_by="k")
    rows = pa.table({"k": [i % 3 == 0 for i in range(300)], "n": list(range(300))})
    row_ids = pa.concat_arrays([new_row_ids(100, now_ms=ms) for ms in (3, 2, 1)])
    rows = rows.append_column(ROW_ID_COLUMN, row_ids)

    # When they are sorted, Then ties follow the row ids, not the rows' positions
    part = split_partitions(duck.connect(threads=1), spec, rows)[0]
    ordered = sorted_rows(spec, rows, part)
    expected = rows.sort_by([("k", "ascending"), (ROW_ID_COLUMN, "ascending")])
    assert ordered.column("n").to_pylist() == expected.column("n").to_pylist()


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


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([1, 1, 2, 2, 2, 5], pa.int64()),
        ([None, None, 1, 1, 3], pa.int64()),
        (["", "", "a", "b", "b"], pa.string()),
        ([None, "a", "a", "b"], pa.string()),
        ([float("nan"), float("nan"), 1.5, 1.5, 2.0], pa.float64()),
        ([None, float("nan"), float("nan"), 0.5], pa.float64()),
        ([False, False, True], pa.bool_()),
    ],
)
def test_partitions_start_where_the_key_changes_nulls_and_nan_each_one_value(
    values: list[object], kind: pa.DataType
) -> None:
    # Given ordered keys, runs of equal values (null equal to null, NaN to NaN)
    ordered = pa.table({"k": pa.array(values, kind)})

    # When the runs are found, Then each starts where the value changes
    def same(a: object, b: object) -> bool:
        return a == b or (a is None and b is None) or (a != a and b != b)  # NaN

    expected = [i for i, v in enumerate(values) if i == 0 or not same(values[i - 1], v)]
    assert layout._run_starts(ordered, ["k"]) == expected
