"""``_row_id`` generation: 16 bytes, time first, distinct, ordered within a chunk."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icefloe.errors import InvalidArgumentError
from icefloe.ingest.row_ids import ROW_ID_TYPE, new_row_ids


@settings(max_examples=50, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=3000), chunk=st.integers(min_value=1, max_value=700)
)
def test_row_ids_are_distinct_and_ordered_within_each_chunk(count: int, chunk: int) -> None:
    ids = new_row_ids(count, now_ms=0x0123456789AB, chunk=chunk).to_pylist()
    assert len(ids) == count and len(set(ids)) == count
    for start in range(0, count, chunk):
        part = ids[start : start + chunk]
        assert part == sorted(part)
        assert {i[6:13] for i in part} == ({part[0][6:13]} if part else set())
        assert [int.from_bytes(i[13:], "big") for i in part] == list(range(len(part)))
    assert all(i[:6] == bytes.fromhex("0123456789ab") for i in ids)


def test_row_ids_are_sixteen_fixed_bytes_and_a_million_fit_one_chunk() -> None:
    ids = new_row_ids(1_000_000)
    assert ids.type == ROW_ID_TYPE == pa.binary(16)
    assert ids[999_999].as_py()[13:] == (999_999).to_bytes(3, "big")
    assert ids[0].as_py()[:13] == ids[999_999].as_py()[:13]


def test_later_batches_sort_after_earlier_ones() -> None:
    earlier = new_row_ids(3, now_ms=1000).to_pylist()
    later = new_row_ids(3, now_ms=1001).to_pylist()
    assert max(earlier) < min(later)


def test_a_bad_chunk_size_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="chunk"):
        new_row_ids(3, chunk=0)


def test_each_row_id_ends_with_its_index_across_all_three_index_bytes() -> None:
    # 200,000 rows: the low byte wraps 781 times, the middle one 3 times, the high one counts 0..3
    data = new_row_ids(200_000).buffers()[1].to_pybytes()
    indexes = [int.from_bytes(data[16 * n + 13 : 16 * n + 16], "big") for n in range(200_000)]
    assert indexes == list(range(200_000))
