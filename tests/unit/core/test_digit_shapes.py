"""A column's common shape decides a timestamp or date form exactly as RE2 does value by value."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from icefloe.ingest import digit_shapes, json_input
from icefloe.ingest.digit_shapes import common_shape

FORMS = [json_input._ZONED_TIMESTAMP, json_input._LOCAL_TIMESTAMP, json_input._PLAIN_DATE]
# Values that match a form, and near misses of one or two characters.
SEEDS = [
    "2026-11-27T10:15:00.123456Z",
    "2026-11-27 10:15:00+02:30",
    "2026-11-27T10:15",
    "2026-11-27",
    "2026-11-27T10:15:00.1234567Z",
    "2026-1-27",
    "2026-11-27X10:15",
    "\uff12026-11-27",  # a fullwidth digit two: not a digit to RE2
    "2026-11-27T10:15:00.123456ZZ",
    "",
]


def _value(rng: random.Random, seed: str) -> str:
    """``seed`` with its digits redrawn, and now and then one character changed."""
    chars = [rng.choice("0123456789") if c.isdigit() and c.isascii() else c for c in seed]
    if chars and rng.random() < 0.1:
        chars[rng.randrange(len(chars))] = rng.choice("0a:- T\n日")
    return "".join(chars)


def _column(rng: random.Random) -> pa.ChunkedArray:
    seeds = rng.sample(SEEDS, rng.choice((1, 1, 1, 2)))
    values: list[str | None] = [
        _value(rng, rng.choice(seeds)) for _ in range(rng.choice((1, 2, 5, 40, 300)))
    ]
    if rng.random() < 0.1:
        values[rng.randrange(len(values))] = None
    kind = rng.choice((pa.string(), pa.large_string()))
    array = pa.array(values, kind)
    if rng.random() < 0.3 and len(array) > 2:
        array = array.slice(1, len(array) - 2)  # chunks that start past their buffers' start
    cut = rng.randint(0, len(array))
    return pa.chunked_array([array.slice(0, cut), array.slice(cut)], kind)


def _each_value_matches(text: pa.ChunkedArray, pattern: str) -> bool:
    return bool(pc.all(pc.match_substring_regex(text, pattern), min_count=0).as_py())


@pytest.mark.parametrize("block_bytes", [1 << 20, 7], ids=["as-shipped", "tiny-blocks"])
def test_the_shape_answers_as_each_value_does(
    monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    # Given 1,000 random columns of timestamp and date text (one or two shapes, near misses,
    # nulls, sliced chunks), compared in blocks as shipped or of a few bytes
    monkeypatch.setattr(digit_shapes, "_BLOCK_BYTES", block_bytes)
    rng = random.Random(2026_11_27)
    shared = 0
    for case in range(1000):
        text = _column(rng)
        # When a column has one shape, Then each form answers for it as RE2 does value by value
        for pattern in FORMS:
            assert json_input._all_match(text, pattern) == _each_value_matches(text, pattern), (
                f"case {case}: {text.to_pylist()[:3]} against {pattern}"
            )
        shape = common_shape(text)
        if shape is not None:
            shared += 1
            present = [v for v in text.to_pylist() if v is not None]
            assert all(len(v.encode()) == len(shape.encode()) for v in present)
    # And the shortcut answered for many of them
    assert shared >= 250


def test_values_of_other_lengths_never_share_a_shape() -> None:
    # Two timestamps in one value and an empty one give the bytes of three timestamps
    one = "2026-11-27T10:15:00Z"
    text = pa.chunked_array([pa.array([one, one + one, ""])])
    assert common_shape(text) is None
    assert not json_input._all_match(text, json_input._ZONED_TIMESTAMP)
    # A value holding a line break between two timestamps is one value, not two
    assert common_shape(pa.chunked_array([pa.array([one, f"{one}\n{one}"])])) is None


def test_a_column_of_one_shape_yields_it() -> None:
    text = pa.chunked_array([pa.array(["2026-11-27", "1999-01-31"]), pa.array(["2000-02-29"])])
    assert common_shape(text) == "0000-00-00"
    assert common_shape(pa.chunked_array([pa.array(["2026-11-27", None])])) is None
