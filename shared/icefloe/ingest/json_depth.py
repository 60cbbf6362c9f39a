"""How deeply JSON text is nested, decided for a whole column at once.

A value is refused when it nests more than ``max_json_depth`` arrays and objects. Counting
brackets bounds the depth from above, cheaply; a value with more brackets than the limit (an
array of a hundred small objects, say) needs its exact depth. A Python scan of each such value
cost about 45 µs, so a batch of 70,000 of them took 3 s to load. Here the column's bytes are
reduced, in a few passes of C-speed ``bytes`` methods, to its bracket skeleton:

1. escaped backslashes and escaped quotes are dropped (a JSON escape is two bytes, so removing
   ``\\\\`` pairs from the left, then ``\\"``, removes exactly those escapes); then every byte
   but brackets and quotes, with ``{}`` written as ``[]`` (depth does not depend on the kind);
2. the strings are dropped: when every string is free of brackets, removing each ``""`` leaves
   no quote (a string holding a bracket always leaves one); otherwise each ``"..."`` is removed
   with a regular expression;
3. each pass removes every ``[]`` (the leaves of the bracket tree): one level of nesting. The
   text is deeper than the limit exactly when brackets remain after ``limit`` passes.

Values are balanced on their own, so the skeleton of the whole column (values end to end) is
one pass sequence for all of them: a value ends with ``]`` and the next starts with ``[``, and
``][`` never pairs. The text must be valid JSON (strings closed, brackets balanced), as every
caller's is: checked first, or written by a JSON library or parser.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.ingest.strict_json import value_bytes

_SQUARE = bytes.maketrans(b"{}", b"[]")
_ALL_BUT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


def skeleton(text: bytes) -> bytes:
    """The brackets of JSON text outside its strings, all written ``[`` and ``]``."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = text.translate(_SQUARE, _ALL_BUT_MARKS)
    bare = marks.replace(b'""', b"")
    # Removing a "" leaves the bytes inside strings as they were (an empty string goes, or two
    # strings with nothing between them become one), so the strings left are removed exactly.
    return bare if b'"' not in bare else _STRING.sub(b"", bare)


def nests_deeper_than(brackets: bytes, limit: int) -> bool:
    """Whether a bracket skeleton (of one value, or of several end to end) nests more than
    ``limit`` levels."""
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


def any_deeper_than(values: pa.Array | pa.ChunkedArray, limit: int) -> bool:
    """Whether any value of a string column of JSON text nests more than ``limit`` levels (a
    scalar is at depth 0, ``[]`` at 1, ``[{}]`` at 2). Only values longer than ``limit``
    bytes can; nulls are not deeper."""
    values = _storage(values)
    lengths = pc.binary_length(values)
    longest = pc.max(lengths).as_py()
    if longest is None or longest <= limit:
        return False
    long_values = values.filter(pc.greater(lengths, limit))  # nulls are left out
    chunks = long_values.chunks if isinstance(long_values, pa.ChunkedArray) else [long_values]
    whole = bytearray()
    for chunk in chunks:
        data = value_bytes(chunk)
        if data is None:
            return True  # another layout (callers pass plain text): a doubt, the conversion decides
        whole += skeleton(data.to_pybytes())
    return nests_deeper_than(bytes(whole), limit)


def _storage(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An extension-typed column (JSON text typed as JSON) as its storage."""
    if not isinstance(values.type, pa.BaseExtensionType):
        return values
    if isinstance(values, pa.ChunkedArray):
        return pa.chunked_array([c.storage for c in values.chunks], values.type.storage_type)
    return values.storage


def rows_deeper_than(values: pa.Array | pa.ChunkedArray, limit: int) -> set[int]:
    """The positions of the values nesting more than ``limit`` levels (see
    :func:`any_deeper_than`, which decides first whether there is any)."""
    if not any_deeper_than(values, limit):
        return set()
    return {
        position
        for position, value in enumerate(values.to_pylist())
        if value is not None
        and len(value) > limit
        and nests_deeper_than(skeleton(value.encode()), limit)
    }
