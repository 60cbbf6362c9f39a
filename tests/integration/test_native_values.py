"""Python rows take native values where the column's type fits, and store what the same
values sent as a typed Arrow table store: decimals, UUIDs, bytes, dates, times, naive and
aware datetimes, numpy scalars. Random values of each kind, a fixed seed, both paths compared.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.lake import Lake

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261128"))
ROWS = 300


def _aware(rng: random.Random) -> datetime:
    offset = timezone(timedelta(minutes=15 * rng.randint(-48, 56)))
    return datetime(2026, 1, 1, tzinfo=offset) + timedelta(microseconds=rng.randrange(10**14))


def _naive(rng: random.Random) -> datetime:
    return datetime(1990, 1, 1) + timedelta(microseconds=rng.randrange(2 * 10**15))


def _decimal_of_at_most_18_digits(rng: random.Random) -> Decimal:
    """Up to 18 significant digits (often 15, the most a double holds, or 18, past it), with
    a scale that keeps DECIMAL(18, 4)'s 14 integer digits."""
    digits = rng.choice([15, 18, rng.randrange(1, 19)])
    unscaled = rng.randrange(10 ** (digits - 1), 10**digits) * rng.choice([1, -1])
    return Decimal(unscaled).scaleb(-rng.randrange(max(0, digits - 14), 5))


# Per kind: the column's type, the Arrow type the same values take on the Arrow path, and a
# random value (as Python holds it; the Arrow path gets ``as_arrow`` of it).
Kind = tuple[str, pa.DataType, Callable[[random.Random], object], Callable[[object], object]]


def _same(value: object) -> object:
    return value


KINDS: dict[str, Kind] = {
    # every digit, past those a double holds too (see icefloe.ingest.exact_numbers)
    "decimal": (
        "DECIMAL(18, 4)",
        pa.decimal128(18, 4),
        _decimal_of_at_most_18_digits,
        _same,
    ),
    "uuid": ("UUID", pa.string(), lambda r: uuid.UUID(int=r.getrandbits(128)), str),
    "bytes": ("BLOB", pa.binary(), lambda r: r.randbytes(r.randrange(0, 40)), _same),
    "date": (
        "DATE",
        pa.date32(),
        lambda r: date(1, 1, 1) + timedelta(days=r.randrange(3652058)),
        _same,
    ),
    "time": (
        "TIME",
        pa.time64("us"),
        lambda r: time(r.randrange(24), r.randrange(60), r.randrange(60), r.randrange(10**6)),
        _same,
    ),
    "naive datetime": ("TIMESTAMP", pa.timestamp("us"), _naive, _same),
    "aware datetime": ("TIMESTAMP", pa.timestamp("us", tz="UTC"), _aware, _same),
    "aware datetime, zoned column": (
        "TIMESTAMPTZ",
        pa.timestamp("us", tz="UTC"),
        _aware,
        _same,
    ),
    "numpy int64": (
        "BIGINT",
        pa.int64(),
        lambda r: np.int64(r.randrange(-(2**63), 2**63)),
        int,
    ),
    "numpy int16": ("SMALLINT", pa.int16(), lambda r: np.int16(r.randrange(-(2**15), 2**15)), int),
    "numpy uint32": ("UINTEGER", pa.uint32(), lambda r: np.uint32(r.randrange(2**32)), int),
    "numpy float64": (
        "DOUBLE",
        pa.float64(),
        lambda r: np.float64(r.uniform(-1e300, 1e300)),
        float,
    ),
    "numpy float32": (
        "REAL",
        pa.float32(),
        lambda r: np.float32(r.uniform(-3e38, 3e38)),
        float,
    ),
    "numpy bool": ("BOOLEAN", pa.bool_(), lambda r: np.bool_(r.random() < 0.5), bool),
    "numpy datetime64": (
        "TIMESTAMP",
        pa.timestamp("us"),
        lambda r: np.datetime64(_naive(r), "us"),
        lambda v: v.astype(datetime),  # type: ignore[attr-defined]
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_native_values_store_what_the_arrow_path_stores(connected_lake: Lake, kind: str) -> None:
    column_type, arrow_type, draw, as_arrow = KINDS[kind]
    rng = random.Random(f"{SEED}:{kind}")
    values = [None if rng.random() < 0.05 else draw(rng) for _ in range(ROWS)]
    schema = f"n INTEGER NOT NULL, v {column_type}"
    connected_lake.create_table("native", schema=schema)
    connected_lake.create_table("arrow", schema=schema)

    # When the values go in as Python rows, and as a typed Arrow table
    connected_lake.insert("native", [{"n": n, "v": v} for n, v in enumerate(values)])
    connected_lake.insert(
        "arrow",
        pa.table(
            {
                "n": pa.array(range(ROWS), pa.int32()),
                "v": pa.array([None if v is None else as_arrow(v) for v in values], arrow_type),
            }
        ),
    )

    # Then both tables hold the same values
    sql = "SELECT n, v FROM {t} ORDER BY n"
    native = connected_lake.query(sql.format(t="native"))
    assert native.num_rows == ROWS
    assert native == connected_lake.query(sql.format(t="arrow"))


_BYTES_REFUSED = "bytes are taken by BLOB fields only"


@pytest.mark.parametrize(
    ("column_type", "value", "message", "field"),
    [
        ("VARCHAR", b"abc", _BYTES_REFUSED, "v"),
        ("JSON", {"inner": b"abc"}, _BYTES_REFUSED, "v.inner"),
        # beside a BLOB: the check is per field of the type, not per column
        ("STRUCT(name VARCHAR, raw BLOB)", {"name": b"abc", "raw": b"x"}, _BYTES_REFUSED, "v.name"),
        (
            "STRUCT(raw BLOB, tags VARCHAR[])",
            {"raw": b"", "tags": [b"a"]},
            _BYTES_REFUSED,
            "v.tags[]",
        ),
        ("STRUCT(raw BLOB)", {"raw": b"x", "extra": b"y"}, _BYTES_REFUSED, "v.extra"),
        # keys match fields with their case, as the conversion matches them
        ("STRUCT(raw BLOB)", {"Raw": b"x"}, _BYTES_REFUSED, "v.Raw"),
        ("MAP(VARCHAR, BLOB)", {"k": {"deeper": b"x"}}, _BYTES_REFUSED, "v[].deeper"),
        ("DECIMAL(10, 2)", Decimal("NaN"), "NaN and infinities are refused", "v"),
        ("DOUBLE", np.float32("inf"), "NaN and infinities are refused", "v"),
        ("DOUBLE", np.float64("nan"), "NaN and infinities are refused", "v"),
        ("INTEGER", Decimal("1.5"), "v", "v"),
        ("DECIMAL(18, 4)", Decimal("1234567890123.64951"), "expected a number that fits", "v"),
        ("VARCHAR", {1, 2}, "not valid JSON", "v"),
    ],
)
def test_a_native_value_the_column_cannot_take_is_refused_by_row_and_field(
    connected_lake: Lake, column_type: str, value: object, message: str, field: str
) -> None:
    connected_lake.create_table("t", schema=f"n INTEGER, v {column_type}")
    with pytest.raises(BatchRejectedError, match=message) as refused:
        connected_lake.insert("t", [{"n": 0, "v": None}, {"n": 1, "v": value}])
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, field)]
    assert connected_lake.snapshots("t") == []


def test_bytes_at_every_blob_of_a_nested_type_are_stored_as_the_arrow_path_stores(
    connected_lake: Lake,
) -> None:
    # Given a column with BLOBs in a struct, in a list of structs and as a map's values, and
    # random bytes at each of them
    column_type = (
        "STRUCT(name VARCHAR, raw BLOB, parts STRUCT(b BLOB)[], by_key MAP(VARCHAR, BLOB))"
    )
    rng = random.Random(f"{SEED}:nested-bytes")

    def blob() -> bytes | None:
        return None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20))

    values = [
        {
            "name": f"n{i}",
            "raw": blob(),
            "parts": [{"b": blob()} for _ in range(rng.randrange(3))],
            "by_key": {f"k{j}": blob() for j in range(rng.randrange(3))},
        }
        for i in range(ROWS // 3)
    ]
    schema = f"n INTEGER NOT NULL, v {column_type}"
    connected_lake.create_table("native", schema=schema)
    connected_lake.create_table("arrow", schema=schema)

    # When they go in as Python rows, and as a typed Arrow table
    connected_lake.insert("native", [{"n": n, "v": v} for n, v in enumerate(values)])
    arrow_type = pa.struct(
        [
            ("name", pa.string()),
            ("raw", pa.binary()),
            ("parts", pa.list_(pa.struct([("b", pa.binary())]))),
            ("by_key", pa.map_(pa.string(), pa.binary())),
        ]
    )
    arrow_values = [{**v, "by_key": list(v["by_key"].items())} for v in values]
    connected_lake.insert(
        "arrow",
        pa.table(
            {
                "n": pa.array(range(len(values)), pa.int32()),
                "v": pa.array(arrow_values, arrow_type),
            }
        ),
    )

    # Then both tables hold the same bytes
    sql = "SELECT n, v FROM {t} ORDER BY n"
    native = connected_lake.query(sql.format(t="native"))
    assert native.num_rows == len(values)
    assert native == connected_lake.query(sql.format(t="arrow"))
    first = native.to_pylist()[0]["v"]
    assert first["raw"] == values[0]["raw"]


def test_native_values_inside_a_json_column_are_stored_as_their_json(
    connected_lake: Lake,
) -> None:
    # Given JSON values holding native values, in a small batch (built from the dicts) and in
    # a batch with a NaN-free null elsewhere (staged as text)
    connected_lake.create_table("t", schema="n INTEGER, doc JSON")
    value = {
        "at": time(6, 6, 31, 29724),
        "price": Decimal("12.50"),
        "count": np.int64(3),
        "ratio": np.float32(0.5),
        "id": uuid.UUID(int=1),
        "day": date(2026, 11, 28),
    }
    connected_lake.insert("t", [{"n": 0, "doc": value}, {"n": 1, "doc": None}])

    # Then each is stored as the JSON a sender would have sent
    stored = connected_lake.query("SELECT doc FROM t WHERE n = 0").to_pylist()[0]["doc"]
    assert json.loads(stored) == {
        "at": "06:06:31.029724",
        "price": 12.5,
        "count": 3,
        "ratio": 0.5,
        "id": "00000000-0000-0000-0000-000000000001",
        "day": "2026-11-28",
    }


def test_integers_past_64_bits_are_stored_exactly_from_rows_and_from_ndjson(
    connected_lake: Lake,
) -> None:
    # Given integers a HUGEINT holds and 64 bits do not, at both ends of its range, in Python
    # rows (orjson writes no wider integer) and in an NDJSON file's text
    connected_lake.create_table("t", schema="n INTEGER, h HUGEINT, doc JSON, l HUGEINT[]")
    edges = [-(2**127), 2**127 - 1, 2**64, -(2**63) - 1]
    connected_lake.insert(
        "t", [{"n": i, "h": v, "doc": {"v": v}, "l": [v, 1]} for i, v in enumerate(edges)]
    )
    ndjson = "".join(f'{{"n": {10 + i}, "h": {v}, "l": [{v}]}}\n' for i, v in enumerate(edges))
    connected_lake.inserter().insert_bytes("t", ndjson.encode(), fmt="ndjson")

    # Then each is stored as sent
    rows = connected_lake.query(
        "SELECT n, h::VARCHAR AS h, doc, list_transform(l, x -> x::VARCHAR) AS l FROM t ORDER BY n"
    ).to_pylist()
    assert [(r["n"], int(r["h"])) for r in rows] == [
        *enumerate(edges),
        *((10 + i, v) for i, v in enumerate(edges)),
    ]
    assert [json.loads(r["doc"])["v"] for r in rows[:4]] == edges
    assert [[int(x) for x in r["l"]] for r in rows] == [[v, 1] for v in edges] + [
        [v] for v in edges
    ]


@pytest.mark.parametrize("value", [2**127, -(2**127) - 1, 2**200])
def test_an_integer_past_hugeint_is_refused_naming_its_row(
    connected_lake: Lake, value: int
) -> None:
    connected_lake.create_table("t", schema="n INTEGER, h HUGEINT")
    with pytest.raises(BatchRejectedError, match="fits HUGEINT") as refused:
        connected_lake.insert("t", [{"n": 0, "h": 1}, {"n": 1, "h": value}])
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, "h")]
    assert connected_lake.snapshots("t") == []
