"""``_row_id``: a 16-byte id every row gets at insert, unique and sortable by insert time.

Layout (big-endian, so byte order is time order): 6 bytes of Unix milliseconds, 7 random bytes
drawn once per batch, 3 bytes of the row's index in its chunk of up to 2^24 rows (a new random
draw per chunk). Unique without the meta store: two batches collide only if they start in the
same millisecond and draw the same 56 random bits. Generated vectorized with numpy.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa

ROW_ID_COLUMN = "_row_id"
ROW_ID_TYPE = pa.binary(16)
_CHUNK = 1 << 24


def new_row_ids(count: int, *, now_ms: int | None = None) -> pa.FixedSizeBinaryArray:
    """``count`` fresh row ids, increasing in row order."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    ids = np.empty((count, 16), dtype=np.uint8)
    ids[:, 0:6] = np.frombuffer(ms.to_bytes(6, "big"), dtype=np.uint8)
    for start in range(0, count, _CHUNK):
        stop = min(count, start + _CHUNK)
        ids[start:stop, 6:13] = np.frombuffer(os.urandom(7), dtype=np.uint8)
        index = np.arange(stop - start, dtype=np.uint32)
        ids[start:stop, 13] = (index >> 16) & 0xFF
        ids[start:stop, 14] = (index >> 8) & 0xFF
        ids[start:stop, 15] = index & 0xFF
    buffer = pa.py_buffer(ids.tobytes())
    array = pa.Array.from_buffers(ROW_ID_TYPE, count, [None, buffer])
    assert isinstance(array, pa.FixedSizeBinaryArray)
    return array
