"""Arrow input refused before anything is stored: a TIME outside ``[00:00:00, 24:00:00)`` (Arrow
holds a time as any integer, and DuckDB stored one past the day as garbage), at the top level
or inside a nested type, in every time unit, named by row and path; a column of an Arrow type
DuckDB cannot read (a half float, a 256-bit decimal, a dense union, a struct with no fields),
named with its type, which crashed the insert with DuckDB's own error; a directory given as
the input file. And a Parquet file that holds a TIME of 24:00:00 (written by another engine)
gets statistics that never prune it wrongly."""

from __future__ import annotations

import decimal
from datetime import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import footer_stats
from icefloe.errors import BatchRejectedError
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.lake import Lake
from icefloe.metastore.models import NewFile

pytestmark = pytest.mark.integration

SCHEMA = (
    "id INTEGER, t TIME, st STRUCT(a TIME), l TIME[], m MAP(VARCHAR, TIME),"
    " d DECIMAL(10,2), f DOUBLE, s STRUCT(a INTEGER), v VARCHAR"
)
DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400 * 10**9}


def _time(ticks: list[int | None], unit: str) -> pa.Array:
    kind = pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    return pa.array(ticks, pa.int32() if kind.bit_width == 32 else pa.int64()).view(kind)


def _lake_with_a_row(lake: Lake) -> None:
    lake.create_table("a", schema=SCHEMA)
    lake.insert("a", [{"id": 0, "t": "10:00:00"}])


def _ids(lake: Lake) -> list[int]:
    return [r["id"] for r in lake.query("SELECT id FROM a ORDER BY id").to_pylist()]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize(
    ("ticks", "shown"),
    [
        (lambda day: day, "24:00:00"),
        (lambda day: day + day // 86_400 // 2 if day > 86_400 else day + 1, None),
        (lambda day: -1, None),
    ],
    ids=["24:00:00", "past-24h", "negative"],
)
def test_an_arrow_time_outside_the_day_is_refused_naming_row_and_field(
    connected_lake: Lake, unit: str, ticks: object, shown: str | None
) -> None:
    # Given a table with a row, and an Arrow batch whose second row's time is outside the day
    _lake_with_a_row(connected_lake)
    day = DAY[unit]
    bad = ticks(day)  # type: ignore[operator]
    batch = pa.table({"id": pa.array([1, 2], pa.int32()), "t": _time([day // 2, bad], unit)})

    # When it is inserted, it is refused naming row 1 and the column
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("a", batch)
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, "t")]
    message = str(refused.value)
    assert "a TIME must be from 00:00:00 up to (not including) 24:00:00" in message
    if shown is not None:
        assert message.endswith(f"got {shown}")

    # And nothing is committed
    assert _ids(connected_lake) == [0]


def test_the_time_a_refusal_shows_is_the_value_sent(connected_lake: Lake) -> None:
    _lake_with_a_row(connected_lake)
    batch = pa.table({"id": pa.array([1], pa.int32()), "t": _time([10**15], "us")})
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("a", batch)
    assert str(refused.value) == (
        "batch refused: row 0, field 't': a TIME must be from 00:00:00 up to (not including)"
        " 24:00:00; got 277777:46:40"
    )
    batch = pa.table({"id": pa.array([1], pa.int32()), "t": _time([86_400_000_000_500], "ns")})
    with pytest.raises(BatchRejectedError, match=r"got 24:00:00\.0000005$"):
        connected_lake.insert("a", batch)
    assert _ids(connected_lake) == [0]


def test_an_arrow_time_outside_the_day_inside_a_nested_column_is_refused_naming_its_path(
    connected_lake: Lake,
) -> None:
    _lake_with_a_row(connected_lake)
    day = DAY["us"]
    ok, bad = day // 2, day
    cases = {
        "st.a": pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "st": pa.StructArray.from_arrays([_time([ok, bad], "us")], names=["a"]),
            }
        ),
        "l[2]": pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "l": pa.ListArray.from_arrays(
                    pa.array([0, 1, 4], pa.int32()), _time([ok, ok, None, bad], "us")
                ),
            }
        ),
        "m['late']": pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "m": pa.MapArray.from_arrays(
                    pa.array([0, 1, 2], pa.int32()),
                    pa.array(["k", "late"]),
                    _time([ok, bad], "us"),
                ),
            }
        ),
        "t": pa.table(  # dictionary-encoded: only the values used count
            {
                "id": pa.array([1, 2], pa.int32()),
                "t": pa.DictionaryArray.from_arrays(
                    pa.array([0, 1], pa.int8()), _time([ok, bad], "us")
                ),
            }
        ),
    }
    for path, batch in cases.items():
        with pytest.raises(BatchRejectedError) as refused:
            connected_lake.insert("a", batch)
        assert [(p.row, p.field) for p in refused.value.problems] == [(1, path)], path
    assert _ids(connected_lake) == [0]


def test_times_of_the_day_are_taken_and_a_bad_one_behind_null_or_unused_is_not_looked_at(
    connected_lake: Lake,
) -> None:
    _lake_with_a_row(connected_lake)
    day = DAY["us"]
    # A NULL struct's field, an unused dictionary value: what they hold is never read
    struct = pa.StructArray.from_arrays(
        [_time([day - 1, day], "us")], names=["a"], mask=pa.array([False, True])
    )
    unused = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int8()), _time([0, day], "us"))
    batch = pa.table({"id": pa.array([1, 2], pa.int32()), "t": unused, "st": struct})
    connected_lake.insert("a", batch)
    rows = connected_lake.query("SELECT id, t, st FROM a WHERE id > 0 ORDER BY id").to_pylist()
    assert rows == [
        {"id": 1, "t": time(0), "st": {"a": time(23, 59, 59, 999999)}},
        {"id": 2, "t": time(0), "st": None},
    ]


@pytest.mark.parametrize(
    ("column", "values", "field", "type_text"),
    [
        ("d", pa.array([decimal.Decimal("1.5"), None], pa.decimal256(40, 2)), "d", "decimal256"),
        ("f", pa.array([1.0, 2.0], pa.float16()), "f", "float16"),
        ("s", pa.array([{}, None], pa.struct([])), "s", "struct<>"),
        (
            "v",
            pa.UnionArray.from_dense(
                pa.array([0, 0], pa.int8()), pa.array([0, 1], pa.int32()), [pa.array(["a", "b"])]
            ),
            "v",
            "dense_union",
        ),
        (
            "s",
            pa.array([{"a": {}}, None], pa.struct([("a", pa.struct([]))])),
            "s.a",
            "struct<>",
        ),
        ("l", pa.array([[1.0], None], pa.list_(pa.float16())), "l[]", "float16"),
    ],
    ids=["decimal256", "float16", "empty-struct", "dense-union", "nested-empty-struct", "list"],
)
def test_an_arrow_type_duckdb_cannot_read_is_refused_naming_the_column_and_type(
    connected_lake: Lake, column: str, values: pa.Array, field: str, type_text: str
) -> None:
    _lake_with_a_row(connected_lake)
    batch = pa.table({"id": pa.array([1, 2], pa.int32()), column: values})
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("a", batch)
    assert [(p.row, p.field) for p in refused.value.problems] == [(None, field)]
    assert f"Arrow type {type_text}" in str(refused.value)
    assert "not supported" in str(refused.value)
    assert _ids(connected_lake) == [0]


def test_a_directory_given_as_the_input_file_is_refused_naming_it(
    connected_lake: Lake, tmp_path: Path
) -> None:
    _lake_with_a_row(connected_lake)
    with pytest.raises(BatchRejectedError) as refused:
        connected_lake.insert("a", str(tmp_path))
    assert str(refused.value) == (
        f"cannot read input file {str(tmp_path)!r}: it is a directory (insert its files one by one)"
    )
    assert _ids(connected_lake) == [0]


def test_a_parquet_file_holding_time_2400_is_never_pruned_wrongly(connected_lake: Lake) -> None:
    # Given a file written by another engine holding TIME 24:00:00, whose statistics icefloe
    # keeps (pyarrow reads its maximum back as 00:00:00)
    connected_lake.create_table("tt", schema="id INTEGER, t TIME")
    connected_lake.insert("tt", [{"id": 1, "t": "12:00:00"}])
    table = pa.table(
        {
            "id": pa.array([2, 3], pa.int32()),
            "t": _time([DAY["us"], 0], "us"),
            ROW_ID_COLUMN: new_row_ids(2),
        }
    )
    path = Path(connected_lake.objects.uri("tt/data/other-engine.parquet"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    metadata = pq.read_metadata(path)
    assert metadata.row_group(0).column(1).statistics.max == time(0)  # pyarrow's reading
    stats = footer_stats(metadata)
    assert (stats["t"].min, stats["t"].max) == ("00:00:00", "24:00:00")
    connected_lake.meta.commit_append(
        "tt",
        files=[
            NewFile(
                path="tt/data/other-engine.parquet",
                partition_path="",
                size_bytes=path.stat().st_size,
                row_count=2,
                column_stats=stats,
            )
        ],
    )

    # When it is queried with conditions only 24:00:00 passes, the file is read
    def ids(where: str) -> list[int]:
        sql = f"SELECT id FROM tt WHERE {where} ORDER BY id"
        return [r["id"] for r in connected_lake.query(sql).to_pylist()]

    assert ids("t > TIME '12:00:00'") == [2]
    assert ids("t >= TIME '23:00:00'") == [2]
    assert ids("t = TIME '24:00:00'") == [2]
    assert ids("t BETWEEN TIME '11:00:00' AND TIME '13:00:00'") == [1]
    assert ids("t < TIME '01:00:00'") == [3]
    assert ids("t >= TIME '00:00:00'") == [1, 2, 3]


def test_integers_carried_as_decimals_of_scale_zero_fill_integer_columns(
    connected_lake: Lake,
) -> None:
    lake = connected_lake
    # DuckDB and Arrow carry HUGEINT as decimal128(38, 0): such a column fills an integer
    # column when each value fits it; a fraction never does
    lake.create_table("h", schema="id INTEGER, h HUGEINT, b BIGINT")
    wide = pa.decimal128(38, 0)
    lake.insert(
        "h",
        pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "h": pa.array([decimal.Decimal(2**100), decimal.Decimal(-(2**120))], wide),
                "b": pa.array([decimal.Decimal(2**63 - 1), None], wide),
            }
        ),
    )
    refused = {
        "b": pa.table({"id": [3], "b": pa.array([decimal.Decimal(2**63)], wide)}),
        "h": pa.table({"id": [4], "h": pa.array([decimal.Decimal("1.5")], pa.decimal128(38, 1))}),
    }
    for field, table in refused.items():
        with pytest.raises(BatchRejectedError) as error:
            lake.insert("h", table)
        (problem,) = error.value.problems
        assert (problem.row, problem.field) == (0, field)
    rows = lake.query("SELECT id, h::VARCHAR AS h, b FROM h ORDER BY id").to_pylist()
    assert rows == [
        {"id": 1, "h": str(2**100), "b": 2**63 - 1},
        {"id": 2, "h": str(-(2**120)), "b": None},
    ]
