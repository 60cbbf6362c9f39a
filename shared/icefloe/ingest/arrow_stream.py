"""Arrow streams as insert input: anything that exports one (pandas, polars, a DuckDB
relation, a ``pyarrow.RecordBatchReader`` or dataset), read in bounded chunks.

Every such object speaks the Arrow PyCapsule stream protocol (``__arrow_c_stream__``), so one
reader takes them all without importing pandas or polars. The stream is read once, in chunks
of about :data:`STREAM_CHUNK_BYTES` of Arrow memory (never more rows than an insert takes), so
a stream bigger than memory holds one chunk at a time. Each chunk is converted and written as
a batch would be; the files of every chunk are committed together, in one snapshot, at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.conversion import refuse

# About this much Arrow memory per chunk: on the stream benchmark's events a chunk's
# conversion, sort and encoding peak at a few times it.
STREAM_CHUNK_BYTES = 64 * 2**20


def arrow_stream(data: object) -> pa.RecordBatchReader | None:
    """``data`` as a record batch reader, when it exports an Arrow stream; else None."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if type(data).__module__.startswith("pyarrow._dataset"):
        import pyarrow.dataset as ds

        if isinstance(data, ds.Dataset):
            return data.scanner().to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        try:
            return pa.RecordBatchReader.from_stream(data)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise BatchRejectedError(
                f"batch refused: {type(data).__name__} did not export an Arrow stream: {e}"
            ) from e
    return None


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """Rows ``[start, start + table.num_rows)`` of the stream."""

    start: int
    table: pa.Table


def stream_chunks(
    reader: pa.RecordBatchReader, *, chunk_bytes: int, max_rows: int
) -> Iterator[StreamChunk]:
    """The stream's rows in chunks of about ``chunk_bytes`` (a bigger batch is sliced) and at
    most ``max_rows``; a stream that fails to produce a batch is refused, naming the row
    where it failed."""
    pending: list[pa.RecordBatch] = []
    size = rows = start = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowException as e:
            raise BatchRejectedError(
                f"batch refused: the Arrow stream failed after {start + rows:,} rows: {e}"
            ) from e
        for piece in _slices(batch, chunk_bytes=chunk_bytes, max_rows=max_rows):
            if pending and (size + piece.nbytes > chunk_bytes or rows + piece.num_rows > max_rows):
                yield StreamChunk(start, pa.Table.from_batches(pending, schema=reader.schema))
                start += rows
                pending, size, rows = [], 0, 0
            pending.append(piece)
            size += piece.nbytes
            rows += piece.num_rows
    if pending or start == 0:
        yield StreamChunk(start, pa.Table.from_batches(pending, schema=reader.schema))


def _slices(batch: pa.RecordBatch, *, chunk_bytes: int, max_rows: int) -> Iterator[pa.RecordBatch]:
    """``batch`` cut into pieces of about ``chunk_bytes`` and at most ``max_rows`` each."""
    if batch.num_rows == 0:
        return
    per_row = max(1.0, batch.nbytes / batch.num_rows)
    step = max(1, min(max_rows, int(chunk_bytes / per_row)))
    for offset in range(0, batch.num_rows, step):
        yield from _halved(batch.slice(offset, step), chunk_bytes)


def _halved(piece: pa.RecordBatch, chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    """``piece`` cut in halves until each is at most ``chunk_bytes`` or one row: rows of very
    different sizes make a slice cut by the average row too big."""
    if piece.nbytes <= chunk_bytes or piece.num_rows <= 1:
        yield piece
        return
    half = piece.num_rows // 2
    yield from _halved(piece.slice(0, half), chunk_bytes)
    yield from _halved(piece.slice(half), chunk_bytes)


def refused_at(error: BatchRejectedError, chunk: StreamChunk) -> BatchRejectedError:
    """``error`` about a chunk, with its rows numbered from the stream's start."""
    if chunk.start == 0 or not error.problems:
        return error
    problems = tuple(
        RowProblem(
            row=None if p.row is None else p.row + chunk.start, field=p.field, message=p.message
        )
        for p in error.problems
    )
    return refuse(problems, total=error.total)
