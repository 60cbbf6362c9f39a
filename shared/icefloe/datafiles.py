"""Data files: naming, encoding a sorted Arrow table as Parquet, and stats from the footer.

Shared by insert, the merge worker and the Spark job, so every writer produces the same kind of
file: zstd, statistics on, per-column min/max/null counts read back from the written footer.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Sequence
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


def parquet_writer(
    sink: pa.NativeFile | str,
    schema: pa.Schema,
    *,
    footer: list[pq.FileMetaData] | None = None,
) -> pq.ParquetWriter:
    """A Parquet writer with the settings every icefloe file uses. ``footer``, if given,
    receives the file's metadata when the writer closes (no need to read it back)."""
    return pq.ParquetWriter(
        sink,
        schema,
        compression=COMPRESSION,
        write_statistics=list(_statistics_columns(schema)),
        version="2.6",
        use_dictionary=list(_dictionary_columns(schema)),
        metadata_collector=footer,
    )


@functools.lru_cache(maxsize=256)
def _statistics_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The leaf columns that get min/max statistics: all but JSON text. Nothing prunes by the
    bounds of JSON text (the meta store keeps none), and computing them took a tenth of the
    sample events' encoding."""
    json_text = {f.name for f in schema if isinstance(f.type, pa.JsonType)}
    return tuple(path for path in _leaf_paths(schema) if path.split(".")[0] not in json_text)


@functools.lru_cache(maxsize=256)
def _dictionary_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The leaf columns (dotted paths, as the writer names them) to dictionary-encode: all but
    times and fixed-size binaries (the row id). Values of those are nearly all distinct, so
    a dictionary only costs: the writer fills one (up to its 1 MiB limit) before it falls back
    to plain values. Leaving them out makes the sample events' files about 12% smaller and
    their encoding about a quarter faster."""
    plain = {
        f.name
        for f in schema
        if pa.types.is_timestamp(f.type)
        or pa.types.is_time(f.type)
        or pa.types.is_fixed_size_binary(f.type)
    }
    return tuple(path for path in _leaf_paths(schema) if path.split(".")[0] not in plain)


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Each leaf column's path as Parquet names it (a list's values are ``name.list.element``),
    read from the footer of an empty file of ``schema``."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, version="2.6")
    written = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return [written.column(i).path for i in range(len(written))]


def encode_parquet(
    table: pa.Table,
    *,
    row_group_sizes: int | Sequence[int],
    membership_column: str | None = None,
) -> EncodedFile:
    """Encode ``table`` as Parquet. ``row_group_sizes`` is a cap, or the exact size of each
    row group in order (how the merge worker aligns row groups to key values).
    ``membership_column`` also gets a membership filter of its distinct values."""
    membership = _filter_beside(table, membership_column)
    sink = pa.BufferOutputStream()
    footer: list[pq.FileMetaData] = []
    with parquet_writer(sink, table.schema, footer=footer) as writer:
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
    stats = footer_stats(metadata)
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
    if column is None or table.schema.get_field_index(column) < 0:
        return None
    try:
        return _filter_threads().submit(membership_filter, table.column(column))
    except RuntimeError:  # the interpreter is shutting down: no new threads
        return membership_filter(table.column(column))


def membership_filter(values: pa.ChunkedArray | pa.Array) -> str | None:
    """The membership filter of these values' distinct keys, or None when they are too many."""
    distinct = pc.unique(values)
    if len(distinct) > MAX_KEYS + 1:
        return None
    return build_filter(distinct.to_pylist())


def membership_column(spec: TableSpec) -> str | None:
    """The column whose files carry membership filters: the row-group key, when it is a
    VARCHAR or an integer (the values a filter can hash exactly as queries compare them)."""
    key = spec.row_group_by
    if key is None:
        return None
    column_type = spec.column(key).type
    return key if column_type == "VARCHAR" or is_integer(column_type) else None


def footer_stats(metadata: pq.FileMetaData) -> dict[str, ColumnStats]:
    """Per top-level primitive column: min and max over all row groups, total null count."""
    stats: dict[str, ColumnStats] = {}
    schema = metadata.schema
    for position in range(len(schema)):
        column = schema.column(position)
        if "." in column.path or column.logical_type.type == "JSON":
            continue  # nested leaves and JSON text carry no useful bounds
        lows: list[object] = []
        highs: list[object] = []
        nulls = 0
        complete = True
        bounded = True
        for group in range(metadata.num_row_groups):
            s = metadata.row_group(group).column(position).statistics
            if s is None:
                complete = False
                break
            nulls += s.null_count or 0
            if s.has_min_max:
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
        stats[column.name] = ColumnStats(min=low, max=high, null_count=nulls)
    return stats


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
