"""Data files: naming, encoding a sorted Arrow table as Parquet, and stats from the footer.

Shared by insert, the merge worker and the Spark job, so every writer produces the same kind of
file: zstd, statistics on, per-column min/max/null counts read back from the written footer.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import date, datetime
from datetime import time as time_of_day
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icefloe.errors import InvalidArgumentError
from icefloe.membership import MAX_KEYS, build_filter
from icefloe.metastore.models import ColumnStats, JsonScalar, NewFile
from icefloe.spec import TableSpec
from icefloe.spec.field_ids import NestedField
from icefloe.spec.layout import FileLayout
from icefloe.spec.names import ROW_ID_COLUMN, ROW_ID_FIELD_ID
from icefloe.spec.type_tree import Leaf
from icefloe.spec.types import is_integer

COMPRESSION = "zstd"
# Longer string bounds are not kept: a truncated min is still a lower bound, a truncated max is not.
MAX_STAT_CHARS = 256


@dataclass(frozen=True, slots=True)
class EncodedFile:
    """A Parquet file in memory, with what its footer says."""

    data: bytes
    row_count: int
    row_group_count: int
    column_stats: dict[str, ColumnStats]


def new_data_key(*, table: str, partition_path: str) -> str:
    """A fresh object key: ``<table>/data/<partition>/<time-ordered unique id>.parquet``."""
    unique = f"{int(time.time() * 1000):012x}{os.urandom(10).hex()}"
    middle = f"{partition_path}/" if partition_path else ""
    return f"{table}/data/{middle}{unique}.parquet"


def with_json_columns(table: pa.Table, json_columns: Sequence[str]) -> pa.Table:
    """Give JSON columns Arrow's JSON type, so the Parquet file marks them as JSON and DuckDB
    reads them back as JSON (Spark and other readers see strings)."""
    json_type = pa.json_(pa.string())
    for name in json_columns:
        position = table.schema.get_field_index(name)
        if position < 0 or table.schema.field(position).type == json_type:
            continue
        storage = table.column(position).cast(pa.string())
        chunks = [pa.ExtensionArray.from_storage(json_type, c) for c in storage.chunks]
        table = table.set_column(position, name, pa.chunked_array(chunks, type=json_type))
    return table


FIELD_ID = b"PARQUET:field_id"


@functools.lru_cache(maxsize=256)
def file_schema(schema: pa.Schema, layout: FileLayout) -> pa.Schema:
    """``schema`` (a table of ``layout``'s columns, and the row id) as files hold it: every
    field carries its Parquet field id, a column's and each nested field's (the repeated groups
    of lists and maps carry none, as Iceberg expects), and JSON text inside a nested column is
    marked JSON as a top-level JSON column is. InvalidArgumentError when ``schema`` is not
    of that layout's shape (a writer's bug, caught before any byte is written)."""
    columns = {c.name: c for c in layout.columns}
    fields = []
    for f in schema:
        if f.name == ROW_ID_COLUMN:
            fields.append(_with_field_id(f, ROW_ID_FIELD_ID))
            continue
        column = columns.get(f.name)
        if column is None:
            raise InvalidArgumentError(
                f"column {f.name!r} is not one of spec version {layout.version}'s columns"
            )
        try:
            fields.append(_with_field_id(f.with_type(_typed(f.type, column.fields)), column.id))
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"column {f.name!r} ({f.type}) is not spec version {layout.version}'s"
                f" {column.type}: {e}"
            ) from e
    return pa.schema(fields, metadata=schema.metadata)


def _with_field_id(f: pa.Field, field_id: int) -> pa.Field:
    return f.with_metadata({**(f.metadata or {}), FIELD_ID: str(field_id).encode()})


def _typed(arrow: pa.DataType, fields: tuple[NestedField, ...]) -> pa.DataType:
    """``arrow`` with the ids of ``fields`` (the fields inside a column or nested field)."""
    if not fields:
        return arrow
    if pa.types.is_struct(arrow):
        names = [arrow.field(i).name for i in range(arrow.num_fields)]
        if names != [f.name for f in fields]:
            raise InvalidArgumentError(
                f"struct fields {names}, expected {[f.name for f in fields]}"
            )
        return pa.struct([_nested(arrow.field(i), f) for i, f in enumerate(fields)])
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        (element,) = fields
        make = pa.list_ if pa.types.is_list(arrow) else pa.large_list
        return make(_nested(arrow.value_field, element))
    if pa.types.is_map(arrow):
        key, value = fields
        return pa.map_(
            _nested(arrow.key_field, key),
            _nested(arrow.item_field, value),
            keys_sorted=arrow.keys_sorted,
        )
    raise InvalidArgumentError(f"{arrow} holds no fields {[f.name for f in fields]}")


def _nested(arrow: pa.Field, field: NestedField) -> pa.Field:
    typed = _typed(arrow.type, field.fields)
    if field.type == Leaf("JSON") and (
        pa.types.is_string(typed) or pa.types.is_large_string(typed)
    ):
        typed = pa.json_(typed)
    return _with_field_id(arrow.with_type(typed), field.id)


def key_values(data: pa.Table | pa.RecordBatch, key: str) -> pa.ChunkedArray | pa.Array:
    """The values of a sort or row-group key in ``data``: a column's, or a struct leaf's
    (``context.page.url``: NULL where the leaf or a struct above it is NULL)."""
    column, *path = key.split(".")
    values = data.column(data.schema.get_field_index(column))
    return pc.struct_field(values, path) if path else values


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s types (nested JSON text marked JSON); as is when they are
    already the same."""
    return table if table.schema.equals(schema) else table.cast(schema)


def parquet_writer(
    sink: pa.NativeFile | str,
    schema: pa.Schema,
    *,
    footer: list[pq.FileMetaData] | None = None,
    sample: pa.Table | None = None,
) -> pq.ParquetWriter:
    """A Parquet writer with the settings every icefloe file uses. ``footer``, if given,
    receives the file's metadata when the writer closes (no need to read it back). ``sample``
    (the first rows to be written) decides which string columns get no dictionary
    (:func:`mostly_distinct_columns`)."""
    dictionary = _dictionary_columns(schema)
    if sample is not None:
        plain = mostly_distinct_columns(sample)
        dictionary = tuple(c for c in dictionary if c not in plain)
    return pq.ParquetWriter(
        sink,
        schema,
        compression=COMPRESSION,
        write_statistics=list(_statistics_columns(schema)),
        version="2.6",
        use_dictionary=list(dictionary),
        metadata_collector=footer,
    )


# A top-level string column whose first rows are nearly all distinct values (message ids,
# anonymous ids) is written plain: its dictionary would fill to the writer's 1 MiB limit and then
# fall back to plain values anyway, after costing the time to build it. A sample of n values is
# 95% distinct only when the column has about 10n distinct values or more (a uniform draw from C
# values repeats one in about n/2C draws), so a column of 20,000 users in 4,096 rows keeps its
# dictionary. On the peer benchmark's events this makes files about 7% smaller and encoding 10 to
# 15% faster.
DISTINCT_SAMPLE_ROWS = 4096
MOSTLY_DISTINCT = 0.95
_MIN_SAMPLE_VALUES = 256


def mostly_distinct_columns(table: pa.Table) -> frozenset[str]:
    """The top-level string columns more than :data:`MOSTLY_DISTINCT` of whose first
    :data:`DISTINCT_SAMPLE_ROWS` values (nulls aside, at least 256 of them) are distinct."""
    sample = table.slice(0, DISTINCT_SAMPLE_ROWS)
    plain = []
    for field in sample.schema:
        storage = (
            field.type.storage_type if isinstance(field.type, pa.BaseExtensionType) else field.type
        )
        if not (pa.types.is_string(storage) or pa.types.is_large_string(storage)):
            continue
        column = sample.column(field.name)
        if storage is not field.type:
            column = pa.chunked_array([c.storage for c in column.chunks], storage)
        values = len(column) - column.null_count
        if values < _MIN_SAMPLE_VALUES:
            continue
        if pc.count_distinct(column).as_py() > MOSTLY_DISTINCT * values:
            plain.append(field.name)
    return frozenset(plain)


@functools.lru_cache(maxsize=256)
def _statistics_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The leaf columns that get min/max statistics: all but JSON text, at any depth. Nothing
    prunes by the bounds of JSON text (the meta store keeps none), and computing them took a
    tenth of the sample events' encoding."""
    return tuple(c.path for c in _leaf_columns(schema) if c.logical_type.type != "JSON")


@functools.lru_cache(maxsize=256)
def _dictionary_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The leaf columns (dotted paths, as the writer names them) to dictionary-encode: all but
    times and plain fixed-size binaries (the row id), at any depth. Values of those are nearly
    all distinct, so a dictionary only costs: the writer fills one (up to its 1 MiB limit)
    before it falls back to plain values. Leaving them out makes the sample events' files about
    12% smaller and their encoding about a quarter faster."""
    return tuple(
        c.path
        for c in _leaf_columns(schema)
        if c.logical_type.type not in ("TIMESTAMP", "TIME")
        and not (c.physical_type == "FIXED_LEN_BYTE_ARRAY" and c.logical_type.type == "NONE")
    )


def _leaf_columns(schema: pa.Schema) -> list[pq.ColumnSchema]:
    """Each leaf column as Parquet describes it (a list's values are ``name.list.element``),
    read from the footer of an empty file of ``schema``."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema, version="2.6").close()  # a file of no rows: the footer
    written = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return [written.column(i) for i in range(len(written))]


def encode_parquet(
    table: pa.Table,
    *,
    spec: TableSpec,
    row_group_sizes: int | Sequence[int],
    membership_column: str | None = None,
) -> EncodedFile:
    """Encode ``table``, rows of ``spec``'s columns, as Parquet with the field ids of its
    version, and read the statistics of its columns and :attr:`TableSpec.stats_leaves` from
    the footer. ``row_group_sizes`` is a cap, or the exact size of each row group in order
    (how the merge worker aligns row groups to key values). ``membership_column`` also gets a
    membership filter of its distinct values."""
    schema = file_schema(table.schema, spec.layout)
    table = conform(table, schema)
    membership = _filter_beside(table, membership_column)
    sink = pa.BufferOutputStream()
    footer: list[pq.FileMetaData] = []
    with parquet_writer(sink, schema, footer=footer, sample=table) as writer:
        if isinstance(row_group_sizes, int):
            writer.write_table(table, row_group_size=max(1, row_group_sizes))
        else:
            offset = 0
            for size in row_group_sizes:
                writer.write_table(table.slice(offset, size), row_group_size=size)
                offset += size
            if offset != table.num_rows:
                raise InvalidArgumentError(
                    f"row group sizes add up to {offset}, not {table.num_rows} rows"
                )
    data = sink.getvalue().to_pybytes()
    (metadata,) = footer
    stats = footer_stats(metadata, leaves=spec.stats_leaves)
    if membership_column is not None and membership_column in stats:
        encoded = membership.result() if isinstance(membership, Future) else membership
        if encoded is not None:
            stats[membership_column] = replace(stats[membership_column], membership=encoded)
    return EncodedFile(
        data=data,
        row_count=metadata.num_rows,
        row_group_count=metadata.num_row_groups,
        column_stats=stats,
    )


# Membership filters are built here while the writer encodes (it releases the GIL; the filter's
# hashing is Python): a fifth of a small insert's encode, otherwise spent after it. The pool is
# made on the first insert, not at import.
@functools.cache
def _filter_threads() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="icefloe-membership")


def _filter_beside(table: pa.Table, column: str | None) -> Future[str | None] | str | None:
    """The membership filter of ``column``, being built in another thread (or built here when
    no thread can start)."""
    if column is None or table.schema.get_field_index(column.split(".")[0]) < 0:
        return None
    values = key_values(table, column)
    try:
        return _filter_threads().submit(membership_filter, values)
    except RuntimeError:  # the interpreter is shutting down: no new threads
        return membership_filter(values)


def membership_filter(values: pa.ChunkedArray | pa.Array) -> str | None:
    """The membership filter of these values' distinct keys, or None when they are too many."""
    distinct = pc.unique(values)
    if len(distinct) > MAX_KEYS + 1:
        return None
    return build_filter(distinct.to_pylist())


def membership_column(spec: TableSpec) -> str | None:
    """The column (or struct leaf) whose files carry membership filters: the row-group key,
    when it is a VARCHAR or an integer (the values a filter can hash exactly as queries
    compare them)."""
    key = spec.row_group_by
    if key is None:
        return None
    column_type = spec.key_type(key)
    return key if column_type == "VARCHAR" or is_integer(column_type) else None


def footer_stats(
    metadata: pq.FileMetaData, *, leaves: Collection[str] = ()
) -> dict[str, ColumnStats]:
    """Min and max over all row groups, and the total null count, of each top-level primitive
    column, and of each nested leaf in ``leaves`` (dotted paths through structs only, whose
    null count counts rows: the leaf's or a parent struct's NULL), keyed by name or path."""
    stats: dict[str, ColumnStats] = {}
    schema = metadata.schema
    for position in range(len(schema)):
        column = schema.column(position)
        if column.logical_type.type == "JSON":
            continue  # JSON text carries no useful bounds
        if "." in column.path and (column.path not in leaves or column.max_repetition_level):
            continue  # an untracked nested leaf, or one with a value per element, not per row
        lows: list[object] = []
        highs: list[object] = []
        nulls = 0
        complete = True
        bounded = True
        per_second = _time_units_per_second(column)
        for group in range(metadata.num_row_groups):
            s = metadata.row_group(group).column(position).statistics
            if s is None:
                complete = False
                break
            nulls += s.null_count or 0
            if s.has_min_max and per_second is not None:
                # TIME from its stored integers: pyarrow's datetime.time cannot hold 24:00:00
                # (it gives 00:00:00, which would prove a file holding 24:00:00 held no late
                # time), nor a value outside the day (then the file's range is unknown).
                least, most = _time_text(s.min_raw, per_second), _time_text(s.max_raw, per_second)
                if least is None or most is None:
                    bounded = False
                else:
                    lows.append(least)
                    highs.append(most)
            elif s.has_min_max:
                lows.append(s.min)
                highs.append(s.max)
            elif not s.has_null_count or s.null_count < s.num_values:
                # Values without bounds (the writer drops statistics of very long values):
                # the file's range is unknown, not the range of the other row groups.
                bounded = False
        if not complete:
            continue
        known = bounded and lows
        low = _json_safe(min(lows), bound="min") if known else None  # type: ignore[type-var]
        high = _json_safe(max(highs), bound="max") if known else None  # type: ignore[type-var]
        stats[column.path] = ColumnStats(min=low, max=high, null_count=nulls)
    return stats


_TIME_UNITS_PER_SECOND = {"milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 10**9}


def _time_units_per_second(column: pq.ColumnSchema) -> int | None:
    """How many of a TIME column's stored units make a second; None for another column."""
    if column.logical_type.type != "TIME":
        return None
    unit = json.loads(column.logical_type.to_json()).get("timeUnit")
    return _TIME_UNITS_PER_SECOND.get(unit, 0) or None


def _time_text(raw: object, per_second: int) -> str | None:
    """A TIME statistic's stored integer as the text the meta store compares (``12:00:00``,
    ``12:00:00.500000``, ``24:00:00``; fixed-width fields, so text order is time order), in
    whole microseconds as DuckDB reads the column (a nanosecond unit's fraction is dropped,
    as DuckDB drops it); None outside ``00:00:00`` to ``24:00:00`` or not an integer."""
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= 86_400 * per_second:
        return None
    micros = raw * 1_000_000 // per_second
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def _json_safe(value: object, *, bound: str) -> JsonScalar:
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        text = value.hex()
        return text if len(text) <= MAX_STAT_CHARS or bound == "min" else None
    if isinstance(value, str):
        if "\x00" in value:
            # The meta store cannot hold NUL: a prefix still bounds from below, not above.
            return value[: value.index("\x00")][:MAX_STAT_CHARS] if bound == "min" else None
        if len(value) <= MAX_STAT_CHARS:
            return value
        return value[:MAX_STAT_CHARS] if bound == "min" else None
    return None


def new_file_record(
    *,
    key: str,
    encoded: EncodedFile,
    partition_path: str,
    partition_values: dict[str, JsonScalar],
    partition_start: datetime | None,
    spec_version: int,
) -> NewFile:
    return NewFile(
        path=key,
        partition_path=partition_path,
        partition_values=partition_values,
        partition_start=partition_start,
        size_bytes=len(encoded.data),
        row_count=encoded.row_count,
        row_group_count=encoded.row_group_count,
        column_stats=encoded.column_stats,
        spec_version=spec_version,
    )
