"""Every data file carries Parquet field ids: each column's, each nested field's, the row id's."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import encode_parquet, file_schema
from icefloe.errors import InvalidArgumentError
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.spec import TableSpec
from support.field_ids import expected_field_ids, file_field_ids

NESTED = TableSpec.create(
    name="ev",
    schema="ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR,"
    " extra JSON)), tags STRUCT(k VARCHAR, v BIGINT)[], m MAP(VARCHAR, INTEGER), n BIGINT",
)
ROWS = [
    ("2026-11-01 00:00:00", "{'ip': '1.2.3.4', 'page': {'url': '/a', 'extra': '{\"x\": 1}'}}",
     "[{'k': 'a', 'v': 1}, NULL]", "MAP {'a': 1}", 1),
    ("2026-11-01 00:00:01", "NULL", "[]", "MAP {}", None),
    ("2026-11-01 00:00:02", "{'ip': NULL, 'page': NULL}", "NULL", "NULL", 3),
]  # fmt: skip


def _nested_rows() -> pa.Table:
    """Rows of NESTED as DuckDB's conversion gives them (list child ``l``, JSON as text)."""
    values = ", ".join(
        f"(TIMESTAMP '{ts}', {ctx}, {tags}, {m}, {'NULL' if n is None else n})"
        for ts, ctx, tags, m, n in ROWS
    )
    casts = ", ".join(f"CAST(c{i} AS {c.type}) AS {c.name}" for i, c in enumerate(NESTED.columns))
    names = ", ".join(f"c{i}" for i in range(len(NESTED.columns)))
    table = duckdb.sql(f"SELECT {casts} FROM (VALUES {values}) AS v({names})").to_arrow_table()
    return table.append_column(ROW_ID_COLUMN, new_row_ids(table.num_rows))


def test_a_nested_file_carries_every_field_id_and_reads_back_the_same_values(
    tmp_path: Path,
) -> None:
    rows = _nested_rows()
    encoded = encode_parquet(rows, spec=NESTED, row_group_sizes=2)
    ids = file_field_ids(encoded.data)
    assert ids == expected_field_ids(NESTED.layout)
    assert ids["context.page.url"] == 8 and ids["tags.element.v"] == 12 and ids["m.value"] == 14
    # The values are the same; JSON inside a struct is marked JSON, as a JSON column is
    back = pq.read_table(pa.BufferReader(encoded.data))
    assert back.to_pylist() == rows.to_pylist()
    assert back.schema.field("context").type.field("page").type.field("extra").type == pa.json_(
        pa.string()
    )
    # The repeated groups of lists and maps carry no id (Iceberg keeps ids on element, key
    # and value); DuckDB reads the file as it was written
    parquet = pq.read_metadata(pa.BufferReader(encoded.data)).schema.to_arrow_schema()
    assert parquet.field("tags").metadata[b"PARQUET:field_id"] == b"3"
    path = tmp_path / "f.parquet"
    path.write_bytes(encoded.data)
    con = duckdb.connect()
    assert con.execute(
        "SELECT count(*) FILTER (WHERE context IS NULL), sum(n) FROM read_parquet($p)",
        {"p": str(path)},
    ).fetchone() == (1, 4)
    assert con.execute(
        "SELECT name, field_id FROM parquet_schema($p) WHERE name IN ('list', 'key_value')",
        {"p": str(path)},
    ).fetchall() == [("list", None), ("key_value", None)]


def test_a_flat_file_carries_its_columns_ids_and_the_row_ids() -> None:
    spec = TableSpec.create(name="flat", schema="a BIGINT, b VARCHAR")
    table = pa.table({"a": [1, 2], "b": ["x", None], ROW_ID_COLUMN: new_row_ids(2)})
    encoded = encode_parquet(table, spec=spec, row_group_sizes=10)
    assert file_field_ids(encoded.data) == {"a": 1, "b": 2, ROW_ID_COLUMN: 2_147_483_000}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"a": [1], "zz": [2]}), "column 'zz' is not one of spec version 1's columns"),
        (
            pa.table({"s": pa.array([{"y": 1}], pa.struct([("y", pa.int64())]))}),
            r"column 's' \(struct<y: int64>\) is not spec version 1's STRUCT\(x BIGINT\):"
            r" struct fields \['y'\], expected \['x'\]",
        ),
        (
            pa.table({"s": pa.array([1])}),
            r"column 's' \(int64\) is not spec version 1's STRUCT\(x BIGINT\): int64 holds no"
            r" fields \['x'\]",
        ),
    ],
)
def test_a_table_not_of_the_layout_s_shape_is_refused_before_anything_is_written(
    table: pa.Table, message: str
) -> None:
    layout = TableSpec.create(name="t", schema="a BIGINT, s STRUCT(x BIGINT)").layout
    with pytest.raises(InvalidArgumentError, match=message):
        file_schema(table.schema, layout)
