"""Load a staged batch into an Arrow table of the table's types, or refuse it naming the rows.

Two vectorized scans in DuckDB: the first checks the batch's shape (every record is a JSON
object with no unknown field, the row count is within limits), the second converts each column
and computes an error code per row. Only a refused batch goes back to Python, to word messages.
"""

from __future__ import annotations

import mmap
import re
import threading
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.duck import ident, name_literal
from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.arrow_input import json_columns_to_check, proven_clean
from icefloe.ingest.columns import ColumnSQL, expected, json_column, sql_column
from icefloe.ingest.json_depth import any_deeper_than, rows_deeper_than
from icefloe.ingest.json_input import load_ndjson_fast, object_lines
from icefloe.ingest.json_shape import check_json_document
from icefloe.ingest.rows_input import load_rows_fast
from icefloe.ingest.sources import ArrowBatch, InsertLimits, RowsBatch, StagedBatch, check_parquet
from icefloe.ingest.strict_json import may_not_be_standard, trailing_comma_at
from icefloe.spec import Column, TableSpec

MAX_PROBLEMS = 5
_ARROW_INPUT = "__icefloe_arrow_input"
_JSON_FORMATS = {"json": "auto", "ndjson": "newline_delimited"}
# The one-parse path bounds records lower than the batch limit: DuckDB's buffers (one per
# thread) are sized by the bound, and it ran beside pyarrow's parse. A larger record makes
# the read fail, and the conversion (with the batch limit) decides.
_FAST_LARGEST_RECORD = 16 << 20


def load_batch(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    batch: StagedBatch | RowsBatch | ArrowBatch,
    *,
    limits: InsertLimits,
    fast: bool = True,
) -> pa.Table:
    """The batch's rows as an Arrow table with the spec's columns, in input order.

    ``fast=False`` sends typed Arrow input through the DuckDB conversion even when Arrow's
    checks could prove it clean (the differential test compares the two)."""
    if isinstance(batch, ArrowBatch):
        return _load_arrow(con, spec, batch.table, limits, fast=fast)
    if isinstance(batch, RowsBatch):
        if fast:
            table = load_rows_fast(
                batch.rows,
                spec,
                limits=limits,
                partition_sources=_identity_sources(spec),
                values_unchecked=batch.values_unchecked,
            )
            if table is not None:
                _check_row_count(table.num_rows, limits)
                return table
        batch = batch.staged()
    if batch.format in _JSON_FORMATS:
        # No parser reads JSON text before its nesting and completeness are scanned (see
        # json_shape): a line nested deeply enough crashes pyarrow's reader.
        if _layout(batch) == "newline_delimited":
            lines = object_lines(batch.path, limits=limits)
            if fast and lines is not None:
                table = _load_ndjson_fast(con, spec, batch, limits, lines=lines)
                if table is not None:
                    return table
        elif not batch.written_by_orjson:  # (orjson writes complete JSON, 255 levels at most)
            check_json_document(batch.path, max_depth=limits.max_json_depth, source=batch.source)
        return _load_json(con, spec, batch, limits)
    params = {"path": str(batch.path)}
    if batch.format == "csv":
        return _load_typed(
            con, spec, "read_csv($path, header=true, all_varchar=true)", params, "csv", limits
        )
    check_parquet(batch.path, source=batch.source)
    return _load_typed(con, spec, "read_parquet($path)", params, batch.format, limits)


# From this many rows, typed Arrow input's JSON text is checked while its partitions are sorted
# and encoded (see load_batch_checking_json_beside); below, a thread costs more than it saves.
_JSON_CHECK_BESIDE_FROM_ROWS = 1 << 16
_JSON_CHECKS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="icefloe-json-check")


def load_batch_checking_json_beside(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    batch: StagedBatch | RowsBatch | ArrowBatch,
    *,
    limits: InsertLimits,
) -> tuple[pa.Table, Future[bool] | None]:
    """As :func:`load_batch`, but a big typed Arrow batch that Arrow's checks prove clean is
    returned before its JSON text is checked, with the check running in another thread (on a
    cursor of its own): the table and the check's future. True: the text passes, and the
    table is what load_batch gives. False: :func:`load_batch` with ``fast=False`` decides (it
    names the rows at fault). The caller must write nothing anywhere, and must not let the
    connection go, before the future is done. Any other batch: load_batch's table and None."""
    if not isinstance(batch, ArrowBatch) or batch.table.num_rows < _JSON_CHECK_BESIDE_FROM_ROWS:
        return load_batch(con, spec, batch, limits=limits), None
    table = batch.table
    _check_row_count(table.num_rows, limits)
    proven = _proven_clean_arrow(spec, table, limits)
    if proven is None:
        return _converted_arrow(con, spec, table, limits), None
    clean, json_columns = proven
    if not json_columns:
        return clean, None
    checker = con.cursor()

    def check() -> bool:
        try:
            return _json_text_holds(checker, spec, table, json_columns, limits)
        finally:
            checker.close()

    try:
        return clean, _JSON_CHECKS.submit(check)
    except RuntimeError:  # the interpreter is shutting down: no new threads
        checker.close()
        if _json_text_holds(con, spec, table, json_columns, limits):
            return clean, None
        return _converted_arrow(con, spec, table, limits), None


def _load_arrow(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: pa.Table,
    limits: InsertLimits,
    *,
    fast: bool,
) -> pa.Table:
    """Typed Arrow input: Arrow's checks when they prove it clean (JSON columns still parsed
    by DuckDB, over those columns alone), else the DuckDB conversion, which names the rows."""
    _check_row_count(table.num_rows, limits)
    proven = _proven_clean_arrow(spec, table, limits) if fast else None
    if proven is not None:
        clean, json_columns = proven
        if not json_columns or _json_text_holds(con, spec, table, json_columns, limits):
            return clean  # checked JSON text is stored as it came
    return _converted_arrow(con, spec, table, limits)


def _proven_clean_arrow(
    spec: TableSpec, table: pa.Table, limits: InsertLimits
) -> tuple[pa.Table, list[Column]] | None:
    """Typed Arrow input as Arrow's checks prove it clean, and its JSON columns, whose text is
    still to be checked; None when the conversion must decide."""
    clean = proven_clean(spec, table, limits=limits, partition_sources=_identity_sources(spec))
    return None if clean is None else (clean, json_columns_to_check(spec, table))


def _converted_arrow(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table, limits: InsertLimits
) -> pa.Table:
    """Typed Arrow input through the DuckDB conversion, which names the rows at fault."""
    _refuse_text_not_utf8(table)
    con.register(_ARROW_INPUT, table)
    try:
        return _load_typed(con, spec, _ARROW_INPUT, {}, "Arrow", limits)
    finally:
        con.unregister(_ARROW_INPUT)


_NOT_UTF8_AT = re.compile(r"Invalid UTF8 sequence at string index (\d+)")
_NOT_UTF8 = "bytes that are not UTF-8"


def _refuse_text_not_utf8(table: pa.Table) -> None:
    """Refuse Arrow input whose text is not UTF-8 (a caller's Arrow memory need not be),
    naming the first row and field, before DuckDB reads it (which refuses it without)."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        storage = (
            column.type.storage_type
            if isinstance(column.type, pa.BaseExtensionType)
            else column.type
        )
        if storage not in (pa.string(), pa.large_string()):
            continue
        start = 0
        for chunk in column.chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid as e:
                at = _NOT_UTF8_AT.search(str(e))
                problem = (
                    RowProblem(row=start + int(at.group(1)), field=name, message=_NOT_UTF8)
                    if at is not None
                    else RowProblem(row=None, field=name, message=f"not valid Arrow data: {e}")
                )
                raise _refuse([problem]) from e
            start += len(chunk)


# Rows of JSON text DuckDB checks in one query; a bigger batch is checked in slices, two at a
# time (each query runs on its own cursor, without the GIL).
_JSON_CHECK_SLICE_ROWS = 1 << 17
_JSON_CHECK_THREADS = 2


def _json_text_holds(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: pa.Table,
    columns: list[Column],
    limits: InsertLimits,
) -> bool:
    """Whether every value of the JSON text columns passes the conversion's checks (valid JSON,
    no NaN, Infinity or trailing comma, size, depth). Only the error codes come back from
    DuckDB, not the text: a value that passes is stored as it is. False when any row needs a
    message. Each column's whole text is searched at once (outside DuckDB, beside its checks)
    for anything like NaN or a trailing comma; DuckDB searches each value of a column only
    when that search found a suspect."""
    partition_sources = _identity_sources(spec)
    text = table.select([c.name for c in columns])

    def query(searched: Collection[str], of: Collection[str] | None = None) -> str:
        """The checks of the columns ``of`` (all by default), searching each value of the
        columns ``searched`` for NaN and trailing commas."""
        sqls = [
            sql_column(
                c,
                source_type="VARCHAR",
                max_value_bytes=limits.max_value_bytes,
                max_json_depth=None,  # checked exactly beside, in Arrow
                partition_source=c.name in partition_sources,
                json_proven_standard=c.name not in searched,
            )
            for c in columns
            if of is None or c.name in of
        ]
        return _failing_rows_query(sqls, "__icefloe_json_text")

    def suspects() -> list[str]:
        return [c.name for c in columns if may_not_be_standard(text.column(c.name))]

    def too_deep() -> bool:
        # Exact for valid JSON; DuckDB's check of validity fails any other batch anyway.
        return any(any_deeper_than(text.column(c.name), limits.max_json_depth) for c in columns)

    failed = threading.Event()  # one failing slice settles it: the rest are skipped

    def passes(start: int, sql: str) -> bool:
        if failed.is_set():
            return False
        with con.cursor() as cursor:
            cursor.register("__icefloe_json_text", text.slice(start, _JSON_CHECK_SLICE_ROWS))
            try:
                found = cursor.execute(sql).fetchone()
            except (duckdb.Error, UnicodeDecodeError):
                found = None
        if found is None or found[0] != 0:
            failed.set()
            return False
        return True

    starts = range(0, text.num_rows, _JSON_CHECK_SLICE_ROWS)
    if len(starts) == 1:
        return passes(0, query(suspects())) and not too_deep()
    with ThreadPoolExecutor(max_workers=_JSON_CHECK_THREADS + 2) as pool:
        searched = pool.submit(suspects)  # beside DuckDB's checks of the rest
        deep = pool.submit(too_deep)
        rest = query(())
        if not all(pool.map(lambda start: passes(start, rest), starts)) or deep.result():
            return False
        found = searched.result()
        if not found:
            return True
        # A suspect (often a string that spells "nan"): DuckDB searches those columns' values.
        only = query(found, of=found)
        return all(pool.map(lambda start: passes(start, only), starts))


def _refuse(problems: Sequence[RowProblem], *, total: int | None = None) -> BatchRejectedError:
    shown = "; ".join(str(p) for p in problems[:MAX_PROBLEMS])
    more = ""
    if total is not None and total > len(problems[:MAX_PROBLEMS]):
        more = f" (and {total - len(problems[:MAX_PROBLEMS])} more)"
    return BatchRejectedError(f"batch refused: {shown}{more}", problems=tuple(problems))


def _layout(batch: StagedBatch) -> str:
    return batch.json_layout if batch.json_layout != "auto" else _JSON_FORMATS[batch.format]


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
        f"read_json($path, format='{_layout(batch)}', records={'true' if records else 'false'},"
        f" columns={{{columns}}}, maximum_object_size={largest})"
    )


def _load_ndjson_fast(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    batch: StagedBatch,
    limits: InsertLimits,
    *,
    lines: int | None = None,
) -> pa.Table | None:
    """NDJSON parsed once (see :mod:`icefloe.ingest.json_input`), or None for the slow path.
    ``lines``: the scan's answer (:func:`~icefloe.ingest.json_input.object_lines`), if made."""
    table = load_ndjson_fast(
        batch.path,
        spec,
        size_bytes=batch.size_bytes,
        limits=limits,
        partition_sources=_identity_sources(spec),
        duck=_DuckJsonColumns(con, spec, batch, limits),
        lines=lines,
    )
    if table is not None:
        _check_row_count(table.num_rows, limits)
    return table


class _DuckJsonColumns:
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
        return _json_text_holds(self._con, self._spec, text, columns, self._limits)

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


def _load_json(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, batch: StagedBatch, limits: InsertLimits
) -> pa.Table:
    params = {"path": str(batch.path)}
    overflow = spec.overflow_column if spec.extra_fields == "keep" else None
    record_columns = [c for c in spec.columns if c.name != overflow]
    shape = _shape_query(batch, record_columns, overflow=overflow, limits=limits)
    bad = "not_object OR len(unknown) > 0 OR overflow_too_big"
    try:
        # Counting needs no row numbers: drop the window so the scan stays parallel and streaming.
        counts = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {bad})"
            f" FROM ({_shape_query(batch, record_columns, overflow=overflow, limits=limits, numbered=False)})",
            params,
        ).fetchone()
    except duckdb.InvalidInputException as e:
        raise _locate_malformed_json(batch, e) from e
    assert counts is not None
    rows, bad_shape = int(counts[0]), int(counts[1])
    _check_row_count(rows, limits)
    comma = _trailing_comma(batch)
    if comma is not None:
        raise comma
    if bad_shape:
        found = con.execute(
            f"SELECT i, not_object, unknown FROM ({shape}) WHERE {bad} ORDER BY i LIMIT {MAX_PROBLEMS}",
            params,
        ).fetchall()
        raise _refuse(
            [_shape_problem(int(i), no, unknown, overflow, limits) for i, no, unknown in found],
            total=bad_shape,
        )

    columns = ", ".join(f"{name_literal(c.name)}: 'JSON'" for c in record_columns)
    sqls = [
        json_column(
            c,
            max_value_bytes=limits.max_value_bytes,
            max_json_depth=limits.max_json_depth,
            partition_source=c.name in _identity_sources(spec),
        )
        for c in record_columns
    ]
    source = _json_reader(batch, columns=columns, limits=limits, records=True)
    try:
        table = _convert(con, sqls, source, params, limits)
    except _NotUtf8Error as e:
        raise _locate_malformed_json(batch, ValueError("bytes that are not UTF-8")) from e
    if overflow is None:
        return table
    extras = con.execute(f"SELECT overflow FROM ({shape}) ORDER BY i", params).to_arrow_table()
    position = spec.column_names.index(overflow)
    return table.add_column(position, overflow, extras.column("overflow"))


def _shape_query(
    batch: StagedBatch,
    columns: Sequence[Column],
    *,
    overflow: str | None,
    limits: InsertLimits,
    numbered: bool = True,
) -> str:
    """Per record: is it an object, which of its keys are unknown, and (when the table keeps
    unknown fields) the object of those fields."""
    known = "[" + ", ".join(name_literal(c.name) for c in columns) + "]"
    whole = _json_reader(batch, columns="'j': 'JSON'", limits=limits, records=False)
    extra_keys = f"list_filter(json_keys(j), k -> NOT list_contains({known}, k))"
    if overflow is None:
        unknown, kept = extra_keys, "NULL"
    else:
        # Unknown fields are kept; only a field named like the overflow column is refused.
        unknown = f"list_filter(json_keys(j), k -> k = {name_literal(overflow)})"
        pairs = (
            f"list_transform({extra_keys}, k -> struct_pack(key := k,"
            " value := json_extract(j, '$.\"' || replace(k, '\"', '\\\"') || '\"')))"
        )
        kept = f"CASE WHEN len({extra_keys}) > 0 THEN to_json(map_from_entries({pairs})) END"
    return f"""
        SELECT {"row_number() OVER () - 1" if numbered else "0"} AS i,
               coalesce(json_type(j) <> 'OBJECT', true) AS not_object,  -- a null record too
               CASE WHEN json_type(j) = 'OBJECT' THEN {unknown} END AS unknown,
               CASE WHEN json_type(j) = 'OBJECT' THEN {kept} END AS overflow,
               coalesce(strlen(CAST(overflow AS VARCHAR)) > {limits.max_value_bytes}, false)
                   AS overflow_too_big
        FROM {whole}
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


def _load_typed(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    source: str,
    params: dict[str, str],
    kind: str,
    limits: InsertLimits,
) -> pa.Table:
    """Rows of a typed ``source`` (a CSV or Parquet reader, or a registered Arrow table)."""
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()
    except (duckdb.InvalidInputException, duckdb.IOException) as e:
        raise BatchRejectedError(f"batch refused: not a readable {kind} file: {e}") from e
    except duckdb.NotImplementedException as e:  # an Arrow type DuckDB cannot scan
        raise BatchRejectedError(
            f"batch refused: {kind} input of a type DuckDB cannot read: {e}"
        ) from e
    source_types = {str(row[0]): str(row[1]) for row in described}
    unknown = [name for name in source_types if name not in spec.column_names]
    if unknown:
        raise _refuse(
            [
                RowProblem(
                    row=None, field=name, message="unknown field (the table has no such column)"
                )
                for name in unknown
            ]
        )
    sqls = [
        sql_column(
            c,
            source_type=source_types.get(c.name),
            max_value_bytes=limits.max_value_bytes,
            max_json_depth=limits.max_json_depth,
            partition_source=c.name in _identity_sources(spec),
        )
        for c in spec.columns
    ]
    count = con.execute(f"SELECT count(*) FROM {source}", params).fetchone()
    assert count is not None
    _check_row_count(int(count[0]), limits)
    return _convert(con, sqls, source, params, limits)


def _check_row_count(rows: int, limits: InsertLimits) -> None:
    if rows == 0:
        raise BatchRejectedError("batch refused: it holds no rows")
    if rows > limits.max_rows:
        raise BatchRejectedError(
            f"batch refused: {rows:,} rows is over the limit of {limits.max_rows:,} rows a batch"
        )


def _convert(
    con: duckdb.DuckDBPyConnection,
    sqls: Sequence[ColumnSQL],
    source: str,
    params: dict[str, str],
    limits: InsertLimits,
) -> pa.Table:
    try:
        table = con.execute(_conversion_query(sqls, source), params).to_arrow_table()
    except (duckdb.InvalidInputException, duckdb.ConversionException) as e:
        raise BatchRejectedError(f"batch refused: {e}") from e
    except UnicodeDecodeError as e:
        # DuckDB's message about bytes that are not UTF-8 quotes them, and its Python binding
        # then fails to decode the message itself.
        raise _NotUtf8Error("batch refused: the input holds bytes that are not UTF-8") from e
    errors_column = table.column("__errors")
    table = table.drop_columns(["__errors"])
    if errors_column.null_count < len(errors_column):
        problems, total = _problems(table, errors_column, sqls, limits)
        if problems:
            raise _refuse(problems, total=total)
    return table


def _conversion_query(sqls: Sequence[ColumnSQL], source: str) -> str:
    """Each column's typed value, and ``__errors``: NULL for a row that passes, else the
    error codes of its bad fields."""
    # Inner: each typed value and each presence flag once. Outer: error codes from those.
    values = ", ".join(ident(s.column.name) for s in sqls)
    errors = ", ".join(f"'{i}:' || ({s.error})" for i, s in enumerate(sqls))
    return (
        f"SELECT {values}, NULLIF(concat_ws(',', {errors}), '') AS __errors"
        f" FROM ({_typed_values(sqls, source)})"
    )


def _failing_rows_query(sqls: Sequence[ColumnSQL], source: str) -> str:
    """How many rows :func:`_conversion_query` would give error codes, without building the
    codes' text (three quarters of the time, on a clean batch)."""
    failing = " OR ".join(f"({s.error}) IS NOT NULL" for s in sqls)
    return f"SELECT count(*) FROM ({_typed_values(sqls, source)}) WHERE {failing}"


def _typed_values(sqls: Sequence[ColumnSQL], source: str) -> str:
    """Each column's typed value and presence flag, computed once for the error codes."""
    inner = ", ".join(
        f"{s.value} AS {ident(s.column.name)}, {s.present} AS {s.present_alias}" for s in sqls
    )
    return f"SELECT {inner} FROM {source}"


class _NotUtf8Error(BatchRejectedError):
    """The conversion met bytes that are not UTF-8 (a JSON input then finds the row)."""


def _problems(
    table: pa.Table, errors: pa.ChunkedArray, sqls: Sequence[ColumnSQL], limits: InsertLimits
) -> tuple[list[RowProblem], int]:
    problems: list[RowProblem] = []
    total = 0
    rows = pc.indices_nonzero(pc.is_valid(errors)).to_pylist()
    codes = [str(c).split(",") for c in errors.take(rows).to_pylist()]
    deep = _too_deep(table, sqls, rows, codes, limits)
    for index, row_codes in zip(rows, codes, strict=True):
        for code in row_codes:
            position, _, kind = code.partition(":")
            column = sqls[int(position)].column
            if kind == "depth?":
                if index not in deep[int(position)]:
                    continue
                kind = "depth"
            total += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(
                    RowProblem(
                        row=index, field=column.name, message=_message(kind, column.type, limits)
                    )
                )
    return problems, total


def _identity_sources(spec: TableSpec) -> frozenset[str]:
    """Columns whose values become partition values (kept in the meta store as they are)."""
    return frozenset(f.source for f in spec.partition_by if f.transform == "identity")


def _message(kind: str, type_name: str, limits: InsertLimits) -> str:
    if kind == "missing":
        return "required, but missing or null"
    if kind == "range":
        what = "a date" if type_name == "DATE" else "a timestamp"
        return f"expected {what} from year 1 to 9999 ({type_name}); infinities are refused"
    if kind == "finite":
        return (
            f"expected a finite number ({type_name}): NaN and infinities are refused"
            " (send null for a missing value)"
        )
    if kind == "json":
        return "expected standard JSON (no NaN, no Infinity, no comma before a closing bracket)"
    if kind == "nul":
        return "a partition value may not hold a NUL character"
    if kind == "size":
        return f"value is over the limit of {limits.max_value_bytes:,} bytes"
    if kind == "depth":
        return f"JSON is nested more than {limits.max_json_depth} levels deep"
    return f"expected {expected(type_name)} ({type_name})"


def _too_deep(
    table: pa.Table,
    sqls: Sequence[ColumnSQL],
    rows: list[int],
    codes: list[list[str]],
    limits: InsertLimits,
) -> dict[int, set[int]]:
    """Per column position, the rows whose JSON the bound flagged (``depth?``) that are nested
    too deeply indeed: each column's suspects decided together."""
    suspects: dict[int, list[int]] = {}
    for index, row_codes in zip(rows, codes, strict=True):
        for code in row_codes:
            position, _, kind = code.partition(":")
            if kind == "depth?":
                suspects.setdefault(int(position), []).append(index)
    deep: dict[int, set[int]] = {n: set() for n in range(len(sqls))}
    for n, indices in suspects.items():
        text = table.column(sqls[n].column.name).take(indices)
        deep[n] = {indices[i] for i in rows_deeper_than(text, limits.max_json_depth)}
    return deep


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
    return _refuse([RowProblem(row=row, field=None, message=message)])


def _locate_malformed_json(batch: StagedBatch, error: Exception) -> BatchRejectedError:
    """The slow path, run only on failure: find the first record that is not valid JSON (or
    the first byte that is not UTF-8). A JSON file that is not an array is read as DuckDB's
    reader reads it, one record per line."""
    data = batch.path.read_bytes()
    lines = batch.format == "ndjson" or not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return _refuse([_not_utf8(data, e.start, rows=lines)])
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
                return _refuse([problem])
            row += 1
    else:
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError as e:
            where = f"line {e.lineno}, column {e.colno}"
            return _refuse(
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
