"""Rows from Python converted without a parse never change an insert: over random rows with
bad values, odd kinds and JSON values of every shape mixed in, loading a batch of rows gives
exactly what the DuckDB conversion of its staged text gives (the same table, or the same
refusal), and whenever the rows path answers alone, its JSON text is the text DuckDB stores."""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import random
import struct
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.errors import BatchRejectedError
from icefloe.ingest.digests import batch_digest
from icefloe.ingest.load import load_batch
from icefloe.ingest.rows_input import load_rows_fast
from icefloe.ingest.sources import InsertLimits, rows_batch
from icefloe.spec import TableSpec
from support.random_values import MIXED_SPEC as SPEC
from support.random_values import bad_value, good_value

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261126"))
BATCHES = 400
LIMITS = InsertLimits(max_value_bytes=40, max_json_depth=4)
WIDE_LIMITS = InsertLimits(max_json_depth=12)
# JSON text only: DuckDB's stored text against orjson's, for values of every shape.
JSON_ONLY = TableSpec.create(name="t", schema="n INTEGER NOT NULL, j JSON")


def random_float(rng: random.Random) -> float:
    """Doubles of every magnitude, where printers differ most (exponent forms)."""
    roll = rng.random()
    if roll < 0.4:
        return rng.uniform(1, 10) * 10.0 ** rng.randint(-30, 30) * rng.choice((1, -1))
    if roll < 0.6:
        bits = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        return bits if math.isfinite(bits) else 0.5
    if roll < 0.8:
        return float(rng.randint(-(10 ** rng.randint(1, 22)), 10 ** rng.randint(1, 22)))
    return round(rng.uniform(-1000, 1000), rng.randint(0, 8))


def json_value(rng: random.Random, depth: int = 0) -> object:
    """A JSON value: nested objects and arrays of numbers, text with escapes, literals."""
    roll = rng.random()
    if depth < 4 and roll < 0.25:
        keys = ("a", "é", "\u2028", '"q', "/", "\x01", "\x1f", "日本", "😀", "e+1", "1e")
        return {
            rng.choice(keys) + str(n): json_value(rng, depth + 1) for n in range(rng.randint(0, 3))
        }
    if depth < 4 and roll < 0.4:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(
        (
            None,
            True,
            False,
            0,
            2**63 - 1,
            -(2**63),
            2**64 - 1,
            "s",
            "\x00",
            "\x0b\x1a\x7f",
            "\\",
            "tab\there",
            "line\nbreak",
            "1e5",
            "banana",  # NaN's letters in a string: not a NaN
            "Info",
            random_float(rng),
            random_float(rng),
            random_float(rng),
        )
    )


def random_rows(rng: random.Random) -> list[object]:
    """Mostly clean rows (some fields absent or null); a third of batches with a bad value,
    a few with an unknown field, a non-dict row, or Python kinds JSON lacks."""
    names = SPEC.column_names
    rows: list[object] = []
    local = rng.random() < 0.4
    for _ in range(rng.randint(1, 30)):
        row: dict[str, object] = {}
        for name in names:
            roll = rng.random()
            required = not SPEC.column(name).nullable
            if roll < (0.002 if required else 0.1):
                continue
            if roll < (0.004 if required else 0.13):
                row[name] = None
            elif name == "j" and rng.random() < 0.2:
                row[name] = json_value(rng, depth=3)  # shallow: most fit the size limit
            else:
                row[name] = good_value(name, rng, local=local)
        rows.append(row)
    at = rng.randrange(len(rows))
    target = rows[at]
    assert isinstance(target, dict)
    roll = rng.random()
    if roll < 0.35:
        bad = rng.choice([*names, "ts", "ts", "d"])
        target[bad] = bad_value(bad, rng)
    elif roll < 0.4:
        target["other"] = 1
    elif roll < 0.43:
        rows[at] = rng.choice(([1, 2], "row", None))
    elif roll < 0.5:
        name = rng.choice(names)
        target[name] = rng.choice((1.0, 2**53 + 1, -(2**53), 7, "7", [], {}))
    elif roll < 0.58:
        # NaN or an infinity (orjson writes null), alone or nested, beside nulls or not
        name = rng.choice(("j", "j", "x", "s"))
        target[name] = rng.choice(
            (math.nan, -math.inf, {"a": [1, math.nan]}, [None, {"z": math.inf}], [None, 2.5])
        )
    return rows


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duck.connect(threads=1)
    yield connection
    connection.close()


def load(
    con: duckdb.DuckDBPyConnection,
    rows: list[object],
    *,
    fast: bool,
    spec: TableSpec = SPEC,
    limits: InsertLimits = LIMITS,
) -> pa.Table | str:
    try:
        batch = rows_batch(rows, limits=limits)  # type: ignore[arg-type]
    except BatchRejectedError as e:
        return f"refused while staging: {e}"
    try:
        return load_batch(con, spec, batch, limits=limits, fast=fast)
    except BatchRejectedError as e:
        return f"refused: {e}"
    finally:
        batch.discard()


def answered_alone(rows: list[object], spec: TableSpec, limits: InsertLimits) -> bool:
    try:
        rows_batch(rows, limits=limits)  # type: ignore[arg-type]
    except BatchRejectedError:
        return False
    sources = frozenset(f.source for f in spec.partition_by if f.transform == "identity")
    fast = load_rows_fast(rows, spec, limits=limits, partition_sources=sources)  # type: ignore[arg-type]
    return fast is not None


def test_rows_path_gives_what_the_duckdb_conversion_gives(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rng = random.Random(SEED)
    answered = refused = 0
    for number in range(BATCHES):
        rows = random_rows(rng)
        fast, slow = load(con, rows, fast=True), load(con, rows, fast=False)
        context = f"seed {SEED}, batch #{number}: {rows[:3]!r}"
        if isinstance(slow, str):
            refused += 1
            assert fast == slow, context
            continue
        assert isinstance(fast, pa.Table), f"{context}: fast refused {fast}"
        assert fast.schema == slow.schema, context
        assert fast.to_pylist() == slow.to_pylist(), context
        answered += answered_alone(rows, SPEC, LIMITS)
    # Both paths were exercised: batches the rows path answered alone, and refusals.
    assert answered > BATCHES // 6 and refused > BATCHES // 6, (answered, refused)


def test_json_text_is_the_text_duckdb_stores(con: duckdb.DuckDBPyConnection) -> None:
    # Given batches of JSON values of every shape (floats of every magnitude, escapes)
    rng = random.Random(SEED + 1)
    answered = 0
    for number in range(600):
        # (Small batches: one value printed otherwise sends its whole batch to the JSON paths.)
        rows: list[object] = [{"n": n, "j": json_value(rng)} for n in range(rng.randint(1, 4))]
        # When they are loaded with and without the rows path
        fast = load(con, rows, fast=True, spec=JSON_ONLY, limits=WIDE_LIMITS)
        slow = load(con, rows, fast=False, spec=JSON_ONLY, limits=WIDE_LIMITS)
        # Then the text is the same, byte for byte
        assert isinstance(slow, pa.Table) and isinstance(fast, pa.Table), (fast, slow)
        assert fast.column("j").to_pylist() == slow.column("j").to_pylist(), f"#{number}"
        answered += answered_alone(rows, JSON_ONLY, WIDE_LIMITS)
    # And the rows path answered often enough for that to mean something
    assert answered > 100, answered


@pytest.mark.parametrize(
    ("value", "alone"),
    [
        ({"a": 1, "b": [0.5, "x"]}, True),
        ({"big": 1e16}, False),  # orjson prints 1e+16, DuckDB 10000000000000000.0
        ({"small": 3.5e-6}, False),  # orjson prints 3.5e-6, DuckDB 0.0000035
        ({"c": "\x1f"}, False),  # orjson escapes \u001f, DuckDB \u001F
        ("just text", True),
        ({"fruit": "banana", "level": "info", "Infinity": ["NaN"]}, True),
    ],
)
def test_json_text_printed_otherwise_goes_to_the_json_paths(
    value: object, alone: bool, con: duckdb.DuckDBPyConnection
) -> None:
    rows: list[object] = [{"n": 1, "j": value}]
    assert answered_alone(rows, JSON_ONLY, WIDE_LIMITS) is alone
    fast = load(con, rows, fast=True, spec=JSON_ONLY, limits=WIDE_LIMITS)
    slow = load(con, rows, fast=False, spec=JSON_ONLY, limits=WIDE_LIMITS)
    assert isinstance(fast, pa.Table) and isinstance(slow, pa.Table)
    assert fast.to_pylist() == slow.to_pylist()


@pytest.mark.parametrize(
    "rows",
    [
        [{"a": 1}, {"a": 2}],
        [{"a": "},{"}, {"a": 2}],  # staged as the array
        [[1], {"a": 2}],
        [{"n": n, "s": "x" * 100} for n in range(30_000)],  # several chunks of lines
        [{"n": n, "s": "x" * 100} for n in range(50_000)],  # over 4 MiB: text dropped
    ],
    ids=["lines", "separator-in-a-value", "not-all-objects", "chunks", "text-dropped"],
)
def test_rows_never_staged_digest_as_their_staged_file(rows: list[object]) -> None:
    # Given a batch of rows, and the same rows staged as a file (as every insert did before)
    batch = rows_batch(rows, limits=InsertLimits())  # type: ignore[arg-type]
    staged = rows_batch(rows, limits=InsertLimits()).staged()  # type: ignore[arg-type]
    try:
        # Then an idempotency key's digest is the same either way
        assert batch_digest(batch) == batch_digest(staged)
        # And the file staged on demand is that file, deleted with the batch
        on_demand = batch.staged().path
        assert on_demand.read_bytes() == staged.path.read_bytes()
    finally:
        batch.discard()
        staged.discard()
    assert not on_demand.exists()


def test_a_nan_is_refused_before_its_batch_is_digested() -> None:
    # Given rows whose text holds a null where a NaN was (orjson writes NaN as null)
    batch = rows_batch([{"n": 1, "j": {"a": math.nan}}], limits=InsertLimits())  # type: ignore[list-item]
    # Then the batch cannot be digested like one that sent null: it is refused, naming the field
    with pytest.raises(BatchRejectedError, match="row 0, field 'j': NaN and infinities"):
        batch_digest(batch)


NULLABLE = TableSpec.create(name="t", schema="a VARCHAR, j JSON")


class Level(enum.Enum):
    UNKNOWN = math.nan


@dataclasses.dataclass
class Reading:
    value: float


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([{"a": "x"}, None], "row 1: not a JSON object"),
        ([{"a": "x"}, math.nan], "row 1: not a JSON object"),
        ([{"a": "x", "j": Level.UNKNOWN}], "row 0, field 'j': NaN and infinities"),
        ([{"a": "x", "j": {"r": Reading(math.inf)}}], "row 0, field 'j': NaN and infinities"),
        ([{"a": "x", "j": [None]}, {"a": None, "j": (Level.UNKNOWN,)}], "row 1, field 'j'"),
    ],
    ids=["null-row", "nan-row", "nan-enum", "inf-in-dataclass", "nan-enum-in-tuple"],
)
def test_what_orjson_writes_as_null_is_refused(
    rows: list[object], words: str, con: duckdb.DuckDBPyConnection
) -> None:
    # Given rows holding values orjson writes as null (a NaN, however wrapped) or null rows,
    # in a table whose columns are all nullable
    for fast in (True, False):
        # When they are loaded, with and without the faster paths
        result = load(con, rows, fast=fast, spec=NULLABLE, limits=InsertLimits())
        # Then they are refused, naming the row (and the field)
        assert isinstance(result, str) and words in result, (fast, result)
