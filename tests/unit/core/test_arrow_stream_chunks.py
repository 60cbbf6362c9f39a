"""An Arrow stream is read in chunks of at most the size asked for, whatever its batches."""

from __future__ import annotations

import pyarrow as pa

from icefloe.ingest.arrow_stream import stream_chunks


def test_rows_of_very_different_sizes_make_no_chunk_over_the_size() -> None:
    # Given 900 one-byte rows and 100 rows of 10 KB, shuffled into one batch
    values = ["x"] * 900 + ["y" * 10_000] * 100
    values = [values[(i * 7919) % 1000] for i in range(1000)]
    batch = pa.record_batch({"v": values})
    reader = pa.RecordBatchReader.from_batches(batch.schema, [batch])

    # When it is read in chunks of 50 KB
    chunks = list(stream_chunks(reader, chunk_bytes=50_000, max_rows=1_000_000))

    # Then no chunk is bigger, and every row is read once, in order
    assert all(c.table.nbytes <= 50_000 for c in chunks)
    assert pa.concat_tables([c.table for c in chunks]).column("v").to_pylist() == values
    assert [c.start for c in chunks] == [
        sum(c.table.num_rows for c in chunks[:n]) for n in range(len(chunks))
    ]
