"""Nested columns from typed input (Arrow tables, Parquet files) through load_batch: a source
struct's fields matched by name at every level (never a whole-struct CAST, which reads a field
it cannot match as NULL), each leaf converted with a typed source's checks, a field the column
lacks refused by its path before any row is read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe import duck
from icefloe.errors import BatchRejectedError
from icefloe.ingest.load import load_batch
from icefloe.ingest.sources import InsertLimits, arrow_batch, stage_file
from icefloe.spec import TableSpec
from icefloe.spec.types import normalize_type

LIMITS = InsertLimits(max_value_bytes=10)
SPEC = TableSpec.create(
    name="t",
    schema=(
        "id INTEGER, s STRUCT(a INTEGER, b VARCHAR, c STRUCT(d DATE)),"
        " l STRUCT(k VARCHAR, v INTEGER)[], m MAP(INTEGER, DOUBLE)"
    ),
)
KINDS = ("arrow", "parquet")


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duck.connect(threads=1)
    yield connection
    connection.close()


def load(con: duckdb.DuckDBPyConnection, table: pa.Table, kind: str, tmp_path: Path) -> pa.Table:
    if kind == "arrow":
        return load_batch(con, SPEC, arrow_batch(table, limits=LIMITS), limits=LIMITS)
    path = tmp_path / "input.parquet"
    pq.write_table(table, path)
    return load_batch(con, SPEC, stage_file(path, fmt="parquet", limits=LIMITS), limits=LIMITS)


def refusal(con: duckdb.DuckDBPyConnection, table: pa.Table, kind: str, tmp_path: Path) -> str:
    with pytest.raises(BatchRejectedError) as caught:
        load(con, table, kind, tmp_path)
    return str(caught.value)


def string_map(entries: list[list[tuple[str, float]] | None]) -> pa.Array:
    return pa.array(entries, pa.map_(pa.string(), pa.float64()))


@pytest.mark.parametrize("kind", KINDS)
def test_fields_are_matched_by_name_and_nulls_kept_apart(
    con: duckdb.DuckDBPyConnection, kind: str, tmp_path: Path
) -> None:
    # Given fields in another order, one (c) absent from the source, NULL beside empty
    table = pa.table(
        {
            "id": [1, 2, 3],
            "s": [{"b": "x", "a": 1}, None, {"b": None, "a": None}],
            "l": [[{"v": 5, "k": "a"}, None], [], None],
            "m": string_map([[("1", 2.5), ("-3", 0.0)], [], None]),
        }
    )
    # Then each field lands in its own, by name; c is NULL; NULL and empty stay apart
    assert load(con, table, kind, tmp_path).to_pylist() == [
        {"id": 1, "s": {"a": 1, "b": "x", "c": None}, "l": [{"k": "a", "v": 5}, None],
         "m": [(1, 2.5), (-3, 0.0)]},
        {"id": 2, "s": None, "l": [], "m": []},
        {"id": 3, "s": {"a": None, "b": None, "c": None}, "l": None, "m": None},
    ]  # fmt: skip
    deep = pa.table({"s": [{"c": {"d": date(2026, 1, 2)}}]})
    assert load(con, deep, kind, tmp_path).column("s").to_pylist() == [
        {"a": None, "b": None, "c": {"d": date(2026, 1, 2)}}
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_the_column_lacks_is_refused_not_dropped(
    con: duckdb.DuckDBPyConnection, kind: str, tmp_path: Path
) -> None:
    # A renamed field (what a whole-struct CAST would read as NULL, silently), a leaf of another
    # type family, and a list where a struct is expected: each named by its path
    table = pa.table({"s": [{"a": 1, "client_ip": "x", "c": {"d": 1.5}}], "l": [[1]]})
    assert refusal(con, table, kind, tmp_path) == (
        "batch refused: field 's.client_ip': unknown field (the struct has no such field);"
        " field 's.c.d': expected DATE, but the input's type is DOUBLE;"
        f" field 'l[]': expected {normalize_type('STRUCT(k VARCHAR, v INTEGER)')}, but the input's"
        " type is BIGINT"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_each_leaf_is_checked_as_a_column_of_its_type(
    con: duckdb.DuckDBPyConnection, kind: str, tmp_path: Path
) -> None:
    table = pa.table(
        {
            "id": [1, 2, 3],
            "s": [{"a": 1}, {"a": 2**40, "b": "x" * 11}, None],
            "l": [None, None, [{"v": 1}, {"v": 2}, {"v": 2**31}]],
            "m": string_map([None, None, [("01", 1.0), ("7", 2.0)]]),
        }
    )
    assert refusal(con, table, kind, tmp_path) == (
        "batch refused: row 1, field 's.a': expected an integer that fits INTEGER (INTEGER);"
        " row 1, field 's.b': value is over the limit of 10 bytes;"
        " row 2, field 'l[2].v': expected an integer that fits INTEGER (INTEGER);"
        " row 2, field \"m['01']\": map key: expected an integer that fits INTEGER (INTEGER)"
    )
