"""Iceberg's bucket hash: 32-bit murmur3 (x86) over a value's canonical bytes, in pure Python.

Values hash as in the Iceberg spec (appendix B), so bucket numbers match other Iceberg engines:
integers as 8-byte little-endian longs, strings as UTF-8, dates as days since the epoch,
timestamps as microseconds since the epoch (UTC), UUIDs as their 16 big-endian bytes.
"""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime
from uuid import UUID

from icefloe.errors import InvalidInputError
from icefloe.spec._text import show

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_EPOCH = datetime(1970, 1, 1)
_EPOCH_DAY = _EPOCH.date().toordinal()
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

HashableValue = int | str | bytes | date | datetime | UUID


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Return murmur3_x86_32 of ``data`` as a signed 32-bit int, like Java's (and Iceberg's)."""
    h = seed & _MASK
    end = len(data) - len(data) % 4
    for (k,) in struct.iter_unpack("<I", data[:end]):
        k = _rotl((k * _C1) & _MASK, 15) * _C2 & _MASK
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[end:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= _rotl((k * _C1) & _MASK, 15) * _C2 & _MASK
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - 2**32 if h & 0x80000000 else h


def micros_since_epoch(value: datetime) -> int:
    """Microseconds since 1970-01-01 UTC; a naive datetime is taken as UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def hash_bytes(value: HashableValue) -> bytes:
    """Return the bytes Iceberg hashes for ``value``; booleans are refused, as in Iceberg."""
    if isinstance(value, bool):
        raise InvalidInputError(f"bucket: cannot hash boolean value {show(value)}")
    if isinstance(value, int):
        if _LONG_MIN <= value <= _LONG_MAX:
            return struct.pack("<q", value)
        # Beyond a long (HUGEINT, UBIGINT): minimal big-endian two's complement, Iceberg's
        # encoding of a decimal's unscaled value.
        return value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInputError(f"bucket: string {show(value)} is not valid Unicode") from e
    if isinstance(value, bytes):
        return value
    if isinstance(value, datetime):
        return struct.pack("<q", micros_since_epoch(value))
    if isinstance(value, date):
        return struct.pack("<q", value.toordinal() - _EPOCH_DAY)
    if isinstance(value, UUID):
        return value.bytes
    raise InvalidInputError(
        f"bucket: cannot hash value {show(value)} of type {type(value).__name__}"
    )


def iceberg_hash(value: HashableValue) -> int:
    """Iceberg's 32-bit hash of one value (signed), the input of the bucket transform."""
    return murmur3_32(hash_bytes(value))


def bucket_of(value: HashableValue, *, buckets: int) -> int:
    """Return the bucket in ``[0, buckets)`` of ``value``, as Iceberg's ``bucket[N]`` does."""
    return (iceberg_hash(value) & 0x7FFFFFFF) % buckets
