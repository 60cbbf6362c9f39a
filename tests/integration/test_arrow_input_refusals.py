"""Arrow input refused before anything is stored, naming the row and the path at fault: text
that is not UTF-8 anywhere in a nested type (stored, it made every later read of the table
fail), and two columns of one name. A part of Arrow's null type inside a nested column (what
pyarrow infers for a field that is None in every row) is NULL values of the declared type."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.lake import Lake

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, s VARCHAR, l VARCHAR[], st STRUCT(a VARCHAR, t TIMESTAMP),"
    " m MAP(VARCHAR, VARCHAR), ls STRUCT(k VARCHAR, v INTEGER)[]"
)
BAD = b"caf\xc3\x28"  # a lead byte without its continuation: not UTF-8


def text(*values: bytes) -> pa.Array:
    """A string array holding the bytes as they are (Arrow does not check a view)."""
    return pa.array(list(values), pa.binary()).view(pa.string())


def two_rows(name: str, values: pa.Array) -> pa.Table:
    ts = pa.array([datetime(2026, 11, 1), datetime(2026, 11, 2)], pa.timestamp("us"))
    return pa.table({"ts": ts, name: values})


def offsets(*at: int) -> pa.Array:
    return pa.array(at, pa.int32())


# Per case: the column, its two rows (the text that is not UTF-8 in the second), the path named.
NOT_UTF8_CASES: dict[str, tuple[str, pa.Array, str]] = {
    "list-element": (
        "l",
        pa.ListArray.from_arrays(offsets(0, 1, 3), text(b"a", b"b", BAD)),
        "l[1]",
    ),
    "map-value": (
        "m",
        pa.MapArray.from_arrays(offsets(0, 1, 2), pa.array(["k", "q"]), text(b"a", BAD)),
        "m['q']",
    ),
    "map-key": (
        "m",
        pa.MapArray.from_arrays(offsets(0, 1, 2), text(b"k", BAD), text(b"a", b"b")),
        r"m['caf\xc3(']",
    ),
    "struct-field": (
        "st",
        pa.StructArray.from_arrays([text(b"a", BAD)], names=["a"]),
        "st.a",
    ),
    "list-of-struct-field": (
        "ls",
        pa.ListArray.from_arrays(
            offsets(0, 1, 3), pa.StructArray.from_arrays([text(b"a", b"b", BAD)], names=["k"])
        ),
        "ls[1].k",
    ),
    "dictionary-encoded": (
        "s",
        pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), text(b"a", BAD)),
        "s",
    ),
    "dictionary-encoded-struct-field": (
        "st",
        pa.StructArray.from_arrays(
            [pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()), text(b"a", BAD))],
            names=["a"],
        ),
        "st.a",
    ),
    "string-view": ("s", text(b"a", BAD).cast(pa.string_view()), "s"),
}


def _create_with_one_row(lake: Lake) -> None:
    lake.create_table("t", schema=SCHEMA)
    lake.insert("t", [{"ts": datetime(2026, 10, 1), "s": "before"}])


def _rows(lake: Lake) -> int:
    return int(lake.query("SELECT count(*) AS n FROM t").to_pylist()[0]["n"])


@pytest.mark.parametrize("case", list(NOT_UTF8_CASES))
def test_arrow_text_not_utf8_inside_a_nested_or_encoded_column_is_refused_naming_its_path(
    connected_lake: Lake, case: str
) -> None:
    # Given a table holding a row, and an Arrow batch whose second row holds bytes that are
    # not UTF-8 below the top of a column (or in an encoding of a string column)
    column, values, path = NOT_UTF8_CASES[case]
    _create_with_one_row(connected_lake)

    # When it is inserted, it is refused naming the row and the path
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("t", two_rows(column, values))
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, path)]
    assert f"row 1, field {path!r}" in str(refused.value)
    assert "bytes that are not UTF-8" in str(refused.value)

    # And nothing is committed: the table still reads, one row
    assert _rows(connected_lake) == 1
    assert connected_lake.query("SELECT s FROM t").to_pylist() == [{"s": "before"}]


def test_arrow_input_with_two_columns_of_one_name_is_refused_naming_it(
    connected_lake: Lake,
) -> None:
    # Given an Arrow table with two columns named s
    _create_with_one_row(connected_lake)
    ts = pa.array([datetime(2026, 11, 1)], pa.timestamp("us"))
    table = pa.Table.from_arrays([ts, pa.array(["a"]), pa.array(["b"])], names=["ts", "s", "s"])

    # When it is inserted (with an idempotency key, which digests the table first), it is
    # refused naming the column
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("t", table, idempotency_key="k")
    assert [(p.row, p.field) for p in refused.value.problems] == [(None, "s")]
    assert "field 's': more than one column of this name" in str(refused.value)
    assert _rows(connected_lake) == 1


def test_arrow_input_with_names_differing_only_by_case_is_refused_naming_them(
    connected_lake: Lake,
) -> None:
    # Given a table with columns a and A_1 (the name DuckDB's scan gives a second column
    # 'A' beside 'a'), and one of a struct
    connected_lake.create_table("cased", schema="a BIGINT, A_1 BIGINT")
    connected_lake.create_table("cased_struct", schema="st STRUCT(x INTEGER, y INTEGER)")
    columns = pa.table([pa.array([1]), pa.array([2])], names=["a", "A"])
    fields = pa.table(
        {"st": pa.array([{"x": 1, "X": 2}], pa.struct([("x", pa.int32()), ("X", pa.int32())]))}
    )

    # When Arrow columns 'a' and 'A' are inserted, then they are refused naming both
    # spellings, and nothing lands in A_1
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("cased", columns)
    assert [(p.row, p.field) for p in refused.value.problems] == [(None, "a")]
    assert "field 'a': more than one column of this name: 'a', 'A'" in str(refused.value)
    assert connected_lake.query("SELECT count(*) AS n FROM cased").to_pylist() == [{"n": 0}]

    # And when struct fields 'x' and 'X' are inserted, they are refused naming the field
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("cased_struct", fields)
    assert [(p.row, p.field) for p in refused.value.problems] == [(None, "st.x")]
    assert "more than one field of this name: 'x', 'X'" in str(refused.value)


def test_arrow_null_typed_parts_of_nested_columns_are_null_values_of_the_declared_type(
    connected_lake: Lake,
) -> None:
    # Given rows whose nested parts are None in every row, which pyarrow types as null: a
    # struct field, a list's elements, a map's values, a struct field inside a list
    _create_with_one_row(connected_lake)
    ts = pa.array([datetime(2026, 11, 1)], pa.timestamp("us"))
    table = pa.table(
        {
            "ts": ts,
            "st": pa.array([{"a": "x", "t": None}]),
            "l": pa.array([[None, None]]),
            "m": pa.array([[("k", None)]], pa.map_(pa.string(), pa.null())),
            "ls": pa.array([[{"k": "y", "v": None}]]),
        }
    )
    assert pa.types.is_null(table.schema.field("st").type.field("t").type)

    # When it is inserted, it commits, each such part NULL
    connected_lake.insert("t", table)
    assert connected_lake.query("SELECT st, l, m, ls FROM t WHERE s IS NULL").to_pylist() == [
        {
            "st": {"a": "x", "t": None},
            "l": [None, None],
            "m": [("k", None)],
            "ls": [{"k": "y", "v": None}],
        }
    ]
    assert _rows(connected_lake) == 2


# Per case: the column, its two rows (a map giving one key twice in the second), the path named.
REPEATED_KEY_CASES: dict[str, tuple[str, pa.Array, str]] = {
    "map": (
        "m",
        pa.MapArray.from_arrays(
            offsets(0, 1, 4), pa.array(["k", "q", "r", "q"]), text(*[b"v"] * 4)
        ),
        "m['q']",
    ),
    "map-in-a-list-of-structs": (
        "lm",
        pa.ListArray.from_arrays(
            offsets(0, 1, 3),
            pa.StructArray.from_arrays(
                [
                    pa.MapArray.from_arrays(
                        offsets(0, 1, 2, 4), pa.array([1, 1, 2, 2], pa.int32()), text(*[b"v"] * 4)
                    )
                ],
                names=["mm"],
            ),
        ),
        "lm[1].mm['2']",
    ),
}


@pytest.mark.parametrize("case", list(REPEATED_KEY_CASES))
def test_an_arrow_map_giving_a_key_twice_is_refused_naming_its_row_and_key(
    connected_lake: Lake, case: str
) -> None:
    # Given a table holding a row, and an Arrow batch whose second row holds a map giving one
    # key twice (DuckDB refuses the whole batch without naming it)
    column, values, path = REPEATED_KEY_CASES[case]
    connected_lake.create_table("t", schema=f"{SCHEMA}, lm STRUCT(mm MAP(INTEGER, VARCHAR))[]")
    connected_lake.insert("t", [{"ts": datetime(2026, 10, 1), "s": "before"}])

    # When it is inserted, it is refused naming the row and the path to the key
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("t", two_rows(column, values))
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, path)]
    assert "map key given more than once in its map" in str(refused.value)
    assert _rows(connected_lake) == 1
