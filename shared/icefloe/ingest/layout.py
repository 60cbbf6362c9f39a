"""Split a batch by the table's partition transforms and sort each part by the sort keys.

The keys are computed in Arrow when its kernels give what DuckDB gives (plain columns, time
transforms), else as DuckDB expressions over the partition source columns (bucket hashing,
which DuckDB lacks, runs once per distinct value in Python). A stable sort of the keys alone
splits the batch; each partition's rows are then ordered by the file sort keys and ``_row_id``
on their own, so partitions can be sorted (and encoded) side by side. When every sort key has
an order-preserving integer rank (strings by a sorted dictionary, integers and times by their
distance from the least value) and the ranks fit 64 bits together, the rows are ordered by one
packed uint64 per row, else by a multi-column sort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe.datafiles import key_values
from icefloe.duck import ident
from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.arrow_input import ARROW_TYPES
from icefloe.ingest.row_ids import ROW_ID_CHUNK_ROWS, ROW_ID_COLUMN
from icefloe.spec import PartitionField, PartitionValue, TableSpec, bucket_of, partition_start
from icefloe.spec.types import is_string
from icefloe.storage import MAX_KEY_BYTES

_VIEW = "__icefloe_batch"


@dataclass(frozen=True, slots=True)
class Partition:
    """The rows of one partition: the partition's values, Hive path and time range start, and
    the positions of its rows in the batch (in input order): an array of them, a range when
    they are consecutive, None when it holds every row."""

    values: tuple[PartitionValue, ...]
    path: str
    start: datetime | None
    positions: pa.Array | range | None


def split_partitions(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    table: pa.Table,
    *,
    max_key_bytes: int = MAX_KEY_BYTES,
) -> list[Partition]:
    """The batch's partitions, in partition order (nulls first), each with its rows' positions.
    A partition whose files' keys would pass ``max_key_bytes`` (the object store's) is refused
    naming its first row and field.

    Only the partition keys are sorted here (a stable sort, so each partition's positions stay
    in input order); the rows themselves are ordered per partition by :func:`sorted_rows`,
    which the writer runs for several partitions at once."""
    fields = spec.partition_by
    if not fields:
        return [Partition(values=(), path=spec.partition_path(()), start=None, positions=None)]
    keys = _partition_keys(con, spec, table)
    names = keys.column_names
    if _one_value_each(keys):
        # One partition (most small batches): no sort, no positions.
        values = tuple(_as_partition_value(keys.column(c)[0].as_py()) for c in names)
        return _storable(
            spec,
            max_key_bytes,
            [
                Partition(
                    values=values,
                    path=spec.partition_path(values),
                    start=partition_start(fields, values),
                    positions=None,
                )
            ],
        )
    # Events mostly come in time order: their keys then need no sort, and each partition's
    # rows are a run of the batch's (a slice, not a copy).
    order = None if _in_order(keys) else _sort_indices_by_columns(keys)
    ordered_keys = keys if order is None else keys.take(order)
    starts = _run_starts(ordered_keys, names)
    partitions = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else table.num_rows
        values = tuple(_as_partition_value(ordered_keys.column(c)[start].as_py()) for c in names)
        positions: pa.Array | range | None = None
        if len(starts) > 1:
            positions = range(start, stop) if order is None else order.slice(start, stop - start)
        partitions.append(
            Partition(
                values=values,
                path=spec.partition_path(values),
                start=partition_start(fields, values),
                positions=positions,
            )
        )
    return _storable(spec, max_key_bytes, partitions)


# A partition's path is part of its files' keys: each segment must fit a file name (255 bytes
# on the usual filesystems), and the whole key S3's 1,024 bytes less the store's own prefix.
# The key's other parts: the table, "/data/", "/", a 32-character id and ".parquet".
_MAX_SEGMENT_BYTES = 255
_KEY_OVERHEAD_BYTES = len("/data/") + 1 + 32 + len(".parquet")


def _storable(spec: TableSpec, max_key_bytes: int, partitions: list[Partition]) -> list[Partition]:
    """``partitions``, or BatchRejectedError naming the first row and field whose partition
    value makes a path too long to store (a long identity or truncate value, escaped)."""
    room = max_key_bytes - _KEY_OVERHEAD_BYTES - len(spec.name.encode("utf-8"))
    for part in partitions:
        segments = part.path.split("/")
        too_long = [
            (field, len(segment))
            for field, segment in zip(spec.partition_by, segments, strict=True)
            if len(segment) > _MAX_SEGMENT_BYTES
        ]
        if not too_long and len(part.path) <= room:
            continue
        field, size = too_long[0] if too_long else (spec.partition_by[0], len(part.path))
        limit = _MAX_SEGMENT_BYTES if too_long else room
        row = _first_row(part)
        problem = RowProblem(
            row=row,
            field=field.source,
            message=(
                f"its partition value ({field.to_text()}) makes a partition path of"
                f" {size} bytes escaped, more than the {limit} a stored file's key allows"
            ),
        )
        raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,))
    return partitions


def _first_row(part: Partition) -> int:
    if part.positions is None:
        return 0
    if isinstance(part.positions, range):
        return part.positions.start
    return int(part.positions[0].as_py())


# From this many rows a partition is ordered by its packed key, when the keys pack. Ranking
# each key costs a dozen Arrow calls, which on fewer rows cost more than the multi-column sort
# they save: 1,000 sample events sort in 0.17 ms column by column against 0.50 ms packed, and
# the two cross at about 20,000 rows (64,000 rows: 3.6 ms against 2.4 ms).
PACKED_FROM_ROWS = 1 << 14


def sorted_rows(spec: TableSpec, table: pa.Table, partition: Partition) -> pa.Table:
    """A partition's rows ordered by the file sort keys (nulls first, strings by bytes, as
    DuckDB's ORDER BY gives), then by ``_row_id``, with one ``take``.

    Precondition of the fast path: ``_row_id`` increases with row position in ``table``.
    :func:`~icefloe.ingest.row_ids.new_row_ids` makes ids that increase within each chunk of
    ``ROW_ID_CHUNK_ROWS`` (2^24) rows, the insert appends them in row order, and partition
    positions are in input order; so for a batch of at most that many rows, a stable sort of
    the keys alone breaks ties as ``_row_id`` does. Such a batch's partition of at least
    ``PACKED_FROM_ROWS`` rows, when every key packs into one uint64 (:func:`packed_sort_key`),
    is ordered by a sort of that single array; any other is ordered by a multi-column sort of
    the keys and ``_row_id`` (several times slower on many rows, cheaper on few)."""
    names = list(spec.file_sort_keys)
    keys = [_partition_values(key_values(table, name), partition) for name in names]
    count = _row_count(table, partition)
    packed = None
    if table.num_rows <= ROW_ID_CHUNK_ROWS and count >= PACKED_FROM_ROWS:
        packed = packed_sort_key(keys, count)
    if packed is not None:
        indices = pc.sort_indices(packed)  # stable: ties keep input order, _row_id's
    else:
        row_ids = _partition_values(table.column(ROW_ID_COLUMN), partition)
        indices = _sort_indices_by_columns(pa.table([*keys, row_ids], [*names, ROW_ID_COLUMN]))
    # The row id stays 16 fixed bytes, as merges write it (a DuckDB sort made it a BLOB).
    positions = partition.positions
    if isinstance(positions, range):
        return table.slice(positions.start, len(positions)).take(indices)
    if positions is not None:
        indices = positions.take(indices)
    return table.take(indices)


def packed_sort_key(keys: Sequence[pa.Array | pa.ChunkedArray], num_rows: int) -> pa.Array | None:
    """One uint64 per row whose ascending order is the order of the rows' key tuples (each
    key ascending, nulls first): the keys' ranks side by side, the first key in the highest
    bits. None when a key's type has no rank here (floats, decimals...) or the ranks need more
    than 64 bits. Keys without a value (empty or all null) order nothing and are left out."""
    packed: pa.Array | None = None
    bits = 0
    for column in keys:
        values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if values.null_count == len(values):
            continue
        ranks = _ranks(values)
        if ranks is None or bits + ranks.width > _KEY_BITS:
            return None
        if packed is None:
            packed = ranks.values
        else:
            shifted = pc.shift_left(packed, pa.scalar(ranks.width, pa.uint64()))
            packed = pc.bit_wise_or(shifted, ranks.values)
        bits += ranks.width
    if packed is None:
        return pa.repeat(pa.scalar(0, pa.uint64()), num_rows)
    return packed


_KEY_BITS = 64


class _Ranks(NamedTuple):
    """A key's rank per row as uint64 (0 for null, 1 + the value's rank among the distinct
    values, or 1 + its distance from the least value), and the bits the largest rank needs."""

    values: pa.Array
    width: int


def _ranks(values: pa.Array) -> _Ranks | None:
    """The ranks of a key holding at least one value; None for a type without ranks here."""
    kind = values.type
    if kind in _BYTE_TYPES or pa.types.is_fixed_size_binary(kind):
        return _dictionary_ranks(values)
    integers = _as_integers(values)
    return None if integers is None else _integer_ranks(integers)


# Types Arrow sorts by their bytes, as DuckDB sorts VARCHAR and BLOB (and UUID, as text).
_BYTE_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def _dictionary_ranks(values: pa.Array) -> _Ranks:
    """Ranks of byte strings: each distinct value's place in the sorted dictionary."""
    encoded = pc.dictionary_encode(values)  # nulls stay null in the indices
    dictionary = encoded.dictionary
    order = pc.sort_indices(dictionary)
    place = pc.sort_indices(order)  # the inverse permutation: each value's place, from 0
    rank_of_index = pc.add(place, pa.scalar(1, pa.uint64()))
    ranks = rank_of_index.take(encoded.indices).fill_null(0)
    return _Ranks(ranks, len(dictionary).bit_length())


def _as_integers(values: pa.Array) -> pa.Array | None:
    """The values as integers in the same order (booleans as 0 and 1, dates, times and
    timestamps, zoned or not, as their count of units), or None for any other type."""
    kind = values.type
    if pa.types.is_integer(kind):
        return values
    if pa.types.is_boolean(kind):
        return values.cast(pa.uint8())
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return values.view(pa.int32())
    if pa.types.is_date64(kind) or pa.types.is_time64(kind) or pa.types.is_timestamp(kind):
        return values.view(pa.int64())
    return None


def _integer_ranks(integers: pa.Array) -> _Ranks | None:
    """Ranks of integers: 1 + the distance from the least value; None when the distances
    need more than 64 bits. The bounds are Python ints and the subtraction wraps in uint64,
    which is exact because every distance fits."""
    bounds = pc.min_max(integers)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    width = (high - low + 1).bit_length()
    if width > _KEY_BITS:
        return None
    if pa.types.is_signed_integer(integers.type):
        as_uint64 = integers.cast(pa.int64()).view(pa.uint64())  # two's complement bits
    else:
        as_uint64 = integers.cast(pa.uint64())
    least_is_one = pa.scalar((low - 1) % (1 << 64), pa.uint64())
    ranks = pc.subtract(as_uint64, least_is_one).fill_null(0)
    return _Ranks(ranks, width)


def _row_count(table: pa.Table, partition: Partition) -> int:
    return table.num_rows if partition.positions is None else len(partition.positions)


def _partition_values(column: pa.ChunkedArray, partition: Partition) -> pa.ChunkedArray:
    """A column's values in the partition's rows, in input order."""
    positions = partition.positions
    if isinstance(positions, range):
        return column.slice(positions.start, len(positions))
    return column if positions is None else column.take(positions)


def _in_order(keys: pa.Table) -> bool:
    """Whether a single key column without nulls never decreases (so a stable sort of the
    keys would leave every row where it is)."""
    if keys.num_columns != 1:
        return False
    column = keys.column(0)
    if column.null_count or not _compares_as_it_sorts(column.type):
        return False
    n = len(column)
    if n < 2:
        return True
    never_decreases = pc.all(pc.greater_equal(column.slice(1), column.slice(0, n - 1)))
    return never_decreases.as_py() is True


def _compares_as_it_sorts(kind: pa.DataType) -> bool:
    """Types whose comparison in Arrow is the order :func:`_sort_indices_by_columns` sorts
    by (floats are left out: NaN compares false, yet sorts last)."""
    checks = (
        pa.types.is_integer,
        pa.types.is_timestamp,
        pa.types.is_date,
        pa.types.is_time,
        pa.types.is_string,
        pa.types.is_large_string,
        pa.types.is_binary,
        pa.types.is_boolean,
    )
    return any(check(kind) for check in checks)


def _sort_indices_by_columns(keys: pa.Table) -> pa.Array:
    """A stable sort of every column ascending, nulls first. Every orderable type (the spec
    refuses others as sort keys) sorts in Arrow as in DuckDB."""
    return pc.sort_indices(
        keys,
        options=pc.SortOptions(sort_keys=[(c, "ascending", "at_start") for c in keys.column_names]),
    )


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
    except (duckdb.OutOfRangeException, duckdb.ConversionException) as e:
        # Only truncate can leave a type: a value within its width of the type's minimum.
        problem = _truncate_outside_its_type(con, spec, with_buckets) or RowProblem(
            row=None, field=None, message=_TRUNCATE_OUTSIDE
        )
        raise BatchRejectedError(f"batch refused: {problem}", problems=(problem,)) from e
    finally:
        con.unregister(_VIEW)


_TRUNCATE_OUTSIDE = "its truncate partition lies outside the integers the column's type stores"


def _truncate_outside_its_type(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, table: pa.Table
) -> RowProblem | None:
    """The first row (and field) whose truncate partition its column's type cannot store
    (a BIGINT within the width of its least value), if any."""
    numbered = table.append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    con.register(_VIEW, numbered)
    try:
        for field in spec.partition_by:
            if field.transform != "truncate":
                continue
            floor, kind = _truncated_integer(spec, field)
            if kind is None:
                continue
            row = con.execute(
                f"SELECT min(__row) FROM {_VIEW}"
                f" WHERE {ident(field.source)} IS NOT NULL AND TRY_CAST({floor} AS {kind}) IS NULL"
            ).fetchone()
            if row is not None and row[0] is not None:
                return RowProblem(row=int(row[0]), field=field.source, message=_TRUNCATE_OUTSIDE)
        return None
    finally:
        con.unregister(_VIEW)


def _one_value_each(keys: pa.Table) -> bool:
    """Whether every column holds a single value throughout (null counting as one)."""
    return keys.num_rows > 0 and all(_one_value(keys.column(name)) for name in keys.column_names)


def _one_value(column: pa.ChunkedArray) -> bool:
    if column.null_count == 0 and _compares_as_it_sorts(column.type):
        extremes = pc.min_max(column)  # no hashing: a tenth of counting distinct values
        return bool(extremes["min"] == extremes["max"])
    distinct: int = pc.count_distinct(column, mode="all").as_py()
    return distinct == 1


def _run_starts(ordered: pa.Table, columns: Sequence[str]) -> list[int]:
    """Row offsets where the tuple of ``columns`` changes in an ordered table (first is 0)."""
    n = ordered.num_rows
    if n == 0:
        return []
    changed = None
    for name in columns:
        values = ordered.column(name).combine_chunks()
        if values.null_count or not _compares_as_it_sorts(values.type):
            # Dictionary indices compare equal exactly when values do (nulls get an index
            # too, and NaN one of its own).
            values = pc.dictionary_encode(values, null_encoding="encode").indices
        differs = pc.not_equal(values.slice(1), values.slice(0, n - 1))
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
        if is_string(column_type):
            return f"left({source}, {int(field.param or 1)})"
        floor, kind = _truncated_integer(spec, field)
        return floor if kind is None else f"CAST({floor} AS {kind})"
    return ident(f"__bucket{position}")


def _truncated_integer(spec: TableSpec, field: PartitionField) -> tuple[str, str | None]:
    """SQL of an integer column's truncate partition, in HUGEINT, and the type it is stored
    as (None: HUGEINT, as computed). In HUGEINT, the floor of a value near its type's minimum
    lies below that minimum (INTEGER -2147483648, width 3: -2147483649); it is stored as a
    BIGINT, which every key of a narrower column fits (a BIGINT key below it is refused:
    :func:`duckdb_partition_keys`), or as a UBIGINT, which holds the floor of any UBIGINT."""
    width = int(field.param or 1)
    column_type = spec.column(field.source).type
    wide = f"CAST({ident(field.source)} AS HUGEINT)"
    floor = f"({wide} - ((({wide} % {width}) + {width}) % {width}))"
    if column_type in ("HUGEINT", "UHUGEINT"):
        return floor, None
    return floor, "UBIGINT" if column_type == "UBIGINT" else "BIGINT"


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
