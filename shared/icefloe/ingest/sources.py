"""Staging an insert's input as one file DuckDB can scan: rows, bytes, streams or files.

Inputs arrive as Python rows (a Lambda event), bytes, a stream (stdin) or a file. Each is
checked against the batch size limit and staged as a local file, so that one vectorized reader
handles them all.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO, Literal, cast

import orjson
import pyarrow as pa

from icefloe.errors import BatchRejectedError, InvalidArgumentError, InvalidInputError, RowProblem
from icefloe.ingest import native_values
from icefloe.ingest.arrow_shape import (
    ARROW_MAX_LEVELS,
    decoded_nbytes,
    exports_deeper_than,
    nests_deeper_than,
)
from icefloe.ingest.json_shape import MAX_JSON_DEPTH_CAP
from icefloe.spec.type_tree import TypeNode

InputFormat = Literal["json", "ndjson", "csv", "parquet"]
INPUT_FORMATS: tuple[InputFormat, ...] = ("json", "ndjson", "csv", "parquet")
_COPY_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class InsertLimits:
    """What one insert accepts. A batch over a limit is refused whole, naming the limit."""

    max_batch_bytes: int = 256 * 2**20
    max_rows: int = 5_000_000
    max_value_bytes: int = 4 * 2**20
    max_json_depth: int = 64

    def __post_init__(self) -> None:
        # Every JSON input is scanned to this depth before a parser reads it; pyarrow's parse
        # is recursive, and a few thousand levels more would exhaust a thread's stack.
        if not 1 <= self.max_json_depth <= MAX_JSON_DEPTH_CAP:
            raise InvalidArgumentError(
                f"max_json_depth must be from 1 to {MAX_JSON_DEPTH_CAP}, not {self.max_json_depth}"
            )


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """A batch as a local file, and whether icefloe made it (and so must delete it)."""

    path: Path
    format: InputFormat
    size_bytes: int
    owned: bool
    # Known layout of a JSON file (DuckDB's read_json format); "auto" makes DuckDB sniff it.
    json_layout: Literal["auto", "array", "newline_delimited"] = "auto"
    # Written by orjson (rows staged by icefloe): standard JSON, no trailing comma to look for.
    written_by_orjson: bool = False
    # What a refusal about the whole input calls it: the file as given, "stdin"; None for
    # bytes and rows ("the input").
    source: str | None = None

    def discard(self) -> None:
        if self.owned:
            self.path.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class ArrowBatch:
    """A batch already in Arrow (a caller's table): converted from memory, never staged."""

    table: pa.Table
    format: Literal["arrow"] = "arrow"

    def discard(self) -> None:
        """Nothing to delete: the table is the caller's."""


def arrow_batch(table: object, *, limits: InsertLimits) -> ArrowBatch:
    """Check an Arrow input's kind, the nesting of its types and its size before anything else
    looks at it (DuckDB's scan of an Arrow type nested some thousands of levels crashes)."""
    if not isinstance(table, pa.Table | pa.RecordBatch):
        raise BatchRejectedError(
            f"batch refused: expected a pyarrow Table or RecordBatch, got {type(table).__name__}"
        )
    for field in table.schema:
        if nests_deeper_than(field.type, limits.max_json_depth):
            problem = RowProblem(
                row=None,
                field=field.name,
                message=f"its Arrow type nests more than {limits.max_json_depth} levels deep",
            )
            raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
        if exports_deeper_than(field.type, ARROW_MAX_LEVELS):
            problem = RowProblem(
                row=None,
                field=field.name,
                message=f"its Arrow type nests more than the {ARROW_MAX_LEVELS} levels an"
                " Arrow input can (a map counts two levels, a dictionary one)",
            )
            raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
    whole = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    for name, column in zip(whole.column_names, whole.columns, strict=True):
        try:
            column.validate()  # buffers as long as the lengths say (cheap; values: later)
        except pa.ArrowInvalid as e:
            problem = RowProblem(row=None, field=name, message=f"not valid Arrow data: {e}")
            raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,)) from e
    size = decoded_nbytes(whole)
    if size > limits.max_batch_bytes:
        raise _too_big(size, limits)
    return ArrowBatch(whole)


def check_parquet(path: Path, *, source: str | None) -> None:
    """Refuse a file whose Parquet footer pyarrow's reader refuses, before DuckDB's reader
    looks at it: pyarrow's refuses a schema nesting more than 100 levels and sizes beyond its
    Thrift limits, where DuckDB's follows a schema's nesting recursively (a few thousand
    levels crash it). Refuse too a file of no column, and one with two columns of a name
    (DuckDB would read the second as ``id_1``, a name the file does not have)."""
    import pyarrow.parquet as pq  # (only Parquet inputs pay for the import)

    name = source or "the input"
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as e:
        reason = " ".join(str(e).split())  # one line, whatever the reader says
        raise BatchRejectedError(
            f"batch refused: not a readable parquet file: {name}: {reason}"
        ) from e
    if metadata.num_columns == 0:
        problem = RowProblem(row=None, field=None, message=f"{name} has no columns")
        raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
    try:
        names = metadata.schema.to_arrow_schema().names
    except pa.ArrowException:
        return  # (a type pyarrow cannot map: DuckDB's reader decides)
    problems = [
        RowProblem(
            row=None,
            field=twice.name,
            message=f"{name} has more than one column of this name ({twice.where()};"
            " which one is meant cannot be told)",
        )
        for twice in repeated_names(names)
    ]
    if problems:
        raise BatchRejectedError(
            "batch refused: " + "; ".join(str(p) for p in problems), problems=tuple(problems)
        )


@dataclass(frozen=True, slots=True)
class RepeatedName:
    """A name given more than once among columns, as DuckDB tells names apart (not by case):
    its spellings and 1-based positions."""

    spellings: tuple[str, ...]
    positions: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.spellings[0]

    def where(self) -> str:
        """``columns 1 and 3``, with the spellings when they differ by case."""
        *rest, last = (str(p) for p in self.positions)
        where = f"columns {', '.join(rest)} and {last}"
        if len(set(self.spellings)) > 1:
            spelled = ", ".join(repr(s) for s in self.spellings)
            where += f": {spelled}, which case does not tell apart"
        return where


def repeated_names(names: Sequence[str]) -> list[RepeatedName]:
    """Each name of ``names`` given more than once, in any case, in order of first use."""
    seen: dict[str, list[int]] = {}
    for position, column in enumerate(names, 1):
        seen.setdefault(column.lower(), []).append(position)
    return [
        RepeatedName(tuple(names[p - 1] for p in positions), tuple(positions))
        for positions in seen.values()
        if len(positions) > 1
    ]


def _too_big(size: int, limits: InsertLimits) -> BatchRejectedError:
    return BatchRejectedError(
        f"batch of {size:,} bytes is over the limit of {limits.max_batch_bytes:,} bytes;"
        " split it into smaller batches"
    )


def _temp_file(directory: Path | None, suffix: str) -> tuple[int, Path]:
    fd, name = tempfile.mkstemp(prefix="icefloe-batch-", suffix=suffix, dir=directory)
    return fd, Path(name)


# Up to this size a batch of rows keeps its serialized text until the insert ends. A bigger
# batch drops it (the rows path needs only the dicts, and a million sample events are 117 MB of
# text) and serializes the rows again if a JSON path needs the file after all.
KEEP_TEXT_MAX_BYTES = 4 << 20


class RowsBatch:
    """A batch of rows (dicts), checked and serialized, staged as a file only if a reader needs
    one: the rows path (:mod:`icefloe.ingest.rows_input`) converts most batches from the dicts
    themselves. Its file is NDJSON when every row is an object (and no value hides the array's
    separator), else the JSON array; its digest is that file's, written or not."""

    def __init__(
        self,
        rows: Sequence[Mapping[str, object]],
        data: bytes,
        *,
        limits: InsertLimits,
        directory: Path | None,
    ) -> None:
        self.rows = rows
        # orjson writes NaN and infinities as null: only a batch with a null can hold one.
        # Looking at every value (in Python, the slow part of a batch) waits until the batch
        # is staged or digested; the rows path proves its own columns instead.
        self.values_unchecked = b"null" in data
        self._max_depth = limits.max_json_depth
        self.size_bytes = len(data)
        self._data = data if self.size_bytes <= KEEP_TEXT_MAX_BYTES else None
        # Whether the file would be NDJSON, which only staging and digests ask: decided now
        # for a batch whose text is dropped, on first use for one that keeps it (the rows
        # path, most small batches, never asks).
        self._as_lines = _separators_unambiguous(data, rows) if self._data is None else None
        self._directory = directory
        self._staged: StagedBatch | None = None

    @property
    def as_lines(self) -> bool:
        """Whether the batch is staged as NDJSON (else as orjson's JSON array)."""
        if self._as_lines is None:
            self._as_lines = _separators_unambiguous(self._text(), self.rows)
        return self._as_lines

    @property
    def staged_format(self) -> InputFormat:
        return "ndjson" if self.as_lines else "json"

    def _text(self) -> bytes:
        # orjson writes the same rows the same way every time.
        return self._data if self._data is not None else native_values.dumps(self.rows)

    def check_values(self) -> None:
        """Refuse NaN and infinities anywhere in the rows, and values nested too deeply,
        naming the row and field (once; a batch without a null has none of the first)."""
        if self.values_unchecked:
            _refuse_non_finite(self.rows, max_depth=self._max_depth)
            self.values_unchecked = False

    def text_chunks(self) -> Iterator[bytes]:
        """The staged file's bytes, in chunks: one object per line, or orjson's array. Its
        values are checked first: a NaN and a null must not digest alike."""
        self.check_values()
        if self.as_lines:
            yield from _line_chunks(self._text())
        else:
            yield self._text()

    def staged(self) -> StagedBatch:
        """The batch as a file (written on the first call, once its values are checked)."""
        if self._staged is None:
            self.check_values()
            text = self._text()
            if self.as_lines:
                fd, path = _temp_file(self._directory, ".ndjson")
                with os.fdopen(fd, "wb") as f:
                    size = _write_lines(f, text)
                self._staged = StagedBatch(
                    path=path,
                    format="ndjson",
                    size_bytes=size,
                    owned=True,
                    json_layout="newline_delimited",
                    written_by_orjson=True,
                )
            else:
                staged = _stage_bytes(text, fmt="json", directory=self._directory)
                self._staged = replace(staged, json_layout="array", written_by_orjson=True)
            self._data = None
        return self._staged

    def discard(self) -> None:
        if self._staged is not None:
            self._staged.discard()


def rows_batch(
    rows: Sequence[Mapping[str, object]],
    *,
    limits: InsertLimits,
    directory: Path | None = None,
    blobs: Mapping[str, TypeNode] | None = None,
) -> RowsBatch:
    """Check and serialize rows (dicts) as one JSON array, in one call into orjson's C code.
    Values beyond JSON's are written as :mod:`icefloe.ingest.native_values` says; ``bytes``
    only at the BLOB leaves of the ``blobs`` columns' types
    (:func:`~icefloe.ingest.native_values.blob_columns`)."""
    if not isinstance(rows, Sequence) or isinstance(rows, str | bytes):
        raise BatchRejectedError("rows must be a list of JSON objects")
    if len(rows) > limits.max_rows:
        raise BatchRejectedError(
            f"batch of {len(rows):,} rows is over the limit of {limits.max_rows:,}"
        )
    writer = native_values.Writer()
    try:
        data = writer.dumps(rows)
    except (orjson.JSONEncodeError, TypeError) as e:
        _refuse_non_finite(rows, max_depth=limits.max_json_depth)  # names a too deep value
        raise _locate_unserializable(rows, e) from e
    if writer.wrote_bytes:
        problem = native_values.bytes_outside_blobs(rows, blobs or {})
        if problem is not None:
            raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
    if len(data) > limits.max_batch_bytes:
        raise _too_big(len(data), limits)
    return RowsBatch(rows, data, limits=limits, directory=directory)


def _separators_unambiguous(data: bytes, rows: Sequence[object]) -> bool:
    """Whether orjson's array of ``rows`` can be staged as NDJSON (one object per line, which
    the one-parse JSON path reads): every row a dict, so that the array's separators are
    ``len(rows) - 1`` times ``},{``, and no other ``},{`` (inside a string, or between objects
    nested in a list) in the text."""
    if not rows or not all(type(row) is dict for row in rows):
        return False
    return data.count(b"},{") == len(rows) - 1


def _write_lines(f: BinaryIO, data: bytes) -> int:
    """Write the array ``data`` as one object per line; return the bytes written."""
    written = 0
    for chunk in _line_chunks(data):
        f.write(chunk)
        written += len(chunk)
    return written


def _line_chunks(data: bytes) -> Iterator[bytes]:
    """The array ``data`` as one object per line, in chunks of about a MiB (a whole copy of a
    large batch would double its memory)."""
    view = memoryview(data)
    start, end = 1, len(data) - 1  # inside the brackets
    while start < end:
        cut = data.find(b"},{", min(start + _COPY_CHUNK, end), end)
        stop = end if cut < 0 else cut + 1  # the chunk keeps its closing brace
        yield bytes(view[start:stop]).replace(b"},{", b"}\n{") + b"\n"
        if cut < 0:
            break
        start = cut + 2  # the next object's opening brace


def _refuse_non_finite(rows: Sequence[Mapping[str, object]], *, max_depth: int) -> None:
    """Refuse NaN and infinities, which JSON cannot carry (orjson would write them as null,
    and the batch would be stored with nulls nobody sent), and values nested more than
    ``max_depth`` levels deep (the JSON reader's own limit, checked here first so that no
    nesting can exhaust Python's stack). Runs over every value of a batch, so the common
    types are told apart by ``type(...) is`` before any slower check."""
    for index, row in enumerate(rows):
        if type(row) is not dict and not isinstance(row, Mapping):
            continue  # the JSON reader names rows that are not objects
        for field, value in row.items():
            kind = type(value)
            if kind is str or kind is int or value is None or kind is bool:
                continue
            message = value_problem(value, max_depth=max_depth)
            if message is not None:
                problem = RowProblem(row=index, field=str(field), message=message)
                raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))


def value_problem(value: object, *, max_depth: int) -> str | None:
    """Why one field's value cannot be stored, or None; iterative, whatever the nesting."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str or kind is int or item is None or kind is bool:
            continue
        if isinstance(item, float) or (
            isinstance(item, numbers.Real) and not isinstance(item, numbers.Integral)
        ):  # a numpy float too, which orjson writes as null if not finite
            if not math.isfinite(cast(float, item)):
                return _NON_FINITE
            continue
        if isinstance(item, Decimal):
            if not item.is_finite():
                return _NON_FINITE
            continue
        if isinstance(item, enum.Enum):
            stack.append((item.value, depth))  # orjson writes a member as its value
            continue
        children: Iterable[object]
        if kind is dict or isinstance(item, Mapping):
            children = cast("Mapping[object, object]", item).values()
        elif kind is list or kind is tuple or isinstance(item, list | tuple):
            children = cast("Iterable[object]", item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            # orjson writes a dataclass instance as an object of its fields
            children = [getattr(item, f.name) for f in dataclasses.fields(item)]
        else:
            continue
        if depth >= max_depth:
            return f"JSON is nested more than {max_depth} levels deep"
        stack.extend((child, depth + 1) for child in children)
    return None


_NON_FINITE = "NaN and infinities are refused (send null for a missing value)"


def _locate_unserializable(rows: Sequence[object], error: Exception) -> BatchRejectedError:
    """The slow path, run only on failure: find which row cannot be written as JSON."""
    for index, row in enumerate(rows):
        try:
            native_values.dumps(row)
        except (orjson.JSONEncodeError, TypeError) as e:
            if not isinstance(row, Mapping):  # (nested too deeply to write, say)
                problem = RowProblem(row=index, field=None, message="not a JSON object")
                return BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
            field, reason = _unserializable_field(row, e)
            problem = RowProblem(row=index, field=field, message=f"not valid JSON: {reason}")
            return BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
    return BatchRejectedError(f"batch refused: not valid JSON: {error}")


def _unserializable_field(row: object, error: Exception) -> tuple[str | None, str]:
    reason = str(error)
    if isinstance(row, Mapping):
        for key, value in row.items():
            try:
                native_values.dumps(value)
            except (orjson.JSONEncodeError, TypeError) as e:
                # orjson keeps the writer's own reason (a Decimal too precise) as the cause
                cause = e.__cause__ if isinstance(e.__cause__, TypeError) else e
                return (key if isinstance(key, str) else repr(key)), str(cause)
    return None, reason


def stage_bytes(
    data: bytes, *, fmt: InputFormat, limits: InsertLimits, directory: Path | None = None
) -> StagedBatch:
    if len(data) > limits.max_batch_bytes:
        raise _too_big(len(data), limits)
    return _stage_bytes(data, fmt=fmt, directory=directory)


def _stage_bytes(data: bytes, *, fmt: InputFormat, directory: Path | None) -> StagedBatch:
    fd, path = _temp_file(directory, f".{fmt}")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return StagedBatch(path=path, format=fmt, size_bytes=len(data), owned=True)


def stage_stream(
    stream: BinaryIO, *, fmt: InputFormat, limits: InsertLimits, directory: Path | None = None
) -> StagedBatch:
    """Copy a stream (stdin) to a file, refusing it as soon as it passes the size limit."""
    fd, path = _temp_file(directory, f".{fmt}")
    size = 0
    try:
        with os.fdopen(fd, "wb") as f:
            while chunk := stream.read(_COPY_CHUNK):
                size += len(chunk)
                if size > limits.max_batch_bytes:
                    raise _too_big(size, limits)
                f.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return StagedBatch(path=path, format=fmt, size_bytes=size, owned=True, source="stdin")


def stage_file(
    path: Path, *, fmt: InputFormat, limits: InsertLimits, directory: Path | None = None
) -> StagedBatch:
    """Use a local file in place (it is read, never changed or deleted). Any other path that
    reads as a stream (a pipe, ``/dev/stdin``, a process substitution's ``/dev/fd/63``, a
    character device) is copied into ``directory`` as stdin is, refused as soon as it passes
    the size limit: its size says nothing of what it holds, and DuckDB's and pyarrow's readers
    seek, which a pipe cannot."""
    name = str(path)
    try:
        status = path.stat()
    except OSError as e:
        raise BatchRejectedError(f"cannot read input file {name!r}: {e.strerror}") from e
    if stat.S_ISDIR(status.st_mode):
        raise BatchRejectedError(
            f"cannot read input file {name!r}: it is a directory (insert its files one by one)"
        )
    if stat.S_ISREG(status.st_mode):
        size = status.st_size
        if size > limits.max_batch_bytes:
            raise _too_big(size, limits)
        return StagedBatch(path=path, format=fmt, size_bytes=size, owned=False, source=name)
    try:
        stream = path.open("rb")  # (a socket cannot be: ENXIO)
    except OSError as e:
        raise BatchRejectedError(f"cannot read input file {name!r}: {e.strerror}") from e
    with stream:
        staged = stage_stream(stream, fmt=fmt, limits=limits, directory=directory)
    return replace(staged, source=name)


# What an input file's suffix says it holds (in any case).
INPUT_SUFFIXES: dict[str, InputFormat] = {
    ".json": "json",
    ".ndjson": "ndjson",
    ".jsonl": "ndjson",
    ".csv": "csv",
    ".parquet": "parquet",
}


def format_from_suffix(path: Path) -> InputFormat:
    """The input format a file name says: .json, .ndjson/.jsonl, .csv, .parquet (in any case).
    A name without a suffix (``/dev/stdin``, a pipe's ``/dev/fd/63``) is NDJSON, as stdin is.
    Any other suffix is refused, naming it: guessed as NDJSON, an Arrow IPC, a gzipped or a
    text file would be refused for its bytes, or a CSV read as JSON lines."""
    suffix = path.suffix
    if not suffix:
        return "ndjson"
    fmt = INPUT_SUFFIXES.get(suffix.lower())
    if fmt is None:
        taken = ", ".join(INPUT_SUFFIXES)
        raise InvalidInputError(
            f"cannot tell the format of input file {str(path)!r} from its suffix {suffix!r}:"
            f" the formats taken are {taken} (name the format with --input-format, or"
            " Inserter.insert_file's fmt)"
        )
    return fmt
