"""Statistics of nested leaves: min, max and null count of the leaves a table tracks, equal to
what DuckDB computes over the same rows; none for leaves under a list or map, or past the cap."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa

from icefloe.datafiles import encode_parquet
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.spec import TableSpec
from icefloe.spec.table_spec import MAX_STATS_LEAVES

SPEC = TableSpec.create(
    name="ev",
    schema="ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, n INTEGER, page STRUCT(url VARCHAR,"
    " d DATE, f DOUBLE, extra JSON, raw BLOB)), tags STRUCT(k VARCHAR)[], m MAP(VARCHAR, INTEGER)",
    sort_by="ts",
)


def _value(rng: random.Random, kind: str) -> str:
    if rng.random() < 0.2:
        return "NULL"
    if kind == "VARCHAR":
        return f"'{rng.choice('abcxyz')}{rng.randint(0, 99)}'"
    if kind == "INTEGER":
        return str(rng.randint(-1000, 1000))
    if kind == "DATE":
        return f"DATE '2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}'"
    return repr(rng.uniform(-5, 5))


def _rows(rng: random.Random, count: int) -> pa.Table:
    values = []
    for i in range(count):
        page = (
            "NULL"
            if rng.random() < 0.2
            else f"{{'url': {_value(rng, 'VARCHAR')}, 'd': {_value(rng, 'DATE')},"
            f" 'f': {_value(rng, 'DOUBLE')}, 'extra': '{{}}', 'raw': NULL}}"
        )
        context = (
            "NULL"
            if rng.random() < 0.15
            else f"{{'ip': {_value(rng, 'VARCHAR')}, 'n': {_value(rng, 'INTEGER')}, 'page': {page}}}"
        )
        values.append(
            f"(TIMESTAMP '2026-11-01' + INTERVAL {i} SECOND, {context}, [{{'k': 'zz'}}],"
            f" MAP {{'a': {i}}})"
        )
    casts = ", ".join(f"CAST(c{i} AS {c.type}) AS {c.name}" for i, c in enumerate(SPEC.columns))
    table = duckdb.sql(
        f"SELECT {casts} FROM (VALUES {', '.join(values)}) AS v(c0, c1, c2, c3)"
    ).to_arrow_table()
    return table.append_column(ROW_ID_COLUMN, new_row_ids(table.num_rows))


def test_tracked_leaves_are_struct_only_orderable_leaves_in_schema_order() -> None:
    assert SPEC.stats_leaves == (
        "context.ip",
        "context.n",
        "context.page.url",
        "context.page.d",
        "context.page.f",
    )
    flat = TableSpec.create(name="flat", schema="a BIGINT, tags VARCHAR[]")
    assert flat.stats_leaves == ()


def test_nested_leaf_statistics_equal_duckdb_s_over_the_same_rows() -> None:
    rng = random.Random(6)
    for _ in range(20):
        rows = _rows(rng, rng.randint(1, 60))
        stats = encode_parquet(rows, spec=SPEC, row_group_sizes=rng.randint(1, 25)).column_stats
        assert not any(key.startswith(("tags", "m.", "context.page.extra")) for key in stats)
        assert "context.page.raw" not in stats
        con = duckdb.connect()
        con.register("t", rows)
        for leaf in SPEC.stats_leaves:
            expr = leaf  # DuckDB's dotted struct access
            low, high, nulls = con.execute(
                f"SELECT min({expr}), max({expr}), count(*) FILTER (WHERE {expr} IS NULL) FROM t"
            ).fetchone()  # type: ignore[misc]
            got = stats[leaf]
            assert got.null_count == nulls, leaf
            if low is None:
                assert (got.min, got.max) == (None, None), leaf
            else:
                as_text = (lambda v: v.isoformat()) if leaf == "context.page.d" else (lambda v: v)
                assert (got.min, got.max) == (as_text(low), as_text(high)), leaf


def test_at_most_the_cap_of_nested_leaves_is_tracked_in_schema_order() -> None:
    fields = ", ".join(f"f{i:02d} INTEGER" for i in range(MAX_STATS_LEAVES + 8))
    spec = TableSpec.create(name="wide", schema=f"a BIGINT, s STRUCT({fields})")
    assert spec.stats_leaves == tuple(f"s.f{i:02d}" for i in range(MAX_STATS_LEAVES))
    row = {f"f{i:02d}": i for i in range(MAX_STATS_LEAVES + 8)}
    table = pa.table({"a": [1], "s": [row], ROW_ID_COLUMN: new_row_ids(1)})
    table = table.cast(
        pa.schema(
            [
                ("a", pa.int64()),
                ("s", pa.struct([(k, pa.int32()) for k in row])),
                (ROW_ID_COLUMN, pa.binary(16)),
            ]
        )
    )
    stats = encode_parquet(table, spec=spec, row_group_sizes=10).column_stats
    assert sorted(k for k in stats if k.startswith("s.")) == list(spec.stats_leaves)
    assert stats["s.f31"].min == 31 and "s.f32" not in stats
