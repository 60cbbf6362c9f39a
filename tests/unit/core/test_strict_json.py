"""Standard JSON where DuckDB is lenient: trailing commas and NaN are found exactly.

DuckDB's JSON parser takes ``[1,]``, ``{"a": 1,}``, NaN and Infinity. Over random JSON text
(strings full of commas, brackets, quotes, escapes and the letters of NaN; pretty-printed and
one record per line; trailing commas and NaN put in at random), both searches must agree with a
strict parser (orjson) on every text DuckDB reads: the search of a JSON file's own bytes
(:func:`trailing_comma_at`), and the conversion's check of stored JSON text (error code
``json``)."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import duckdb
import orjson
import pyarrow as pa
import pytest

from icefloe import duck
from icefloe.ingest.columns import sql_column
from icefloe.ingest.strict_json import may_not_be_standard, trailing_comma_at
from icefloe.spec import Column

SEED = int(os.environ.get("ICEFLOE_FUZZ_SEED", "20261126"))
TEXTS = 3000
STRING_PIECES = ['"', "\\", ",", "]", "}", "[", "{", " ", "nan", "Inf", ":", "a", "é", "\n", "\t"]
SPACE = ["", "", " ", "  ", "\t", "\n", "\r\n"]


def random_string(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_PIECES) for _ in range(rng.randint(0, 6)))


def random_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([random_string(rng), rng.randint(-9, 9), 1.5e300, True, None])
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@dataclass(frozen=True)
class Text:
    text: str
    trailing_comma: bool  # put in before some closing bracket
    nan: bool  # a NaN or an infinity put in for some number


def text_of(rng: random.Random, value: object) -> Text:
    """The value as JSON text, with random whitespace and, at random, a trailing comma before
    a closing bracket or a NaN or Infinity for a number."""
    pieces: list[str] = []
    placed = {"comma": False, "nan": False}

    def put(v: object) -> None:
        pieces.append(rng.choice(SPACE))
        if isinstance(v, list | dict):
            items = list(v.items()) if isinstance(v, dict) else list(v)
            pieces.append("{" if isinstance(v, dict) else "[")
            for n, item in enumerate(items):
                if n:
                    pieces.append(rng.choice(SPACE) + ",")
                if isinstance(v, dict):
                    key, inner = item
                    pieces.append(rng.choice(SPACE) + orjson.dumps(key).decode() + ":")
                    put(inner)
                else:
                    put(item)
            if items and rng.random() < 0.04:
                pieces.append(rng.choice(SPACE) + ",")  # a trailing comma
                placed["comma"] = True
            pieces.append(rng.choice(SPACE) + ("}" if isinstance(v, dict) else "]"))
        elif isinstance(v, int) and not isinstance(v, bool) and rng.random() < 0.08:
            pieces.append(rng.choice(["NaN", "-Infinity", "inf", "nan", "Infinity"]))
            placed["nan"] = True
        else:
            pieces.append(orjson.dumps(v).decode())
        pieces.append(rng.choice(SPACE))

    put(value)
    return Text("".join(pieces), trailing_comma=placed["comma"], nan=placed["nan"])


def strict(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


@pytest.fixture(scope="module")
def texts() -> list[Text]:
    """Random JSON texts that DuckDB's parser reads; standard JSON exactly when nothing was
    put in (which holds the generator to the strict parser)."""
    rng = random.Random(SEED)
    candidates = [text_of(rng, random_value(rng)) for _ in range(TEXTS)]
    con = duck.connect(threads=1)
    valid = con.execute(
        "SELECT list_transform(?, t -> json_valid(t))", [[c.text for c in candidates]]
    ).fetchone()
    con.close()
    assert valid is not None and all(valid[0])
    for c in candidates:
        assert strict(c.text) == (not c.trailing_comma and not c.nan), c
    commas = sum(c.trailing_comma for c in candidates)
    nans = sum(c.nan for c in candidates)
    assert TEXTS * 0.05 < commas < TEXTS * 0.4 and TEXTS * 0.05 < nans < TEXTS * 0.4
    return candidates


def test_a_trailing_comma_is_found_outside_strings_and_nowhere_else(texts: list[Text]) -> None:
    for t in texts:
        data = t.text.encode()
        at = trailing_comma_at(data)
        assert (at is not None) == t.trailing_comma, t
        if at is not None:
            assert data[at : at + 1] == b",", t
            assert b"]" in data[at:] or b"}" in data[at:]


def test_a_trailing_comma_in_a_file_of_many_records_is_found_on_its_line(
    texts: list[Text],
) -> None:
    rng = random.Random(SEED + 1)
    clean = [orjson.dumps({"v": orjson.loads(t.text)}).decode() for t in texts if strict(t.text)]
    planted = 0
    for _ in range(200):
        lines = rng.sample(clean, 20)
        bad_at = rng.randrange(len(lines) + 1)
        if rng.random() < 0.5:
            lines.insert(bad_at, '{"v": "a,]", "w": [1, {"x": "}"},\t]}')
            planted += 1
        data = "\n".join(lines).encode()
        at = trailing_comma_at(data)
        if len(lines) == 20:
            assert at is None
        else:
            assert at is not None and data[:at].count(b"\n") == bad_at
            assert data[at : at + 1] == b","
    assert 70 < planted < 130


def test_the_conversion_refuses_json_text_exactly_when_a_strict_parser_does(
    texts: list[Text],
) -> None:
    check = sql_column(
        Column(name="j", type="JSON", nullable=True),
        source_type="VARCHAR",
        max_value_bytes=1 << 20,
        max_json_depth=64,
    )
    con: duckdb.DuckDBPyConnection = duck.connect(threads=1)
    values = [t.text for t in texts]
    con.register("texts", pa.table({"j": values, "__present_j": [True] * len(values)}))
    codes = [row[0] for row in con.execute(f"SELECT {check.error} FROM texts").fetchall()]
    con.close()
    assert [code == "json" for code in codes] == [t.trailing_comma or t.nan for t in texts]


def test_a_column_search_misses_no_value_that_is_not_standard(texts: list[Text]) -> None:
    """The whole-column search (each chunk's text at once, values sliced out of larger
    arrays, nulls between them) finds every NaN and trailing comma; a miss would store one."""
    rng = random.Random(SEED + 2)
    values: list[str | None] = [t.text for t in texts]
    lenient = [t.trailing_comma or t.nan for t in texts]
    for _ in range(300):
        start = rng.randrange(len(values))
        length = rng.choice([1, 2, 5, 40])
        chunk = pa.array(values[: start + length + 3], pa.string()).slice(start, length)
        pieces = [chunk, pa.array([None, "[]"], pa.string())]
        rng.shuffle(pieces)
        column = pa.chunked_array(pieces)
        found = may_not_be_standard(column)
        if any(lenient[start : start + length]):
            assert found, values[start : start + length]
    standard = pa.chunked_array(
        [pa.array([t.text for t in texts if not (t.trailing_comma or t.nan)])]
    )
    assert not may_not_be_standard(standard.slice(0, 0))
    assert may_not_be_standard(pa.chunked_array([pa.array(["[1, 2, ]"], pa.large_string())]))
    as_json = pa.ExtensionArray.from_storage(
        pa.json_(pa.large_string()), pa.array(["[1]", "[2,]"], pa.large_string())
    )
    assert may_not_be_standard(pa.chunked_array([as_json]))
    # Text in another layout is a suspect: DuckDB's check of each value decides.
    assert may_not_be_standard(pa.chunked_array([pa.array(["[1]"], pa.string_view())]))
