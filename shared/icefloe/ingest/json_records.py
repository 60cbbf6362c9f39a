"""JSON and NDJSON files through DuckDB: the first of the two scans checks the batch's shape
(every record is a JSON object with no unknown field, the row count is within limits), the
second is the conversion (:mod:`icefloe.ingest.conversion`) of each field read as JSON. A file
DuckDB cannot read is searched in Python, only then, for the record at fault. Also the one-parse
path's DuckDB side (:class:`DuckJsonColumns`)."""

from __future__ import annotations

import mmap
import re
from collections.abc import Sequence
from dataclasses import replace

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.duck import ident, name_literal
from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.columns import json_column, json_member
from icefloe.ingest.conversion import (
    MAX_PROBLEMS,
    NotUtf8Error,
    check_row_count,
    convert,
    identity_sources,
    json_text_holds,
    refuse,
)
from icefloe.ingest.exact_numbers import (
    file_holds_inexact,
    marked_copy,
    new_marker,
    numbers_kept_exactly,
    unmarked,
)
from icefloe.ingest.nested_json import (
    is_nested_column,
    kept_unknown_entries,
    nested_json_column,
)
from icefloe.ingest.sources import InsertLimits, StagedBatch
from icefloe.ingest.strict_json import trailing_comma_at
from icefloe.spec import Column, TableSpec

JSON_FORMATS = {"json": "auto", "ndjson": "newline_delimited"}
# The one-parse path bounds records lower than the batch limit: DuckDB's buffers (one per
# thread) are sized by the bound, and it ran beside pyarrow's parse. A larger record makes
# the read fail, and the conversion (with the batch limit) decides.
_FAST_LARGEST_RECORD = 16 << 20
# DuckDB's reader refusing a record that gives one of its own fields twice.
_DUPLICATE_KEY = re.compile(
    r'in (line|record/value) (\d+): Object .* has duplicate key "(.*?)"\n', re.DOTALL
)


def load_json(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, batch: StagedBatch, limits: InsertLimits
) -> pa.Table:
    """The batch's records converted, or refused naming the rows at fault. A batch holding a
    number a double cannot hold exactly, where the table could keep its digits, is read from
    a copy that marks each such number (:mod:`~icefloe.ingest.exact_numbers`); every
    refusal still names the batch's own lines."""
    if not numbers_kept_exactly(spec) or not file_holds_inexact(batch.path):
        return _load_json(con, spec, batch, limits, read=batch, marker=None)
    marker = new_marker()
    copy = marked_copy(batch.path, marker, directory=batch.path.parent if batch.owned else None)
    try:
        read = replace(batch, path=copy, size_bytes=copy.stat().st_size, owned=True)
        return _load_json(con, spec, batch, limits, read=read, marker=marker)
    finally:
        copy.unlink(missing_ok=True)


def _load_json(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    batch: StagedBatch,
    limits: InsertLimits,
    *,
    read: StagedBatch,
    marker: str | None,
) -> pa.Table:
    """:func:`load_json` of ``batch``, whose records DuckDB reads from ``read`` (the batch
    itself, or its copy marked with ``marker``)."""
    params = {"path": str(read.path)}
    overflow = spec.overflow_column if spec.extra_fields == "keep" else None
    record_columns = [c for c in spec.columns if c.name != overflow]
    shape = _shape_query(read, record_columns, overflow=overflow, limits=limits, marker=marker)
    shapes = None  # read whole when the table keeps unknown fields: its overflow is there
    if overflow is not None:
        shapes = counts = _Shapes.keeping(con, shape, read, batch)
    else:
        # Counting needs no row numbers: drop the window so the scan stays parallel and
        # streaming.
        unnumbered = _shape_query(
            read, record_columns, overflow=overflow, limits=limits, numbered=False
        )
        counts = _Shapes.counted(con, unnumbered, read, batch)
    rows, bad_shape = counts.rows, counts.bad
    check_row_count(rows, limits)
    comma = _trailing_comma(batch)
    if comma is not None:
        raise comma
    if bad_shape:
        found = (
            shapes.first_bad(MAX_PROBLEMS)
            if shapes is not None
            else con.execute(
                f"SELECT i, not_object, unknown FROM ({shape}) WHERE bad ORDER BY i"
                f" LIMIT {MAX_PROBLEMS}",
                params,
            ).fetchall()
        )
        raise refuse(
            [_shape_problem(int(i), no, unknown, overflow, limits) for i, no, unknown in found],
            total=bad_shape,
        )

    columns = ", ".join(f"{name_literal(c.name)}: 'JSON'" for c in record_columns)
    sqls = [
        nested_json_column(
            c,
            max_value_bytes=limits.max_value_bytes,
            unknown_kept=overflow is not None,
            marker=marker,
        )
        if is_nested_column(c)
        else json_column(
            c,
            max_value_bytes=limits.max_value_bytes,
            max_json_depth=limits.max_json_depth,
            partition_source=c.name in identity_sources(spec),
            marker=marker,
        )
        for c in record_columns
    ]
    source = _json_reader(read, columns=columns, limits=limits, records=True)
    try:
        table = convert(con, sqls, source, params, limits)
    except NotUtf8Error as e:
        raise _locate_malformed_json(batch, ValueError("bytes that are not UTF-8")) from e
    except BatchRejectedError as e:
        duplicate = _duplicate_key(e)
        if duplicate is None:
            raise
        raise duplicate from e
    if shapes is None:
        return table
    position = spec.column_names.index(overflow)
    return table.add_column(position, overflow, shapes.overflow)


class _Shapes:
    """The records' shapes: how many there are and how many are bad, and, for a table keeping
    unknown fields, each record's shape (read once: the overflow column comes from it, and
    its expression, bound once, is most of a small batch's cost when a struct is wide)."""

    def __init__(self, rows: int, bad: int, table: pa.Table | None = None) -> None:
        self.rows = rows
        self.bad = bad
        self._table = table

    @classmethod
    def counted(
        cls, con: duckdb.DuckDBPyConnection, shape: str, read: StagedBatch, batch: StagedBatch
    ) -> _Shapes:
        sql = f"SELECT count(*) AS rows, count(*) FILTER (WHERE bad) AS bad FROM ({shape})"
        counts = _read_records(con, sql, read, batch).to_pylist()[0]
        return cls(int(counts["rows"]), int(counts["bad"]))

    @classmethod
    def keeping(
        cls, con: duckdb.DuckDBPyConnection, shape: str, read: StagedBatch, batch: StagedBatch
    ) -> _Shapes:
        sql = f"SELECT bad, not_object, unknown, overflow FROM ({shape}) ORDER BY i"
        table = _read_records(con, sql, read, batch)
        bad = int(pc.sum(table.column("bad"), min_count=0).as_py() or 0)
        return cls(table.num_rows, bad, table)

    @property
    def overflow(self) -> pa.ChunkedArray:
        assert self._table is not None
        return self._table.column("overflow")

    def first_bad(self, limit: int) -> list[tuple[int, bool, list[str] | None]]:
        """(row, not an object, unknown keys) of the first ``limit`` bad records."""
        assert self._table is not None
        rows = pc.indices_nonzero(self._table.column("bad").combine_chunks())[:limit]
        taken = self._table.select(["not_object", "unknown"]).take(rows).to_pylist()
        return [
            (int(row), bool(shape["not_object"]), shape["unknown"])
            for row, shape in zip(rows.to_pylist(), taken, strict=True)
        ]


def _read_records(
    con: duckdb.DuckDBPyConnection, sql: str, read: StagedBatch, batch: StagedBatch
) -> pa.Table:
    """``sql`` over the batch's records, read from ``read`` (the batch, or its marked copy);
    a file DuckDB cannot read is searched for the record at fault."""
    try:
        return con.execute(sql, {"path": str(read.path)}).to_arrow_table()
    except duckdb.InvalidInputException as e:
        raise _locate_malformed_json(batch, e) from e


def _shape_query(
    batch: StagedBatch,
    columns: Sequence[Column],
    *,
    overflow: str | None,
    limits: InsertLimits,
    numbered: bool = True,
    marker: str | None = None,
) -> str:
    """Per record: its row number ``i``; ``not_object``; ``unknown``, which of its keys are
    unknown; (when the table keeps unknown fields) ``overflow``, the object of those fields,
    its numbers as sent when the batch is ``marker``-ed; and ``bad``, whether any of these
    refuses it."""
    known = "[" + ", ".join(name_literal(c.name) for c in columns) + "]"
    whole = _json_reader(batch, columns="'j': 'JSON'", limits=limits, records=False)
    extra_keys = f"list_filter(record_keys, k -> NOT list_contains({known}, k))"
    keys: list[str] = []
    if overflow is None:
        unknown, pairs = extra_keys, "[]"
    else:
        # Unknown fields are kept; only a field named like the overflow column is refused.
        unknown = f"list_filter(record_keys, k -> k = {name_literal(overflow)})"
        pairs = (
            f"list_transform({extra_keys}, k -> struct_pack(key := k,"
            f" value := {json_member('j', 'k')}))"
        )
        # With the unknown keys of the nested columns' structs, each column's at its path.
        entries = [pairs]
        for c in columns:
            kept = (
                kept_unknown_entries(c, "j", f"keys_{len(keys)}") if is_nested_column(c) else None
            )
            if kept is not None:
                entries.append(kept.entry)
                keys.append(f"{kept.keys} AS keys_{len(keys)}")
        pairs = f"flatten([{', '.join(entries)}])" if len(entries) > 1 else pairs
    # Each step in a subquery of its own, so that what the next reads twice is computed once:
    # the record's JSON type and keys, each a parse of the whole record, once.
    record = ["json_type(j) AS record_type", "json_keys(j) AS record_keys"]
    overflow_json = "to_json(map_from_entries(pairs))"
    if marker is not None:
        overflow_json = unmarked(f"CAST({overflow_json} AS VARCHAR)", marker)
        overflow_json = f"CAST({overflow_json} AS JSON)"
    return f"""
        SELECT *, not_object OR coalesce(len(unknown) > 0, false) OR overflow_too_big AS bad
        FROM (
            SELECT i, not_object, unknown, overflow,
                   coalesce(strlen(CAST(overflow AS VARCHAR)) > {limits.max_value_bytes}, false)
                       AS overflow_too_big
            FROM (
                SELECT i, not_object, unknown,
                       CASE WHEN len(pairs) > 0 THEN {overflow_json} END AS overflow
                FROM (
                    SELECT {"row_number() OVER () - 1" if numbered else "0"} AS i,
                           -- a null record too
                           coalesce(record_type <> 'OBJECT', true) AS not_object,
                           CASE WHEN record_type = 'OBJECT' THEN {unknown} END AS unknown,
                           CASE WHEN record_type = 'OBJECT' THEN {pairs} END AS pairs
                    FROM (SELECT {", ".join(["j", *record, *keys])} FROM {whole})
                )
            )
        )
    """


def _shape_problem(
    row: int,
    not_object: bool,
    unknown: list[str] | None,
    overflow: str | None,
    limits: InsertLimits,
) -> RowProblem:
    if not_object:
        return RowProblem(row=row, field=None, message="not a JSON object")
    if unknown:
        if overflow is not None:
            return RowProblem(
                row=row, field=unknown[0], message="reserved for the fields the table does not know"
            )
        return RowProblem(
            row=row,
            field=unknown[0],
            message=f"unknown field (the table has no column {unknown[0]!r})",
        )
    return RowProblem(
        row=row,
        field=overflow,
        message=f"unknown fields are over the limit of {limits.max_value_bytes:,} bytes",
    )


def duckdb_json_format(batch: StagedBatch) -> str:
    return batch.json_layout if batch.json_layout != "auto" else JSON_FORMATS[batch.format]


_BOUND_MARGIN = 64 << 10


def _json_reader(
    batch: StagedBatch,
    *,
    columns: str,
    limits: InsertLimits,
    records: bool,
    largest_record: int | None = None,
) -> str:
    # No record is larger than the file, and DuckDB sizes its buffers by this bound: the
    # batch limit (256 MiB) would cost a small batch milliseconds of allocation per query.
    # The margin: DuckDB 1.5.5, reading NDJSON with two threads or more, fails on a file of
    # more than 16 MiB whose last line has no line break ("Malformed JSON ... at byte 1 in
    # line N+1") when the bound is within a few bytes above the file's size (or a line below
    # it): the file's size plus 1, as this was, refused such batches, valid as they were.
    # Eight bytes above was enough where measured.
    largest = min(batch.size_bytes, largest_record or limits.max_batch_bytes) + _BOUND_MARGIN
    return (
        f"read_json($path, format='{duckdb_json_format(batch)}', records={'true' if records else 'false'},"
        f" columns={{{columns}}}, maximum_object_size={largest})"
    )


class DuckJsonColumns:
    """The one-parse path's DuckDB side. Each query runs on a cursor of its own: the JSON
    columns are read in another thread while pyarrow parses, and may still be running when
    the fields are checked."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        spec: TableSpec,
        batch: StagedBatch,
        limits: InsertLimits,
    ) -> None:
        self._con, self._spec, self._batch, self._limits = con, spec, batch, limits
        self._params = {"path": str(batch.path)}

    def json_columns(self, columns: list[Column]) -> pa.Table | None:
        """The JSON columns' text, as the conversion reads it (checked in Arrow afterwards)."""
        values = ", ".join(
            f"{json_column(c, max_value_bytes=0, max_json_depth=0).value} AS {ident(c.name)}"
            for c in columns
        )
        names = ", ".join(f"{name_literal(c.name)}: 'JSON'" for c in columns)
        source = _json_reader(
            self._batch,
            columns=names,
            limits=self._limits,
            records=True,
            largest_record=_FAST_LARGEST_RECORD,
        )
        with self._con.cursor() as cursor:
            try:
                return cursor.execute(
                    f"SELECT {values} FROM {source}", self._params
                ).to_arrow_table()
            except (duckdb.Error, UnicodeDecodeError):
                # The slow path words the refusal. (DuckDB's message about bytes that are
                # not UTF-8 quotes them, and cannot always be decoded itself.)
                return None

    def json_text_holds(self, text: pa.Table, columns: list[Column]) -> bool:
        return json_text_holds(self._con, self._spec, text, columns, self._limits)

    def only_known_fields(self) -> bool:
        known = "[" + ", ".join(name_literal(c.name) for c in self._spec.columns) + "]"
        whole = _json_reader(
            self._batch,
            columns="'j': 'JSON'",
            limits=self._limits,
            records=False,
            largest_record=_FAST_LARGEST_RECORD,
        )
        with self._con.cursor() as cursor:
            try:
                row = cursor.execute(
                    f"SELECT bool_and(list_has_all({known}, json_keys(j))) FROM {whole}",
                    self._params,
                ).fetchone()
            except (duckdb.Error, UnicodeDecodeError):
                return False
        return row is not None and row[0] is True


def _trailing_comma(batch: StagedBatch) -> BatchRejectedError | None:
    """A refusal naming the first trailing comma of a JSON file DuckDB read (its reader drops
    them), or None. The file is searched in place, mapped rather than read."""
    if batch.size_bytes == 0 or batch.written_by_orjson:
        return None
    with batch.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
        at = trailing_comma_at(text)
        if at is None:
            return None
        before = text[:at]
    line_start = before.rfind(b"\n") + 1
    line = before.count(b"\n") + 1
    column = len(before[line_start:].decode("utf-8", errors="replace")) + 1  # in characters
    where = f"line {line}, column {column}"
    message = f"invalid JSON: a trailing comma before a closing bracket ({where})"
    row = None
    if batch.format == "ndjson":  # rows are the lines that are not blank
        row = sum(1 for line in before[:line_start].splitlines() if line.strip())
    return refuse([RowProblem(row=row, field=None, message=message)])


def _duplicate_key(error: BatchRejectedError) -> BatchRejectedError | None:
    """A refusal naming the record and key of DuckDB's "has duplicate key" (a record's own
    field given twice: DuckDB's reader refuses it before icefloe's checks, which name a
    repeated key inside a value), or None for any other error. DuckDB names the record by its
    place, counted from 1: its "line" counts the lines that are not blank, as rows do."""
    found = _DUPLICATE_KEY.search(str(error))
    if found is None:
        return None
    row, key = int(found.group(2)) - 1, found.group(3)
    problem = RowProblem(row=row, field=key, message="given more than once in its object")
    return refuse([problem])


def _locate_malformed_json(batch: StagedBatch, error: Exception) -> BatchRejectedError:
    """The slow path, run only on failure: find the first record that is not valid JSON (or
    the first byte that is not UTF-8). A JSON file that is not an array is read as DuckDB's
    reader reads it, one record per line."""
    data = batch.path.read_bytes()
    lines = batch.format == "ndjson" or not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return refuse([_not_utf8(data, e.start, rows=lines)])
    if lines:
        row = 0
        for number, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError as e:
                where = f"line {number}, column {e.colno}"
                problem = RowProblem(
                    row=row, field=None, message=f"invalid JSON: {e.msg} ({where})"
                )
                return refuse([problem])
            row += 1
    else:
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError as e:
            where = f"line {e.lineno}, column {e.colno}"
            return refuse(
                [RowProblem(row=None, field=None, message=f"invalid JSON: {e.msg} ({where})")]
            )
    return BatchRejectedError(f"batch refused: {error}")


def _not_utf8(data: bytes, at: int, *, rows: bool) -> RowProblem:
    """The first byte that is not UTF-8, by line and column (in characters); and by row, when
    rows are the lines that are not blank."""
    line_start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, at) + 1
    column = len(data[line_start:at].decode("utf-8", errors="replace")) + 1
    row = sum(1 for before in data[:line_start].splitlines() if before.strip()) if rows else None
    return RowProblem(
        row=row,
        field=None,
        message=f"bytes that are not UTF-8 (0x{data[at]:02X} at line {line}, column {column})",
    )
