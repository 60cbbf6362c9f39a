"""The merge worker: one claimed group of files becomes fewer, bigger, value-aligned files.

For a :class:`MergeTask`: skip it if its commit exists already (a redelivered message) or if
its claim was lost (the files were merged elsewhere, or another merge took them after the lease
ran out); renew the lease; read the inputs in DuckDB (which spills to its temp directory past
its memory limit), apply the table's merge mode, sort; stream value-aligned row groups into
files of about the target size; upload them; replace-commit under the claim token with the
task's idempotency key. The checks before the work and the commit after it are the protocol of
:mod:`icefloe.merge.claimed_replace`, which a Spark compaction follows too: a conflict deletes
this worker's outputs; an unknown commit outcome leaves them (the retry finds the commit, or
the janitor's orphan sweep removes them).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal
from uuid import UUID

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from icefloe import duck
from icefloe.datafiles import file_schema, membership_column
from icefloe.errors import IcefloeError
from icefloe.ingest.row_ids import ROW_ID_COLUMN, ROW_ID_TYPE
from icefloe.merge.claimed_replace import (
    ClaimedGroup,
    ReplaceOutcome,
    ReplaceStatus,
    check_claim,
    commit_replacement,
)
from icefloe.merge.in_memory import can_sort_in_memory, sorted_in_memory
from icefloe.merge.modes import merge_sql
from icefloe.merge.tasks import MergeTask
from icefloe.merge.writer import (
    StagedFile,
    duckdb_rows_schema,
    stage_rows,
    upload_staged,
    written_types,
)
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore
from icefloe.query.database import WorkDatabase
from icefloe.query.views import files_source, view_sql
from icefloe.settings.limits import DEFAULT_LEASE, MergeLimits, QueryLimits
from icefloe.spec import CustomMode, PartitionValue, TableSpec
from icefloe.storage import ObjectStore, discard_uncommitted
from icefloe.tracing import span

logger = logging.getLogger(__name__)

MergeStatus = ReplaceStatus
# What else a task on the merge queue may end as: a delete's part recorded (the job commits
# when its last part is done), or a delete job ended without committing.
DeletePartStatus = Literal["part_done", "failed"]
# Where a merge's rows were read and sorted: in Arrow (a small append group, see
# icefloe.merge.in_memory) or in DuckDB (which spills).
SortedIn = Literal["arrow", "duckdb"]
BATCH_ROWS = 65_536
_ROW_ID_BYTES = ROW_ID_TYPE.byte_width


class MergeFailedError(IcefloeError):
    """The merge could not run: its mode's SQL failed, or a custom query's output was refused
    (a row out of its partition, a NULL in a NOT NULL column, a NULL or malformed ``_row_id``)."""


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What became of one task. Only ``committed`` changed the table."""

    table: str
    partition_path: str
    status: MergeStatus | DeletePartStatus
    snapshot_id: int | None = None
    files_in: int = 0
    files_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    reason: str = ""
    sorted_in: SortedIn | None = None  # set when the merge ran


class MergeWorker:
    """Runs merge tasks against one meta store and object store."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        limits: MergeLimits | None = None,
        lease: timedelta = DEFAULT_LEASE,
        configure: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
        database: WorkDatabase | None = None,
    ) -> None:
        """Merges run in ``database`` (by default one of the worker's own, see
        :func:`merge_database`); merges running at once share its limits."""
        self._meta = meta
        self._objects = objects
        self.limits = limits or MergeLimits()
        self._lease = lease
        self._configure = configure
        self._database = database or merge_database(objects, self.limits, configure)
        self._rows_schemas: dict[tuple[tuple[str, str], ...], pa.Schema] = {}

    def close(self) -> None:
        """Close the worker's DuckDB (a later merge opens a new one)."""
        self._database.close()

    @property
    def lease(self) -> timedelta:
        """How long each claim this worker renews is held."""
        return self._lease

    def with_lease(self, lease: timedelta) -> MergeWorker:
        """The same worker, renewing claims for ``lease``."""
        return MergeWorker(
            meta=self._meta,
            objects=self._objects,
            limits=self.limits,
            lease=lease,
            configure=self._configure,
            database=self._database,
        )

    def run(self, task: MergeTask) -> MergeOutcome:
        started = time.perf_counter()
        with span("icefloe.merge"):
            outcome = self._run(task)
        seconds = time.perf_counter() - started
        logger.info(
            "merge %s of %s/%s: %d files -> %d in %.2fs (sorted in %s)",
            outcome.status,
            task.table,
            task.partition_path,
            outcome.files_in,
            outcome.files_out,
            seconds,
            outcome.sorted_in or "-",
        )
        return _with_seconds(outcome, seconds)

    def _run(self, task: MergeTask) -> MergeOutcome:
        group = ClaimedGroup(
            table=task.table,
            partition_path=task.partition_path,
            file_ids=task.file_ids,
            claim_token=task.claim_token,
            idempotency_key=task.idempotency_key,
        )
        inputs = check_claim(self._meta, group, renew_for=self._lease)
        if isinstance(inputs, ReplaceOutcome):
            return _merge_outcome(task, inputs)
        spec = self._meta.get_table(task.table).spec
        if self.limits.temp_directory is not None:
            self.limits.temp_directory.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="icefloe-merge-", dir=self.limits.temp_directory))
        written: list[str] = []
        try:
            staged, sorted_in = self._merge_to_files(spec, inputs, scratch)
            new_files = self._upload(spec, inputs[0], staged, written)
        except BaseException:
            discard_uncommitted(self._objects, written)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        outcome = commit_replacement(self._meta, self._objects, group, add=new_files)
        if outcome.status != "committed":
            return _merge_outcome(task, outcome)
        return MergeOutcome(
            table=task.table,
            partition_path=task.partition_path,
            status="committed",
            snapshot_id=outcome.snapshot_id,
            files_in=len(inputs),
            files_out=len(new_files),
            rows_in=sum(f.row_count for f in inputs),
            rows_out=outcome.rows_added,
            bytes_in=sum(f.size_bytes for f in inputs),
            bytes_out=sum(f.size_bytes for f in new_files),
            sorted_in=sorted_in,
        )

    def _merge_to_files(
        self, spec: TableSpec, inputs: Sequence[DataFile], scratch: Path
    ) -> tuple[list[StagedFile], SortedIn]:
        """The merged rows as local files, and where they were sorted."""
        memory = self.limits.memory_bytes
        if self.limits.sort_in_memory and can_sort_in_memory(spec, inputs, memory_bytes=memory):
            rows = sorted_in_memory(
                spec, inputs, self._objects, expected=self._rows_schema(spec), memory_bytes=memory
            )
            if rows is not None:
                batches = rows.to_batches(max_chunksize=BATCH_ROWS)
                reader = pa.RecordBatchReader.from_batches(rows.schema, batches)
                return self._write(spec, inputs, reader, scratch), "arrow"
        uris = [self._objects.uri(f.path) for f in inputs]
        with self._database.session() as con:
            source = files_source(
                spec, [(uri, f.spec_version) for uri, f in zip(uris, inputs, strict=True)]
            )
            con.execute(view_sql(spec, source, None, temporary=True))
            try:
                reader = con.execute(merge_sql(spec)).to_arrow_reader(BATCH_ROWS)
            except duckdb.Error as e:
                raise MergeFailedError(
                    f"merge of {spec.name!r} ({spec.merge.to_text()}) failed: {e}"
                ) from e
            return self._write(spec, inputs, reader, scratch), "duckdb"

    def _rows_schema(self, spec: TableSpec) -> pa.Schema:
        """The schema the DuckDB path's rows have once the writer normalizes them."""
        # (by columns, not name and version alone: a table dropped and created again starts
        # again at version 1)
        key = tuple((c.name, c.type) for c in spec.columns)
        known = self._rows_schemas.get(key)
        if known is None:
            with self._database.session() as con:
                empty = duckdb_rows_schema(con, spec).empty_table()
            json_columns = [c.name for c in spec.columns if c.type == "JSON"]
            known = file_schema(written_types(empty, json_columns).schema, spec.layout)
            self._rows_schemas[key] = known
        return known

    def _write(
        self,
        spec: TableSpec,
        inputs: Sequence[DataFile],
        reader: pa.RecordBatchReader,
        scratch: Path,
    ) -> list[StagedFile]:
        rows_in = max(1, sum(f.row_count for f in inputs))
        check = (
            _CustomOutputCheck(spec, inputs[0].partition_path)
            if isinstance(spec.merge, CustomMode)
            else None
        )

        def checked() -> Iterator[pa.RecordBatch]:
            for batch in reader:
                if check is not None:
                    check.check(batch)
                yield batch

        try:
            return stage_rows(
                spec,
                checked(),
                scratch,
                bytes_per_row=sum(f.size_bytes for f in inputs) / rows_in,
            )
        except duckdb.Error as e:
            raise MergeFailedError(
                f"merge of {spec.name!r} ({spec.merge.to_text()}) failed: {e}"
            ) from e
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            # The built-in modes write rows of the table's types by construction; a custom
            # query's rows that the checks let through and pyarrow still cannot write are the
            # query's fault, said as such rather than as a bare pyarrow error.
            if check is None:
                raise
            raise check.refused(f"its rows could not be written: {e}") from e

    def _upload(
        self, spec: TableSpec, model: DataFile, staged: Sequence[StagedFile], written: list[str]
    ) -> list[NewFile]:
        return upload_staged(
            self._objects,
            staged,
            table=spec.name,
            partition_path=model.partition_path,
            partition_values=model.partition_values,
            partition_start=model.partition_start,
            written=written,
            spec_version=spec.version,
            stats_leaves=spec.stats_leaves,
            membership_column=membership_column(spec),
        )


class _CustomOutputCheck:
    """Checks each batch a custom merge query returns before any of it is written: no NULL in
    a NOT NULL column, a ``_row_id`` of 16 bytes on every row, every row in the partition being
    merged. The built-in modes give such rows by construction; a custom query may not, and
    what it commits every reader then trusts. (A ``_row_id`` repeated is allowed: a custom
    query may duplicate rows, and the change feed compares such tables' rows by value.)"""

    def __init__(self, spec: TableSpec, partition_path: str) -> None:
        self._spec = spec
        self._expected = spec.parse_partition_path(partition_path)
        self._path = partition_path
        self._required = [c.name for c in spec.columns if not c.nullable]

    def refused(self, problem: str) -> MergeFailedError:
        """The error for a custom query whose output has ``problem``."""
        return MergeFailedError(
            f"custom merge query of {self._spec.name!r} ({self._spec.merge.to_text()}) "
            f"refused: {problem}"
        )

    def check(self, batch: pa.RecordBatch) -> None:
        row_ids = self._check_row_ids(batch)
        self._check_required(batch, row_ids)
        self._check_partition(batch)

    def _check_row_ids(self, batch: pa.RecordBatch) -> pa.Array:
        row_ids = batch.column(ROW_ID_COLUMN)
        fix = f"return each row's {ROW_ID_COLUMN} from the rows being merged"
        if row_ids.null_count:
            raise self.refused(
                f"it returned a NULL {ROW_ID_COLUMN} ({row_ids.null_count} rows in one batch);"
                f" {fix}"
            )
        widths = pc.min_max(pc.binary_length(row_ids))
        for width in (widths["min"].as_py(), widths["max"].as_py()):
            if width is not None and width != _ROW_ID_BYTES:
                unit = "byte" if width == 1 else "bytes"
                raise self.refused(
                    f"it returned a {ROW_ID_COLUMN} of {width} {unit}, not {_ROW_ID_BYTES}; {fix}"
                )
        return row_ids

    def _check_required(self, batch: pa.RecordBatch, row_ids: pa.Array) -> None:
        for name in self._required:
            column = batch.column(name)
            if not column.null_count:
                continue
            first = pc.indices_nonzero(pc.is_null(column))[0].as_py()
            row_id = row_ids[first].as_py()
            raise self.refused(
                f"it returned NULL in NOT NULL column {name!r} ({column.null_count} rows in one"
                f" batch, one of them the row with {ROW_ID_COLUMN} {row_id.hex()})"
            )

    def _check_partition(self, batch: pa.RecordBatch) -> None:
        for field, expected in zip(self._spec.partition_by, self._expected, strict=True):
            column = batch.column(batch.schema.get_field_index(field.source))
            # Time and truncate transforms are monotone: the extremes decide. Identity and
            # bucket values are checked one distinct value at a time.
            if field.is_time or field.transform == "truncate":
                extremes = pc.min_max(column)
                values = [extremes["min"].as_py(), extremes["max"].as_py()]
                if column.null_count:
                    values.append(None)
            else:
                values = pc.unique(column).to_pylist()
            for value in values:
                got: PartitionValue = field.apply(value)
                if _comparable(got) != _comparable(expected):
                    raise self.refused(
                        f"it moved a row out of partition {self._path!r}:"
                        f" {field.source} = {value!r}"
                    )


def _comparable(value: object) -> object:
    """A partition value as the path holds it and as a batch's value gives it: a naive time,
    and a UUID as its text (DuckDB hands UUIDs to Arrow as text)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.replace(tzinfo=None)
    if isinstance(value, UUID):
        return str(value)
    return value


def merge_database(
    objects: ObjectStore,
    limits: MergeLimits,
    configure: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> WorkDatabase:
    """The DuckDB merges run in: bounded by ``limits``, spilling under its temp directory,
    free to emit rows in any order (the merge sorts them)."""
    temp_directory = limits.temp_directory

    def settings() -> list[str]:
        statements = ["SET GLOBAL preserve_insertion_order = false"]
        if temp_directory is not None:  # a spill directory of each database's own
            spill = temp_directory / f"spill-{uuid.uuid4().hex}"
            statements.append(f"SET GLOBAL temp_directory = {duck.string_literal(str(spill))}")
        return statements

    return WorkDatabase(
        root_uri=objects.root_uri,
        limits=QueryLimits(memory_limit=limits.memory_limit, threads=limits.threads),
        configure=configure,
        settings=settings,
    )


def _merge_outcome(task: MergeTask, outcome: ReplaceOutcome) -> MergeOutcome:
    """A task that did not commit: skipped, beaten by an earlier delivery, or in conflict."""
    return MergeOutcome(
        task.table,
        task.partition_path,
        outcome.status,
        snapshot_id=outcome.snapshot_id,
        reason=outcome.reason,
    )


def _with_seconds(outcome: MergeOutcome, seconds: float) -> MergeOutcome:
    return replace(outcome, seconds=seconds)
