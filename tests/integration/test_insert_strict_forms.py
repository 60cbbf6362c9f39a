"""Values are refused, never altered: a DECIMAL with more digits after the point than its
scale is not rounded, a DATE followed by more text is not cut, and text (CSV, Arrow strings)
becomes an integer, a number or a boolean only in the form a JSON number or boolean has
(``3.7`` is not 4, ``0x10`` not 16, ``1_000`` not 1000, ``yes`` not true). A refusal names
the row and field, and nothing is written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore, ObjectStore

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, dec DECIMAL(5,2), st STRUCT(x DECIMAL(5,2), d DATE),"
    " m MAP(VARCHAR, DATE), dl DATE[], dt DATE, n BIGINT, b BOOLEAN, x DOUBLE, tm TIME"
)
TS = "2026-11-01T00:00:00"
DECIMAL = "expected a number that fits DECIMAL(5,2), with at most 2 digits after the point"
DATE = "expected an ISO-8601 date string (DATE)"
TIME = "expected an ISO-8601 time of day before 24:00:00 (TIME)"


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def strict(meta: MetaStore) -> TableSpec:
    spec = TableSpec.create(name="strict", schema=SCHEMA)
    meta.create_table(spec)
    return spec


@pytest.fixture
def inserter(meta: MetaStore, objects: ObjectStore) -> Iterator[Inserter]:
    ins = Inserter(meta=meta, objects=objects)
    yield ins
    ins.close()


def stored(meta: MetaStore, objects: ObjectStore) -> list[dict[str, object]]:
    paths = [objects.uri(f.path) for f in meta.files("strict")]
    return (
        duckdb.sql(f"SELECT * EXCLUDE (_row_id) FROM read_parquet({paths!r})")
        .to_arrow_table()
        .to_pylist()
    )


def assert_refused(
    meta: MetaStore, objects: ObjectStore, error: pytest.ExceptionInfo[BatchRejectedError]
) -> str:
    assert meta.snapshots("strict") == []
    assert [o.key for o in objects.list_prefix("")] == []
    return str(error.value)


JSON_BAD: list[tuple[dict[str, object], str, str]] = [
    ({"dec": 1.235}, "dec", f"{DECIMAL} (DECIMAL(5,2))"),
    ({"dec": 0.001}, "dec", f"{DECIMAL} (DECIMAL(5,2))"),
    ({"st": {"x": 1.235}}, "st.x", f"{DECIMAL} (DECIMAL(5,2))"),
    ({"dt": "2026-11-01 this is not a date"}, "dt", DATE),
    ({"dt": "2026-11-01T10:00:00"}, "dt", DATE),
    ({"st": {"d": "2026-11-01 junk"}}, "st.d", DATE),
    ({"m": {"a": "2026-11-01 junk"}}, "m['a']", DATE),
    ({"dl": ["2026-11-01", "2026-11-01 junk"]}, "dl[1]", DATE),
    ({"tm": "24:00:00"}, "tm", TIME),
    ({"tm": "10:00:00+02"}, "tm", TIME),
    ({"tm": "10:00:00 junk"}, "tm", TIME),
    ({"tm": "10:00:00.1234567"}, "tm", TIME),
]


@pytest.mark.parametrize("via", ["rows", "ndjson"])
@pytest.mark.parametrize(("fields", "path", "message"), JSON_BAD)
def test_a_json_value_that_would_be_altered_is_refused(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    strict: TableSpec,
    via: str,
    fields: dict[str, object],
    path: str,
    message: str,
) -> None:
    rows = [{"ts": TS, "dec": 1.5}, {"ts": TS, **fields}]
    with pytest.raises(BatchRejectedError) as error:
        if via == "rows":
            inserter.insert_rows("strict", rows)
        else:
            data = "\n".join(json.dumps(row) for row in rows).encode()
            inserter.insert_bytes("strict", data, fmt="ndjson")
    assert assert_refused(meta, objects, error) == (
        f"batch refused: row 1, field {path!r}: {message}"
    )


def test_a_python_decimal_with_more_digits_than_the_scale_is_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, strict: TableSpec
) -> None:
    with pytest.raises(BatchRejectedError) as error:
        inserter.insert_rows("strict", [{"ts": TS, "dec": Decimal("1.2345")}])
    assert assert_refused(meta, objects, error) == (
        f"batch refused: row 0, field 'dec': {DECIMAL} (DECIMAL(5,2))"
    )


def test_exact_values_in_any_json_form_are_kept(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, strict: TableSpec
) -> None:
    # Trailing zeros and exponents lose nothing: they are taken
    inserter.insert_bytes(
        "strict",
        (
            f'{{"ts": "{TS}", "dec": 1.230, "st": {{"x": 1.5e1, "d": "2026-11-01"}},'
            ' "dt": "2026-11-01", "dl": ["2026-11-01"], "m": {"a": "2026-11-01"}}\n'
        ).encode(),
        fmt="ndjson",
    )
    inserter.insert_rows("strict", [{"ts": TS, "dec": Decimal("-0.50")}])
    rows = sorted(stored(meta, objects), key=lambda r: str(r["dec"]))
    assert [r["dec"] for r in rows] == [Decimal("-0.50"), Decimal("1.23")]
    assert rows[1]["st"] == {"x": Decimal("15.00"), "d": date(2026, 11, 1)}
    assert rows[1]["dt"] == date(2026, 11, 1)
    assert rows[1]["dl"] == [date(2026, 11, 1)]


CSV_BAD: list[tuple[str, str, str, str]] = [
    ("n", "3.7", "n", "expected an integer that fits BIGINT (BIGINT)"),
    ("n", "0x10", "n", "expected an integer that fits BIGINT (BIGINT)"),
    ("n", "1_000", "n", "expected an integer that fits BIGINT (BIGINT)"),
    ("n", "+5", "n", "expected an integer that fits BIGINT (BIGINT)"),
    ("n", "1e3", "n", "expected an integer that fits BIGINT (BIGINT)"),
    ("b", "yes", "b", "expected true or false (BOOLEAN)"),
    ("b", "y", "b", "expected true or false (BOOLEAN)"),
    ("b", "1", "b", "expected true or false (BOOLEAN)"),
    ("x", "1_000.5", "x", "expected a number that fits DOUBLE (DOUBLE)"),
    ("dec", "1.235", "dec", f"{DECIMAL} (DECIMAL(5,2))"),
    ("dt", "2026-11-01 junk", "dt", DATE),
    ("tm", "24:00:00", "tm", TIME),
    ("tm", "10:00+02:00", "tm", TIME),
]


@pytest.mark.parametrize(("column", "text", "path", "message"), CSV_BAD)
def test_csv_text_in_another_form_than_json_would_have_is_refused(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    strict: TableSpec,
    column: str,
    text: str,
    path: str,
    message: str,
) -> None:
    data = f"ts,{column}\n{TS},\n{TS},{text}\n".encode()
    with pytest.raises(BatchRejectedError) as error:
        inserter.insert_bytes("strict", data, fmt="csv")
    assert assert_refused(meta, objects, error) == (
        f"batch refused: row 1, field {path!r}: {message}"
    )


def test_csv_text_in_json_forms_is_taken(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, strict: TableSpec
) -> None:
    data = (
        f"ts,n,b,x,dec,dt,tm\n{TS},-12,true,1.5e2,1.50,2026-11-01,23:59:59.999999\n"
        f"{TS},0,false,-0.25,7,,00:00\n{TS},1,TRUE,0,0,,\n{TS},2,False,0,0,,\n"
    ).encode()
    inserter.insert_bytes("strict", data, fmt="csv")
    rows = sorted(stored(meta, objects), key=lambda r: str(r["n"]))
    assert [(r["n"], r["b"], r["x"], r["dec"], r["dt"], r["tm"]) for r in rows] == [
        (-12, True, 150.0, Decimal("1.50"), date(2026, 11, 1), time(23, 59, 59, 999999)),
        (0, False, -0.25, Decimal("7.00"), None, time(0, 0)),
        (1, True, 0.0, Decimal("0.00"), None, None),
        (2, False, 0.0, Decimal("0.00"), None, None),
    ]


def test_arrow_strings_are_held_to_the_same_forms(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, strict: TableSpec
) -> None:
    table = pa.table({"ts": pa.array([datetime(2026, 11, 1)]), "n": pa.array(["2.5"])})
    with pytest.raises(BatchRejectedError) as error:
        inserter.insert_arrow("strict", table)
    assert assert_refused(meta, objects, error) == (
        "batch refused: row 0, field 'n': expected an integer that fits BIGINT (BIGINT)"
    )


def test_an_arrow_decimal_of_a_larger_scale_is_refused_unless_exact(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, strict: TableSpec
) -> None:
    ts = pa.array([datetime(2026, 11, 1)])
    wide = pa.decimal128(10, 4)
    with pytest.raises(BatchRejectedError) as error:
        inserter.insert_arrow(
            "strict", pa.table({"ts": ts, "dec": pa.array([Decimal("1.2345")], wide)})
        )
    assert assert_refused(meta, objects, error) == (
        f"batch refused: row 0, field 'dec': {DECIMAL} (DECIMAL(5,2))"
    )
    inserter.insert_arrow(
        "strict", pa.table({"ts": ts, "dec": pa.array([Decimal("1.2300")], wide)})
    )
    assert [r["dec"] for r in stored(meta, objects)] == [Decimal("1.23")]
