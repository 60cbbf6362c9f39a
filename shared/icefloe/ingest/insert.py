"""Insert: a batch of events becomes one Parquet file per partition and one append snapshot.

Objects are written first, then committed together under the batch's idempotency key. If the
commit surely failed, the objects are deleted; if its outcome is unknown they are left for the
janitor's orphan sweep; if the key was used already, the earlier snapshot is returned and this
attempt's objects are deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import pyarrow as pa

from icefloe import duck
from icefloe.errors import (
    BatchRejectedError,
    CommitOutcomeUnknownError,
    InvalidInputError,
    SpecChangedError,
    TableNotFoundError,
)
from icefloe.ingest import native_values
from icefloe.ingest.arrow_stream import STREAM_CHUNK_BYTES, refused_at, stream_chunks
from icefloe.ingest.digests import StreamDigest, batch_digest, check_key
from icefloe.ingest.generated_values import with_generated_values
from icefloe.ingest.load import load_batch, load_batch_checking_json_beside
from icefloe.ingest.partition_files import _JsonTextUnproven, write_partition_files
from icefloe.ingest.sources import (
    ArrowBatch,
    InputFormat,
    InsertLimits,
    RowsBatch,
    StagedBatch,
    arrow_batch,
    rows_batch,
    stage_bytes,
    stage_file,
    stage_stream,
)
from icefloe.metastore.models import CommitResult, NewFile, TableInfo
from icefloe.metastore.store import MetaStore, check_same_batch
from icefloe.spec import TableSpec, validate_table_name
from icefloe.storage import ObjectStore, discard_uncommitted
from icefloe.tracing import span

logger = logging.getLogger(__name__)

_TABLES_KEPT = 256
# How many times a batch is converted when the table's spec keeps changing under it.
_CONVERSIONS_MAX = 3

# The phases InsertPhases times, in order; an ``on_phase`` callback hears each as it starts.
InsertPhase = Literal["load", "write", "commit"]


@dataclass(frozen=True, slots=True)
class InsertResult:
    """What an insert did. ``committed`` is False when the idempotency key had been used:
    ``snapshot_id`` is then the earlier snapshot and nothing new was written."""

    table: str
    snapshot_id: int
    committed: bool
    rows: int
    files: tuple[str, ...]
    partitions: int
    # Where the time went (None when nothing was written): what the small-batch benchmark
    # reports, and what a slow insert's log line names.
    phases: InsertPhases | None = None


@dataclass(slots=True)
class _Commit:
    """When an insert's commit began (None: not yet)."""

    started: float | None = None


@dataclass(frozen=True, slots=True)
class InsertPhases:
    """Seconds spent loading (checks and conversion), writing (partitioning, encoding,
    uploading) and committing one batch."""

    load_s: float
    write_s: float
    commit_s: float


class Inserter:
    """Validates, partitions, sorts, writes and commits batches for any table."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        limits: InsertLimits | None = None,
        scratch_dir: Path | None = None,
        duckdb_threads: int | None = None,
        duckdb_memory_limit: str | None = None,
    ) -> None:
        self._meta = meta
        self._objects = objects
        self.limits = limits or InsertLimits()
        self._scratch = scratch_dir
        self._duck = duck.connect(threads=duckdb_threads, memory_limit=duckdb_memory_limit)
        self._duck_lock = threading.Lock()
        self._tables: dict[str, TableInfo] = {}

    def close(self) -> None:
        self._duck.close()

    def committed_receipts(self, table: str, receipts: Sequence[str]) -> dict[str, int]:
        """Which message ids are committed to ``table`` already (see the queue ingestion)."""
        return self._meta.committed_receipts(table, receipts)

    def insert_rows(
        self,
        table: str,
        rows: Sequence[Mapping[str, object]],
        *,
        idempotency_key: str | None = None,
        receipts: Sequence[str] = (),
    ) -> InsertResult:
        """Insert JSON objects (dicts): a Lambda event's rows, a client's batch.

        ``receipts`` are the ids of the messages the rows came from; each is committed once
        (see :meth:`MetaStore.commit_append`). The rows are read more than once during the
        call (checked and serialized, then converted): they must not change until it returns.
        """

        def stage() -> RowsBatch:
            spec = self._table(table)[0].spec  # kept by _insert a moment ago
            blobs = native_values.blob_columns((c.name, c.type) for c in spec.columns)
            return rows_batch(rows, limits=self.limits, directory=self._scratch, blobs=blobs)

        return self._insert(table, stage, idempotency_key, receipts, stage_reads_spec=True)

    def insert_arrow(
        self,
        table: str,
        data: pa.Table | pa.RecordBatch,
        *,
        idempotency_key: str | None = None,
    ) -> InsertResult:
        """Insert an Arrow table (or record batch) whose columns are named like the table's.

        It is converted from memory, with the checks a Parquet input gets (each column of the
        table's type family, every value in range, NOT NULL held); absent nullable columns are
        NULL, and a column the table does not have is refused."""
        return self._insert(table, lambda: arrow_batch(data, limits=self.limits), idempotency_key)

    def insert_arrow_stream(
        self,
        table: str,
        stream: pa.RecordBatchReader,
        *,
        idempotency_key: str | None = None,
        chunk_bytes: int = STREAM_CHUNK_BYTES,
    ) -> InsertResult:
        """Insert an Arrow stream (see :func:`icefloe.ingest.arrow_stream.arrow_stream`) in one
        snapshot, reading it in chunks of about ``chunk_bytes``: each chunk is converted with
        :meth:`insert_arrow`'s checks and its files stored, and every chunk's files are
        committed together at the end. A refused chunk (its rows numbered from the stream's
        start) or a failed stream leaves nothing stored or committed.

        The stream is read once, so a schema change committed while it is read cannot be met
        by converting again: the insert is then refused (:class:`SpecChangedError`), nothing
        committed. An ``idempotency_key`` used before compares digests, which reads the rest
        of the stream without converting it."""
        validate_table_name(table)
        if idempotency_key is not None:
            check_key(idempotency_key)
        info = self._remember(self._meta.get_table(table))
        digest = StreamDigest()
        chunks = stream_chunks(
            stream,
            chunk_bytes=min(chunk_bytes, self.limits.max_batch_bytes),
            max_rows=self.limits.max_rows,
        )
        if idempotency_key is not None:
            earlier = self._meta.snapshot_for_key(table, idempotency_key)
            if earlier is not None:
                for chunk in chunks:
                    digest.update(arrow_batch(chunk.table, limits=self.limits).table)
                check_same_batch(
                    table,
                    idempotency_key,
                    earlier.snapshot_id,
                    earlier.batch_digest,
                    digest.hexdigest(),
                )
                return InsertResult(table, earlier.snapshot_id, False, 0, (), 0)
        written: list[str] = []
        files: list[NewFile] = []
        load_s = write_s = 0.0
        with self._discarding_uncommitted(table, written) as commit:
            for chunk in chunks:
                staged = arrow_batch(chunk.table, limits=self.limits)
                if idempotency_key is not None:
                    digest.update(staged.table)
                try:
                    more, loaded, wrote = self._write_files(
                        info.spec, staged, written, lambda _: None
                    )
                except BatchRejectedError as e:
                    raise refused_at(e, chunk) from e
                files.extend(more)
                load_s, write_s = load_s + loaded, write_s + wrote
                del staged, chunk
            commit.started = time.perf_counter()
            result = self._meta.commit_append(
                table,
                files=files,
                idempotency_key=idempotency_key,
                batch_digest=digest.hexdigest() if idempotency_key is not None else None,
                table_id=info.table_id,
                spec_version=info.spec.version,
            )
        return self._outcome(table, result, files, written, (load_s, write_s, commit.started))

    def insert_bytes(
        self, table: str, data: bytes, *, fmt: InputFormat, idempotency_key: str | None = None
    ) -> InsertResult:
        return self._insert(
            table,
            lambda: stage_bytes(data, fmt=fmt, limits=self.limits, directory=self._scratch),
            idempotency_key,
        )

    def insert_stream(
        self,
        table: str,
        stream: BinaryIO,
        *,
        fmt: InputFormat,
        idempotency_key: str | None = None,
        on_phase: Callable[[InsertPhase], None] | None = None,
    ) -> InsertResult:
        """``on_phase`` hears each phase as it starts (the CLI's progress line)."""
        return self._insert(
            table,
            lambda: stage_stream(stream, fmt=fmt, limits=self.limits, directory=self._scratch),
            idempotency_key,
            on_phase=on_phase,
        )

    def insert_file(
        self,
        table: str,
        path: Path,
        *,
        fmt: InputFormat,
        idempotency_key: str | None = None,
        on_phase: Callable[[InsertPhase], None] | None = None,
    ) -> InsertResult:
        """``on_phase`` hears each phase as it starts (the CLI's progress line)."""
        return self._insert(
            table,
            lambda: stage_file(path, fmt=fmt, limits=self.limits, directory=self._scratch),
            idempotency_key,
            on_phase=on_phase,
        )

    def _insert(
        self,
        table: str,
        stage: Callable[[], StagedBatch | RowsBatch | ArrowBatch],
        idempotency_key: str | None,
        receipts: Sequence[str] = (),
        *,
        on_phase: Callable[[InsertPhase], None] | None = None,
        stage_reads_spec: bool = False,
    ) -> InsertResult:
        """``stage_reads_spec``: ``stage`` checks the rows against the table's spec (Python
        rows' bytes need a BLOB column), so a refusal under a kept spec is staged again under
        the current one. Other stages read their input once (a stream cannot be read again)
        and check nothing of the spec."""
        validate_table_name(table)
        if idempotency_key is not None:
            check_key(idempotency_key)
        info, cached = self._table(table)
        try:
            staged = stage()
        except InvalidInputError:
            # Refused under a kept spec (bytes for a column since made a BLOB): again under
            # the current spec if it differs.
            fresh = self._reread(info) if cached and stage_reads_spec else None
            if fresh is None:
                raise
            info, cached = fresh, False
            staged = stage()
        try:
            digest = batch_digest(staged) if idempotency_key is not None else None
            if idempotency_key is not None:
                earlier = self._meta.snapshot_for_key(table, idempotency_key)
                if earlier is not None:
                    check_same_batch(
                        table, idempotency_key, earlier.snapshot_id, earlier.batch_digest, digest
                    )
                    return InsertResult(table, earlier.snapshot_id, False, 0, (), 0)
            return self._convert_and_commit(
                info, cached, staged, idempotency_key, receipts, digest, on_phase=on_phase
            )
        finally:
            staged.discard()

    def _convert_and_commit(
        self,
        info: TableInfo,
        cached: bool,
        staged: StagedBatch | RowsBatch | ArrowBatch,
        idempotency_key: str | None,
        receipts: Sequence[str],
        digest: str | None,
        *,
        on_phase: Callable[[InsertPhase], None] | None,
    ) -> InsertResult:
        """Write and commit the batch under ``info``'s spec; again under the table's current
        spec if the commit finds that it changed, or if the batch was refused (or its table
        was gone) under a spec this process kept, and the current one differs."""
        error: Exception
        for attempt in range(1, _CONVERSIONS_MAX + 1):
            try:
                return self._write_and_commit(
                    info.spec,
                    staged,
                    idempotency_key,
                    receipts,
                    digest,
                    info.table_id,
                    on_phase=on_phase,
                )
            except SpecChangedError as e:
                error, stale = e, True  # the spec moved on while the batch was written
            except (TableNotFoundError, InvalidInputError) as e:
                error, stale = e, cached
            if not stale:
                raise error  # refused (or gone) under the spec just read: nothing to retry
            fresh = self._reread(info)
            if fresh is None or attempt == _CONVERSIONS_MAX:
                raise error
            info, cached = fresh, False
        raise AssertionError("unreachable")

    def _reread(self, info: TableInfo) -> TableInfo | None:
        """The table read again (and kept), or None if it is the one ``info`` describes."""
        self._tables.pop(info.name, None)
        fresh = self._remember(self._meta.get_table(info.name))
        unchanged = fresh.table_id == info.table_id and fresh.spec.version == info.spec.version
        return None if unchanged else fresh

    def _table(self, name: str) -> tuple[TableInfo, bool]:
        """The table as this process last read it (and True), or as read now (and False).

        Reading a table's spec costs a small insert a round trip; a kept one may be stale,
        which the commit detects (it names the spec version the rows were converted under):
        the batch is then converted again under the current spec. A batch refused under a
        kept spec is tried again under the current one if that differs."""
        kept = self._tables.get(name)
        if kept is not None:
            return kept, True
        return self._remember(self._meta.get_table(name)), False

    def _remember(self, info: TableInfo) -> TableInfo:
        if len(self._tables) >= _TABLES_KEPT:
            self._tables.clear()
        self._tables[info.name] = info
        return info

    def _write_and_commit(
        self,
        spec: TableSpec,
        staged: StagedBatch | RowsBatch | ArrowBatch,
        idempotency_key: str | None,
        receipts: Sequence[str],
        digest: str | None = None,
        table_id: int | None = None,
        *,
        on_phase: Callable[[InsertPhase], None] | None = None,
    ) -> InsertResult:
        table = spec.name
        tell = on_phase or (lambda _: None)
        written: list[str] = []
        with self._discarding_uncommitted(table, written) as commit:
            files, load_s, write_s = self._write_files(spec, staged, written, tell)
            tell("commit")
            commit.started = time.perf_counter()
            result = self._meta.commit_append(
                table,
                files=files,
                idempotency_key=idempotency_key,
                receipts=receipts,
                batch_digest=digest,
                table_id=table_id,
                spec_version=spec.version,
            )
        return self._outcome(table, result, files, written, (load_s, write_s, commit.started))

    @contextmanager
    def _discarding_uncommitted(self, table: str, written: list[str]) -> Iterator[_Commit]:
        """Delete the stored objects in ``written`` if the block fails, except when its commit
        (begun once ``started`` is set) may have gone through: a lost answer, or an interrupt
        (Ctrl-C, a cancelled task) while it was in flight. The orphan sweep judges those."""
        commit = _Commit()
        try:
            yield commit
        except CommitOutcomeUnknownError:
            logger.warning("commit outcome unknown for %s; leaving %d objects", table, len(written))
            raise
        except BaseException as e:
            if commit.started is not None and not isinstance(e, Exception):
                logger.warning("insert into %s interrupted while committing", table)
                raise
            discard_uncommitted(self._objects, written)
            raise

    def _outcome(
        self,
        table: str,
        result: CommitResult,
        files: Sequence[NewFile],
        written: list[str],
        times: tuple[float, float, float | None],
    ) -> InsertResult:
        """What an insert did, given its commit's result; a commit that found its idempotency
        key used (nothing new committed) deletes the objects this insert stored.
        ``times``: the seconds loading and writing, and when the commit began."""
        if not result.committed:
            discard_uncommitted(self._objects, written)
            return InsertResult(table, result.snapshot_id, False, 0, (), 0)
        load_s, write_s, committing = times
        assert committing is not None
        return InsertResult(
            table=table,
            snapshot_id=result.snapshot_id,
            committed=True,
            rows=result.rows_added,
            files=tuple(f.path for f in files),
            partitions=len({f.partition_path for f in files}),
            phases=InsertPhases(
                load_s=load_s, write_s=write_s, commit_s=time.perf_counter() - committing
            ),
        )

    def _write_files(
        self,
        spec: TableSpec,
        staged: StagedBatch | RowsBatch | ArrowBatch,
        written: list[str],
        tell: Callable[[InsertPhase], None],
    ) -> tuple[list[NewFile], float, float]:
        """Convert the batch and store its files (each key reaches ``written`` once stored);
        returns them, and the seconds spent loading and writing."""
        with self._duck_lock:
            con = self._duck.cursor()
            json_check: Future[bool] | None = None
            try:
                tell("load")
                started = time.perf_counter()
                with span("icefloe.insert.load"):
                    rows, json_check = load_batch_checking_json_beside(
                        con, spec, staged, limits=self.limits
                    )
                    rows = with_generated_values(con, spec, rows, limits=self.limits)
                    if rows.nbytes > _RELEASE_FROM_BYTES:
                        # Parsing freed more than it kept; give it back before the sort
                        # and the encodes need theirs (the pool would otherwise hold it).
                        pa.default_memory_pool().release_unused()
                loaded = time.perf_counter()
                tell("write")
                with span("icefloe.insert.write"):
                    try:
                        files = write_partition_files(
                            self._objects, con, spec, rows, written=written, json_check=json_check
                        )
                    except _JsonTextUnproven:
                        # Nothing was uploaded. The conversion decides, naming the rows;
                        # its time is the load's.
                        converting = time.perf_counter()
                        rows = load_batch(con, spec, staged, limits=self.limits, fast=False)
                        rows = with_generated_values(con, spec, rows, limits=self.limits)
                        loaded += time.perf_counter() - converting
                        files = write_partition_files(
                            self._objects, con, spec, rows, written=written, json_check=None
                        )
                    del rows
                wrote = time.perf_counter()
            finally:
                if json_check is not None:
                    wait([json_check])  # its cursor must not outlive the connection
                con.close()
        return files, loaded - started, wrote - loaded


# Below this, what a batch's parse freed is not worth giving back: the next insert's pages
# would be faulted in again (about 3% of a 1,000-event insert).
_RELEASE_FROM_BYTES = 16 << 20
