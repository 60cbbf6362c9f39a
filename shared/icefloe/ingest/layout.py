"""Split a batch by the table's partition transforms and sort each part by the sort keys.

The keys are computed in Arrow when its kernels give what DuckDB gives (plain columns, time
transforms), else as DuckDB expressions over the partition source columns (bucket hashing,
which DuckDB lacks, runs once per distinct value in Python). A stable sort of the keys alone
splits the batch; each partition's rows are then ordered by the file sort keys and ``_row_id``
on their own, so partitions can be sorted (and encoded) side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
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
class Partition:
    """The rows of one partition: the partition's values, Hive path and time range start, and
    the positions of its rows in the batch (in input order; None when it holds every row)."""

    values: tuple[PartitionValue, ...]
    path: str
    start: datetime | None
    positions: pa.Array | None


def split_partitions(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table
) -> list[Partition]:
    """The batch's partitions, in partition order (nulls first), each with its rows' positions.

    Only the partition keys are sorted here (a stable sort, so each partition's positions stay
    in input order); the rows themselves are ordered per partition by :func:`sorted_rows`,
    which the writer runs for several partitions at once."""
    fields = spec.partition_by
    if not fields:
        return [Partition(values=(), path=spec.partition_path(()), start=None, positions=None)]
    keys = _partition_keys(con, spec, table)
    names = keys.column_names
    order = pc.sort_indices(
        keys, options=pc.SortOptions(sort_keys=[(c, "ascending", "at_start") for c in names])
    )
    ordered_keys = keys.take(order)
    starts = _run_starts(ordered_keys, names)
    partitions = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else table.num_rows
        values = tuple(_as_partition_value(ordered_keys.column(c)[start].as_py()) for c in names)
        positions = None if len(starts) == 1 else order.slice(start, stop - start)
        partitions.append(
            Partition(
                values=values,
                path=spec.partition_path(values),
                start=partition_start(fields, values),
                positions=positions,
            )
        )
    return partitions


def sorted_rows(spec: TableSpec, table: pa.Table, partition: Partition) -> pa.Table:
    """A partition's rows ordered by the file sort keys, then by ``_row_id``: an Arrow sort on
    indices of the key columns and one ``take`` (several times faster than a DuckDB ORDER BY
    over every column, which gives the same order, nulls first and strings by bytes)."""
    order = [*spec.file_sort_keys, ROW_ID_COLUMN]
    keys = table.select(order)
    if partition.positions is not None:
        keys = keys.take(partition.positions)
    # Every orderable type (the spec refuses others as sort keys) sorts in Arrow as in DuckDB.
    indices = pc.sort_indices(
        keys, options=pc.SortOptions(sort_keys=[(c, "ascending", "at_start") for c in order])
    )
    if partition.positions is not None:
        indices = partition.positions.take(indices)
    # The row id stays 16 fixed bytes, as merges write it (a DuckDB sort made it a BLOB).
    return table.take(indices)


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
