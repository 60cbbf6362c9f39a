"""Top-level lists of leaves (``T[]`` columns) get, element by element, the conversion and
the checks a column of the element's type gets, from every input: JSON text, Python rows and
typed Arrow. A bad element refuses the batch naming its row and its path, and nothing is
written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest import Inserter, InsertLimits
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore, ObjectStore

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, tl TIMESTAMP[], dl DATE[], bl BLOB[], xl DOUBLE[], jl JSON[],"
    " vl VARCHAR[], st STRUCT(t TIMESTAMP)"
)
TS = "2026-11-01T00:00:00"


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def lists(meta: MetaStore) -> TableSpec:
    spec = TableSpec.create(name="lists", schema=SCHEMA)
    meta.create_table(spec)
    return spec


@pytest.fixture
def inserter(meta: MetaStore, objects: ObjectStore) -> Iterator[Inserter]:
    ins = Inserter(meta=meta, objects=objects, limits=InsertLimits(max_value_bytes=64))
    yield ins
    ins.close()


def stored(meta: MetaStore, objects: ObjectStore) -> list[dict[str, object]]:
    paths = [objects.uri(f.path) for f in meta.files("lists")]
    return (
        duckdb.sql(f"SELECT * EXCLUDE (_row_id) FROM read_parquet({paths!r})")
        .to_arrow_table()
        .to_pylist()
    )


@pytest.mark.parametrize("via", ["rows", "ndjson"])
def test_list_elements_are_converted_as_a_column_of_their_type_is(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, lists: TableSpec, via: str
) -> None:
    # Given a row whose lists hold an offset timestamp, epoch milliseconds and base64 text
    row: dict[str, object] = {
        "ts": TS,
        "tl": ["2026-11-01T10:00:00+02:00", 1793527200000, None],
        "dl": ["2026-11-01"],
        "bl": ["aGVsbG8="],
        "xl": [1, 2.5],
        "jl": [{"a": [1]}, "x"],
        "vl": ["a", None],
        "st": {"t": "2026-11-01T10:00:00+02:00"},
    }
    # When it is inserted as Python rows or as NDJSON text
    if via == "rows":
        inserter.insert_rows("lists", [row])
    else:
        inserter.insert_bytes("lists", json.dumps(row).encode(), fmt="ndjson")
    # Then each element is what a column of its type would hold: the offset taken to UTC (as
    # in the struct field), epoch milliseconds read, base64 decoded
    [back] = stored(meta, objects)
    assert back["tl"] == [datetime(2026, 11, 1, 8), datetime(2026, 11, 1, 10), None]
    assert back["st"] == {"t": datetime(2026, 11, 1, 8)}
    assert back["dl"] == [date(2026, 11, 1)]
    assert back["bl"] == [b"hello"]
    assert back["xl"] == [1.0, 2.5]
    assert back["jl"] == ['{"a":[1]}', '"x"']
    assert back["vl"] == ["a", None]


def test_python_bytes_in_a_blob_list_are_stored_as_those_bytes(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, lists: TableSpec
) -> None:
    inserter.insert_rows("lists", [{"ts": TS, "bl": [b"hello", None]}])
    [back] = stored(meta, objects)
    assert back["bl"] == [b"hello", None]


RANGE_TS = "expected a timestamp from year 1 to 9999 (TIMESTAMP); infinities are refused"
RANGE_DATE = "expected a date from year 1 to 9999 (DATE); infinities are refused"
# (NDJSON text of the row's list field, the path named, the message)
BAD_ELEMENTS: list[tuple[str, str, str]] = [
    ('"tl": ["2026-11-01T00:00:00", "0000-01-01T00:00:00"]', "tl[1]", RANGE_TS),
    ('"tl": ["10000-01-01T00:00:00"]', "tl[0]", RANGE_TS),
    ('"tl": ["infinity"]', "tl[0]", RANGE_TS),
    (
        '"tl": ["yesterday"]',
        "tl[0]",
        "expected an ISO-8601 timestamp string or epoch milliseconds (TIMESTAMP)",
    ),
    ('"dl": ["10000-01-01"]', "dl[0]", RANGE_DATE),
    (
        '"xl": [1e400]',
        "xl[0]",
        "expected a finite number (DOUBLE): NaN and infinities are refused"
        " (send null for a missing value)",
    ),
    (
        '"jl": [NaN]',
        "jl[0]",
        "expected standard JSON (no NaN, no Infinity, no comma before a closing bracket)",
    ),
    ('"bl": ["not base64!"]', "bl[0]", "expected a base64 string (BLOB)"),
    ('"vl": ["x", 1]', "vl[1]", "expected a string (VARCHAR)"),
    ('"vl": ["' + "x" * 65 + '"]', "vl[0]", "value is over the limit of 64 bytes"),
    ('"vl": {"a": 1}', "vl", "expected a JSON array of VARCHAR values (VARCHAR[])"),
]


@pytest.mark.parametrize(("field", "path", "message"), BAD_ELEMENTS)
def test_a_bad_list_element_refuses_the_batch_naming_its_path(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    lists: TableSpec,
    field: str,
    path: str,
    message: str,
) -> None:
    # Given a batch whose row 1 holds one bad list element
    data = f'{{"ts": "{TS}"}}\n{{"ts": "{TS}", {field}}}\n'.encode()
    # Then it is refused, naming the row and the element, and nothing is written
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_bytes("lists", data, fmt="ndjson")
    assert str(refused.value) == f"batch refused: row 1, field {path!r}: {message}"
    assert meta.snapshots("lists") == []
    assert [o.key for o in objects.list_prefix("")] == []


def test_python_rows_with_a_bad_list_element_are_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, lists: TableSpec
) -> None:
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_rows("lists", [{"ts": TS, "tl": ["9999-12-31T00:00:00", "infinity"]}])
    assert str(refused.value) == f"batch refused: row 0, field 'tl[1]': {RANGE_TS}"
    assert meta.snapshots("lists") == []
    assert [o.key for o in objects.list_prefix("")] == []


ARROW_BAD: list[tuple[str, pa.Array, str, str]] = [
    (
        "xl",
        pa.array([[1.0, float("inf")]], pa.list_(pa.float64())),
        "xl[1]",
        "expected a finite number (DOUBLE): NaN and infinities are refused"
        " (send null for a missing value)",
    ),
    (
        "xl",
        pa.array([[float("nan")]], pa.list_(pa.float64())),
        "xl[0]",
        "expected a finite number (DOUBLE): NaN and infinities are refused"
        " (send null for a missing value)",
    ),
    (
        "tl",
        pa.array([[300 * 10**15]], pa.list_(pa.timestamp("us"))),
        "tl[0]",
        RANGE_TS,
    ),
    ("vl", pa.array([["x" * 65]], pa.list_(pa.string())), "vl[0]", "value is over the limit of 64 bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "values", "path", "message"), ARROW_BAD)
def test_a_bad_element_of_an_arrow_list_refuses_the_batch(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    lists: TableSpec,
    name: str,
    values: pa.Array,
    path: str,
    message: str,
) -> None:
    table = pa.table({"ts": pa.array([datetime(2026, 11, 1)], pa.timestamp("us")), name: values})
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_arrow("lists", table)
    assert str(refused.value) == f"batch refused: row 0, field {path!r}: {message}"
    assert meta.snapshots("lists") == []
    assert [o.key for o in objects.list_prefix("")] == []


def test_an_arrow_list_of_another_element_family_is_refused_not_rounded(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, lists: TableSpec
) -> None:
    # A list of doubles is no list of timestamps, as a DOUBLE column is no TIMESTAMP column
    table = pa.table(
        {
            "ts": pa.array([datetime(2026, 11, 1)], pa.timestamp("us")),
            "tl": pa.array([[3.7]], pa.list_(pa.float64())),
        }
    )
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_arrow("lists", table)
    assert str(refused.value) == (
        "batch refused: field 'tl[]': expected TIMESTAMP, but the input's type is DOUBLE"
    )
    assert meta.snapshots("lists") == []


@pytest.mark.parametrize(
    ("csv", "message"),
    [
        (
            'ts,xl\n2026-11-01,"[1.5, inf]"\n',
            "row 0, field 'xl': expected a finite number (DOUBLE[]): NaN and infinities are"
            " refused (send null for a missing value)",
        ),
        (
            'ts,dl\n2026-11-01,"[2026-01-01, 10000-01-01]"\n',
            "row 0, field 'dl': expected a date from year 1 to 9999 (DATE[]); infinities are"
            " refused",
        ),
    ],
)
def test_a_csv_list_is_parsed_whole_and_its_elements_checked(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    lists: TableSpec,
    csv: str,
    message: str,
) -> None:
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_bytes("lists", csv.encode(), fmt="csv")
    assert str(refused.value) == f"batch refused: {message}"
    assert meta.snapshots("lists") == []
    assert [o.key for o in objects.list_prefix("")] == []
