"""Stream row groups into local Parquet files of about the target size.

Row groups arrive already cut (see :mod:`icefloe.merge.rowgroups`); a file is closed once its
bytes on disk reach the target, so memory holds one row group at a time, whatever the total.
Files use the same encoding as every other writer (:mod:`icefloe.datafiles`).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icefloe.datafiles import (
    conform,
    file_schema,
    footer_stats,
    key_values,
    membership_column,
    new_data_key,
    parquet_writer,
    with_json_columns,
)
from icefloe.duck import ident
from icefloe.ingest.row_ids import ROW_ID_COLUMN, ROW_ID_TYPE
from icefloe.membership import MAX_KEYS, build_filter
from icefloe.merge.rowgroups import RowGroupCutter
from icefloe.metastore.models import ColumnStats, JsonScalar, NewFile
from icefloe.spec import TableSpec
from icefloe.spec.layout import FileLayout
from icefloe.storage import ObjectStore


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A finished local Parquet file, not uploaded yet."""

    path: Path
    size_bytes: int
    row_count: int
    row_group_count: int
    membership: str | None = None  # the membership filter of the writer's membership column


class RollingParquetWriter:
    """Writes row groups to ``directory``, starting a new file past ``target_file_bytes``."""

    def __init__(
        self,
        *,
        directory: Path,
        target_file_bytes: int,
        layout: FileLayout,
        json_columns: Sequence[str],
        membership_column: str | None = None,
    ) -> None:
        """Row groups hold ``layout``'s columns (and the row id); files carry its field ids.
        ``membership_column``: each file gets a membership filter of that column's values."""
        self._layout = layout
        self._directory = directory
        self._membership_column = membership_column
        self._keys: set[object] | None = set()
        self._target = target_file_bytes
        self._json_columns = tuple(json_columns)
        self._writer: pq.ParquetWriter | None = None
        self._sink: pa.NativeFile | None = None
        self._path: Path | None = None
        self._rows = self._groups = 0
        self.files: list[StagedFile] = []

    def write_group(self, group: pa.Table) -> None:
        """Write ``group`` as exactly one row group."""
        if group.num_rows == 0:
            return
        group = self._normalize(group)
        schema = file_schema(group.schema, self._layout)
        group = conform(group, schema)
        if self._writer is None:
            self._path = self._directory / f"{uuid.uuid4().hex}.parquet"
            self._sink = pa.OSFile(str(self._path), "wb")
            self._writer = parquet_writer(self._sink, schema, sample=group)
        self._writer.write_table(group, row_group_size=group.num_rows)
        self._collect_keys(group)
        self._rows += group.num_rows
        self._groups += 1
        assert self._sink is not None
        if self._sink.tell() >= self._target:
            self._close_file()

    def close(self) -> list[StagedFile]:
        """Finish the open file; returns every file written."""
        if self._writer is not None:
            self._close_file()
        return self.files

    def _close_file(self) -> None:
        assert self._writer is not None and self._sink is not None and self._path is not None
        self._writer.close()
        self._sink.close()
        membership = (
            build_filter(self._keys)
            if self._membership_column is not None and self._keys is not None
            else None
        )
        self.files.append(
            StagedFile(
                path=self._path,
                size_bytes=self._path.stat().st_size,
                row_count=self._rows,
                row_group_count=self._groups,
                membership=membership,
            )
        )
        self._writer = self._sink = self._path = None
        self._rows = self._groups = 0
        self._keys = set()

    def _collect_keys(self, group: pa.Table) -> None:
        column = self._membership_column
        if (
            column is None
            or self._keys is None
            or group.schema.get_field_index(column.split(".")[0]) < 0
        ):
            return
        self._keys.update(pc.unique(key_values(group, column)).to_pylist())
        if len(self._keys) > MAX_KEYS:
            self._keys = None  # too many for a filter: this file has min/max only

    def _normalize(self, group: pa.Table) -> pa.Table:
        return written_types(group, self._json_columns)


def duckdb_rows_schema(con: duckdb.DuckDBPyConnection, spec: TableSpec) -> pa.Schema:
    """The Arrow types DuckDB gives the table's columns, cast to their types, and the row id
    as a BLOB: the rows every merge path hands the writer."""
    items = [f"CAST(NULL AS {c.type}) AS {ident(c.name)}" for c in spec.columns]
    items.append(f"CAST(NULL AS BLOB) AS {ident(ROW_ID_COLUMN)}")
    return con.execute(f"SELECT {', '.join(items)} WHERE false").to_arrow_table().schema


def written_types(rows: pa.Table, json_columns: Sequence[str]) -> pa.Table:
    """``rows`` of the types insert writes: JSON columns marked JSON, ``_row_id`` as 16 fixed
    bytes."""
    position = rows.schema.get_field_index(ROW_ID_COLUMN)
    if position >= 0 and rows.schema.field(position).type != ROW_ID_TYPE:
        rows = rows.set_column(position, ROW_ID_COLUMN, rows.column(position).cast(ROW_ID_TYPE))
    return with_json_columns(rows, json_columns)


def stage_rows(
    spec: TableSpec,
    batches: Iterable[pa.RecordBatch],
    scratch: Path,
    *,
    bytes_per_row: float,
) -> list[StagedFile]:
    """Sorted rows of one partition (the table's columns and row id, in file order) as local
    files of the table's sizes: row groups cut at key boundaries, each file about the target.
    ``bytes_per_row`` (of the inputs, encoded) sizes the row groups."""
    sizes = spec.sizes
    target_rows = max(
        1,
        min(sizes.row_group_max_rows, int(sizes.row_group_target_bytes / max(1.0, bytes_per_row))),
    )
    cutter = RowGroupCutter(
        key=spec.row_group_by, target_rows=target_rows, max_rows=sizes.row_group_max_rows
    )
    writer = RollingParquetWriter(
        directory=scratch,
        target_file_bytes=sizes.target_file_bytes,
        layout=spec.layout,
        json_columns=[c.name for c in spec.columns if c.type == "JSON"],
        membership_column=membership_column(spec),
    )
    for batch in batches:
        for group in cutter.push(batch):
            writer.write_group(group)
    for group in cutter.finish():
        writer.write_group(group)
    return writer.close()


def upload_staged(
    objects: ObjectStore,
    staged: Sequence[StagedFile],
    *,
    table: str,
    partition_path: str,
    partition_values: Mapping[str, JsonScalar],
    partition_start: datetime | None,
    written: list[str],
    spec_version: int,
    stats_leaves: Collection[str],
    membership_column: str | None = None,
) -> list[NewFile]:
    """Upload staged files under fresh keys and describe them from their footers.

    ``written`` receives each key as soon as it is stored, so a caller that fails later knows
    what to delete.
    """
    files = []
    for item in staged:
        key = new_data_key(table=table, partition_path=partition_path)
        objects.put_file(key, item.path)
        written.append(key)
        metadata = pq.read_metadata(item.path)
        files.append(
            NewFile(
                path=key,
                partition_path=partition_path,
                partition_values=dict(partition_values),
                partition_start=partition_start,
                size_bytes=item.size_bytes,
                row_count=metadata.num_rows,
                row_group_count=metadata.num_row_groups,
                column_stats=_with_filter(
                    footer_stats(metadata, leaves=stats_leaves), membership_column, item.membership
                ),
                spec_version=spec_version,
            )
        )
    return files


def _with_filter(
    stats: dict[str, ColumnStats], column: str | None, membership: str | None
) -> dict[str, ColumnStats]:
    if column is None or membership is None or column not in stats:
        return stats
    return {**stats, column: replace(stats[column], membership=membership)}
