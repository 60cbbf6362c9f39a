"""``_row_id``: a 16-byte id every row gets at insert, unique and sortable by insert time.

Layout (big-endian, so byte order is time order): 6 bytes of Unix milliseconds, 7 random bytes
drawn once per batch, 3 bytes of the row's index in its chunk of up to 2^24 rows (a new random
draw per chunk). Unique without the meta store: two batches collide only if they start in the
same millisecond and draw the same 56 random bits. Built with C-speed byte operations (a
repeated template, then the index bytes, themselves repeated patterns, written with strided
slices), without numpy.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa

from icefloe.errors import InvalidArgumentError
from icefloe.spec.names import ROW_ID_COLUMN

__all__ = ["ROW_ID_CHUNK_ROWS", "ROW_ID_COLUMN", "ROW_ID_TYPE", "new_row_ids"]

ROW_ID_TYPE = pa.binary(16)
ROW_ID_CHUNK_ROWS = 1 << 24  # ids increase with row position within each chunk this long
_BYTE_VALUES = bytes(range(256))
_EACH_256_TIMES = b"".join(bytes([value]) * 256 for value in range(256))  # 64 KiB


def new_row_ids(
    count: int, *, now_ms: int | None = None, chunk: int = ROW_ID_CHUNK_ROWS
) -> pa.FixedSizeBinaryArray:
    """``count`` fresh row ids, distinct, increasing in row order within each chunk of
    ``chunk`` rows (2^24; smaller only in tests)."""
    if not 1 <= chunk <= ROW_ID_CHUNK_ROWS:
        raise InvalidArgumentError(f"chunk must be in 1..{ROW_ID_CHUNK_ROWS}, got {chunk}")
    if count == 0:
        empty = pa.array([], type=ROW_ID_TYPE)
        assert isinstance(empty, pa.FixedSizeBinaryArray)
        return empty
    ms = (int(time.time() * 1000) if now_ms is None else now_ms).to_bytes(6, "big")
    parts = []
    for start in range(0, count, chunk):
        size = min(chunk, count - start)
        ids = _repeated(ms + os.urandom(7) + b"\0\0\0", size)
        for byte, column in enumerate(_index_bytes(size)):  # the index, big-endian
            ids[13 + byte :: 16] = column
        parts.append(ids)
    data = parts[0] if len(parts) == 1 else bytearray().join(parts)
    array_ = pa.Array.from_buffers(ROW_ID_TYPE, count, [None, pa.py_buffer(data)])
    assert isinstance(array_, pa.FixedSizeBinaryArray)
    return array_


def _repeated(pattern: bytes, count: int) -> bytearray:
    """``pattern`` ``count`` times, filled in place by doubling: copying ``pattern * count``
    into a bytearray took four times as long (16 MB: 37 against 9 ms)."""
    out = bytearray(len(pattern) * count)
    if not out:
        return out
    out[: len(pattern)] = pattern
    filled = len(pattern)
    while filled < len(out):
        step = min(filled, len(out) - filled)
        out[filled : filled + step] = out[:step]
        filled += step
    return out


def _index_bytes(size: int) -> tuple[bytes, bytes, bytes]:
    """The high, middle and low bytes of the indexes 0 .. size - 1 (below 2^24), each as one
    run of ``size`` bytes. Each is a repeating pattern (the low byte counts 0..255 over and
    over, the middle one holds each value for 256 rows, the high one for 65,536), so they are
    built by repeating bytes, at C speed: a million rows in a few milliseconds, where an
    array of the indexes took 30."""
    low = (_BYTE_VALUES * (size // 256 + 1))[:size]
    middle = (_EACH_256_TIMES * (size // 65536 + 1))[:size]
    high = b"".join(bytes([value]) * 65536 for value in range(-(-size // 65536)))[:size]
    return high, middle, low
