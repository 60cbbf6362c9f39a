"""JSON numbers a double cannot hold exactly, from NDJSON, JSON arrays, Python rows and queue
messages: a JSON value keeps the number as sent, a DECIMAL takes its exact digits or refuses it
by row and field, at any depth; other types, and batches without such numbers, are as ever."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import duckdb
import orjson
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.ingest.exact_numbers import holds_inexact, inexact, loads_exactly
from icefloe.ingest.load import load_batch
from icefloe.ingest.sources import InsertLimits, rows_batch, stage_bytes
from icefloe.spec import TableSpec

LIMITS = InsertLimits()
SCHEMA = (
    "id INTEGER, d DECIMAL(20,3), j JSON, b BIGINT, x DOUBLE,"
    " s STRUCT(d DECIMAL(20,3), j JSON), l DECIMAL(20,3)[], m MAP(VARCHAR, JSON)"
)
SPEC = TableSpec.create(name="t", schema=SCHEMA)
FLAT = TableSpec.create(name="t", schema="id INTEGER, j JSON, b BIGINT, x DOUBLE, u UBIGINT")
THIRTY = "123456789012345678901234567890"


def load(
    con: duckdb.DuckDBPyConnection, lines: list[str], fmt: str, spec: TableSpec = SPEC
) -> list[dict[str, object]]:
    """The records (JSON text each) loaded as NDJSON or as one JSON array."""
    text = "\n".join(lines) if fmt == "ndjson" else "[\n" + ",\n".join(lines) + "\n]"
    staged = stage_bytes(text.encode(), fmt=fmt, limits=LIMITS)  # type: ignore[arg-type]
    try:
        return load_batch(con, spec, staged, limits=LIMITS).to_pylist()
    finally:
        staged.discard()


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_json_values_keep_the_numbers_as_sent_at_any_depth(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given numbers a double cannot hold, in a JSON column, a struct's JSON field and a map's
    # JSON values, beside an ordinary row
    tricky = f"[-0, {THIRTY}, 1234567890123456.78, 1e400, 1e-400, 0.1e-999]"
    lines = [
        '{"id": 0, "j": {"a": 1.5, "s": "12345678901234567890"}, "x": 0.1}',
        f'{{"id": 1, "j": {tricky}, "s": {{"j": -0}}, "m": {{"k": 1234567890123456.78}}}}',
        '{"id": 2, "j": -0}',
    ]
    # When loaded
    rows = load(con, lines, fmt)
    # Then the JSON values hold the text sent; the ordinary row is as ever
    assert rows[0]["j"] == '{"a":1.5,"s":"12345678901234567890"}'
    assert rows[0]["x"] == 0.1
    assert rows[1]["j"] == tricky.replace(" ", "")
    assert rows[1]["s"] == {"d": None, "j": "-0"}
    assert rows[1]["m"] == [("k", "1234567890123456.78")]
    assert rows[2]["j"] == "-0"


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_decimals_take_the_exact_digits_at_any_depth(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    lines = [
        '{"id": 0, "d": 1.5}',
        '{"id": 1, "d": 1234567890123456.78, "s": {"d": 12345678901234567.001},'
        ' "l": [99999999999999999.999, -0, 0.1]}',
    ]
    rows = load(con, lines, fmt)
    assert rows[0]["d"] == Decimal("1.500")
    assert rows[1]["d"] == Decimal("1234567890123456.780")
    assert rows[1]["s"] == {"d": Decimal("12345678901234567.001"), "j": None}
    assert rows[1]["l"] == [Decimal("99999999999999999.999"), Decimal("0.000"), Decimal("0.100")]


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
@pytest.mark.parametrize(
    ("record", "field"),
    [
        ('"d": 1234567890123456.7801', "d"),  # a digit past the scale, past a double's digits
        ('"d": 1e400', "d"),
        ('"d": 1e-400', "d"),  # rounded to 0 by a cast, and by the widest scale
        ('"s": {"d": 1.00000000000000000000001}', "s.d"),
        ('"l": [1, 0.12345678901234567]', "l[1]"),
    ],
)
def test_a_decimal_that_does_not_fit_exactly_is_refused_by_row_and_field(
    con: duckdb.DuckDBPyConnection, fmt: str, record: str, field: str
) -> None:
    lines = ['{"id": 0, "d": 1.5}', '{"id": 1, ' + record + "}"]
    with pytest.raises(BatchRejectedError, match="expected a number that fits") as refused:
        load(con, lines, fmt)
    assert [(p.row, p.field) for p in refused.value.problems] == [(1, field)]


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_integers_and_doubles_are_as_ever(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    # Integers past 2^53 are exact (DuckDB reads 64 bits); doubles the nearest, -0 as 0
    lines = [
        '{"id": 0, "b": 9007199254740993, "u": 18446744073709551615, "x": 9007199254740993}',
        '{"id": 1, "b": -0, "x": 1234567890123456.78, "j": -0}',
    ]
    for spec in (FLAT, TableSpec.create(name="t", schema=SCHEMA + ", u UBIGINT")):
        rows = load(con, lines, fmt, spec)
        assert (rows[0]["b"], rows[0]["u"], rows[0]["x"]) == (
            9007199254740993,
            18446744073709551615,
            9007199254740992.0,
        )
        assert (rows[1]["b"], rows[1]["x"], rows[1]["j"]) == (0, 1234567890123456.8, "-0")
    with pytest.raises(BatchRejectedError, match="an integer that fits BIGINT") as refused:
        load(con, ['{"id": 0, "b": 9223372036854775808}'], fmt, FLAT)
    assert [(p.row, p.field) for p in refused.value.problems] == [(0, "b")]


def test_a_table_keeping_unknown_fields_keeps_their_numbers(
    con: duckdb.DuckDBPyConnection,
) -> None:
    spec = TableSpec.create(
        name="t", schema="id INTEGER, extra JSON", extra_fields="keep", overflow_column="extra"
    )
    rows = load(con, ['{"id": 1, "x": 1234567890123456.78, "y": {"z": -0}}'], "ndjson", spec)
    assert rows == [{"id": 1, "extra": '{"x":1234567890123456.78,"y":{"z":-0}}'}]


def test_python_rows_and_queue_messages_keep_the_digits(con: duckdb.DuckDBPyConnection) -> None:
    # Given a Decimal of 18 digits (refused before, as JSON carried 15), and a queue message's
    # body as the queue ingestion parses it
    body = '{"id": 1, "d": 1234567890123456.78, "j": [-0, 1e-400, ' + THIRTY + "]}"
    parsed = loads_exactly(body, orjson.loads(body))
    assert isinstance(parsed, dict)
    for row in ({"id": 1, "d": Decimal("1234567890123456.78"), "j": Decimal("-0")}, parsed):
        batch = rows_batch([row], limits=LIMITS)
        try:
            loaded = load_batch(con, SPEC, batch, limits=LIMITS).to_pylist()[0]
        finally:
            batch.discard()
        assert loaded["d"] == Decimal("1234567890123456.780")
    assert loaded["j"] == f"[-0,1e-400,{THIRTY}]"


def test_only_numbers_a_double_loses_are_doubted() -> None:
    assert inexact("-0") and inexact("1234567890123456.78") and inexact("1e400")
    assert inexact("1e-400") and inexact("1.0000000000000000001")
    # a double's own shortest digits, integers, and few digits are kept by any path
    assert not inexact("0.30000000000000004") and not inexact(THIRTY)
    assert not inexact("-0.0") and not inexact("1.5") and not inexact("1e308")
    # in strings, numbers are text
    strings = json.dumps({"a": ["12345678901234567890", "0.1234567890123456789", "-0", "1e400"]})
    assert not holds_inexact(strings.encode())
    assert holds_inexact(b'{"a": "x", "b": 0.1234567890123456789}')
    assert holds_inexact(b'{"a": [1, -0 ]}')
    # a batch of doubles' own digits only is no doubt (the one-parse path keeps it)
    doubles = "\n".join(json.dumps({"x": n / 3, "y": 0.1 + 0.2}) for n in range(1, 500))
    assert not holds_inexact(doubles.encode())
    assert not holds_inexact(pa.py_buffer(b"").to_pybytes())


def test_an_exponent_no_decimal_holds_is_kept_in_json_and_refused_in_a_message() -> None:
    # Given valid numbers whose exponents have 19 digits (Python's Decimal holds 18)
    tiny, zero = "1e-9999999999999999999", "0e-9999999999999999999"
    # Then they are judged (not a crash): the first is no double, the second is 0
    assert inexact(tiny) and inexact("-" + zero) and not inexact(zero)
    # And a queue message holding one is refused naming it, not the whole batch crashed
    body = '{"id": 1, "j": ' + tiny + "}"
    with pytest.raises(InvalidInputError, match="1e-9999999999999999999"):
        loads_exactly(body, orjson.loads(body))


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_an_exponent_no_decimal_holds_is_kept_as_sent_in_a_json_column(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    rows = load(con, ['{"id": 0, "j": [1e-9999999999999999999, 2]}'], fmt, FLAT)
    assert rows[0]["j"] == "[1e-9999999999999999999,2]"


def test_minus_zero_keeps_its_sign_in_pretty_printed_json(con: duckdb.DuckDBPyConnection) -> None:
    # Given -0 with its neighbours on other lines, as json.dumps(indent=2) writes it
    records = [{"id": 7, "j": [0, 1]}, {"id": 8, "j": {"a": 0}}]
    text = json.dumps(records, indent=2).replace(": 0", ": -0").replace("\n      0,", "\n      -0,")
    assert text.count("-0") == 2 and "\n      -0,\n" in text
    staged = stage_bytes(text.encode(), fmt="json", limits=LIMITS)
    try:
        loaded = load_batch(con, FLAT, staged, limits=LIMITS).to_pylist()
    finally:
        staged.discard()
    # Then both keep their sign
    assert [r["j"] for r in loaded] == ["[-0,1]", '{"a":-0}']


@pytest.mark.timeout(60)  # linear: well under a second; quadratic: 32,000 digits took 9 s
def test_long_runs_of_digits_are_scanned_in_linear_time() -> None:
    # A run of 200,000 digits in a string beside numbers of many digits: each step of the
    # scan must not start again at every digit of the run
    line = '{"j": [1e100, 0.30000000000000004, "' + "7" * 200_000 + '"]}'
    assert not holds_inexact(line.encode())
    assert loads_exactly(line, orjson.loads(line)) == orjson.loads(line)
    marked = line.replace("1e100", "-0")
    assert holds_inexact(marked.encode())


def test_lines_of_many_doubles_are_judged_without_reading_them_in_python() -> None:
    # Given lines each holding many doubles' own shortest digits (an embedding), and one line
    # whose last number a double would change
    rng = random.Random(7)
    lines = [json.dumps({"v": [rng.random() / 3 for _ in range(64)]}) for _ in range(2_000)]
    assert not holds_inexact("\n".join(lines).encode())
    lines[1_000] = lines[1_000][:-2] + ", 0.12345678901234567890]}"
    assert holds_inexact("\n".join(lines).encode())


@pytest.mark.parametrize("number", ["1e400", "-1234567890123456.78", "0.000123456789012345678901"])
def test_a_number_is_found_after_every_delimiter_json_allows_before_it(number: str) -> None:
    # The search looks for a number's first digit at the text's start or after whitespace,
    # a comma, a colon or a bracket: every place JSON lets a value start
    for text in (
        number,
        f"[{number}]",
        f'{{"a":{number}}}',
        f'{{"a": 1,"b":\t{number}}}',
        f"[\r\n  {number}\n]",
        f'{{"x": "5c18e8598d"}}\n{number}',
    ):
        assert holds_inexact(text.encode()), text


def test_digits_inside_strings_are_text_wherever_they_stand() -> None:
    # Hex ids spell far exponents ("18e8598"), and strings may hold numbers after spaces or
    # colons: none of them is a number
    ids = "\n".join(
        json.dumps({"id": f"m-2-{n}-5c18e859{n % 10}dd", "t": f"at: 1e400 {n}"}) for n in range(300)
    )
    assert not holds_inexact(ids.encode())
    assert holds_inexact((ids + '\n{"id": "x", "v": 1e400}').encode())
