"""Arrow input's checks below the top of a column, through load_batch: text that is not UTF-8
found at any depth and named by row and path (rows counted across chunks and slices, bytes
behind a NULL not looked at), two struct fields of one name refused, and parts of Arrow's null
type read as NULL values of the declared type."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.errors import BatchRejectedError
from icefloe.ingest.load import load_batch
from icefloe.ingest.sources import InsertLimits, arrow_batch
from icefloe.spec import TableSpec

LIMITS = InsertLimits()
SPEC = TableSpec.create(
    name="t",
    schema=(
        "s VARCHAR, l VARCHAR[], st STRUCT(a VARCHAR, t TIMESTAMP, inner STRUCT(x INTEGER)),"
        " ls STRUCT(k VARCHAR, v INTEGER)[], mm MAP(VARCHAR, STRUCT(a VARCHAR[])),"
        " mi MAP(INTEGER, VARCHAR)"
    ),
)
BAD = b"x\xff"


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duck.connect(threads=1)
    yield connection
    connection.close()


def text(*values: bytes) -> pa.Array:
    return pa.array(list(values), pa.binary()).view(pa.string())


def offsets(*at: int) -> pa.Array:
    return pa.array(at, pa.int32())


def load(con: duckdb.DuckDBPyConnection, table: pa.Table) -> pa.Table:
    return load_batch(con, SPEC, arrow_batch(table, limits=LIMITS), limits=LIMITS)


def refused_at(con: duckdb.DuckDBPyConnection, table: pa.Table) -> list[tuple[int | None, str]]:
    with pytest.raises(BatchRejectedError) as refused:
        load(con, table)
    return [(p.row, p.field or "") for p in refused.value.problems]


CASES: dict[str, tuple[pa.Table, list[tuple[int | None, str]]]] = {
    "a-sliced-list": (
        pa.table({"l": pa.ListArray.from_arrays(offsets(0, 2, 3, 5), text(b"a", BAD, *[b"c", b"d", BAD])).slice(1)}),
        [(1, "l[1]")],
    ),
    "a-list-after-a-null-list-over-values": (
        pa.table(
            {
                "l": pa.ListArray.from_arrays(
                    offsets(0, 2, 3, 5), text(b"a", BAD, b"c", b"d", BAD), mask=pa.array([True, False, False])
                )
            }
        ),
        [(2, "l[1]")],
    ),
    "a-large-list": (
        pa.table({"l": pa.LargeListArray.from_arrays(pa.array([0, 2, 3], pa.int64()), text(b"a", b"b", BAD))}),
        [(1, "l[0]")],
    ),
    "a-fixed-size-list": (
        pa.table({"l": pa.FixedSizeListArray.from_arrays(text(b"a", b"b", b"c", BAD), 2)}),
        [(1, "l[1]")],
    ),
    "a-list-of-string-views": (
        pa.table({"l": pa.ListArray.from_arrays(offsets(0, 2), text(b"a", BAD).cast(pa.string_view()))}),
        [(0, "l[1]")],
    ),
    "a-sliced-struct": (
        pa.table({"st": pa.StructArray.from_arrays([text(b"a", b"b", BAD, b"c")], names=["a"]).slice(1)}),
        [(1, "st.a")],
    ),
    "a-struct-field-in-a-later-chunk": (
        pa.Table.from_batches(
            [
                pa.record_batch({"st": pa.StructArray.from_arrays([text(b"a", b"b")], names=["a"])}),
                pa.record_batch({"st": pa.StructArray.from_arrays([text(b"c", BAD)], names=["a"])}),
            ]
        ),
        [(3, "st.a")],
    ),
    "a-map-value-under-an-integer-key": (
        pa.table({"mi": pa.MapArray.from_arrays(offsets(0, 1, 3), pa.array([1, 2, 3], pa.int32()), text(b"a", b"b", BAD))}),
        [(1, "mi['3']")],
    ),
    "a-list-in-a-struct-in-a-map": (
        pa.table(
            {
                "mm": pa.MapArray.from_arrays(
                    offsets(0, 1),
                    pa.array(["k"]),
                    pa.StructArray.from_arrays([pa.ListArray.from_arrays(offsets(0, 2), text(b"ok", BAD))], names=["a"]),
                )
            }
        ),
        [(0, "mm['k'].a[1]")],
    ),
    "two-columns-named-by-row": (
        pa.table({"s": text(b"a", BAD), "st": pa.StructArray.from_arrays([text(BAD, b"b")], names=["a"])}),
        [(0, "st.a"), (1, "s")],
    ),
    "two-struct-fields-of-one-name": (
        pa.table({"st": pa.StructArray.from_arrays([text(b"a"), text(b"b")], names=["a", "a"])}),
        [(None, "st.a")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_arrow_nested_input_is_refused_naming_each_row_and_path(
    con: duckdb.DuckDBPyConnection, case: str
) -> None:
    table, expected = CASES[case]
    assert refused_at(con, table) == expected


def test_arrow_bytes_behind_a_null_are_not_looked_at(con: duckdb.DuckDBPyConnection) -> None:
    # Given bytes that are not UTF-8 only behind NULLs: a NULL struct's field, a NULL list's
    # values, a dictionary entry no row uses
    table = pa.table(
        {
            "st": pa.StructArray.from_arrays([text(b"a", BAD)], names=["a"], mask=pa.array([False, True])),
            "l": pa.ListArray.from_arrays(offsets(0, 1, 2), text(BAD, b"b"), mask=pa.array([True, False])),
            "s": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int8()), text(b"a", BAD)),
        }
    )  # fmt: skip

    # Then the batch loads, those values NULL
    assert load(con, table).select(["st", "l", "s"]).to_pylist() == [
        {"st": {"a": "a", "t": None, "inner": None}, "l": None, "s": "a"},
        {"st": None, "l": ["b"], "s": "a"},
    ]


def test_arrow_null_typed_parts_at_any_depth_load_as_nulls_of_the_declared_type(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # Given null-typed parts: a struct field whose declared type is a leaf, one whose declared
    # type is a struct, a field inside a list's structs, a map's values, whole nested columns
    table = pa.table(
        {
            "st": pa.array([{"a": "x", "t": None, "inner": None}, None]),
            "ls": pa.array([[{"k": None, "v": None}], []]),
            "mm": pa.array([[("k", None)], None], pa.map_(pa.string(), pa.null())),
            "mi": pa.nulls(2),
        }
    )
    assert pa.types.is_null(table.schema.field("st").type.field("inner").type)

    # Then they load as NULLs
    assert load(con, table).select(["st", "ls", "mm", "mi"]).to_pylist() == [
        {"st": {"a": "x", "t": None, "inner": None}, "ls": [{"k": None, "v": None}],
         "mm": [("k", None)], "mi": None},
        {"st": None, "ls": [], "mm": None, "mi": None},
    ]  # fmt: skip

    # And a null-typed field the struct does not declare is still refused by its path
    unknown = pa.table({"st": pa.array([{"zz": None}])})
    assert refused_at(con, unknown) == [(None, "st.zz")]
