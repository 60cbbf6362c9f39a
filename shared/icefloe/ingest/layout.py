"""Split a batch by the table's partition transforms and sort each part by the sort keys.

The transforms run as DuckDB expressions over the partition source columns (bucket hashing,
which DuckDB lacks, runs once per distinct value in Python). Rows are ordered by partition, then
by the file sort keys, then by ``_row_id`` (an Arrow sort on indices); each partition is one
contiguous slice of the result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.duck import ident
from icefloe.ingest.arrow_input import ARROW_TYPES
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.spec import PartitionField, PartitionValue, TableSpec, bucket_of, partition_start
from icefloe.spec.types import is_string

_VIEW = "__icefloe_batch"


@dataclass(frozen=True, slots=True)
class PartitionSlice:
    """The rows of one partition, sorted, with the partition's values and Hive path."""

    values: tuple[PartitionValue, ...]
    path: str
    start: datetime | None
    rows: pa.Table


def partition_rows(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table
) -> Iterator[PartitionSlice]:
    """Yield one sorted slice per partition, in partition order."""
    fields = spec.partition_by
    part_names = [f"__p{i}" for i in range(len(fields))]
    ordered = _ordered(con, spec, table, part_names)
    starts = _run_starts(ordered, part_names)
    rows = ordered.drop_columns(part_names)
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else ordered.num_rows
        values = tuple(_as_partition_value(ordered.column(c)[start].as_py()) for c in part_names)
        yield PartitionSlice(
            values=values,
            path=spec.partition_path(values),
            start=partition_start(fields, values),
            rows=rows.slice(start, stop - start),
        )


def _ordered(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table, part_names: list[str]
) -> pa.Table:
    """``table`` with its partition keys appended, ordered by them, then by the file sort keys,
    then by ``_row_id``. DuckDB computes the keys (reading only their source columns); Arrow
    sorts (a sort on indices and one ``take``: several times faster than a DuckDB ORDER BY
    over every column, which it gives the same order, nulls first and strings by bytes)."""
    with_keys = table
    if part_names:
        keys = _partition_keys(con, spec, table)
        for name in part_names:
            with_keys = with_keys.append_column(name, keys.column(name))
    order = [*part_names, *spec.file_sort_keys, ROW_ID_COLUMN]
    # Every orderable type (the spec refuses others as sort keys) sorts in Arrow as in DuckDB.
    indices = pc.sort_indices(
        with_keys.select(order),
        options=pc.SortOptions(sort_keys=[(c, "ascending", "at_start") for c in order]),
    )
    # The row id stays 16 fixed bytes, as merges write it (a DuckDB sort made it a BLOB).
    return with_keys.take(indices)


def _partition_keys(con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table) -> pa.Table:
    """The partition key of every row, in the rows' order (insertion order is preserved)."""
    in_arrow = arrow_partition_keys(spec, table)
    if in_arrow is not None:
        return in_arrow
    return duckdb_partition_keys(con, spec, table)


# Time transforms Arrow computes as DuckDB's date_trunc does (floor to the period's start),
# and the Arrow types of the columns whose keys Arrow computes.
_ARROW_UNITS = ("year", "month", "day", "hour")
_US = pa.timestamp("us")
_ARROW_KEY_TYPES = {
    kind: arrow_type
    for kind, arrow_type in ARROW_TYPES.items()
    if kind not in ("FLOAT", "DOUBLE", "JSON")  # floats and JSON text: DuckDB's expressions
}


def arrow_partition_keys(spec: TableSpec, table: pa.Table) -> pa.Table | None:
    """The keys computed in Arrow: identity of plain columns, and time transforms of TIMESTAMP
    and DATE columns; None for anything else (bucket, truncate, zoned timestamps...), which
    DuckDB computes. Registering a batch in DuckDB and querying it costs a small batch a few
    milliseconds; these kernels cost microseconds. A test holds the two to the same keys."""
    keys: dict[str, pa.ChunkedArray] = {}
    for position, field in enumerate(spec.partition_by):
        column = table.column(field.source)
        kind = spec.column(field.source).type
        if column.type != _ARROW_KEY_TYPES.get(kind):
            return None
        if field.transform == "identity":
            keys[f"__p{position}"] = column
        elif field.transform in _ARROW_UNITS and kind in ("TIMESTAMP", "DATE"):
            floored = pc.floor_temporal(column, unit=field.transform)
            keys[f"__p{position}"] = floored.cast(_US)
        else:
            return None
    return pa.table(keys)


def duckdb_partition_keys(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table
) -> pa.Table:
    """The keys computed by DuckDB expressions (every transform)."""
    fields = spec.partition_by
    sources = list(dict.fromkeys(f.source for f in fields))
    with_buckets = _add_bucket_columns(spec, table.select(sources))
    con.register(_VIEW, with_buckets)
    try:
        keys = [f"{_expression(spec, f, i)} AS __p{i}" for i, f in enumerate(fields)]
        return con.execute(f"SELECT {', '.join(keys)} FROM {_VIEW}").to_arrow_table()
    finally:
        con.unregister(_VIEW)


def _run_starts(ordered: pa.Table, columns: Sequence[str]) -> list[int]:
    """Row offsets where the tuple of ``columns`` changes in an ordered table (first is 0)."""
    n = ordered.num_rows
    if n == 0:
        return []
    changed = None
    for name in columns:
        # Dictionary indices compare equal exactly when values do (nulls get an index too).
        encoded = pc.dictionary_encode(
            ordered.column(name).combine_chunks(), null_encoding="encode"
        )
        indices = encoded.indices
        differs = pc.not_equal(indices.slice(1), indices.slice(0, n - 1))
        changed = differs if changed is None else pc.or_(changed, differs)
    if changed is None:
        return [0]
    return [0, *(int(i) + 1 for i in pc.indices_nonzero(changed).to_pylist())]


def _expression(spec: TableSpec, field: PartitionField, position: int) -> str:
    source = ident(field.source)
    column_type = spec.column(field.source).type
    if field.transform in ("year", "month", "day", "hour"):
        if column_type == "TIMESTAMPTZ":
            source = f"({source} AT TIME ZONE 'UTC')"
        return f"CAST(date_trunc('{field.transform}', {source}) AS TIMESTAMP)"
    if field.transform == "identity":
        if column_type == "TIMESTAMPTZ":
            return f"({source} AT TIME ZONE 'UTC')"
        return source
    if field.transform == "truncate":
        width = int(field.param or 1)
        if is_string(column_type):
            return f"left({source}, {width})"
        return f"({source} - ((({source} % {width}) + {width}) % {width}))"
    return ident(f"__bucket{position}")


def _add_bucket_columns(spec: TableSpec, table: pa.Table) -> pa.Table:
    """Iceberg bucket numbers, hashed once per distinct value and mapped back vectorized."""
    for position, field in enumerate(spec.partition_by):
        if field.transform != "bucket":
            continue
        column = table.column(field.source)
        distinct = pc.unique(column).drop_null()
        buckets = pa.array(
            [bucket_of(v, buckets=int(field.param or 1)) for v in distinct.to_pylist()],
            type=pa.int32(),
        )
        mapped = pc.take(buckets, pc.index_in(column, value_set=distinct))
        table = table.append_column(f"__bucket{position}", mapped)
    return table


def _as_partition_value(value: object) -> PartitionValue:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=None)
    return value  # type: ignore[return-value]
