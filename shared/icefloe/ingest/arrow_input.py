"""The fast path for typed Arrow input: prove a batch clean with Arrow compute, or step aside.

A caller's Arrow table whose columns already have the exact types the DuckDB conversion would
produce needs no conversion, only checks: nulls in NOT NULL columns, finite floats, dates and
timestamps in years 1 to 9999, value sizes, NUL in identity partition values. When every check
passes, the columns are used as they are (absent nullable columns become nulls). Anything else
(another type, an unknown column, a value that fails a check) returns None, and the DuckDB
conversion, which names the row and field at fault, decides. JSON columns are always checked
by that conversion (JSON text must be parsed), over their own columns only.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.ingest.sources import InsertLimits
from icefloe.ingest.strict_json import as_one_value, value_bytes
from icefloe.spec import Column, TableSpec

# The Arrow type the DuckDB conversion gives each column type it can be skipped for.
ARROW_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
}
_BOUNDS: dict[str, tuple[pa.Scalar, pa.Scalar]] = {
    "DATE": (pa.scalar(date(1, 1, 1)), pa.scalar(date(9999, 12, 31))),
    "TIMESTAMP": (
        pa.scalar(datetime(1, 1, 1), pa.timestamp("us")),
        pa.scalar(datetime(9999, 12, 31, 23, 59, 59, 999999), pa.timestamp("us")),
    ),
}


def json_columns_to_check(spec: TableSpec, table: pa.Table) -> list[Column]:
    """The JSON columns present in ``table``: the ones the fast path leaves to DuckDB."""
    return [c for c in spec.columns if c.type == "JSON" and c.name in table.column_names]


def proven_clean(
    spec: TableSpec,
    table: pa.Table,
    *,
    limits: InsertLimits,
    partition_sources: Collection[str],
) -> pa.Table | None:
    """The columns of ``spec``, in order, as the conversion would give them, if Arrow's checks
    prove the batch holds no bad value; None when the conversion must decide. JSON columns
    are passed as they are: their text is the caller's to check."""
    names = set(table.column_names)
    if not names <= set(spec.column_names):
        return None  # an unknown column: the conversion names it
    columns: dict[str, pa.ChunkedArray] = {}
    for col in spec.columns:
        target = ARROW_TYPES.get(col.type)
        if col.name not in names:
            if not col.nullable or target is None:
                return None
            columns[col.name] = pa.chunked_array([pa.nulls(table.num_rows, target)])
            continue
        values = table.column(col.name)
        if target is None or values.type != target:
            return None
        if col.type != "JSON" and not _holds(
            col, values, limits=limits, partition_source=col.name in partition_sources
        ):
            return None
        columns[col.name] = values
    return pa.table(columns)


def _holds(
    col: Column, values: pa.ChunkedArray, *, limits: InsertLimits, partition_source: bool
) -> bool:
    """Whether every value of a column of the right type passes the conversion's checks."""
    if not col.nullable and values.null_count > 0:
        return False
    if values.null_count == len(values):
        return True
    if col.type in ("FLOAT", "DOUBLE"):
        return bool(pc.all(pc.is_finite(values)).as_py())
    if col.type in _BOUNDS:
        low, high = _BOUNDS[col.type]
        extremes = pc.min_max(values)  # compared in Arrow: Python has no year 10000
        return bool(
            pc.greater_equal(extremes["min"], low).as_py()
            and pc.less_equal(extremes["max"], high).as_py()
        )
    if col.type == "VARCHAR":
        longest = pc.max(pc.binary_length(values)).as_py()
        if longest is not None and longest > limits.max_value_bytes:
            return False
        if partition_source and pc.any(pc.match_substring(values, "\x00")).as_py():
            return False
        if not utf8_valid(values):
            return False  # the conversion refuses it, naming the row
    return True


def utf8_valid(values: pa.ChunkedArray) -> bool:
    """Whether every value of a string column is UTF-8 (a caller's Arrow memory need not be:
    stored as it is, it would make the table's files unreadable). Each chunk's bytes are
    validated as one value, in a fraction of a millisecond a megabyte; only text that is not
    ASCII then needs each value validated (a character could be split between two values)."""
    for chunk in values.chunks:
        data = value_bytes(chunk)
        if data is None:
            return False
        whole = as_one_value(data).view(pa.large_string())
        try:
            whole.validate(full=True)
        except pa.ArrowInvalid:
            return False
        if pc.utf8_length(whole)[0].as_py() == data.size:
            continue  # ASCII: no character to split
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True
