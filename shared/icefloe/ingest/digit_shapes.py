"""Text columns whose values all share one shape, checked against a form in one step.

A value's shape is its text with every digit read as ``0``: ``2026-11-27T10:15:00.123456Z``
has the shape ``0000-00-00T00:00:00.000000Z``. An anchored pattern in which ``\\d`` is the
only class that holds a digit (the timestamp and date forms the fast paths accept) matches
every value of a shape or none. Most columns of timestamps hold one shape throughout, so
instead of searching each value with RE2 (0.2 ms per thousand values, a tenth of a small
insert's load), the column's bytes are read once with ``bytes.translate`` and compared with
its first value's shape repeated; that shape alone is then matched, once per process.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.ingest.strict_json import value_bytes

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
# The column's bytes are translated and compared this many at a time (about), so that no
# copy of a whole large column is made.
_BLOCK_BYTES = 1 << 20


def common_shape(text: pa.ChunkedArray) -> str | None:
    """The shape every value of ``text`` has, or None: when they differ, or a value is null
    or empty, or the column is not plain text."""
    if text.type not in (pa.string(), pa.large_string()) or text.null_count or len(text) == 0:
        return None
    bounds = pc.min_max(pc.binary_length(text))
    width = bounds["min"].as_py()
    if not width or width != bounds["max"].as_py():
        return None
    shape: bytes | None = None
    block = b""
    for chunk in text.chunks:
        data = value_bytes(chunk)  # every value is ``width`` bytes, end to end
        assert data is not None  # plain text, checked above
        if data.size == 0:
            continue
        if shape is None:
            shape = data.slice(0, width).to_pybytes().translate(_DIGITS_AS_ZERO)
            block = shape * max(1, _BLOCK_BYTES // width)
        for at in range(0, data.size, len(block)):
            size = min(len(block), data.size - at)
            piece = data.slice(at, size).to_pybytes().translate(_DIGITS_AS_ZERO)
            if piece != block[:size]:
                return None
    return None if shape is None else shape.decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=256)
def shape_matches(shape: str, pattern: str) -> bool:
    """Whether ``pattern`` (anchored RE2, ``\\d`` its only class holding a digit) matches the
    values of ``shape``."""
    return bool(pc.match_substring_regex(pa.array([shape]), pattern)[0].as_py())
