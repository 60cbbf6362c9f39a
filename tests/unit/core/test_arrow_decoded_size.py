"""An Arrow input is measured by the size of its values decoded, not of its encoded buffers:
a dictionary, run-end encoded or view column counts each row's value, as a plain column of the
same values would be counted."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest.arrow_stream import stream_chunks
from icefloe.ingest.sources import InsertLimits, arrow_batch

LIMITS = InsertLimits(max_batch_bytes=100_000)
VALUE = "x" * 10_000  # 50 rows of it: 500 KB decoded, 10 KB encoded once


def _encoded_columns() -> dict[str, pa.Array]:
    return {
        "dictionary": pa.DictionaryArray.from_arrays(
            pa.array([0] * 50, pa.int32()), pa.array([VALUE])
        ),
        "run-end encoded": pa.RunEndEncodedArray.from_arrays([50], [VALUE]),
        "string_view": _shared_views(50),
    }


def _shared_views(rows: int) -> pa.Array:
    """``rows`` string views of one buffer's one value."""
    one = pa.array([VALUE], pa.string_view())
    views = pa.py_buffer(one.buffers()[1].to_pybytes() * rows)
    return pa.Array.from_buffers(pa.string_view(), rows, [None, views, one.buffers()[2]])


@pytest.mark.parametrize("kind", list(_encoded_columns()))
def test_an_encoded_column_over_the_batch_limit_decoded_is_refused(kind: str) -> None:
    # Given 50 rows of one 10 KB value, encoded so that the value is held once (or shared)
    table = pa.table({"s": _encoded_columns()[kind]})
    assert table.nbytes < LIMITS.max_batch_bytes  # (the encoded buffers pass the limit)

    # When it is taken as a batch under a 100 KB limit
    with pytest.raises(BatchRejectedError) as refused:
        arrow_batch(table, limits=LIMITS)

    # Then it is refused as the plain column of the same 500 KB of values is
    assert "over the limit of 100,000 bytes" in str(refused.value)
    with pytest.raises(BatchRejectedError):
        arrow_batch(pa.table({"s": [VALUE] * 50}), limits=LIMITS)


def test_a_pandas_categorical_stream_is_chunked_by_its_decoded_size() -> None:
    # Given a pandas Categorical of 50 rows of one 10 KB value (a dictionary column in Arrow)
    frame = pd.DataFrame({"c": pd.Categorical([VALUE] * 50)})
    reader = pa.RecordBatchReader.from_stream(frame)

    # When it is read in chunks of 50 KB
    chunks = list(stream_chunks(reader, chunk_bytes=50_000, max_rows=1_000_000))

    # Then each chunk holds at most 50 KB of values, and every row is read once
    assert len(chunks) >= 10
    assert all(c.table.num_rows * len(VALUE) <= 50_000 for c in chunks)
    assert sum(c.table.num_rows for c in chunks) == 50
