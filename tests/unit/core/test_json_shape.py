"""The scan before any JSON parser (icefloe.ingest.json_shape): held to a tokenizer written
plainly here, over random text (strings holding brackets, quotes and backslashes, lines cut
short, closing brackets that close nothing) and read in blocks small enough that lines and
strings fall across their edges."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError, InvalidArgumentError
from icefloe.ingest import json_input, json_shape
from icefloe.ingest.arrow_input import utf8_valid
from icefloe.ingest.json_shape import (
    check_json_document,
    lines_within,
    openers_within,
    opening_brackets,
    skeleton,
)
from icefloe.ingest.sources import InsertLimits, arrow_batch

SEED = 20261127


def reference_skeleton(text: bytes) -> tuple[bytes, bool]:
    """Brackets outside strings (as [ and ]) and line breaks, read a byte at a time; and
    whether a string was open at a line's end. A string ends at its line's end."""
    out = bytearray()
    in_string = escaped = open_at_end = False
    for byte in text:
        if byte == ord("\n"):
            open_at_end = open_at_end or in_string
            in_string = escaped = False
            out.append(byte)
        elif in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            out += b"["
        elif byte in b"]}":
            out += b"]"
    return bytes(out), open_at_end or in_string


def reference_lines_within(bare: bytes, limit: int) -> bool | None:
    """Whether every line closes what it opens within ``limit`` levels; None for a line with a
    closing bracket that closes nothing (where the scan may answer either way)."""
    for line in bare.split(b"\n"):
        depth = deepest = 0
        for byte in line:
            depth += 1 if byte == ord("[") else -1
            if depth < 0:
                return None
            deepest = max(deepest, depth)
        if depth or deepest > limit:
            return False
    return True


def reference_deep_line(text: bytes, limit: int) -> int | None:
    """The index (among lines that are not blank) of the first line whose record nests more
    than ``limit`` levels, a parser's way: strings skipped, a bracket closing nothing starting
    the line over."""
    row = 0
    for line in text.split(b"\n"):
        bare, _ = reference_skeleton(line)
        depth = 0
        for byte in bare:
            depth = max(depth + (1 if byte == ord("[") else -1), 0)
            if depth > limit:
                return row
        if line.strip():
            row += 1
    return None


def random_string(rng: random.Random, *, closed: bool = True) -> bytes:
    """A JSON string holding brackets, escaped quotes and backslashes; left open (its line
    then ends inside it) unless ``closed``."""
    pieces = [b"a", b"[", b"]", b"{", b"}", b",", b":", b'\\"', b"\\\\", b"\\n"]
    inner = b"".join(rng.choices(pieces, k=rng.randint(0, 6)))
    return b'"' + inner + (b'"' if closed else b"")


def random_text(rng: random.Random, *, lines: int, depth: int) -> bytes:
    pieces = []
    for _ in range(lines):
        line = bytearray()
        opened = 0
        for _ in range(rng.randint(0, 12)):
            roll = rng.random()
            if roll < 0.3:
                closed = rng.random() < 0.9
                line += random_string(rng, closed=closed)
                if not closed:
                    break  # it takes the rest of its line (so no backslash is ever outside
                    # a string: JSON has none, and no parser reads past one)
            elif roll < 0.55:
                line += rng.choice([b"[", b"{"]) * rng.randint(1, depth)
                opened += 1
            elif roll < 0.8:
                line += rng.choice([b"]", b"}"]) * rng.randint(1, depth)
            else:
                line += rng.choice([b"1", b",", b":", b" ", b"null"])
        pieces.append(bytes(line))
    return b"\n".join(pieces) + (b"\n" if rng.random() < 0.5 else b"")


def test_the_skeleton_is_the_brackets_a_tokenizer_finds_outside_strings() -> None:
    rng = random.Random(SEED)
    for _ in range(3000):
        text = random_text(rng, lines=rng.randint(1, 4), depth=3)
        assert skeleton(text) == reference_skeleton(text), text


def test_lines_within_answers_as_a_tokenizer_does() -> None:
    rng = random.Random(SEED + 1)
    answered = set()
    for _ in range(3000):
        bare, _ = reference_skeleton(random_text(rng, lines=rng.randint(1, 4), depth=8))
        limit = rng.choice([1, 3, 5, 8, 20])
        expected = reference_lines_within(bare, limit)
        if expected is not None:
            assert lines_within(bare, limit) is expected, (bare, limit)
            answered.add(expected)
    # A line nested exactly to the limit passes; one more level does not (passes and sums)
    for limit in (1, 4, 5, 64):
        assert lines_within(b"[" * limit + b"]" * limit + b"\n[]", limit)
        assert not lines_within(b"[]\n" + b"[" * (limit + 1) + b"]" * (limit + 1), limit)
        assert not lines_within(b"[" * limit, limit)  # not closed
    assert answered == {True, False}


def test_a_line_with_no_more_openers_than_the_limit_nests_no_deeper() -> None:
    assert openers_within(opening_brackets(b'{"a": [1, {"b": 2}]}\n{}'), 3)
    assert not openers_within(opening_brackets(b'{"a": [1, {"b": 2}]}\n{}'), 2)
    # Openers in strings count too (the scan looks closer at such a line)
    assert not openers_within(opening_brackets(b'{"a": "[[[["}'), 3)


@pytest.mark.parametrize("block", [16, 64, 1 << 20])
def test_object_lines_refuses_the_first_line_nesting_too_deeply_by_row_across_blocks(
    block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given blocks small enough that lines and strings cross their edges
    monkeypatch.setattr(json_input, "_SCAN_BLOCK", block)
    rng = random.Random(SEED + block)
    limits = InsertLimits(max_json_depth=3)  # a record nests 4 levels at most
    refused = passed = 0
    for case in range(300):
        lines = []
        for _ in range(rng.randint(1, 8)):
            depth = rng.choice([0, 1, 2, 3, 4, 5, 7])
            value = (
                random_string(rng, closed=rng.random() < 0.8)
                if rng.random() < 0.2
                else b"[" * depth + b"1" + b"]" * depth
            )
            lines.append(b'{"k": ' + value + b"}" if rng.random() < 0.9 else b"")
        text = b"\n".join(lines) + b"\n"
        path = tmp_path / f"{case}.ndjson"
        path.write_bytes(text)
        expected = reference_deep_line(text, limits.max_json_depth + 1)
        # When it is scanned: then it is refused exactly when a line nests too deeply,
        # naming that line's row (the lines before it that are not blank) and its field
        if expected is None:
            json_input.object_lines(path, limits=limits)
            passed += 1
        else:
            with pytest.raises(BatchRejectedError) as error:
                json_input.object_lines(path, limits=limits)
            assert f"row {expected}, field 'k': JSON is nested more than 3 levels" in str(
                error.value
            )
            (problem,) = error.value.problems
            assert (problem.row, problem.field) == (expected, "k")
            refused += 1
    assert refused and passed


def test_brackets_in_strings_do_not_refuse_a_line(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    path.write_bytes(b'{"k": "' + b"[" * 500 + b'\\"' + b"{" * 500 + b'"}\n')
    assert json_input.object_lines(path, limits=InsertLimits()) == 1


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "batch.json"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (
            b'[{"a": 1}, {"a": 2},',
            "batch.json is not complete: the array is not closed (it ends at line 1)",
        ),
        (b'[{"a": 1},\n {"a": 2}\n', "the array is not closed (it ends at line 2)"),
        (b'{"a": 1}\n{"a": [1, 2', "the last object is not closed (it ends at line 2)"),
        (b'[{"a": "tr', "batch.json is not complete: a string is not closed (it ends at line 1)"),
        (b'[{"a": 1}]]', "a closing bracket closes nothing (line 1, column 11)"),
        (b'[{"a": "x\n"}]', "a string is not closed before its line ends (line 1, column 8)"),
    ],
)
def test_a_json_document_that_is_not_complete_is_refused_naming_the_file(
    data: bytes, words: str, tmp_path: Path
) -> None:
    with pytest.raises(BatchRejectedError) as error:
        check_json_document(write(tmp_path, data), max_depth=64, source="batch.json")
    assert words in str(error.value)


@pytest.mark.parametrize(
    "data",
    [b'[{"a": 1}, {"a": [2, {"b": "]"}]}]', b'{"a": 1}\n{"a": 2}', b"\xef\xbb\xbf[]", b"  \n", b""],
)
def test_a_complete_json_document_passes(data: bytes, tmp_path: Path) -> None:
    check_json_document(write(tmp_path, data), max_depth=64, source=None)


@pytest.mark.parametrize("block", [8, 32, 1 << 20])
def test_a_json_array_element_nested_too_deeply_is_refused_by_row_and_field_across_blocks(
    block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an array whose element 3 nests 4 levels in field "k" (one too many for the limit
    # of 3), pretty-printed over lines, read in small blocks
    monkeypatch.setattr(json_shape, "BLOCK_BYTES", block)
    elements = [b'{"k": [1, "],]"]}', b'{"k": 2}', b'{"j": {"x": [1]}}', b'{"k": [[[[1]]]]}', b"{}"]
    path = write(tmp_path, b"[\n" + b",\n".join(elements) + b"\n]\n")
    with pytest.raises(BatchRejectedError) as error:
        check_json_document(path, max_depth=3, source=None)
    (problem,) = error.value.problems
    assert (problem.row, problem.field) == (3, "k")
    assert "JSON is nested more than 3 levels deep (line 5, column 10)" in problem.message
    # One level less passes
    path.write_bytes(path.read_bytes().replace(b"[[[[1]]]]", b"[[[1]]]"))
    check_json_document(path, max_depth=3, source=None)


def test_the_depth_limit_has_a_ceiling_below_what_a_recursive_parser_survives() -> None:
    InsertLimits(max_json_depth=json_shape.MAX_JSON_DEPTH_CAP)
    with pytest.raises(InvalidArgumentError, match="max_json_depth must be from 1 to 1000"):
        InsertLimits(max_json_depth=json_shape.MAX_JSON_DEPTH_CAP + 1)


def nested(kind: pa.DataType, wrap: str, depth: int) -> pa.DataType:
    for _ in range(depth):
        if wrap == "list":
            kind = pa.list_(kind)
        elif wrap == "struct":
            kind = pa.struct([("a", kind)])
        elif wrap == "map":
            kind = pa.map_(pa.string(), kind)
        elif wrap == "union":  # not a level of JSON: only the list inside counts
            kind = pa.dense_union([pa.field("x", pa.list_(kind))])
    return kind


@pytest.mark.parametrize("wrap", ["list", "struct", "map", "union"])
def test_an_arrow_column_type_nesting_past_the_limit_is_refused_by_name(wrap: str) -> None:
    limits = InsertLimits(max_json_depth=5)
    fits = pa.table({"c": pa.nulls(1, nested(pa.int8(), wrap, 5))})
    arrow_batch(fits, limits=limits)
    deep = pa.table({"c": pa.nulls(1, nested(pa.int8(), wrap, 6))})
    with pytest.raises(BatchRejectedError, match="field 'c': its Arrow type nests more than 5"):
        arrow_batch(deep, limits=limits)
    dictionary = pa.table({"c": pa.array(["x"]).dictionary_encode()})
    arrow_batch(dictionary, limits=limits)


def test_text_split_between_two_values_is_not_utf8_though_their_bytes_are() -> None:
    # Given "é" (two bytes) split between two values: their bytes end to end are UTF-8
    split = pa.chunked_array([pa.array([b"caf\xc3", b"\xa9"], pa.binary()).view(pa.string())])
    assert not utf8_valid(split)
    assert utf8_valid(pa.chunked_array([pa.array(["café", "ascii", None, ""])]))
    assert not utf8_valid(
        pa.chunked_array([pa.array([b"ok", b"\xff"], pa.binary()).view(pa.string())])
    )
