"""Arrow streams as insert input: anything that exports one (pandas, polars, a DuckDB
relation, a ``pyarrow.RecordBatchReader`` or dataset), read in bounded chunks.

Every such object speaks the Arrow PyCapsule stream protocol (``__arrow_c_stream__``), so one
reader takes them all without importing pandas or polars. The stream is read once, in chunks
of about :data:`STREAM_CHUNK_BYTES` of Arrow memory, decoded (never more rows than an insert takes), so
a stream bigger than memory holds one chunk at a time. Each chunk is converted and written as
a batch would be; the files of every chunk are committed together, in one snapshot, at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.arrow_shape import decoded_nbytes
from icefloe.ingest.conversion import refuse

# About this much Arrow memory per chunk: on the stream benchmark's events a chunk's
# conversion, sort and encoding peak at a few times it.
STREAM_CHUNK_BYTES = 64 * 2**20


def arrow_stream(data: object) -> pa.RecordBatchReader | None:
    """``data`` as a record batch reader, when it exports an Arrow stream; else None. A
    pandas DataFrame's index is read as :func:`pandas_index_resolved` says."""
    reader = _reader(data)
    return None if reader is None else pandas_index_resolved(reader)


def _reader(data: object) -> pa.RecordBatchReader | None:
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
            column = _column_not_exported(data)
            where = "" if column is None else f" (its column {column!r})"
            raise BatchRejectedError(
                f"batch refused: {type(data).__name__} did not export an Arrow stream{where}: {e}"
            ) from e
    return None


def _column_not_exported(data: object) -> str | None:
    """The first column of a frame (pandas, polars: ``frame[[name]]``) whose own export
    fails: polars' ``Int128`` has no Arrow form pyarrow reads. None when no one column is
    found to fail, or the frame cannot be split so."""
    names = getattr(data, "columns", None)
    if names is None:
        return None
    try:
        for name in list(names):
            try:
                pa.RecordBatchReader.from_stream(data[[name]])  # type: ignore[index]
            except (pa.ArrowException, TypeError, ValueError):
                return str(name)
    except Exception:  # (a frame that cannot be split so: only a better message was sought)
        return None
    return None


_PANDAS_METADATA = b"pandas"


def pandas_index_resolved(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """``reader`` with a pandas DataFrame's index (its schema's ``pandas`` metadata says
    where) read as pandas writes it to Parquet: an unnamed index is row labels, left out
    (``__index_level_0__`` after a ``concat``, a filter, an explicit index), and a named one
    is a column of its name, whether pandas exported it as a column or, being a range
    (``set_index("user_id")`` over ids 1, 2, 3), as metadata alone; but left out when the
    frame has a column of that name (``set_index("user_id", drop=False)``: the column is
    inserted). ``reader`` itself when there is nothing to change (a frame with its default
    index, or no pandas metadata)."""
    schema = reader.schema
    index = _pandas_index(schema)
    if index is None:
        return reader
    dropped, ranges = index
    # (pandas' export puts the index after the frame's columns: a name given twice is the
    # index at its last place)
    drop = {max(i for i, f in enumerate(schema) if f.name == name) for name in dropped}
    if not drop and not ranges:
        return reader
    keep = [i for i in range(len(schema)) if i not in drop]
    metadata = {k: v for k, v in (schema.metadata or {}).items() if k != _PANDAS_METADATA}
    resolved = pa.schema(
        [schema.field(i) for i in keep] + [pa.field(r.name, pa.int64()) for r in ranges],
        metadata=metadata or None,
    )

    def batches() -> Iterator[pa.RecordBatch]:
        offset = 0
        with reader:
            for batch in reader:
                labels = [r.labels(offset, batch.num_rows) for r in ranges]
                offset += batch.num_rows
                yield pa.RecordBatch.from_arrays(
                    [batch.column(i) for i in keep] + labels, schema=resolved
                )

    return pa.RecordBatchReader.from_batches(resolved, batches())


@dataclass(frozen=True, slots=True)
class _RangeIndex:
    """A named pandas index that is a range, exported as metadata alone."""

    name: str
    start: int
    step: int

    def labels(self, offset: int, rows: int) -> pa.Array:
        """Its labels of rows ``[offset, offset + rows)``."""
        first = self.start + offset * self.step
        return pa.array(range(first, first + rows * self.step, self.step), pa.int64())


def _pandas_index(schema: pa.Schema) -> tuple[list[str], list[_RangeIndex]] | None:
    """From a schema's pandas metadata: the fields of the schema holding an index level to
    leave out (unnamed, or named as a column of the frame, which pandas then calls
    ``__index_level_0__``), and the named range indexes to add; None without pandas metadata
    (or with metadata of another shape: then nothing is taken for an index)."""
    raw = (schema.metadata or {}).get(_PANDAS_METADATA)
    if raw is None:
        return None
    try:
        described = json.loads(raw)
        named = {c["field_name"]: c["name"] for c in described.get("columns", [])}
        dropped: list[str] = []
        ranges: list[_RangeIndex] = []
        for level in described["index_columns"]:
            if isinstance(level, str):
                name = named.get(level)
                if level in schema.names and (name is None or str(name) != level):
                    dropped.append(level)
            elif level["kind"] == "range" and level["name"] is not None:
                name, step = str(level["name"]), int(level["step"])
                if name not in schema.names:
                    ranges.append(_RangeIndex(name, int(level["start"]), step))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return dropped, ranges


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
        for piece, piece_bytes in _slices(batch, chunk_bytes=chunk_bytes, max_rows=max_rows):
            if pending and (size + piece_bytes > chunk_bytes or rows + piece.num_rows > max_rows):
                yield StreamChunk(start, pa.Table.from_batches(pending, schema=reader.schema))
                start += rows
                pending, size, rows = [], 0, 0
            pending.append(piece)
            size += piece_bytes
            rows += piece.num_rows
    if pending or start == 0:
        yield StreamChunk(start, pa.Table.from_batches(pending, schema=reader.schema))


def _slices(
    batch: pa.RecordBatch, *, chunk_bytes: int, max_rows: int
) -> Iterator[tuple[pa.RecordBatch, int]]:
    """``batch`` cut into pieces of about ``chunk_bytes`` and at most ``max_rows`` each, with
    each piece's size as :func:`~icefloe.ingest.arrow_shape.decoded_nbytes` measures it (a
    dictionary column's rows as their values: a pandas Categorical's too)."""
    if batch.num_rows == 0:
        return
    per_row = max(1.0, decoded_nbytes(batch) / batch.num_rows)
    step = max(1, min(max_rows, int(chunk_bytes / per_row)))
    for offset in range(0, batch.num_rows, step):
        yield from _halved(batch.slice(offset, step), chunk_bytes)


def _halved(piece: pa.RecordBatch, chunk_bytes: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """``piece`` cut in halves until each is at most ``chunk_bytes`` or one row: rows of very
    different sizes make a slice cut by the average row too big."""
    size = decoded_nbytes(piece)
    if size <= chunk_bytes or piece.num_rows <= 1:
        yield piece, size
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
