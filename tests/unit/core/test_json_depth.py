"""The bracket skeleton gives each JSON value's exact depth, and a column's at once, as a
parse of every value does."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from icefloe.ingest.json_depth import any_deeper_than, rows_deeper_than
from icefloe.ingest.json_input import json_text_clean
from icefloe.ingest.sources import InsertLimits
from icefloe.spec import Column

# Strings that look like structure: brackets, quotes, backslashes and escapes of each.
NASTY = ["[", "]", "{}", '"', "\\", '\\"', '"[', "\\[", "a\\\\", "\n[", "é{", "", "\u2028]"]


def _value(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([1, -2.5, True, None, rng.choice(NASTY) + rng.choice(NASTY)])
    if rng.random() < 0.5:
        return [_value(rng, depth - 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(NASTY) + str(i): _value(rng, depth - 1) for i in range(rng.randint(0, 4))}


def _depth(value: object) -> int:
    """The oracle: the nesting of the parsed value."""
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _text(rng: random.Random, value: object) -> str:
    return json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 2]))


@pytest.mark.parametrize("limit", [0, 1, 3, 8])
def test_each_value_is_as_deep_as_its_parse(limit: int) -> None:
    # Given 2,000 random JSON values up to 12 levels deep, their strings full of brackets,
    # quotes and escapes, some pretty-printed, and a null
    rng = random.Random(limit)
    values = [_value(rng, rng.randint(0, 12)) for _ in range(2000)]
    texts: list[str | None] = [_text(rng, v) for v in values]
    texts.append(None)

    # When the rows deeper than the limit are found, Then they are those of the parse
    expected = {i for i, v in enumerate(values) if _depth(v) > limit}
    assert rows_deeper_than(pa.array(texts), limit) == expected
    # And the column as a whole says whether there is any
    assert any_deeper_than(pa.array(texts), limit) == bool(expected)


def test_a_column_is_judged_as_its_values_in_any_layout() -> None:
    # Given columns of one to three values, chunked, sliced, large or JSON-typed
    rng = random.Random(7)
    for case in range(600):
        values = [_value(rng, rng.randint(0, 6)) for _ in range(rng.randint(1, 3))]
        texts = [_text(rng, v) for v in values]
        limit = rng.randint(0, 5)
        kind = rng.choice([pa.string(), pa.large_string()])
        array = pa.array(["[[[[[[[[[[]]]]]]]]]]", *texts], kind).slice(1)  # a deep one cut off
        column: pa.Array | pa.ChunkedArray = array
        if rng.random() < 0.5:
            cut = rng.randint(0, len(array))
            column = pa.chunked_array([array.slice(0, cut), array.slice(cut)], kind)
        if rng.random() < 0.3 and kind == pa.string():
            column = pa.ExtensionArray.from_storage(pa.json_(), array)
        # Then the column is deeper exactly when one of its values is
        expected = any(_depth(v) > limit for v in values)
        assert any_deeper_than(column, limit) == expected, f"case {case}: {texts} ({limit})"


def test_many_long_shallow_values_are_not_deeper() -> None:
    # An array of 70 small objects has 71 brackets but is 3 levels deep: not over 64
    text = json.dumps({"items": [{"sku": i, "note": "[x]"} for i in range(70)]})
    assert not any_deeper_than(pa.array([text] * 1000), 64)
    deep = "[" * 65 + "]" * 65
    assert rows_deeper_than(pa.array([text, deep, None, text]), 64) == {1}


def test_long_shallow_json_text_passes_the_fast_checks_and_deep_text_does_not() -> None:
    # Given JSON text with more brackets than the limit (an array of 70 objects), 3 levels deep
    shallow = json.dumps([{"sku": i} for i in range(70)])
    column = Column(name="j", type="JSON", nullable=True)
    limits = InsertLimits()
    # Then the fast paths' check passes it (it used to send the batch to the conversion)
    assert json_text_clean(pa.chunked_array([[shallow] * 100]), column, limits=limits)
    # And a value one level over the limit still fails it
    deep = "[" * (limits.max_json_depth + 1) + "]" * (limits.max_json_depth + 1)
    assert not json_text_clean(pa.chunked_array([[shallow, deep]]), column, limits=limits)
