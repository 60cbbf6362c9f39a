"""Bucket hashing matches the Iceberg spec's test vectors (appendix B)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from uuid import UUID

import pytest

from icefloe.errors import InvalidInputError
from icefloe.spec import bucket_of, iceberg_hash, murmur3_32
from icefloe.spec.hashing import HashableValue, hash_bytes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (34, 2017239379),  # Iceberg's int and long vectors agree: ints hash as longs
        ("iceberg", 1210000089),
        (date(2017, 11, 16), -653330422),
        (datetime(2017, 11, 16, 22, 31, 8), -2047944441),
        (datetime(2017, 11, 16, 14, 31, 8, tzinfo=timezone(timedelta(hours=-8))), -2047944441),
        (UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7"), 1488055340),
        (bytes([0, 1, 2, 3]), -188683207),
    ],
)
def test_iceberg_hash_matches_the_spec_vectors(value: HashableValue, expected: int) -> None:
    assert iceberg_hash(value) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"hello", 613153351),
        (b"The quick brown fox jumps over the lazy dog", 776992547),
    ],
)
def test_murmur3_matches_reference_vectors_for_every_tail_length(
    data: bytes, expected: int
) -> None:
    assert murmur3_32(data) == expected


def test_murmur3_returns_a_signed_32_bit_value() -> None:
    values = [murmur3_32(bytes([i]) * i) for i in range(64)]
    assert all(-(2**31) <= v < 2**31 for v in values)
    assert any(v < 0 for v in values)


def test_bucket_is_the_non_negative_hash_modulo_n() -> None:
    assert bucket_of(34, buckets=16) == (2017239379 & 0x7FFFFFFF) % 16
    assert bucket_of("iceberg", buckets=7) == (1210000089 & 0x7FFFFFFF) % 7


def test_booleans_cannot_be_hashed() -> None:
    with pytest.raises(InvalidInputError, match="boolean"):
        iceberg_hash(True)


def test_integers_beyond_a_long_hash_as_minimal_big_endian_twos_complement() -> None:
    # Given a UBIGINT value that does not fit a long; then it hashes like Iceberg's decimals do
    assert hash_bytes(2**63) == b"\x00\x80" + bytes(7)
    assert hash_bytes(-(2**63) - 1) == b"\xff\x7f" + b"\xff" * 7
    assert 0 <= bucket_of(2**64 - 1, buckets=16) < 16
