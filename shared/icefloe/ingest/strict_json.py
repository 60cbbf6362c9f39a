"""Standard JSON, where DuckDB's parser is lenient.

DuckDB reads (and ``json_valid`` passes) two things standard JSON (RFC 8259) does not have:

- NaN and infinities as numbers, in any case (``NaN``, ``-Infinity``, ``inf``);
- a trailing comma before a closing bracket (``[1,]``, ``{"a": 1,}``).

JSON text that is stored as it came (a JSON column of Arrow, CSV or Parquet input) is checked
for both by the conversion (:mod:`icefloe.ingest.columns`). A JSON file's records are re-written
by DuckDB's reader, which drops a trailing comma silently, so the file's own bytes are searched
for one (:func:`trailing_comma_at`). Both searches start with a cheap pattern over the whole
text and look closer, outside strings, only where it matches.
"""

from __future__ import annotations

import mmap
import re
import struct

import pyarrow as pa
import pyarrow.compute as pc

# A comma, JSON whitespace, then a closing bracket: valid only inside a string.
TRAILING_COMMA = r",[ \t\n\r]*[\]}]"
# What may not be standard JSON: the letters of NaN and infinities, or a trailing comma. Also
# matches inside strings ("finance", "a,]"), so a match is only a suspect.
NOT_STANDARD_SUSPECT = r"(?i)nan|inf|" + TRAILING_COMMA
# A JSON string (its characters in runs, for speed), in RE2 and Python syntax.
JSON_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
# From the start of JSON text: bytes that are not quotes, and whole strings, then a trailing
# comma. Only a comma outside strings can follow such a prefix.
_TRAILING_COMMA_OUTSIDE_STRINGS = f'^(?:[^"]|{JSON_STRING})*{TRAILING_COMMA}'
# A JSON string, or a trailing comma outside any string (group 1). Strings cannot hold a raw
# newline, so a line of valid JSON starts outside any string.
_STRING_OR_TRAILING_COMMA = re.compile(f"{JSON_STRING}|({TRAILING_COMMA})".encode())


def as_one_value(data: pa.Buffer | bytes | mmap.mmap) -> pa.Array:
    """The bytes as an array of one binary value, without a copy."""
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    offsets = pa.py_buffer(struct.pack("<qq", 0, buffer.size))  # (numpy is not in the layer)
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, buffer])


def matches_anywhere(data: pa.Buffer | bytes | mmap.mmap, pattern: str) -> bool:
    """Whether ``pattern`` (RE2 syntax) matches anywhere in ``data``. The bytes are searched as
    one value, without a copy: several times faster than per value, or than Python's ``re``."""
    return bool(pc.match_substring_regex(as_one_value(data), pattern)[0].as_py())


def may_not_be_standard(values: pa.ChunkedArray) -> bool:
    """Whether a string column of JSON text may hold NaN, an infinity or a trailing comma
    (False proves it holds none). Each chunk's text is searched as one value; a match across
    two values, or in the bytes of a null, only makes a suspect."""
    for chunk in values.chunks:
        if len(chunk) == 0:
            continue
        data = value_bytes(chunk)
        if data is None:
            return True  # another layout: a suspect, and DuckDB's check of each value decides
        if data.size and matches_anywhere(data, NOT_STANDARD_SUSPECT):
            return True
    return False


_OFFSETS = {pa.string(): struct.Struct("<i"), pa.large_string(): struct.Struct("<q")}


def value_bytes(chunk: pa.Array) -> pa.Buffer | None:
    """The bytes of a string array's values end to end (a null's too, if it has any), without
    a copy; None for a layout other than string or large string (plain, or an extension's
    storage)."""
    storage = (
        chunk.type.storage_type if isinstance(chunk.type, pa.BaseExtensionType) else chunk.type
    )
    offset = _OFFSETS.get(storage)
    if offset is None:
        return None
    _, offsets_buffer, data = chunk.buffers()
    if data is None or len(chunk) == 0:
        return pa.py_buffer(b"")
    (start,) = offset.unpack_from(offsets_buffer, offset.size * chunk.offset)
    (end,) = offset.unpack_from(offsets_buffer, offset.size * (chunk.offset + len(chunk)))
    return data.slice(start, end - start)


def trailing_comma_at(text: bytes | mmap.mmap) -> int | None:
    """Where the first trailing comma outside a string is in JSON text DuckDB read without
    error (so its strings are well formed), or None when there is none."""
    if not text or not matches_anywhere(text, TRAILING_COMMA):
        return None
    # A suspect: RE2 decides in one pass whether one is outside strings (Python's re would
    # take seconds over a long line only to find it inside a string); only then is it located.
    if not matches_anywhere(text, _TRAILING_COMMA_OUTSIDE_STRINGS):
        return None
    outside = 0  # a position known to be outside any string
    for suspect in re.finditer(TRAILING_COMMA.encode(), text):
        if suspect.start() < outside:
            continue  # inside a string already passed over
        start = max(outside, text.rfind(b"\n", 0, suspect.start()) + 1)
        for token in _STRING_OR_TRAILING_COMMA.finditer(text, start):
            if token.group(1) is not None:
                return token.start()
            if token.end() > suspect.start():
                outside = token.end()  # the suspect was inside this string
                break
    return None
