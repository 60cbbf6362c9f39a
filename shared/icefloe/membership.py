"""Per-file membership filters for the row-group key: which values a file may hold.

Min/max statistics cannot skip a small file whose keys span the whole range (every insert of
mixed users does), so each file written with a row-group key on a VARCHAR or integer column also
records a Bloom filter of its distinct keys (about 1% false positives, 10 bits a key, at most
:data:`MAX_KEYS` keys). A query comparing the key with constants skips the files whose filter
says none of them is there. A filter never says "absent" for a value the file holds, so
skipping on it cannot change an answer.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable

MAX_KEYS = 20_000  # above this many distinct keys, min/max must do
BITS_PER_KEY = 10
HASHES = 7
_LOW_64 = (1 << 64) - 1


def hash_pair(value: str | int) -> tuple[int, int]:
    """The double-hashing pair of a key: its ``i``-th bit is ``(first + i * second) % bits``
    (the meta store's ``membership_may_contain`` probes the same bits)."""
    encoded = (
        b"s\x00" + value.encode() if isinstance(value, str) else b"i\x00" + str(value).encode()
    )
    both = int.from_bytes(hashlib.blake2b(encoded, digest_size=16).digest(), "little")
    return both & _LOW_64, (both >> 64) | 1  # the digest's first 8 bytes, then its last 8


def _positions(value: str | int, bits: int) -> list[int]:
    first, second = hash_pair(value)
    return [(first + i * second) % bits for i in range(HASHES)]


def build_filter(values: Iterable[object]) -> str | None:
    """The filter of these keys (None when there are too many, or one is not str or int)."""
    keys: set[str | int] = set()
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            return None
        keys.add(value)
        if len(keys) > MAX_KEYS:
            return None
    bits = max(64, math.ceil(len(keys) * BITS_PER_KEY / 8) * 8)
    array = bytearray(bits // 8)
    for key in keys:
        # The positions of _positions, stepped in small integers: (first + i * second) % bits
        # is (first % bits + i * (second % bits)) % bits. A file's filter is built on every
        # insert; this loop is most of its cost.
        first, second = hash_pair(key)
        position, step = first % bits, second % bits
        for _ in range(HASHES):
            array[position >> 3] |= 1 << (position & 7)
            position = (position + step) % bits
    return f"{HASHES}:{bits}:{base64.b64encode(bytes(array)).decode()}"


def may_contain(encoded: str, value: object) -> bool:
    """False only when the filter proves ``value`` is not among the file's keys."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return True
    try:
        hashes, bits, payload = encoded.split(":", 2)
        array = base64.b64decode(payload)
        if int(hashes) != HASHES or len(array) * 8 != int(bits):
            return True  # another format: no proof
    except ValueError:
        return True
    return all(array[p // 8] & (1 << (p % 8)) for p in _positions(value, int(bits)))
