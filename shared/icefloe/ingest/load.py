"""Load a staged batch into an Arrow table of the table's types, or refuse it naming the rows.

Each kind of input takes the shortest way its checks allow: rows from Python and clean NDJSON
parsed once (:mod:`~icefloe.ingest.rows_input`, :mod:`~icefloe.ingest.json_input`), typed Arrow
proven clean by Arrow's checks (:mod:`~icefloe.ingest.arrow_input`); everything else, and
anything those cannot prove, through the DuckDB conversion (:mod:`~icefloe.ingest.conversion`,
and :mod:`~icefloe.ingest.json_records` for JSON text), which names the rows at fault. CSV
is read as RFC 4180, nothing sniffed (:mod:`~icefloe.ingest.csv_input`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import cache

import duckdb
import pyarrow as pa

from icefloe.duck import name_literal
from icefloe.errors import BatchRejectedError
from icefloe.ingest.arrow_input import (
    duplicate_names,
    json_columns_to_check,
    null_children_typed,
    proven_clean,
    unreadable_types,
)
from icefloe.ingest.arrow_values import repeated_map_key, text_not_utf8, time_out_of_range
from icefloe.ingest.conversion import (
    check_row_count,
    identity_sources,
    json_text_holds,
    load_typed,
    refuse,
)
from icefloe.ingest.csv_input import (
    check_csv_header,
    csv_fault,
    csv_header,
    csv_reader_options,
    duckdb_csv_reason,
)
from icefloe.ingest.exact_numbers import file_holds_inexact
from icefloe.ingest.json_input import (
    fast_json_columns,
    load_ndjson_fast,
    object_lines,
    read_json_columns_beside,
)
from icefloe.ingest.json_records import (
    JSON_FORMATS,
    DuckJsonColumns,
    duckdb_json_format,
    load_json,
)
from icefloe.ingest.json_shape import check_json_document
from icefloe.ingest.rows_input import load_rows_fast
from icefloe.ingest.sources import (
    ArrowBatch,
    InsertLimits,
    RowsBatch,
    StagedBatch,
    check_parquet,
)
from icefloe.spec import Column, TableSpec

_ARROW_INPUT = "__icefloe_arrow_input"


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
                partition_sources=identity_sources(spec),
                values_unchecked=batch.values_unchecked,
            )
            if table is not None:
                check_row_count(table.num_rows, limits)
                return table
        batch = batch.staged()
    if batch.format in JSON_FORMATS:
        # No parser reads JSON text before its nesting and completeness are scanned (see
        # json_shape): a line nested deeply enough crashes pyarrow's reader.
        if duckdb_json_format(batch) == "newline_delimited":
            if fast:
                table = _load_ndjson_fast(con, spec, batch, limits)
                if table is not None:
                    return table
            else:
                object_lines(batch.path, limits=limits)
        elif not batch.written_by_orjson:  # (orjson writes complete JSON, 255 levels at most)
            check_json_document(batch.path, max_depth=limits.max_json_depth, source=batch.source)
        return load_json(con, spec, batch, limits)
    if batch.format == "csv":
        return _load_csv(con, spec, batch, limits)
    check_parquet(batch.path, source=batch.source)
    params = {"path": str(batch.path)}
    return load_typed(con, spec, "read_parquet($path)", params, batch.format, limits)


# From this many rows, typed Arrow input's JSON text is checked while its partitions are sorted
# and encoded (see load_batch_checking_json_beside); below, a thread costs more than it saves.
_JSON_CHECK_BESIDE_FROM_ROWS = 1 << 16


@cache
def _json_checkers() -> ThreadPoolExecutor:
    """The threads that check JSON text beside the encode, made on first use (not at import)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="icefloe-json-check")


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
    _refuse_bad_shape(table)
    check_row_count(table.num_rows, limits)
    proven = _proven_clean_arrow(spec, table, limits)
    if proven is None:
        return _converted_arrow(con, spec, table, limits), None
    clean, json_columns = proven
    if not json_columns:
        return clean, None
    checker = con.cursor()

    def check() -> bool:
        try:
            return json_text_holds(checker, spec, table, json_columns, limits)
        finally:
            checker.close()

    try:
        return clean, _json_checkers().submit(check)
    except RuntimeError:  # the interpreter is shutting down: no new threads
        checker.close()
        if json_text_holds(con, spec, table, json_columns, limits):
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
    _refuse_bad_shape(table)
    check_row_count(table.num_rows, limits)
    proven = _proven_clean_arrow(spec, table, limits) if fast else None
    if proven is not None:
        clean, json_columns = proven
        if not json_columns or json_text_holds(con, spec, table, json_columns, limits):
            return clean  # checked JSON text is stored as it came
    return _converted_arrow(con, spec, table, limits)


def _proven_clean_arrow(
    spec: TableSpec, table: pa.Table, limits: InsertLimits
) -> tuple[pa.Table, list[Column]] | None:
    """Typed Arrow input as Arrow's checks prove it clean, and its JSON columns, whose text is
    still to be checked; None when the conversion must decide."""
    clean = proven_clean(spec, table, limits=limits, partition_sources=identity_sources(spec))
    return None if clean is None else (clean, json_columns_to_check(spec, table))


def _converted_arrow(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table, limits: InsertLimits
) -> pa.Table:
    """Typed Arrow input through the DuckDB conversion, which names the rows at fault."""
    _refuse_bad_values(table)
    table = null_children_typed(spec, table)
    con.register(_ARROW_INPUT, table)
    try:
        return load_typed(con, spec, _ARROW_INPUT, {}, "Arrow", limits)
    finally:
        con.unregister(_ARROW_INPUT)


def _refuse_bad_values(table: pa.Table) -> None:
    """Refuse Arrow input holding text that is not UTF-8, a time outside the day or a map key
    given twice in one map, at any depth of a nested type, naming the first row and path of
    each column, before DuckDB reads it (see :mod:`~icefloe.ingest.arrow_values`)."""
    problems = [
        problem
        for name, column in zip(table.column_names, table.columns, strict=True)
        # (time first: Arrow's full validation, which looks for the text, fails on it too)
        if (
            problem := time_out_of_range(name, column)
            or text_not_utf8(name, column)
            or repeated_map_key(name, column)
        )
        is not None
    ]
    if problems:  # by row, a column's before the next's in the same row
        raise refuse(sorted(problems, key=lambda p: p.row if p.row is not None else -1))


def _refuse_bad_shape(table: pa.Table) -> None:
    """Refuse Arrow input with two columns, or two fields of a struct, of one name, or with
    a part of a type DuckDB cannot read, before anything reads a value of it."""
    problems = duplicate_names(table) + unreadable_types(table)
    if problems:
        raise refuse(problems)


def _load_ndjson_fast(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, batch: StagedBatch, limits: InsertLimits
) -> pa.Table | None:
    """NDJSON parsed once (see :mod:`icefloe.ingest.json_input`), or None for the slow path.
    The file is scanned first (:func:`~icefloe.ingest.json_input.object_lines`, which refuses
    a line nested too deeply) while DuckDB already reads its JSON columns: the scan holds the
    GIL on one core, DuckDB's read takes the other."""
    duck = DuckJsonColumns(con, spec, batch, limits)
    json_read = read_json_columns_beside(
        spec, size_bytes=batch.size_bytes, limits=limits, duck=duck
    )
    lines = None
    try:
        lines = object_lines(batch.path, limits=limits)
        if lines is not None and _json_numbers_inexact(spec, batch):
            lines = None  # DuckDB's read of the JSON columns holds them as doubles
        if lines is None:
            return None
    finally:
        if lines is None and json_read is not None:
            wait([json_read])  # refused, or not for this path: DuckDB's read is not used
    table = load_ndjson_fast(
        batch.path,
        spec,
        size_bytes=batch.size_bytes,
        limits=limits,
        partition_sources=identity_sources(spec),
        duck=duck,
        lines=lines,
        json_read=json_read,
    )
    if table is not None:
        check_row_count(table.num_rows, limits)
    return table


def _json_numbers_inexact(spec: TableSpec, batch: StagedBatch) -> bool:
    """Whether the one-parse path must leave an NDJSON batch to the conversion for a number a
    double cannot hold (see :mod:`~icefloe.ingest.exact_numbers`): its JSON columns are read
    by DuckDB, as doubles; pyarrow reads the other columns' numbers from their text."""
    return bool(fast_json_columns(spec)) and file_holds_inexact(batch.path)


# What DuckDB's CSV reader raises for a file it cannot read: refused naming the file (a
# NotImplementedException was its word for a line longer than its buffer).
_CSV_READ_ERRORS = duckdb.InvalidInputException | duckdb.NotImplementedException


def _load_csv(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, batch: StagedBatch, limits: InsertLimits
) -> pa.Table:
    """A CSV file's rows: its header checked here, its values converted by DuckDB. A file
    DuckDB's reader refuses is scanned again, to name the line at fault
    (:func:`~icefloe.ingest.csv_input.csv_fault`). DuckDB is given room for a line as long as
    the file (:func:`~icefloe.ingest.csv_input.csv_reader_options`): it drops or refuses none
    for its length, and a value over the limit is refused by row and field."""
    name = batch.source or "the input"
    header = csv_header(batch.path, name)
    check_csv_header(spec, header, name)
    columns = ", ".join(f"{name_literal(column)}: 'VARCHAR'" for column in header)
    try:  # (the file as read now, should it have grown since it was staged)
        size = max(batch.size_bytes, batch.path.stat().st_size)
    except OSError:
        size = batch.size_bytes
    source = f"read_csv($path, columns={{{columns}}}, {csv_reader_options(size)})"
    try:
        return load_typed(con, spec, source, {"path": str(batch.path)}, "csv", limits)
    except (duckdb.InvalidInputException, duckdb.NotImplementedException, BatchRejectedError) as e:
        if isinstance(e, BatchRejectedError) and (
            e.problems or not isinstance(e.__cause__, _CSV_READ_ERRORS | UnicodeDecodeError)
        ):
            raise  # (a refusal of values, naming them)
        problem = csv_fault(batch.path, header, name)
        if problem is not None:
            raise refuse([problem]) from e
        if isinstance(e, BatchRejectedError):
            raise
        raise BatchRejectedError(f"batch refused: {duckdb_csv_reason(e, name)}") from e
