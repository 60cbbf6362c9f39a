"""The Arrow fast path never changes an insert: over random typed tables with bad values mixed
in, loading with Arrow's checks gives exactly what the DuckDB conversion gives (the same table,
or the same refusal naming the same rows and fields)."""

from __future__ import annotations

import math
import os
import random
from datetime import date, datetime, timedelta

import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.errors import BatchRejectedError
from icefloe.ingest.arrow_input import proven_clean
from icefloe.ingest.load import load_batch
from icefloe.ingest.sources import ArrowBatch, InsertLimits
from icefloe.spec import TableSpec

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261126"))
TABLES = 300
LIMITS = InsertLimits(max_value_bytes=40, max_json_depth=4)
SPEC = TableSpec.create(
    name="t",
    schema=(
        "ts TIMESTAMP NOT NULL, d DATE, flag BOOLEAN, tiny TINYINT, n INTEGER NOT NULL,"
        " big UBIGINT, r FLOAT, x DOUBLE, s VARCHAR, k VARCHAR, j JSON"
    ),
    partition_by="day(ts), k",
)
# Per column: the exact Arrow type, another type it may arrive as, a good and a bad value.
US = pa.timestamp("us")
GOOD = {
    "ts": (US, lambda r: datetime(2026, 1, 1) + timedelta(seconds=r.randrange(10**6))),
    "d": (pa.date32(), lambda r: date(2026, 1, 1) + timedelta(days=r.randrange(-999, 999))),
    "flag": (pa.bool_(), lambda r: r.random() < 0.5),
    "tiny": (pa.int8(), lambda r: r.randint(-128, 127)),
    "n": (pa.int32(), lambda r: r.randint(-(2**31), 2**31 - 1)),
    "big": (pa.uint64(), lambda r: r.randrange(2**64)),
    "r": (pa.float32(), lambda r: r.uniform(-1e6, 1e6)),
    "x": (pa.float64(), lambda r: r.choice((-0.0, 1e308, r.gauss(0, 1e9)))),
    "s": (pa.string(), lambda r: r.choice(("", "a", "Zürich", "日本", "x" * 40))),
    "k": (pa.string(), lambda r: r.choice(("alpha", "beta", "é"))),
    "j": (pa.string(), lambda r: r.choice(('{"a": 1}', "[1, [2]]", '"s"', "null", "3.5"))),
}
BAD = {
    "ts": lambda r: r.choice((datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999))),
    "d": lambda r: r.choice((date(1, 1, 1), date(9999, 12, 31))),
    "r": lambda r: r.choice((math.nan, math.inf, -math.inf)),
    "x": lambda r: r.choice((math.nan, math.inf, -math.inf)),
    "s": lambda r: "y" * 41,
    "k": lambda r: r.choice(("a\x00b", "\x00")),
    "j": lambda r: r.choice(
        ("{nope", "NaN", '{"x": Infinity}', "[[[[[1]]]]]", '"' + "z" * 45 + '"')
    ),
}
OTHER_TYPES = {
    "n": pa.int64(),
    "tiny": pa.int16(),
    "s": pa.large_string(),
    "x": pa.float32(),
    "ts": pa.timestamp("ns"),
    "d": pa.timestamp("us"),
}


def random_table(rng: random.Random) -> pa.Table:
    rows = rng.randint(1, 40)
    bad_share = 0.05 if rng.random() < 0.4 else 0.0  # most tables hold no bad value
    columns: dict[str, pa.Array] = {}
    for name, (arrow_type, good) in GOOD.items():
        nullable = name not in ("ts", "n")
        if nullable and rng.random() < 0.15:
            continue  # absent
        values: list[object] = []
        for _ in range(rows):
            roll = rng.random()
            if roll < bad_share and name in BAD:
                values.append(BAD[name](rng))
            elif roll < bad_share + 0.06 and (nullable or rng.random() < 0.05):
                values.append(None)
            else:
                values.append(good(rng))
        kind = OTHER_TYPES[name] if name in OTHER_TYPES and rng.random() < 0.03 else arrow_type
        array = pa.array(values, type=arrow_type)
        try:
            columns[name] = array.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            columns[name] = array  # not representable in the other type: keep the exact one
    if rng.random() < 0.03:
        columns["unknown"] = pa.array(["?"] * rows)
    table = pa.table(columns)
    # Out of Python's range: a raw int64 past year 9999 (or before year 1) for a timestamp.
    if "ts" in columns and rng.random() < 0.03 and table.schema.field("ts").type == US:
        raw = rng.choice((253402300800 * 10**6, -62135596801 * 10**6))
        ts = pa.array([raw] * rows, pa.int64()).cast(US)
        table = table.set_column(table.schema.get_field_index("ts"), "ts", ts)
    return table


def load(table: pa.Table, *, fast: bool) -> pa.Table | str:
    con = duck.connect(threads=1)
    try:
        return load_batch(con, SPEC, ArrowBatch(table), limits=LIMITS, fast=fast)
    except BatchRejectedError as e:
        return f"refused: {e}"
    finally:
        con.close()


def test_the_fast_path_gives_what_the_duckdb_conversion_gives() -> None:
    rng = random.Random(SEED)
    fast_taken = refused = 0
    for number in range(TABLES):
        table = random_table(rng)
        if proven_clean(SPEC, table, limits=LIMITS, partition_sources={"k"}) is not None:
            fast_taken += 1
        fast, slow = load(table, fast=True), load(table, fast=False)
        if isinstance(slow, str):
            refused += 1
            assert fast == slow, f"seed {SEED}, table #{number}: {table.to_pylist()[:3]}"
        else:
            assert isinstance(fast, pa.Table), f"#{number}: fast refused {fast}"
            assert fast.schema == slow.schema, f"#{number}"
            assert fast.to_pylist() == slow.to_pylist(), f"#{number}"
    # Both paths were exercised: tables proven clean, and refusals
    assert fast_taken > TABLES // 4 and refused > TABLES // 10, (fast_taken, refused)


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("x", math.nan, "row 0, field 'x': expected a finite number"),
        ("s", "y" * 41, "row 0, field 's'"),
        ("k", "a\x00b", "row 0, field 'k'"),
        ("j", "{nope", "row 0, field 'j'"),
    ],
)
def test_a_bad_value_is_refused_naming_row_and_field(
    column: str, value: object, words: str
) -> None:
    table = pa.table(
        {"ts": pa.array([datetime(2026, 1, 1)]), "n": pa.array([1], pa.int32()), column: [value]}
    )
    result = load(table, fast=True)
    assert isinstance(result, str) and words in result


SUSPECT_TEXT = ['{"a": [1, "NaN"]}', "[]", '"inf"']  # the letters of NaN, inside strings
PLAIN_TEXT = ['{"a": [1, "b"]}', "[]", '"c, d"']


@pytest.mark.parametrize(
    ("good", "bad_row", "bad"),
    [
        (SUSPECT_TEXT, None, None),
        (SUSPECT_TEXT, 5, "NaN"),
        (SUSPECT_TEXT, 200_000, "NaN"),
        (SUSPECT_TEXT, 299_999, "NaN"),
        (PLAIN_TEXT, None, None),
        (PLAIN_TEXT, 200_000, "[1, 2,]"),
        (PLAIN_TEXT, 299_999, "{nope"),
        (PLAIN_TEXT, 131_072, '{"x": -Infinity}'),
    ],
    ids=[
        "suspect",
        "suspect-nan-5",
        "suspect-nan-200k",
        "suspect-nan-last",
        "plain",
        "plain-comma-200k",
        "plain-invalid-last",
        "plain-infinity-slice-start",
    ],
)
def test_json_text_of_a_big_batch_is_checked_in_slices(
    good: list[str], bad_row: int | None, bad: str | None
) -> None:
    # Given 300,000 rows (three slices of the JSON check; text whose strings spell NaN, or
    # not), one of them not standard JSON unless bad_row is None
    texts = pa.array(good * 100_000)
    if bad_row is not None:
        texts = pa.concat_arrays(
            [texts.slice(0, bad_row), pa.array([bad]), texts.slice(bad_row + 1)]
        )
    table = pa.table(
        {
            "ts": pa.array([datetime(2026, 1, 1)] * 300_000, US),
            "n": pa.array(range(300_000), pa.int32()),
            "j": texts,
        }
    )

    # When it is loaded through the fast path
    result = load(table, fast=True)

    # Then the bad row is named, or the text is stored exactly as it came
    if bad_row is None:
        assert isinstance(result, pa.Table)
        assert result.column("j").combine_chunks().equals(texts)
    else:
        assert isinstance(result, str)
        assert f"row {bad_row:,}, field 'j'" in result or f"row {bad_row}, field 'j'" in result
