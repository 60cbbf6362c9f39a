"""Heavy compaction in Spark: whole partitions, merged, sorted and written value-aligned.

The driver checks the manifest's claims against the meta store, reads every input file into
one DataFrame tagged with its partition, applies the table's merge mode (append, replace and
aggregate compiled to Spark; a custom DuckDB query, a column type Spark cannot read or hold and
a MAP key are refused here, before anything is read: such tables run with the DuckDB engine,
see :func:`icefloe.compaction.spark_modes.check_spark_can_merge`), range-partitions by (partition, row-group key) so each key value stays in one task,
sorts within tasks and hands the sorted rows to ``mapInArrow``. Each task cuts value-aligned
row groups and writes files through pyarrow (Spark's writer cannot cut row groups at key
boundaries), uploads them and returns one small row per file. The driver then commits each
partition on its own, through the same protocol as a merge worker
(:mod:`icefloe.merge.claimed_replace`, which also checks each partition's claim before the
job reads anything): partial progress survives, and a conflict on one partition deletes that
partition's outputs only.
"""

from __future__ import annotations

import json
import math
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from icefloe import duck
from icefloe.compaction.manifest import CompactionManifest, PartitionGroup
from icefloe.compaction.spark_modes import apply_mode, check_spark_can_merge
from icefloe.compaction.tracking import outputs_prefix
from icefloe.config import WarehouseLocation
from icefloe.datafiles import membership_column
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.merge.claimed_replace import (
    ClaimedGroup,
    ReplaceOutcome,
    ReplaceStatus,
    check_claim,
    commit_replacement,
)
from icefloe.merge.rowgroups import RowGroupCutter
from icefloe.merge.writer import RollingParquetWriter, duckdb_rows_schema, upload_staged
from icefloe.metastore.models import ColumnStats, DataFile, JsonScalar, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.spec.layout import FileLayout
from icefloe.storage import ObjectStore, open_object_store
from icefloe.tracing import span

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTITION_COLUMN = "__icefloe_partition"
FILE_COLUMN = "__icefloe_file"
_OUTPUT_SCHEMA = (
    "partition string, path string, size_bytes long, row_count long, row_group_count int,"
    " column_stats string"
)

PartitionStatus = ReplaceStatus


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    partition_path: str
    status: PartitionStatus
    snapshot_id: int | None = None
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    job_id: str
    table: str
    partitions: tuple[PartitionOutcome, ...]

    def count(self, status: PartitionStatus) -> int:
        return sum(1 for p in self.partitions if p.status == status)


@dataclass(frozen=True, slots=True)
class _WriteContext:
    """Everything a Spark task needs to write files: picklable, no connections."""

    table: str
    job_id: str
    location: WarehouseLocation
    endpoint_url: str | None
    region: str
    row_group_key: str | None
    target_rows: int
    max_rows: int
    target_file_bytes: int
    json_columns: tuple[str, ...]
    membership_column: str | None
    columns: tuple[str, ...]
    arrow_schema: pa.Schema
    layout: FileLayout
    stats_leaves: tuple[str, ...]
    partitions: Mapping[str, tuple[Mapping[str, JsonScalar], datetime | None]]
    scratch: str | None
    spec_version: int


def compact_with_spark(
    spark: SparkSession,
    *,
    meta: MetaStore,
    objects: ObjectStore,
    location: WarehouseLocation,
    manifest: CompactionManifest,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    scratch: str | None = None,
) -> CompactionResult:
    """Run one compaction job (see the module docstring), in an ``icefloe.compaction`` span."""
    with span("icefloe.compaction"):
        return _compact(
            spark,
            meta=meta,
            objects=objects,
            location=location,
            manifest=manifest,
            endpoint_url=endpoint_url,
            region=region,
            scratch=scratch,
        )


def _compact(
    spark: SparkSession,
    *,
    meta: MetaStore,
    objects: ObjectStore,
    location: WarehouseLocation,
    manifest: CompactionManifest,
    endpoint_url: str | None,
    region: str,
    scratch: str | None,
) -> CompactionResult:
    spec = meta.get_table(manifest.table).spec
    check_spark_can_merge(spec)
    outcomes: list[PartitionOutcome] = []
    runnable: list[tuple[ClaimedGroup, list[DataFile]]] = []
    for group in map(partial(_claimed, manifest.table), manifest.groups):
        inputs = check_claim(meta, group)
        if isinstance(inputs, ReplaceOutcome):
            outcomes.append(_partition_outcome(group, inputs))
        else:
            runnable.append((group, inputs))
    if runnable:
        # The inputs' own specs too: a column dropped since is still in their files.
        versions = {f.spec_version for _, inputs in runnable for f in inputs} - {spec.version}
        written_by = [meta.table_spec(spec.name, version=v) for v in sorted(versions)]
        check_spark_can_merge(spec, written_by=written_by)
        written = _write(
            spark,
            spec,
            objects,
            location,
            runnable,
            endpoint_url,
            region,
            scratch,
            job_id=manifest.job_id,
        )
        for group, inputs in runnable:
            outcomes.append(_commit(meta, objects, group, inputs, written))
    order = {g.partition_path: n for n, g in enumerate(manifest.groups)}
    outcomes.sort(key=lambda o: order[o.partition_path])
    return CompactionResult(manifest.job_id, manifest.table, tuple(outcomes))


def _write(
    spark: SparkSession,
    spec: TableSpec,
    objects: ObjectStore,
    location: WarehouseLocation,
    runnable: Sequence[tuple[ClaimedGroup, list[DataFile]]],
    endpoint_url: str | None,
    region: str,
    scratch: str | None,
    *,
    job_id: str,
) -> dict[str, list[NewFile]]:
    from pyspark.sql import functions as F

    files = [f for _, inputs in runnable for f in inputs]
    names = spark.createDataFrame(
        [(f.path.rsplit("/", 1)[-1], f.partition_path) for f in files],
        f"{FILE_COLUMN} string, {PARTITION_COLUMN} string",
    )
    from icefloe.spark_files import read_files

    # Each input read by its own spec version's layout, cast to the current types.
    rows = (
        read_files(
            spark,
            spec,
            [(objects.uri(f.path), f.spec_version) for f in files],
            file_column=FILE_COLUMN,
        )
        .withColumn(FILE_COLUMN, F.regexp_extract(F.col(FILE_COLUMN), r"[^/]+$", 0))
        .join(F.broadcast(names), FILE_COLUMN)
        .drop(FILE_COLUMN)
    )
    merged = apply_mode(spec, rows, partition_column=PARTITION_COLUMN)
    total_bytes = sum(f.size_bytes for f in files)
    total_rows = max(1, sum(f.row_count for f in files))
    tasks = sum(
        max(1, math.ceil(sum(f.size_bytes for f in inputs) / spec.sizes.target_file_bytes))
        for _, inputs in runnable
    )
    range_keys = [PARTITION_COLUMN, *([spec.row_group_by] if spec.row_group_by else [])]
    ordered = merged.repartitionByRange(tasks, *range_keys).sortWithinPartitions(
        PARTITION_COLUMN, *spec.file_sort_keys, ROW_ID_COLUMN
    )
    bytes_per_row = max(1.0, total_bytes / total_rows)
    context = _WriteContext(
        table=spec.name,
        job_id=job_id,
        location=location,
        endpoint_url=endpoint_url,
        region=region,
        row_group_key=spec.row_group_by,
        target_rows=max(
            1,
            min(
                spec.sizes.row_group_max_rows,
                int(spec.sizes.row_group_target_bytes / bytes_per_row),
            ),
        ),
        max_rows=spec.sizes.row_group_max_rows,
        target_file_bytes=spec.sizes.target_file_bytes,
        json_columns=tuple(c.name for c in spec.columns if c.type == "JSON"),
        membership_column=membership_column(spec),
        columns=(*spec.column_names, ROW_ID_COLUMN),
        arrow_schema=_arrow_schema(spec),
        layout=spec.layout,
        stats_leaves=spec.stats_leaves,
        partitions={
            inputs[0].partition_path: (dict(inputs[0].partition_values), inputs[0].partition_start)
            for _, inputs in runnable
        },
        scratch=scratch,
        spec_version=spec.version,
    )
    written: dict[str, list[NewFile]] = {}
    for row in ordered.mapInArrow(_task_writer(context), _OUTPUT_SCHEMA).collect():
        values, start = context.partitions[row["partition"]]
        stats = {k: ColumnStats.from_json(v) for k, v in json.loads(row["column_stats"]).items()}
        written.setdefault(row["partition"], []).append(
            NewFile(
                path=row["path"],
                partition_path=row["partition"],
                partition_values=values,
                partition_start=start,
                size_bytes=row["size_bytes"],
                row_count=row["row_count"],
                row_group_count=row["row_group_count"],
                column_stats=stats,
                spec_version=spec.version,
            )
        )
    return written


def _arrow_schema(spec: TableSpec) -> pa.Schema:
    """The Arrow types DuckDB gives the table's columns: what every icefloe file holds."""
    con = duck.connect()
    try:
        return duckdb_rows_schema(con, spec)
    finally:
        con.close()


def _task_writer(context: _WriteContext) -> Any:
    """The ``mapInArrow`` function: sorted batches in, one metadata row per written file out."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        objects = open_object_store(
            context.location, endpoint_url=context.endpoint_url, region=context.region
        )
        writer = _PartitionFiles(context, objects)
        for batch in batches:
            for partition, rows in _split_by_partition(batch):
                yield from writer.switch_to(partition)
                writer.push(_conform(rows, context))
        yield from writer.switch_to(None)

    return write


class _PartitionFiles:
    """Cuts and writes the rows of one partition at a time, in one Spark task."""

    def __init__(self, context: _WriteContext, objects: ObjectStore) -> None:
        self._context = context
        self._objects = objects
        self._partition: str | None = None
        self._cutter: RowGroupCutter | None = None
        self._writer: RollingParquetWriter | None = None
        self._scratch = tempfile.TemporaryDirectory(prefix="icefloe-compact-", dir=context.scratch)

    def switch_to(self, partition: str | None) -> Iterator[pa.RecordBatch]:
        if partition == self._partition:
            return
        if self._partition is not None:
            yield self._finish()
        self._partition = partition
        if partition is not None:
            self._cutter = RowGroupCutter(
                key=self._context.row_group_key,
                target_rows=self._context.target_rows,
                max_rows=self._context.max_rows,
            )
            self._writer = RollingParquetWriter(
                directory=Path(self._scratch.name),
                target_file_bytes=self._context.target_file_bytes,
                layout=self._context.layout,
                json_columns=self._context.json_columns,
                membership_column=self._context.membership_column,
            )
        else:
            self._scratch.cleanup()

    def push(self, rows: pa.RecordBatch) -> None:
        assert self._cutter is not None and self._writer is not None
        for group in self._cutter.push(rows):
            self._writer.write_group(group)

    def _finish(self) -> pa.RecordBatch:
        assert self._cutter is not None and self._writer is not None
        assert self._partition is not None
        for group in self._cutter.finish():
            self._writer.write_group(group)
        staged = self._writer.close()
        values, start = self._context.partitions[self._partition]
        written: list[str] = []
        files = upload_staged(
            self._objects,
            staged,
            table=self._context.table,
            partition_path=self._partition,
            partition_values=values,
            partition_start=start,
            written=written,
            spec_version=self._context.spec_version,
            stats_leaves=self._context.stats_leaves,
            membership_column=self._context.membership_column,
        )
        if written:
            # What this task uploaded, so that a failed job's outputs can be found and deleted.
            listing = f"{outputs_prefix(self._context.table, self._context.job_id)}{uuid.uuid4().hex}.json"
            self._objects.put(listing, json.dumps(written).encode())
        for item in staged:
            item.path.unlink(missing_ok=True)
        return pa.RecordBatch.from_pydict(
            {
                "partition": [f.partition_path for f in files],
                "path": [f.path for f in files],
                "size_bytes": [f.size_bytes for f in files],
                "row_count": [f.row_count for f in files],
                "row_group_count": [f.row_group_count for f in files],
                "column_stats": [
                    json.dumps({k: v.to_json() for k, v in f.column_stats.items()}) for f in files
                ],
            },
            schema=pa.schema(
                [
                    ("partition", pa.string()),
                    ("path", pa.string()),
                    ("size_bytes", pa.int64()),
                    ("row_count", pa.int64()),
                    ("row_group_count", pa.int32()),
                    ("column_stats", pa.string()),
                ]
            ),
        )


def _split_by_partition(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Runs of equal partition in a batch sorted by partition."""
    column = batch.column(batch.schema.get_field_index(PARTITION_COLUMN))
    values = column.to_pylist()
    start = 0
    for n in range(1, len(values) + 1):
        if n == len(values) or values[n] != values[start]:
            yield str(values[start]), batch.slice(start, n - start)
            start = n


def _conform(rows: pa.RecordBatch, context: _WriteContext) -> pa.RecordBatch:
    """Spark's Arrow batch as the table's columns and types (time zones dropped: UTC)."""
    arrays = []
    for field in context.arrow_schema:
        column = rows.column(rows.schema.get_field_index(field.name))
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = pc.cast(column, pa.timestamp(column.type.unit))
        arrays.append(column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=context.arrow_schema)


def _claimed(table: str, group: PartitionGroup) -> ClaimedGroup:
    return ClaimedGroup(
        table=table,
        partition_path=group.partition_path,
        file_ids=group.file_ids,
        claim_token=group.claim_token,
        idempotency_key=group.idempotency_key,
    )


def _commit(
    meta: MetaStore,
    objects: ObjectStore,
    group: ClaimedGroup,
    inputs: Sequence[DataFile],
    written: Mapping[str, list[NewFile]],
) -> PartitionOutcome:
    new_files = written.get(group.partition_path, [])
    outcome = commit_replacement(meta, objects, group, add=new_files)
    if outcome.status != "committed":
        return _partition_outcome(group, outcome)
    return PartitionOutcome(
        partition_path=group.partition_path,
        status="committed",
        snapshot_id=outcome.snapshot_id,
        files_in=len(inputs),
        files_out=len(new_files),
        rows_in=sum(f.row_count for f in inputs),
        rows_out=outcome.rows_added,
    )


def _partition_outcome(group: ClaimedGroup, outcome: ReplaceOutcome) -> PartitionOutcome:
    """A partition that did not commit: skipped, beaten by an earlier run, or in conflict."""
    return PartitionOutcome(
        group.partition_path, outcome.status, snapshot_id=outcome.snapshot_id, reason=outcome.reason
    )
