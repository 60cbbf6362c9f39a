"""Arrow input into a JSON column refused naming the column (and row) at fault, never with a
raw error or stored as a value never sent: a type nested deeper than Arrow's C data interface
carries (through which DuckDB reads an Arrow input), bytes (which have no JSON form), and
malformed text in Arrow's JSON extension type."""

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
SPEC = TableSpec.create(name="t", schema="j JSON")
ARROW_MAX_LEVELS = 62  # (pyarrow's C data import: 64, the table's struct and the column included)


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duck.connect(threads=1)
    yield connection
    connection.close()


def nested_structs(levels: int) -> pa.Array:
    value: object = 1
    for _ in range(levels):
        value = {"a": value}
    return pa.array([value])


def nested_maps(levels: int) -> pa.Array:
    kind: pa.DataType = pa.int64()
    for _ in range(levels):
        kind = pa.map_(pa.string(), kind)
    return pa.nulls(1, kind)


def load(con: duckdb.DuckDBPyConnection, column: pa.Array) -> pa.Table:
    table = pa.table({"j": column})
    return load_batch(con, SPEC, arrow_batch(table, limits=LIMITS), limits=LIMITS)


@pytest.mark.parametrize(
    "column",
    [nested_structs(63), nested_structs(64), nested_maps(32)],
    ids=["struct-63", "struct-64", "map-32"],
)
def test_an_arrow_type_deeper_than_arrow_carries_is_refused_naming_the_column(
    con: duckdb.DuckDBPyConnection, column: pa.Array
) -> None:
    # Given a JSON column's Arrow value nested within the JSON depth limit (64) but deeper
    # than the 62 levels Arrow's C data interface imports (a map is two of them)
    # When it is loaded
    with pytest.raises(BatchRejectedError) as refused:
        load(con, column)

    # Then it is refused naming the column and the Arrow limit
    assert [p.field for p in refused.value.problems] == ["j"]
    assert f"more than the {ARROW_MAX_LEVELS} levels an Arrow input can" in str(refused.value)


def test_an_arrow_type_at_the_arrow_limit_is_taken_one_level_more_refused(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # Given a struct nested 62 levels and a map nested 31 (62 Arrow levels) in a JSON column
    # When each is loaded
    structs = load(con, nested_structs(ARROW_MAX_LEVELS))
    maps = load(con, nested_maps(ARROW_MAX_LEVELS // 2))

    # Then each is taken as JSON text
    assert structs.column("j")[0].as_py().count('{"a":') == ARROW_MAX_LEVELS
    assert maps.num_rows == 1

    # And one level more is refused, not failed in the reader
    with pytest.raises(BatchRejectedError):
        load(con, nested_structs(ARROW_MAX_LEVELS + 1))


@pytest.mark.parametrize(
    "column",
    [
        pa.array([b'{"a":1}'], pa.binary()),
        pa.array([b'{"a":1}'], pa.large_binary()),
        pa.array([{"b": b"\xff\x00"}], pa.struct([("b", pa.binary())])),
    ],
    ids=["binary", "large-binary", "struct-of-binary"],
)
def test_arrow_bytes_into_a_json_column_are_refused_naming_the_row_and_field(
    con: duckdb.DuckDBPyConnection, column: pa.Array
) -> None:
    # Given Arrow bytes (alone or inside a struct) for a JSON column: no JSON value has bytes
    # When they are loaded
    with pytest.raises(BatchRejectedError) as refused:
        load(con, column)

    # Then they are refused naming row 0 and the field, as bytes into a VARCHAR column are,
    # not stored as DuckDB's escaped text of a BLOB
    assert [(p.row, p.field) for p in refused.value.problems] == [(0, "j")]


def test_malformed_text_in_arrow_json_type_is_refused_naming_the_row_and_field(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # Given pyarrow's JSON extension type holding valid JSON text, and then a malformed value
    valid = pa.array(['{"a":1}', "[1,2]"], pa.json_())
    malformed = pa.array(['{"a":1}', '{"a":1'], pa.json_())

    # When the valid text is loaded, then each value is its text
    assert load(con, valid).column("j").to_pylist() == ['{"a":1}', "[1,2]"]

    # And when the malformed one is, it is refused naming row 1 and field 'j', as the same
    # plain string is
    with pytest.raises(BatchRejectedError) as refused:
        load(con, malformed)
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, "j")]
    assert "row 1, field 'j': expected any JSON value (JSON)" in str(refused.value)
