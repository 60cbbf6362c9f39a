"""Membership filters: never "absent" for a value the file holds, rarely "present" otherwise."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.membership import MAX_KEYS, build_filter, may_contain

keys = st.one_of(st.text(max_size=12), st.integers(-(2**63), 2**64))


@settings(max_examples=300, derandomize=True)
@given(values=st.lists(keys, min_size=1, max_size=200))
def test_every_value_written_is_reported_present(values: list[str | int]) -> None:
    encoded = build_filter(values)
    assert encoded is not None
    assert all(may_contain(encoded, v) for v in values)


def test_absent_values_are_mostly_reported_absent() -> None:
    rng = random.Random(7)
    present = {f"u{rng.randrange(10**9)}" for _ in range(2000)}
    encoded = build_filter(present)
    assert encoded is not None
    probes = [f"v{n}" for n in range(5000)]
    false_positives = sum(may_contain(encoded, p) for p in probes)
    assert false_positives < 5000 * 0.03  # about 1% by design


def test_a_string_and_an_integer_of_the_same_text_are_different_keys() -> None:
    encoded = build_filter(["42"])
    assert encoded is not None
    assert may_contain(encoded, "42")
    # A 1-key filter has few bits set; the integer 42 hashes elsewhere (seeded check).
    assert not may_contain(encoded, 42)


def test_no_filter_for_too_many_keys_or_other_types() -> None:
    assert build_filter(range(MAX_KEYS + 1)) is None
    assert build_filter([1.5]) is None
    assert build_filter([True]) is None
    assert build_filter([None, "a"]) is not None


def test_an_unknown_format_or_value_type_proves_nothing() -> None:
    encoded = build_filter(["a"])
    assert encoded is not None
    assert may_contain("3:64:AAAAAAAAAAA=", "zzz")
    assert may_contain("garbage", "zzz")
    assert may_contain(encoded, 1.5)
