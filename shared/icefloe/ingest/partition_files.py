"""A converted batch stored as files: row ids given, rows split by partition, each partition
sorted by the file sort keys and encoded as one Parquet file, and uploaded."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import cache
from typing import Any

import duckdb
import pyarrow as pa

from icefloe.datafiles import (
    encode_parquet,
    membership_column,
    new_data_key,
    new_file_record,
    with_json_columns,
)
from icefloe.ingest.layout import Partition, sorted_rows, split_partitions
from icefloe.ingest.row_ids import ROW_ID_COLUMN, new_row_ids
from icefloe.metastore.models import JsonScalar, NewFile
from icefloe.spec import TableSpec
from icefloe.storage import ObjectStore

MAX_CONCURRENT_UPLOADS = 8
MAX_CONCURRENT_ENCODES = 2


def write_partition_files(
    objects: ObjectStore,
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    rows: pa.Table,
    *,
    written: list[str],
    json_check: Future[bool] | None,
) -> list[NewFile]:
    """Give ``rows`` (a converted batch) their row ids, split them by partition and store one
    file per partition (see :func:`_write_partitions`)."""
    rows, parts = _with_row_ids_and_partitions(con, spec, rows, objects.max_key_bytes)
    return _write_partitions(objects, spec, rows, parts, written, json_check)


def _write_partitions(
    objects: ObjectStore,
    spec: TableSpec,
    rows: pa.Table,
    parts: list[Partition],
    written: list[str],
    json_check: Future[bool] | None,
) -> list[NewFile]:
    """Sort and encode one file per partition, at most two at a time (pyarrow sorts and
    encodes without the GIL; more at once would hold every partition's sorted copy and
    buffers together), and upload each as soon as it is encoded, up to eight at a time (S3
    puts are latency bound). A file's bytes are dropped once uploaded. ``written``
    receives every key that reached the store, even if another partition failed. With a
    ``json_check`` still running, every upload waits for it, and none happens (each raises
    ``_JsonTextUnproven``) if the batch's JSON text did not pass."""
    json_columns = [c.name for c in spec.columns if c.type == "JSON"]
    membership = membership_column(spec)

    def put(key: str, data: bytes) -> None:
        if json_check is not None and not json_check.result():
            raise _JsonTextUnproven
        objects.put(key, data)
        written.append(key)

    def encode(part: Partition, uploads: ThreadPoolExecutor | None) -> NewFile:
        if json_check is not None and json_check.done() and not json_check.result():
            raise _JsonTextUnproven  # no use sorting and encoding the rest
        encoded = encode_parquet(
            with_json_columns(sorted_rows(spec, rows, part), json_columns),
            spec=spec,
            row_group_sizes=spec.sizes.row_group_max_rows,
            membership_column=membership,
        )
        key = new_data_key(table=spec.name, partition_path=part.path)
        if uploads is None:
            put(key, encoded.data)
        else:
            pending.append(uploads.submit(put, key, encoded.data))
        values: dict[str, JsonScalar] = {
            f.name: (None if v is None else f.to_path_value(v))
            for f, v in zip(spec.partition_by, part.values, strict=True)
        }
        return new_file_record(
            key=key,
            encoded=encoded,
            partition_path=part.path,
            partition_values=values,
            partition_start=part.start,
            spec_version=spec.version,
        )

    if len(parts) == 1:
        return [encode(parts[0], None)]
    pending: list[Future[None]] = []
    with (
        ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_UPLOADS, len(parts))) as uploads,
        ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_ENCODES, len(parts))) as encodes,
    ):
        files = [encodes.submit(encode, part, uploads) for part in parts]
        wait(files)  # every upload is submitted before the upload pool closes
    everything: list[Future[Any]] = [*files, *pending]
    for future in everything:
        error = future.exception()
        if error is not None:
            raise error
    return [f.result() for f in files]


class _JsonTextUnproven(Exception):
    """The JSON text of a batch written while it was checked did not pass the check (the
    inserter catches it and converts the batch again: it never reaches a caller)."""


# From this many rows a batch's row ids are made beside its partition split (the split's Arrow
# kernels release the GIL): about 9 ms of a million-row insert. Below, a thread costs more.
_ROW_IDS_BESIDE_FROM_ROWS = 1 << 18


@cache
def _row_id_thread() -> ThreadPoolExecutor:
    """The thread that makes row ids beside the split, made on first use (not at import)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="icefloe-row-ids")


def _with_row_ids_and_partitions(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, rows: pa.Table, max_key_bytes: int
) -> tuple[pa.Table, list[Partition]]:
    """The rows with their new ``_row_id`` column, and their partitions."""
    pending = None
    if rows.num_rows >= _ROW_IDS_BESIDE_FROM_ROWS:
        try:
            pending = _row_id_thread().submit(new_row_ids, rows.num_rows)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            pending = None
    parts = split_partitions(con, spec, rows, max_key_bytes=max_key_bytes)
    ids = new_row_ids(rows.num_rows) if pending is None else pending.result()
    return rows.append_column(ROW_ID_COLUMN, ids), parts
