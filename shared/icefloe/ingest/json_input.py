"""NDJSON parsed once into typed Arrow, or left to the DuckDB conversion.

The DuckDB conversion (:mod:`icefloe.ingest.conversion`) reads every field as JSON and checks its
type value by value; it names the row and field at fault, and it is slow. Most batches hold
no bad value. For those, pyarrow's JSON reader parses the typed columns straight into their
Arrow types (its typing is strict: a string is never read as a number, nor a number as a
string), while DuckDB reads and checks only the JSON-typed columns, in another thread. The
batch is then proven clean with the Arrow input's checks
(:func:`~icefloe.ingest.arrow_input.proven_clean`).

Before pyarrow reads a byte, :func:`object_lines` scans the file
(:mod:`~icefloe.ingest.json_shape`): pyarrow parses nested values recursively, and a line
nesting about 20,000 levels kills the process. A line nesting its record deeper than the
limit refuses the batch there, naming its row and field. DuckDB's read of the JSON columns
runs during the scan (:func:`read_json_columns_beside`): its reader is iterative, and the scan
holds the GIL on one core while DuckDB works on the other.

This path answers only when the slow path would give the same table:

- every line starts with ``{`` and the file is valid UTF-8 (pyarrow reads a top-level ``null``
  as a row of nulls, or crashes on it as the first line; it replaces bytes that are not UTF-8,
  where DuckDB refuses them);
- pyarrow read as many objects as there are lines (two objects on one line are refused by
  DuckDB's reader, not by pyarrow's);
- no field outside the table's columns: pyarrow infers the other fields, and any that is not
  a JSON column is unknown; when a JSON column's values change shape from record to record
  (inference then fails), the other fields are skipped and DuckDB checks the keys instead;
- timestamps and dates in the ISO-8601 forms both parsers read the same (pyarrow alone reads
  ``2026-01-01T10`` and ``10:59+0230``), either all with a zone or all without;
- every check of the Arrow input passes, and the JSON columns' checks pass.

Otherwise (or for a table keeping unknown fields, or a column type this path does not convert)
it returns None and the DuckDB conversion decides, naming what is wrong. A differential test
(``tests/unit/core/test_ndjson_differential.py``) holds the two to the same answer over random
batches with bad values, odd forms and malformed lines mixed in.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import cache
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from icefloe.ingest.arrow_input import ARROW_TYPES, proven_clean
from icefloe.ingest.digit_shapes import common_shape, shape_matches
from icefloe.ingest.json_depth import any_deeper_than
from icefloe.ingest.json_shape import openers_within, opening_brackets, refuse_deep_lines
from icefloe.ingest.sources import InsertLimits
from icefloe.ingest.strict_json import (
    as_one_value,
    matches_anywhere,
    may_not_be_standard,
    value_bytes,
)
from icefloe.spec import Column, TableSpec

# What pyarrow's reader parses each column type as: the Arrow input's types, but timestamps
# and dates as strings (converted after their form is checked). FLOAT is left out: DuckDB
# rounds the text to a float once, pyarrow through a double (twice), and the two can differ
# in the last bit. JSON columns are DuckDB's to read.
_READ_TYPES: dict[str, pa.DataType] = {
    kind: pa.string() if kind in ("DATE", "TIMESTAMP") else arrow_type
    for kind, arrow_type in ARROW_TYPES.items()
    if kind not in ("FLOAT", "JSON")
}
_DATE = r"\d{4}-\d{2}-\d{2}"
_TIME = r"[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
_ZONE = r"(?:Z|[+-]\d{2}(?::?\d{2})?)"
# A zone only after the seconds: pyarrow reads "10:59+0230", DuckDB does not.
_ZONED_TIMESTAMP = rf"^{_DATE}[T ]\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d{{1,6}})?{_ZONE}$"
# The same, its offset in range (-18:00 to +18:00, minutes 00 to 59; pyarrow reads up to
# 23:59, DuckDB any two digits): for values searched one by one. A column of one shape is
# matched with the form above, its offsets then checked as numbers (_offsets_in_range).
_ZONE_IN_RANGE = r"(?:Z|[+-](?:(?:0\d|1[0-7])(?::?[0-5]\d)?|18(?::?00)?))"
_ZONED_TIMESTAMP_IN_RANGE = rf"^{_DATE}[T ]\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d{{1,6}})?{_ZONE_IN_RANGE}$"
_LOCAL_TIMESTAMP = f"^{_DATE}(?:{_TIME})?$"
_PLAIN_DATE = f"^{_DATE}$"
_CONCURRENT_FROM_BYTES = 1 << 20
_SCAN_BLOCK = 8 << 20


# Threads that read JSON columns beside pyarrow's parse: kept for the process, since starting
# a thread costs about a millisecond, a tenth of a small batch's insert; made on first use, not
# at import.
@cache
def _json_readers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="icefloe-json-columns")


def fast_json_columns(spec: TableSpec) -> list[Column] | None:
    """The JSON columns DuckDB must read, or None when the spec is not for this path."""
    if spec.extra_fields == "keep":
        return None
    if any(c.type != "JSON" and c.type not in _READ_TYPES for c in spec.columns):
        return None
    return [c for c in spec.columns if c.type == "JSON"]


def object_lines(path: Path, *, limits: InsertLimits | None = None) -> int | None:
    """How many lines of an NDJSON file there are, if every one starts with ``{`` and the
    file is valid UTF-8; None otherwise (a blank line, a line starting with whitespace, a
    scalar, an array, a BOM...: rare in practice, and left to the slow path). Read in blocks
    into one buffer, each block ending at a newline (never inside a character), so a large
    batch is not held twice; a line longer than the buffer grows it.

    With ``limits``, this is also the scan no parser reads a line before
    (:mod:`~icefloe.ingest.json_shape`): a line nesting its record more than
    ``max_json_depth`` levels refuses the batch, naming its row and field. The lines are
    counted among each block's opening brackets, which that scan keeps anyway (counting them
    in the block took as long)."""
    buffer = bytearray(_SCAN_BLOCK)
    view = memoryview(buffer)
    lines = held = 0  # held: the start of a line not yet whole, moved to the buffer's front
    start = 0  # where the buffer's first byte is in the file
    objects = True  # every line so far starts with an object, and is UTF-8
    try:
        with path.open("rb", buffering=0) as f:
            while True:
                if held == len(buffer):
                    view.release()
                    buffer.extend(bytes(len(buffer)))
                    view = memoryview(buffer)
                read = f.readinto(view[held:])
                if not read:
                    break
                end = held + read
                cut = buffer.rfind(b"\n", 0, end) + 1  # whole lines end there (none: read on)
                if cut:
                    objects = objects and _object_lines(view[:cut])
                    if not objects and limits is None:
                        return None
                    # The opening brackets of the whole lines: a full buffer is read in place
                    # (no copy), its line not yet whole cut off the end; a short read copied.
                    openers = opening_brackets(buffer if end == len(buffer) else view[:end])
                    openers = openers[: openers.rfind(b"\n") + 1]
                    lines += _scanned_lines(path, openers, view[:cut], start, limits)
                    start += cut
                held = end - cut
                view[:held] = view[cut:end]
            if held:  # a last line without a newline
                objects = objects and _object_lines(view[:held])
                openers = opening_brackets(view[:held])
                lines += _scanned_lines(path, openers, view[:held], start, limits) + 1
    finally:
        view.release()
    return (lines or None) if objects else None


def _scanned_lines(
    path: Path,
    openers: bytes | bytearray,
    block: memoryview,
    start: int,
    limits: InsertLimits | None,
) -> int:
    """The line breaks of a block of whole lines (from byte ``start`` of the file), given its
    :func:`~icefloe.ingest.json_shape.opening_brackets`, once, with ``limits``, no line of
    it nests its record too deeply."""
    if limits is not None and not openers_within(openers, limits.max_json_depth + 1):
        refuse_deep_lines(path, bytes(block), block_start=start, max_depth=limits.max_json_depth)
    return openers.count(b"\n")


# A line that does not start with an object: after a newline, anything but ``{``.
_LINE_NOT_AN_OBJECT = r"\n[^{]"


def _object_lines(whole_lines: memoryview) -> bool:
    """Whether the whole lines are UTF-8 and each starts with ``{``. Searched with RE2 and
    validated by Arrow's SIMD check, each over the lines at once, without a copy."""
    data = pa.py_buffer(whole_lines)
    return (
        whole_lines[0] == ord("{")
        and not matches_anywhere(data, _LINE_NOT_AN_OBJECT)
        and _utf8(data)
    )


def _utf8(data: pa.Buffer) -> bool:
    """Whether ``data`` is valid UTF-8 (pyarrow's reader would replace bad bytes; DuckDB's
    refuses them): the bytes viewed as one string, validated."""
    try:
        as_one_value(data).view(pa.large_string()).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def read_typed(
    path: Path, spec: TableSpec, *, infer_rest: bool, threads: bool = False
) -> pa.Table | None:
    """The columns as pyarrow reads them (timestamps and dates still text), or None when it
    refuses the batch. With ``infer_rest`` every other field is inferred and comes back as a
    column too (the JSON columns, and any unknown field); without, they are skipped."""
    schema = pa.schema(
        [pa.field(c.name, _READ_TYPES[c.type]) for c in spec.columns if c.type != "JSON"]
    )
    options = pj.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="infer" if infer_rest else "ignore"
    )
    try:
        return pj.read_json(
            str(path), read_options=pj.ReadOptions(use_threads=threads), parse_options=options
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def typed_columns(spec: TableSpec, table: pa.Table) -> pa.Table | None:
    """Convert the text timestamps and dates, if every one is in a form both parsers read."""
    types = {c.name: c.type for c in spec.columns}
    for index, name in enumerate(table.column_names):
        kind = types[name]
        if kind == "TIMESTAMP":
            converted = timestamps_from_text(table.column(name))
        elif kind == "DATE":
            converted = dates_from_text(table.column(name))
        else:
            continue
        if converted is None:
            return None
        table = table.set_column(index, name, converted)
    return table


def timestamps_from_text(text: pa.ChunkedArray) -> pa.ChunkedArray | None:
    if text.null_count == len(text):
        return pa.chunked_array([pa.nulls(len(text), pa.timestamp("us"))])
    shape = common_shape(text)
    try:
        if _all_match_shaped(text, _ZONED_TIMESTAMP, shape=shape, each=_ZONED_TIMESTAMP_IN_RANGE):
            if shape is not None and not _offsets_in_range(text, shape):
                return None  # the conversion names the value
            zoned = pc.cast(text, pa.timestamp("us", tz="UTC"))
            return zoned.cast(pa.timestamp("us"))  # the same instants, in UTC
        if _all_match_shaped(text, _LOCAL_TIMESTAMP, shape=shape):
            return pc.cast(text, pa.timestamp("us"))
    except pa.ArrowInvalid:  # a month 13, an hour 24, a year 0...
        return None
    return None  # mixed zoned and local, or another form


def _offsets_in_range(text: pa.ChunkedArray, shape: str) -> bool:
    """Whether every offset of a column of zoned timestamps of one ``shape`` (matching
    ``_ZONED_TIMESTAMP``, so one byte a character, every value as wide) is from -18:00 to
    +18:00, its minutes from 00 to 59. The offset is at the same place in every value: the
    bytes of its tens of hours and of minutes are read at a stride (a copy of one byte a
    value), and only a column with hours past 9 has its offsets compared as text."""
    if shape.endswith("Z"):
        return True
    width = len(shape)
    sign = max(shape.rfind("+"), shape.rfind("-"))  # the zone's: the date's come first
    zone = shape[sign + 1 :]
    # Digits of one width compare as their numbers: 18:00 is the largest offset.
    largest_allowed = {"00": b"18", "0000": b"1800", "00:00": b"18:00"}[zone]
    minutes_at = None if zone == "00" else sign + 1 + zone.index("0", 2)
    for chunk in text.chunks:
        data = value_bytes(chunk)
        if data is None or data.size != len(chunk) * width:
            return False  # not the layout common_shape read: left to the conversion
        if not data.size:
            continue
        view = memoryview(data)
        if minutes_at is not None and bytes(view[minutes_at::width]).translate(None, b"012345"):
            return False  # minutes past 59
        tens = bytes(view[sign + 1 :: width])
        if not tens.translate(None, b"0"):
            continue  # hours below 10
        if tens.translate(None, b"01"):
            return False  # hours from 20
        values = pa.Array.from_buffers(pa.binary(width), len(chunk), [None, data])
        if pc.max(pc.binary_slice(values, sign + 1, width)).as_py() > largest_allowed:
            return False
    return True


# From this many values a form is checked in two halves at once (pyarrow's regex releases
# the GIL): it is the longest step between the parse and the write, on one core otherwise.
_HALVED_FROM_VALUES = 1 << 18


def _all_match(text: pa.ChunkedArray, pattern: str) -> bool:
    """Whether every value (nulls aside) matches ``pattern``, an anchored RE2 pattern in which
    ``\\d`` is the only class holding a digit (so that a value's shape decides: see
    :mod:`~icefloe.ingest.digit_shapes`)."""
    return _all_match_shaped(text, pattern, shape=common_shape(text))


def _all_match_shaped(
    text: pa.ChunkedArray, pattern: str, *, shape: str | None, each: str | None = None
) -> bool:
    """:func:`_all_match`, given the values' common shape (None when they have none: see
    :func:`~icefloe.ingest.digit_shapes.common_shape`). ``each``: a stricter pattern (one that
    may tell digits apart) that values searched one by one, when they have no common shape,
    are held to instead."""
    if shape is not None:
        return shape_matches(shape, pattern)
    searched = each or pattern

    def matches(part: pa.ChunkedArray) -> bool:
        # min_count=0: a part of nulls alone is true (by default it would be null)
        return bool(pc.all(pc.match_substring_regex(part, searched), min_count=0).as_py())

    if len(text) < _HALVED_FROM_VALUES:
        return matches(text)
    half = len(text) // 2
    return all(_json_readers().map(matches, [text.slice(0, half), text.slice(half)]))


def dates_from_text(text: pa.ChunkedArray) -> pa.ChunkedArray | None:
    if text.null_count == len(text):
        return pa.chunked_array([pa.nulls(len(text), pa.date32())])
    if not _all_match(text, _PLAIN_DATE):
        return None
    try:
        return pc.cast(text, pa.date32())
    except pa.ArrowInvalid:
        return None


class JsonColumnReader(Protocol):
    """DuckDB's side of the one-parse path (:mod:`icefloe.ingest.json_records`)."""

    def json_columns(self, columns: list[Column]) -> pa.Table | None:
        """The JSON columns, read and checked as the slow path does; None if a value fails."""

    def only_known_fields(self) -> bool:
        """Whether every record's fields are columns of the table."""

    def json_text_holds(self, text: pa.Table, columns: list[Column]) -> bool:
        """The conversion's own checks of JSON text that raised a doubt (letters of NaN in a
        string, say): whether every value passes them."""


def read_json_columns_beside(
    spec: TableSpec, *, size_bytes: int, limits: InsertLimits, duck: JsonColumnReader
) -> Future[pa.Table | None] | None:
    """DuckDB reading and checking the JSON columns in another thread (it releases the GIL),
    for :func:`load_ndjson_fast`; None when the batch is too small for a thread to pay, or
    the spec is not for this path. It may start before :func:`object_lines` scans the file:
    DuckDB's reader is iterative, so no nesting harms it, and its answer is used only if the
    scan passes. Whoever starts it waits for it (``load_ndjson_fast`` does)."""
    json_columns = fast_json_columns(spec)
    # Threads pay for themselves from about a megabyte; below, they cost more than they save.
    if not json_columns or size_bytes <= _CONCURRENT_FROM_BYTES:
        return None
    return _json_readers().submit(_checked_json_columns, duck, json_columns, limits)


def load_ndjson_fast(
    path: Path,
    spec: TableSpec,
    *,
    size_bytes: int,
    limits: InsertLimits,
    partition_sources: frozenset[str],
    duck: JsonColumnReader,
    lines: int,
    json_read: Future[pa.Table | None] | None,
) -> pa.Table | None:
    """The batch as the slow path would load it, or None when it must decide. ``lines``: what
    :func:`object_lines` answered with ``limits`` (the scan comes before pyarrow's parse).
    ``json_read``: :func:`read_json_columns_beside` as the caller started it (None: the JSON
    columns, if any, are read here after the parse); it is waited for before this returns
    or raises."""
    try:
        json_columns = fast_json_columns(spec)
        if json_columns is None:
            return None
        # DuckDB reads the JSON columns while pyarrow parses the rest; pyarrow only ever sees
        # lines that start with an object, and that the scan passed.
        return _parse_beside(
            path,
            spec,
            json_columns,
            json_read,
            lines=lines,
            threads=size_bytes > _CONCURRENT_FROM_BYTES,
            limits=limits,
            partition_sources=partition_sources,
            duck=duck,
        )
    finally:
        if json_read is not None:
            wait([json_read])


def _parse_beside(
    path: Path,
    spec: TableSpec,
    json_columns: list[Column],
    json_future: Future[pa.Table | None] | None,
    *,
    lines: int,
    threads: bool,
    limits: InsertLimits,
    partition_sources: frozenset[str],
    duck: JsonColumnReader,
) -> pa.Table | None:
    """pyarrow's parse of the typed columns, joined with the JSON columns (DuckDB's, read in
    ``json_future`` or here), proven clean."""
    try:
        typed = _read_known(path, spec, duck, threads=threads)
    except BaseException:
        if json_future is not None:
            wait([json_future])  # its own error, if any, must not replace this one
        raise
    json_table = json_future.result() if json_future is not None else None
    if json_columns and json_future is None and typed is not None:
        json_table = _checked_json_columns(duck, json_columns, limits)
    if typed is None or typed.num_rows != lines:
        return None
    if json_columns and (json_table is None or json_table.num_rows != lines):
        return None
    typed = typed_columns(spec, typed)
    if typed is None:
        return None
    for col in json_columns:  # proven_clean passes them as they are: checked already
        assert json_table is not None
        typed = typed.append_column(col.name, json_table.column(col.name))
    return proven_clean(spec, typed, limits=limits, partition_sources=partition_sources)


def _checked_json_columns(
    duck: JsonColumnReader, columns: list[Column], limits: InsertLimits
) -> pa.Table | None:
    """The JSON columns as DuckDB reads them, if their text passes the conversion's checks
    (in the reading thread, while pyarrow parses the rest); None otherwise."""
    table = duck.json_columns(columns)
    if table is None:
        return None
    doubtful = [c for c in columns if not json_text_clean(table.column(c.name), c, limits=limits)]
    if doubtful and not duck.json_text_holds(table.select([c.name for c in doubtful]), doubtful):
        return None
    return table


def json_text_clean(
    text: pa.ChunkedArray, col: Column, *, limits: InsertLimits, written_by_orjson: bool = False
) -> bool:
    """Whether a JSON column's text surely passes the conversion's checks: no null in a NOT
    NULL column, no value over the size limit, none that could hold NaN or Infinity (a
    letter sequence the conversion looks at more closely) or be nested too deeply (its exact
    depth, see :mod:`~icefloe.ingest.json_depth`). A doubt sends the batch to the conversion. Text
    ``written_by_orjson`` holds no NaN or Infinity (orjson never writes them), so text like
    ``"banana"`` or ``"info"`` raises no doubt there."""
    if not col.nullable and text.null_count > 0:
        return False
    if text.null_count == len(text):
        return True
    longest = pc.max(pc.binary_length(text)).as_py()
    if longest is not None and longest > limits.max_value_bytes:
        return False
    if not written_by_orjson and may_not_be_standard(text):
        return False
    return not any_deeper_than(text, limits.max_json_depth)


def _read_known(
    path: Path, spec: TableSpec, duck: JsonColumnReader, *, threads: bool
) -> pa.Table | None:
    """The typed columns, if no record has a field the table lacks; None otherwise.

    A batch big enough for threads is first read with its JSON columns' shape declared
    (:func:`_read_shaped`). Otherwise, or when that gives up, pyarrow infers the other
    fields: any that is not a JSON column is unknown. When a
    JSON column's values change shape between records (an object, then a string), inference
    fails; the fields are then skipped and DuckDB checks that none is unknown."""
    typed_names = [c.name for c in spec.columns if c.type != "JSON"]
    if threads and _json_count(spec):
        shaped = _read_shaped(path, spec)
        if shaped is not None:
            return shaped
    inferred = read_typed(path, spec, infer_rest=True, threads=threads)
    if inferred is not None:
        if len(inferred.column_names) > len(typed_names) + _json_count(spec):
            return None
        extra = [n for n in inferred.column_names if n not in typed_names]
        if any(spec.column_names.count(n) == 0 for n in extra):
            return None  # an unknown field: the slow path names it
        return inferred.drop_columns(extra)
    if not _json_count(spec):
        return None  # pyarrow refused a typed value: the slow path names it
    skipped = read_typed(path, spec, infer_rest=False, threads=threads)
    if skipped is None or not duck.only_known_fields():
        return None
    return skipped


# The lines whose JSON columns' shapes stand for the batch's: about the first 64 KiB.
_SHAPE_SAMPLE_BYTES = 1 << 16


def _read_shaped(path: Path, spec: TableSpec) -> pa.Table | None:
    """The typed columns, read with each JSON column declared in the shape its values have
    in the first lines, and any other field an error; None when the sample has no shape to
    declare or a record does not fit it (a field the table lacks, a JSON value of another
    shape), and :func:`_read_known` goes on as without this.

    Inferring every field of every record doubles pyarrow's parse when a JSON column holds
    objects; events' JSON columns (properties, context) mostly keep one shape through a
    batch, so the inference runs on a sample and the whole file is parsed to a known schema.
    The JSON columns' values still come from DuckDB; the shape only lets pyarrow tell a field
    the table lacks (which it refuses here) from one of a JSON column."""
    with path.open("rb") as file:
        sample = file.read(_SHAPE_SAMPLE_BYTES)
    end = sample.rfind(b"\n")
    if end <= 0:
        return None
    try:
        inferred = pj.read_json(
            pa.BufferReader(sample[: end + 1]),
            read_options=pj.ReadOptions(use_threads=False),
            parse_options=pj.ParseOptions(unexpected_field_behavior="infer"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    fields = [pa.field(c.name, _READ_TYPES[c.type]) for c in spec.columns if c.type != "JSON"]
    for column in spec.columns:
        if column.type != "JSON":
            continue
        index = inferred.schema.get_field_index(column.name)
        if index < 0:
            return None  # no value in the sample to take a shape from
        fields.append(pa.field(column.name, inferred.schema.field(index).type))
    options = pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="error")
    try:
        read = pj.read_json(
            str(path), read_options=pj.ReadOptions(use_threads=True), parse_options=options
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return read.drop_columns([c.name for c in spec.columns if c.type == "JSON"])


def _json_count(spec: TableSpec) -> int:
    return sum(1 for c in spec.columns if c.type == "JSON")
