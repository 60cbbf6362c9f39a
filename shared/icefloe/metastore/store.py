"""The Postgres meta store: tables, snapshots, files, and the commit protocol.

This is the only module that talks to Postgres. Every statement is parameterized; the schema
name, the one identifier that varies, goes through ``psycopg.sql``.

Commit protocol: the caller writes its objects first, then :meth:`MetaStore.commit`
runs one short transaction that locks the table's head row, validates the commit's assumptions,
takes ``head + 1`` as the snapshot id, adds and ends file rows, records the snapshot and moves the
head. Locking the head makes snapshot ids follow commit order.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import random
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from icefloe.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    DuplicateReceiptError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    MetaStoreNotInitializedError,
    MetaStoreUnavailableError,
    SnapshotNotFoundError,
    SpecChangedError,
    TableExistsError,
    TableNotFoundError,
)
from icefloe.metastore.credentials import (
    DEFAULT_MIN_REFRESH_INTERVAL_S,
    DsnSource,
    FixedDsn,
    RefreshGate,
    refreshing_connection_class,
)
from icefloe.metastore.file_filter import FileCondition, StatNames, render
from icefloe.metastore.migrate import MigrationReport, migrate
from icefloe.metastore.models import (
    FILE_SIZE_BUCKETS,
    ColumnStats,
    CommitResult,
    DataFile,
    FileListing,
    JsonScalar,
    LiveFile,
    NewFile,
    Operation,
    PartitionShape,
    RollbackPlan,
    Snapshot,
    SpecCommit,
    TableInfo,
    TableStatus,
)
from icefloe.spec import Publish, TableSpec
from icefloe.tracing import span

logger = logging.getLogger(__name__)

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

# Errors after which the transaction surely did not commit and a fresh attempt is safe.
_TRANSIENT = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected, pgerrors.LockNotAvailable)

_FILE_COLUMNS = """
    file_id, path, partition_path, partition_values, partition_start, size_bytes, row_count,
    row_group_count, column_stats, begin_snapshot, end_snapshot, created_at, claim_token,
    coalesce(claim_token IS NOT NULL AND claim_expires_at > now(), false), copy_of,
    spec_version
"""
_SNAPSHOT_COLUMNS = """
    snapshot_id, parent_id, operation, committed_at, idempotency_key, files_added, files_removed,
    rows_added, rows_removed, bytes_added, bytes_removed, expired_at IS NOT NULL, batch_digest,
    rolled_back_to, spec_version
"""


_INSERT_SNAPSHOT = """
    INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, idempotency_key,
        files_added, files_removed, rows_added, rows_removed, bytes_added, bytes_removed,
        batch_digest, rolled_back_to, spec_version)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_INSERT_FILE = """
    INSERT INTO data_files (table_id, path, partition_path, partition_values, partition_start,
        size_bytes, row_count, row_group_count, column_stats, begin_snapshot, copy_of,
        spec_version)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_END_FILES = """
    UPDATE data_files
    SET end_snapshot = %s, removed_at = now(), claim_token = NULL, claim_expires_at = NULL
    WHERE file_id = ANY(%s)
"""
_INSERT_RECEIPT = "INSERT INTO ingest_receipts (table_id, receipt, snapshot_id) VALUES (%s, %s, %s)"
_MOVE_HEAD = "UPDATE lake_tables SET head_snapshot_id = %s WHERE table_id = %s"
# An append in one statement: lock the head row, add the snapshot, its files and receipts, move
# the head. Every insert hangs off the locked row, so a missing table, another table of the same
# name or a changed spec adds nothing (the answer's snapshot_id is then NULL). A used idempotency
# key, receipt or path is a unique violation, and the stepwise protocol then says which.
_APPEND = """
    WITH head AS (
        SELECT table_id, head_snapshot_id, spec_version FROM lake_tables
        WHERE name = %(name)s AND dropped_at IS NULL FOR UPDATE
    ), snapshot AS (
        INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, idempotency_key,
            files_added, files_removed, rows_added, rows_removed, bytes_added, bytes_removed,
            batch_digest, rolled_back_to, spec_version)
        SELECT table_id, head_snapshot_id + 1, nullif(head_snapshot_id, 0), 'append', %(key)s,
            %(files_added)s, 0, %(rows_added)s, 0, %(bytes_added)s, 0, %(digest)s, NULL,
            spec_version
        FROM head
        WHERE table_id = coalesce(%(table_id)s, table_id)
            AND spec_version = coalesce(%(spec_version)s, spec_version)
        RETURNING table_id, snapshot_id
    ), files AS (
        INSERT INTO data_files (table_id, path, partition_path, partition_values,
            partition_start, size_bytes, row_count, row_group_count, column_stats,
            begin_snapshot, copy_of, spec_version)
        SELECT s.table_id, f.path, f.partition_path, f.partition_values, f.partition_start,
            f.size_bytes, f.row_count, f.row_group_count, f.column_stats, s.snapshot_id,
            f.copy_of, f.spec_version
        FROM snapshot s, jsonb_to_recordset(%(files)s) AS f(path text, partition_path text,
            partition_values jsonb, partition_start timestamp, size_bytes bigint,
            row_count bigint, row_group_count integer, column_stats jsonb, copy_of bigint,
            spec_version integer)
    ), receipts AS (
        INSERT INTO ingest_receipts (table_id, receipt, snapshot_id)
        SELECT s.table_id, r.receipt, s.snapshot_id
        FROM snapshot s, unnest(%(receipts)s::text[]) AS r(receipt)
    ), moved AS (
        UPDATE lake_tables t SET head_snapshot_id = s.snapshot_id
        FROM snapshot s WHERE t.table_id = s.table_id
    )
    SELECT h.table_id, h.spec_version, s.snapshot_id FROM head h LEFT JOIN snapshot s USING (table_id)
"""


@dataclass(frozen=True, slots=True)
class _TableRef:
    table_id: int | None  # None: whichever live table has the name when the commit runs
    name: str


@dataclass(frozen=True, slots=True)
class _CommitRequest:
    info: _TableRef
    operation: Operation
    add: Sequence[NewFile]
    remove: Sequence[int]
    idempotency_key: str | None
    claim_token: uuid.UUID | None
    receipts: Sequence[str]
    batch_digest: str | None = None
    # A rollback: the snapshot it restores, and the head it was planned at (a commit that finds
    # the head moved is a conflict: the plan no longer gives exactly that snapshot's files).
    rolled_back_to: int | None = None
    planned_head: int | None = None
    # An append converted under this spec version: refused if the table's spec moved on.
    spec_version: int | None = None

    @property
    def is_plain_append(self) -> bool:
        """An append, which :data:`_APPEND` commits in one statement (a used key, receipt or
        path, or a changed table under a key, leaves the answer to the stepwise protocol)."""
        return self.operation == "append" and not self.remove and self.claim_token is None


# A pooled connection idle longer than this is checked (one round trip) before it is used.
CHECK_AFTER_IDLE_S = 5.0


class _CheckWhenIdle:
    """The pool's check of a connection before handing it out, skipped when the connection was
    returned moments ago: that saves a round trip per operation on a busy engine. A server
    that went away within those seconds shows as a failed operation, as it would have a moment
    later anyway (and commits retry)."""

    def __init__(self, *, idle_s: float) -> None:
        self._idle_s = idle_s
        self._returned: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def check(self, conn: Conn) -> None:
        with self._lock:
            returned = self._returned.get(conn)
        # Wall-clock time: it also advances while a Lambda container is frozen.
        if returned is None or time.time() - returned > self._idle_s:
            ConnectionPool.check_connection(conn)

    def returned(self, conn: Conn) -> None:
        with self._lock:
            self._returned[conn] = time.time()


class MetaStore:
    """Tables, snapshots and files in Postgres, with validated optimistic commits.

    Thread-safe: connections come from a pool, one per operation.
    """

    def __init__(
        self,
        dsn: str | DsnSource,
        *,
        schema: str = "icefloe",
        max_connections: int = 8,
        connect_timeout_s: float = 10.0,
        commit_attempts: int = 3,
        min_refresh_interval_s: float = DEFAULT_MIN_REFRESH_INTERVAL_S,
    ) -> None:
        """``dsn`` is a libpq DSN, or a :class:`DsnSource` (a secret) read again when opening a
        connection fails, at most once per ``min_refresh_interval_s``."""
        self.schema = schema
        self._commit_attempts = commit_attempts
        self._recent = _CheckWhenIdle(idle_s=CHECK_AFTER_IDLE_S)
        if not _SCHEMA_NAME.match(schema):
            raise InvalidInputError(f"meta store schema {schema!r} is not a plain lower-case name")
        source = FixedDsn(dsn) if isinstance(dsn, str) else dsn
        self.dsn_source: DsnSource = source
        connection_class: type[Conn] = (
            psycopg.Connection
            if isinstance(dsn, str)
            else refreshing_connection_class(
                source, gate=RefreshGate(interval_s=min_refresh_interval_s)
            )
        )
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            source.current(),
            connection_class=connection_class,
            min_size=1,
            max_size=max_connections,
            timeout=connect_timeout_s,
            # search_path as a startup option: no statement per new connection.
            kwargs={"options": f"-c search_path={schema}"},
            check=self._recent.check,
            reset=self._recent.returned,
            open=False,
            name=f"icefloe-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except PoolTimeout as e:
            raise MetaStoreUnavailableError(f"cannot connect to the meta store: {e}") from e

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def migrate(self) -> MigrationReport:
        """Create or upgrade the schema (``icefloe init``). Idempotent and concurrency-safe."""
        with self._connection() as conn:
            return migrate(conn, schema=self.schema)

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise MetaStoreUnavailableError(f"no meta store connection available: {e}") from e
        except pgerrors.UndefinedTable as e:
            raise MetaStoreNotInitializedError(
                f"the meta store schema {self.schema!r} is not initialized: run `icefloe init`"
            ) from e
        except _TRANSIENT:
            raise
        except psycopg.OperationalError as e:
            raise MetaStoreUnavailableError(f"meta store connection failed: {e}") from e

    # -- tables ---------------------------------------------------------------------------------

    def create_table(self, spec: TableSpec) -> TableInfo:
        """Register a table. Raises :class:`TableExistsError` if the name is taken."""
        try:
            with self._connection() as conn, conn.transaction():
                row = conn.execute(
                    """
                    INSERT INTO lake_tables (name, spec, spec_version) VALUES (%s, %s, %s)
                    RETURNING table_id, name, spec, head_snapshot_id, created_at
                    """,
                    (spec.name, Jsonb(spec.to_dict()), spec.version),
                ).fetchone()
                assert row is not None
                conn.execute(
                    "INSERT INTO table_specs (table_id, spec_version, spec) VALUES (%s, %s, %s)",
                    (row[0], spec.version, Jsonb(spec.to_dict())),
                )
        except pgerrors.UniqueViolation as e:
            raise TableExistsError(f"table {spec.name!r} exists already") from e
        assert row is not None
        return _table_info(row)

    def alter_table(self, name: str, evolve: Callable[[TableSpec], TableSpec]) -> SpecCommit:
        """Change a table's spec to ``evolve(current spec)``, the next version, and commit a
        snapshot that changes no file but records that version: reads at it and after use the
        new schema; a read pinned earlier keeps the schema it had. Holds the head lock, so it
        is ordered with every commit; files written at the old version and committed later
        are still read right (each file records its version)."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT table_id, spec, head_snapshot_id FROM lake_tables"
                " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
                (name,),
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table named {name!r}")
            table_id, current, head = int(row[0]), _spec(row[1]), int(row[2])
            spec = evolve(current)
            if spec.version != current.version + 1 or spec.name != current.name:
                raise ValueError(f"alter of {name!r} must give version {current.version + 1}")
            snapshot_id = head + 1
            stored = Jsonb(spec.to_dict())
            with conn.pipeline(), conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO table_specs (table_id, spec_version, spec) VALUES (%s, %s, %s)",
                    (table_id, spec.version, stored),
                )
                cur.execute(
                    _INSERT_SNAPSHOT,
                    (table_id, snapshot_id, head or None, "alter", None)
                    + (0,) * 6
                    + (None, None, spec.version),
                )
                cur.execute(
                    "UPDATE lake_tables SET spec = %s, spec_version = %s, head_snapshot_id = %s"
                    " WHERE table_id = %s",
                    (stored, spec.version, snapshot_id, table_id),
                )
        return SpecCommit(table=name, snapshot_id=snapshot_id, spec=spec)

    def set_publish(self, name: str, publish: Publish) -> TableInfo:
        """Turn a table's publication on (``"iceberg"``) or off (``"none"``). Not a schema
        change: the current spec version is updated in place and no snapshot is committed."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT table_id, spec FROM lake_tables"
                " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
                (name,),
            ).fetchone()
            if row is None:
                raise TableNotFoundError(f"no table named {name!r}")
            spec = dataclasses.replace(_spec(row[1]), publish=publish)
            stored = Jsonb(spec.to_dict())
            conn.execute(
                "UPDATE table_specs SET spec = %s WHERE table_id = %s AND spec_version = %s",
                (stored, row[0], spec.version),
            )
            updated = conn.execute(
                "UPDATE lake_tables SET spec = %s WHERE table_id = %s"
                " RETURNING table_id, name, spec, head_snapshot_id, created_at",
                (stored, row[0]),
            ).fetchone()
        assert updated is not None
        return _table_info(updated)

    def drop_table(self, name: str) -> TableInfo:
        """Drop a table: from now on no listing, query, insert or merge sees it (a commit in
        flight fails), and a table of the same name may be created at once. Its objects and
        rows stay until the janitor purges them, after the table's retention."""
        with self._connection() as conn, conn.transaction():
            row = conn.execute(
                "UPDATE lake_tables SET dropped_at = now()"
                " WHERE name = %s AND dropped_at IS NULL"
                " RETURNING table_id, name, spec, head_snapshot_id, created_at",
                (name,),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r}")
        return _table_info(row)

    def get_table(self, name: str) -> TableInfo:
        with self._autocommit() as conn:
            row = conn.execute(
                "SELECT table_id, name, spec, head_snapshot_id, created_at"
                " FROM lake_tables WHERE name = %s AND dropped_at IS NULL",
                (name,),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"no table named {name!r}")
        return _table_info(row)

    def table_spec(self, name: str, *, version: int) -> TableSpec:
        """The spec of table ``name`` at ``version`` (its current one, or an earlier one)."""
        with self._autocommit() as conn:
            row = conn.execute(
                "SELECT s.spec FROM table_specs s JOIN lake_tables t USING (table_id)"
                " WHERE t.name = %s AND t.dropped_at IS NULL AND s.spec_version = %s",
                (name, version),
            ).fetchone()
        if row is None:
            raise TableNotFoundError(f"table {name!r} has no spec version {version}")
        return _spec(row[0])

    @contextmanager
    def read_tables(self, names: Collection[str]) -> Iterator[TablesRead]:
        """The tables among ``names`` (unknown names are simply absent): their specs and heads
        in one statement, then snapshots pinned and listed with :meth:`TablesRead.pin`.

        Each is one statement outside any transaction (one round trip each: a warm query whose
        plan is cached makes just the first). That is consistent because a snapshot's files
        never change, and the listing checks in the same statement that the snapshot is
        still live: the janitor forgets a file only after expiring every snapshot that saw
        it, so a listing of a live snapshot is complete, and one of an expired snapshot is
        :class:`SnapshotNotFoundError`, never a partial list."""
        with self._autocommit() as conn:
            rows = (
                conn.execute(
                    "SELECT table_id, name, spec, head_snapshot_id, created_at"
                    " FROM lake_tables WHERE name = ANY(%s) AND dropped_at IS NULL ORDER BY name",
                    (sorted(names),),
                ).fetchall()
                if names
                else []
            )
            yield TablesRead(conn, {info.name: info for info in map(_table_info, rows)})

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        """A read-write transaction on a pooled connection: committed when the block ends,
        rolled back when it raises. What the meta store's companion stores (compaction jobs,
        delete jobs, maintenance) write through, so that the pool, the errors it raises and
        the transaction handling live in this class alone."""
        with self._connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def read_transaction(self) -> Iterator[Conn]:
        """A read-only transaction (read committed), rolled back when the block ends: several
        reads that belong together, for the companion stores."""
        with self._read_only(repeatable=False) as conn:
            yield conn

    @contextmanager
    def _autocommit(self) -> Iterator[Conn]:
        with self._connection() as conn, _statements_commit_alone(conn):
            yield conn

    @contextmanager
    def _read_only(self, *, repeatable: bool) -> Iterator[Conn]:
        with self._connection() as conn:
            # Set on the idle connection, so that BEGIN itself carries them: no extra round trip.
            if repeatable:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            try:
                yield conn
            finally:
                conn.rollback()
                conn.isolation_level = None
                conn.read_only = None

    def list_tables(self) -> list[TableInfo]:
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT table_id, name, spec, head_snapshot_id, created_at"
                " FROM lake_tables WHERE dropped_at IS NULL ORDER BY name"
            ).fetchall()
        return [_table_info(row) for row in rows]

    # -- snapshots ------------------------------------------------------------------------------

    def snapshots(self, table: str) -> list[Snapshot]:
        """Every snapshot of a table, oldest first (expired ones flagged)."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            query = sql.SQL(
                "SELECT {columns} FROM snapshots WHERE table_id = %s ORDER BY snapshot_id"
            ).format(columns=sql.SQL(_SNAPSHOT_COLUMNS))
            rows = conn.execute(query, (info.table_id,)).fetchall()
        return [_snapshot(row) for row in rows]

    def snapshot_for_key(self, table: str, idempotency_key: str) -> Snapshot | None:
        """The snapshot committed under ``idempotency_key``, if any (a cheap pre-check that
        spares a retried batch its writes; the commit itself re-checks under the head lock)."""
        with self._autocommit() as conn:
            query = sql.SQL(
                "SELECT {columns} FROM snapshots"
                " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND idempotency_key = %s"
            ).format(columns=sql.SQL(_SNAPSHOT_COLUMNS))
            row = conn.execute(query, (table, idempotency_key)).fetchone()
        return None if row is None else _snapshot(row)

    def resolve_snapshot(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> int:
        """The snapshot a read pins: the head, a given id, or the last one committed at ``as_of``.

        Returns 0 for a table that has no commit yet (and no id was asked for).
        """
        with self.pin(table, snapshot_id=snapshot_id, as_of=as_of) as pinned:
            return pinned.snapshot_id

    @contextmanager
    def pin(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> Iterator[PinnedSnapshot]:
        """Resolve a snapshot (as :meth:`resolve_snapshot`) inside one repeatable-read
        transaction, and list its files from the same transaction: whatever commits or janitor
        runs happen meanwhile, the listing is the complete file list of the snapshot that was
        resolved. SnapshotNotFoundError names a snapshot that is unknown or expired."""
        with self._read_only(repeatable=True) as conn:
            yield PinnedSnapshot(conn, _resolve(conn, table, snapshot_id=snapshot_id, as_of=as_of))

    # -- files ----------------------------------------------------------------------------------

    def files(
        self,
        table: str,
        *,
        snapshot_id: int | None = None,
        partitions: Sequence[str] | None = None,
        start_from: datetime | None = None,
        start_before: datetime | None = None,
    ) -> list[DataFile]:
        """The files live at a snapshot (default: the head), optionally pruned.

        ``partitions`` keeps only those partition paths. ``start_from``/``start_before`` keep
        files whose partition period starts in ``[start_from, start_before)``; the caller aligns
        ``start_from`` down to the partition period so that a range never misses a period that
        overlaps it.
        """
        info = self.get_table(table)
        at = info.head_snapshot_id if snapshot_id is None else snapshot_id
        with self._connection() as conn:
            files = _files_at(
                conn,
                info.table_id,
                at,
                partitions=partitions,
                start_from=start_from,
                start_before=start_before,
            )
            conn.rollback()
        return files

    def live_files(self, table: str) -> list[LiveFile]:
        """The files live at the head, in id order, as :meth:`files` gives them but without
        their statistics: what planning merges reads."""
        info = self.get_table(table)
        where, params = _live_at(info.table_id, info.head_snapshot_id)
        query = sql.SQL(
            "SELECT file_id, partition_path, partition_start, size_bytes, row_count, created_at,"
            " coalesce(claim_token IS NOT NULL AND claim_expires_at > now(), false)"
            " FROM data_files WHERE {} ORDER BY file_id"
        ).format(where)
        with self._autocommit() as conn:
            rows = conn.execute(query, params).fetchall()
        return list(map(LiveFile._make, rows))

    def files_by_id(self, table: str, file_ids: Sequence[int]) -> list[DataFile]:
        """The rows of these files of ``table``, live or not, in id order (missing ids are
        simply absent): what a merge worker checks its inputs against."""
        query = sql.SQL(
            "SELECT {columns} FROM data_files"
            " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND file_id = ANY(%s) ORDER BY file_id"
        ).format(columns=sql.SQL(_FILE_COLUMNS))
        with self._autocommit() as conn:
            rows = conn.execute(query, (table, sorted(set(file_ids)))).fetchall()
        return [_data_file(row) for row in rows]

    def files_by_path(self, table: str, paths: Sequence[str]) -> list[DataFile]:
        """The rows of the files of ``table`` at these object keys, live or not, in id order
        (a key names one file row at most): a query plan's files, without listing the rest."""
        query = sql.SQL(
            "SELECT {columns} FROM data_files"
            " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND path = ANY(%s) ORDER BY file_id"
        ).format(columns=sql.SQL(_FILE_COLUMNS))
        with self._autocommit() as conn:
            rows = conn.execute(query, (table, sorted(set(paths)))).fetchall()
        return [_data_file(row) for row in rows]

    def status(self, table: str) -> TableStatus:
        """Live files, partitions, rows and bytes at the head."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            row = conn.execute(
                """
                SELECT count(*), count(DISTINCT partition_path),
                       coalesce(sum(row_count), 0), coalesce(sum(size_bytes), 0),
                       count(*) FILTER (WHERE claim_token IS NOT NULL AND claim_expires_at > now()),
                       max(claim_expires_at) FILTER (
                           WHERE claim_token IS NOT NULL AND claim_expires_at > now())
                FROM data_files WHERE table_id = %s AND end_snapshot IS NULL
                """,
                (info.table_id,),
            ).fetchone()
        assert row is not None
        return TableStatus(
            table=info.name,
            head_snapshot_id=info.head_snapshot_id,
            live_files=int(row[0]),
            partitions=int(row[1]),
            rows=int(row[2]),
            bytes=int(row[3]),
            claimed_files=int(row[4]),
            claimed_until=row[5],
        )

    def partition_shapes(self, table: str) -> list[PartitionShape]:
        """Each partition's live files at the head, with a histogram of their sizes."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT partition_path, count(*), sum(row_count), sum(size_bytes),"
                " array_agg(size_bytes) FROM data_files"
                " WHERE table_id = %s AND end_snapshot IS NULL"
                " GROUP BY partition_path ORDER BY partition_path",
                (info.table_id,),
            ).fetchall()
        return [
            PartitionShape(
                partition_path=str(row[0]),
                files=int(row[1]),
                rows=int(row[2]),
                bytes=int(row[3]),
                size_buckets=_histogram([int(b) for b in row[4]]),
            )
            for row in rows
        ]

    # -- claims ---------------------------------------------------------------------------------

    def claim_files(
        self,
        table: str,
        file_ids: Sequence[int],
        *,
        lease: timedelta,
        token: uuid.UUID | None = None,
    ) -> uuid.UUID | None:
        """Claim live files for one merge job, all or nothing; returns the token, or None.

        Rows locked by another claimer are skipped (``SKIP LOCKED``), and files claimed under an
        unexpired lease are taken; either way the claim fails as a whole and nothing changes.
        """
        if not file_ids:
            raise InvalidInputError("claim_files: no file ids given")
        info = self.get_table(table)
        token = token or uuid.uuid4()
        wanted = sorted(set(file_ids))
        with self._connection() as conn, conn.transaction():
            rows = conn.execute(
                """
                SELECT file_id FROM data_files
                WHERE table_id = %s AND file_id = ANY(%s) AND end_snapshot IS NULL
                  AND (claim_token IS NULL OR claim_expires_at <= now())
                ORDER BY file_id
                FOR UPDATE SKIP LOCKED
                """,
                (info.table_id, wanted),
            ).fetchall()
            if [int(r[0]) for r in rows] != wanted:
                return None
            conn.execute(
                "UPDATE data_files SET claim_token = %s, claim_expires_at = now() + %s"
                " WHERE file_id = ANY(%s)",
                (token, lease, wanted),
            )
        return token

    def renew_claim(self, token: uuid.UUID, *, lease: timedelta) -> int:
        """Extend the lease of the live files claimed under ``token``; returns how many.

        A lease that expired is renewed too, as long as nobody claimed the files since.
        """
        with self._connection() as conn, conn.transaction():
            cur = conn.execute(
                "UPDATE data_files SET claim_expires_at = now() + %s"
                " WHERE claim_token = %s AND end_snapshot IS NULL",
                (lease, token),
            )
            return cur.rowcount

    def release_claim(self, token: uuid.UUID) -> int:
        """Free every file claimed under ``token``; returns how many were freed."""
        with self._connection() as conn, conn.transaction():
            cur = conn.execute(
                "UPDATE data_files SET claim_token = NULL, claim_expires_at = NULL"
                " WHERE claim_token = %s",
                (token,),
            )
            return cur.rowcount

    # -- commits --------------------------------------------------------------------------------

    def commit_append(
        self,
        table: str,
        *,
        files: Sequence[NewFile],
        idempotency_key: str | None = None,
        receipts: Sequence[str] = (),
        batch_digest: str | None = None,
        table_id: int | None = None,
        spec_version: int | None = None,
    ) -> CommitResult:
        """Add files in one new snapshot; a used ``idempotency_key`` returns the earlier one
        (unless the earlier batch's ``batch_digest`` differs: :class:`IdempotencyKeyReusedError`).

        ``receipts`` (message ids) are recorded with the snapshot; if any was recorded before,
        :class:`DuplicateReceiptError` names them and nothing is committed. ``table_id`` (the
        table the files were written for) refuses the commit if the table was dropped and
        created again meanwhile; ``spec_version`` (the spec the rows were converted under)
        refuses it with :class:`SpecChangedError` if the table's spec changed meanwhile.
        One round trip: the whole append is one statement, its own transaction. If the
        connection breaks once it is sent, the next attempt first looks for the append's files
        (their paths are unique), so a lost answer neither repeats nor loses the append.
        """
        return self.commit(
            table,
            operation="append",
            add=files,
            idempotency_key=idempotency_key,
            receipts=receipts,
            batch_digest=batch_digest,
            table_id=table_id,
            spec_version=spec_version,
        )

    def committed_receipts(self, table: str, receipts: Sequence[str]) -> dict[str, int]:
        """Which of ``receipts`` are committed already, and in which snapshot."""
        if not receipts:
            return {}
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT receipt, snapshot_id FROM ingest_receipts"
                " WHERE table_id = (SELECT table_id FROM lake_tables"
                "  WHERE name = %s AND dropped_at IS NULL) AND receipt = ANY(%s)",
                (table, list(receipts)),
            ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def commit_replace(
        self,
        table: str,
        *,
        remove: Sequence[int],
        add: Sequence[NewFile],
        claim_token: uuid.UUID | None = None,
        idempotency_key: str | None = None,
    ) -> CommitResult:
        """Swap live files for new ones (a merge). Every input must still be live and, when a
        token is given, claimed under it; otherwise :class:`CommitConflictError`. A used
        ``idempotency_key`` returns the earlier snapshot and changes nothing."""
        return self.commit(
            table,
            operation="replace",
            add=add,
            remove=remove,
            claim_token=claim_token,
            idempotency_key=idempotency_key,
        )

    def commit(
        self,
        table: str,
        *,
        operation: Operation,
        add: Sequence[NewFile] = (),
        remove: Sequence[int] = (),
        idempotency_key: str | None = None,
        claim_token: uuid.UUID | None = None,
        receipts: Sequence[str] = (),
        batch_digest: str | None = None,
        table_id: int | None = None,
        spec_version: int | None = None,
    ) -> CommitResult:
        """Run the commit protocol, retrying transient failures that surely did not commit.

        Raises :class:`CommitConflictError` (nothing committed: delete your objects),
        :class:`CommitOutcomeUnknownError` (leave your objects for the orphan sweep) or
        :class:`MetaStoreUnavailableError` (nothing committed).
        """
        _check_commit_input(operation, add, remove)
        for text in (idempotency_key, *receipts):
            if text is not None and "\x00" in text:
                raise InvalidInputError("an idempotency key or receipt may not hold NUL")
        if len(receipts) != len(set(receipts)):
            raise InvalidInputError("a commit names the same receipt twice")
        request = _CommitRequest(
            info=_TableRef(table_id=table_id, name=table),
            operation=operation,
            add=add,
            remove=remove,
            idempotency_key=idempotency_key,
            claim_token=claim_token,
            receipts=receipts,
            batch_digest=batch_digest,
            spec_version=spec_version,
        )
        return self._commit_with_retries(request)

    def plan_rollback(self, table: str, *, to_snapshot: int) -> RollbackPlan:
        """What making the live files those of ``to_snapshot`` takes, read in one
        repeatable-read transaction: which live files stay, which go, and which of the
        snapshot's files are no longer live (they must be restored). SnapshotNotFoundError
        when the snapshot is unknown or expired (its files may have been collected)."""
        with self._read_only(repeatable=True) as conn:
            head = _resolve(conn, table, snapshot_id=None, as_of=None)
            if to_snapshot > head.snapshot_id or to_snapshot < 1:
                raise SnapshotNotFoundError(
                    f"table {table!r} has no snapshot {to_snapshot} (its head is snapshot"
                    f" {head.snapshot_id})"
                )
            try:
                target = _resolve_from(
                    conn,
                    table,
                    head.table_id,
                    head.snapshot_id,
                    head.spec_version,
                    snapshot_id=to_snapshot,
                    as_of=None,
                )
            except SnapshotNotFoundError as e:
                oldest = conn.execute(
                    "SELECT min(snapshot_id) FROM snapshots"
                    " WHERE table_id = %s AND expired_at IS NULL",
                    (head.table_id,),
                ).fetchone()
                raise SnapshotNotFoundError(
                    f"cannot roll {table!r} back to snapshot {to_snapshot}: it has expired, and"
                    " the files only it needed may have been collected; the oldest snapshot"
                    f" kept is {oldest[0] if oldest and oldest[0] is not None else 'none'}"
                ) from e
            at_head = _files_at(conn, head.table_id, head.snapshot_id)
            at_target = _files_at(conn, head.table_id, target.snapshot_id)
        # A restored copy stands for its original: asked again, a rollback changes nothing.
        live = {f.origin for f in at_head}
        wanted = {f.origin for f in at_target}
        return RollbackPlan(
            table=table,
            table_id=head.table_id,
            head_snapshot_id=head.snapshot_id,
            target_snapshot_id=target.snapshot_id,
            keep=tuple(f for f in at_head if f.origin in wanted),
            remove=tuple(f for f in at_head if f.origin not in wanted),
            restore=tuple(f for f in at_target if f.origin not in live),
        )

    def commit_rollback(self, plan: RollbackPlan, *, restored: Sequence[NewFile]) -> CommitResult:
        """One new snapshot whose live files are those of ``plan.target_snapshot_id``: the
        plan's ``remove`` files end, ``restored`` (copies of its ``restore`` files) are added.
        CommitConflictError when another snapshot was committed since the plan (plan again);
        a merge holding any removed file loses at its own commit."""
        remove = [f.file_id for f in plan.remove]
        _check_commit_input("rollback", restored, remove)
        return self._commit_with_retries(
            _CommitRequest(
                info=_TableRef(table_id=plan.table_id, name=plan.table),
                operation="rollback",
                add=restored,
                remove=remove,
                idempotency_key=None,
                claim_token=None,
                receipts=(),
                rolled_back_to=plan.target_snapshot_id,
                planned_head=plan.head_snapshot_id,
            )
        )

    def _commit_with_retries(self, request: _CommitRequest) -> CommitResult:
        attempt = 0
        lost = False  # an append statement may have committed without its answer arriving
        while True:
            attempt += 1
            error: Exception
            try:
                return self._commit_once(request, after_loss=lost)
            except _AppendAnswerLost as e:
                lost, error = True, e
            except (*_TRANSIENT, MetaStoreUnavailableError) as e:
                error = e
            except Exception as e:
                if not lost:
                    raise
                # After a loss, a failure is no answer: the lost statement may still commit
                # (queued behind a lock, say), and the caller must not delete its objects.
                return self._found_after_loss(request, e)
            if attempt >= self._commit_attempts:
                if lost:
                    return self._found_after_loss(request, error)
                if isinstance(error, MetaStoreUnavailableError):
                    raise error
                raise MetaStoreUnavailableError(
                    f"commit failed after {attempt} attempts: {error}"
                ) from error
            self._pause_before_retry(request, error, attempt)

    def _found_after_loss(self, request: _CommitRequest, error: Exception) -> CommitResult:
        """The append whose answer was lost, if its files are committed by now; otherwise
        :class:`CommitOutcomeUnknownError` (it may still commit, or never)."""
        try:
            with self._connection() as conn:
                found = _committed_before(conn, request)
        except Exception as e:
            raise CommitOutcomeUnknownError(
                f"the answer to an append to {request.info.name!r} was lost, and the meta"
                f" store could not be asked whether it committed: {e}"
            ) from error
        if found is not None:
            return found
        raise CommitOutcomeUnknownError(
            f"the answer to an append to {request.info.name!r} was lost, and it is not"
            f" committed yet: it may still be ({error})"
        ) from error

    @staticmethod
    def _pause_before_retry(request: _CommitRequest, error: Exception, attempt: int) -> None:
        delay = min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5)
        logger.warning(
            "commit to %s failed (%s); retrying in %.2fs", request.info.name, error, delay
        )
        time.sleep(delay)

    def _commit_once(self, request: _CommitRequest, *, after_loss: bool = False) -> CommitResult:
        """One attempt. ``after_loss``: an earlier attempt's append statement may have
        committed (its connection broke with the statement sent), so the append's files are
        looked up first; their paths are unique, so they are committed once or not at all."""
        with span("icefloe.commit"), self._connection() as conn:
            if after_loss:
                found = _committed_before(conn, request)
                if found is not None:
                    return found
            if request.is_plain_append:
                result = self._append_statement(conn, request)
                if result is None and after_loss:
                    # A unique value was taken: by the lost attempt, committed while this one
                    # was on its way (then its files are there now), or by another commit.
                    result = _committed_before(conn, request)
                if result is not None:
                    return result
            try:
                result = self._commit_statements(conn, request)
            except BaseException:
                _rollback_quietly(conn)
                raise
            if not result.committed:
                conn.rollback()
                return result
            try:
                conn.commit()
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                raise CommitOutcomeUnknownError(
                    f"connection lost while committing snapshot {result.snapshot_id} of "
                    f"{request.info.name!r}; it may or may not be committed"
                ) from e
            logger.debug(
                "committed %s snapshot %d of %s",
                request.operation,
                result.snapshot_id,
                result.table,
            )
            return result

    def _append_statement(self, conn: Conn, request: _CommitRequest) -> CommitResult | None:
        """An append as one statement in a transaction of its own (autocommit): one round
        trip, COMMIT included. None when it met a taken idempotency key, receipt or path, or a
        key committed before the table changed: nothing was written, and the stepwise
        protocol, which looks each up, answers. Any other failure raises
        :class:`_AppendAnswerLost` (the statement may have committed)."""
        info, add = request.info, request.add
        rows_added = sum(f.row_count for f in add)
        params = {
            "name": info.name,
            "table_id": info.table_id,
            "spec_version": request.spec_version,
            "key": request.idempotency_key,
            "digest": request.batch_digest if request.idempotency_key is not None else None,
            "files_added": len(add),
            "rows_added": rows_added,
            "bytes_added": sum(f.size_bytes for f in add),
            "files": Jsonb(
                [{**f.to_json(), "partition_start": _utc_text(f.partition_start)} for f in add]
            ),
            "receipts": list(request.receipts),
        }
        try:
            # Through a cursor, as the stepwise writes: tracing wraps cursors, not execute.
            with _statements_commit_alone(conn), conn.cursor() as cursor:
                cursor.execute(_APPEND, params)
                row = cursor.fetchone()
        except pgerrors.UniqueViolation:
            return None  # the statement failed: nothing was written
        except psycopg.Error as e:
            # Any other failure may come after the statement committed (with COMMIT in the same
            # round trip, an error does not prove a rollback: a proxy may answer one for a
            # statement that went through), so the next attempt looks for the files first.
            raise _AppendAnswerLost(
                f"no answer to an append to {info.name!r} ({e}); it may have committed"
            ) from e
        if row is None:
            raise TableNotFoundError(f"no table named {info.name!r} (was it dropped?)")
        if row[2] is None:
            if request.idempotency_key is not None:
                # A key committed before the table changed answers with its snapshot, which
                # only the stepwise protocol looks up before the table's checks.
                return None
            if info.table_id is not None and int(row[0]) != info.table_id:
                raise _recreated(info.name)
            raise _spec_changed(info.name, request.spec_version, int(row[1]))
        logger.debug("committed append snapshot %d of %s", int(row[2]), info.name)
        return CommitResult(
            table=info.name,
            snapshot_id=int(row[2]),
            committed=True,
            files_added=len(add),
            files_removed=0,
            rows_added=rows_added,
        )

    def _commit_statements(self, conn: Conn, request: _CommitRequest) -> CommitResult:
        info, operation, add, remove = request.info, request.operation, request.add, request.remove
        idempotency_key, claim_token, receipts = (
            request.idempotency_key,
            request.claim_token,
            request.receipts,
        )
        # One round trip, two statements: lock the head row, then look the idempotency key up.
        # The lookup must be a statement of its own: at read committed each statement sees what
        # was committed when it started, so a key committed by an attempt this one waited for
        # (while it held the lock) is visible only to a statement that starts after the lock.
        with conn.pipeline():
            locked = conn.execute(
                "SELECT table_id, head_snapshot_id, spec_version FROM lake_tables"
                " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
                (info.name,),
            )
            earlier = conn.execute(
                "SELECT snapshot_id, batch_digest FROM snapshots WHERE table_id = ("
                "SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL)"
                " AND idempotency_key = %s",
                (info.name, idempotency_key),
            )
        head_row = locked.fetchone()
        if head_row is None:
            raise TableNotFoundError(f"no table named {info.name!r} (was it dropped?)")
        if info.table_id is not None and int(head_row[0]) != info.table_id:
            raise _recreated(info.name)
        table_id = int(head_row[0])
        head = int(head_row[1])
        if request.planned_head is not None and head != request.planned_head:
            raise CommitConflictError(
                f"{info.name!r}: snapshot {head} was committed while this {operation} was"
                f" planned at snapshot {request.planned_head}"
            )
        earlier_row = earlier.fetchone() if idempotency_key is not None else None
        if earlier_row is not None:
            check_same_batch(
                info.name,
                idempotency_key,
                int(earlier_row[0]),
                earlier_row[1],
                request.batch_digest,
            )
            return _already_committed(info.name, int(earlier_row[0]))
        if request.spec_version is not None and int(head_row[2]) != request.spec_version:
            raise _spec_changed(info.name, request.spec_version, int(head_row[2]))

        if receipts:
            seen = conn.execute(
                "SELECT receipt FROM ingest_receipts WHERE table_id = %s AND receipt = ANY(%s)",
                (table_id, list(receipts)),
            ).fetchall()
            if seen:
                raise DuplicateReceiptError(
                    f"{info.name!r}: {len(seen)} message(s) were committed already",
                    receipts=tuple(sorted(str(r[0]) for r in seen)),
                )

        rows_removed = bytes_removed = 0
        if remove:
            rows_removed, bytes_removed = _validate_inputs(
                conn,
                _TableRef(table_id, info.name),
                remove,
                claim_token,
                # A rollback or delete overrides merges: one holding these files loses at its
                # commit (and a merge that committed first makes this commit a conflict).
                respect_claims=operation not in ("rollback", "delete"),
            )

        new_id = head + 1
        rows_added = sum(f.row_count for f in add)
        bytes_added = sum(f.size_bytes for f in add)
        snapshot_params = (
            table_id,
            new_id,
            head or None,
            operation,
            idempotency_key,
            len(add),
            len(remove),
            rows_added,
            rows_removed,
            bytes_added,
            bytes_removed,
            request.batch_digest if idempotency_key is not None else None,
            request.rolled_back_to,
            int(head_row[2]),
        )
        try:
            # Pipelined: the writes go out together and the head lock is held for one round trip.
            with conn.pipeline(), conn.cursor() as cur:
                cur.execute(_INSERT_SNAPSHOT, snapshot_params)
                if add:
                    cur.executemany(_INSERT_FILE, [_file_params(table_id, f, new_id) for f in add])
                if remove:
                    cur.execute(_END_FILES, (new_id, list(remove)))
                if receipts:
                    cur.executemany(_INSERT_RECEIPT, [(table_id, r, new_id) for r in receipts])
                cur.execute(_MOVE_HEAD, (new_id, table_id))
        except pgerrors.UniqueViolation as e:
            raise _unique_violation(info.name, e) from e
        return CommitResult(
            table=info.name,
            snapshot_id=new_id,
            committed=True,
            files_added=len(add),
            files_removed=len(remove),
            rows_added=rows_added,
        )


def _histogram(sizes: Sequence[int]) -> tuple[int, ...]:
    counts = [0] * (len(FILE_SIZE_BUCKETS) + 1)
    for size in sizes:
        counts[bisect.bisect_left(FILE_SIZE_BUCKETS, size)] += 1
    return tuple(counts)


def _validate_inputs(
    conn: Conn,
    info: _TableRef,
    remove: Sequence[int],
    claim_token: uuid.UUID | None,
    *,
    respect_claims: bool = True,
) -> tuple[int, int]:
    """Check that every input file is live and (un)claimed as the commit assumes."""
    rows = conn.execute(
        """
        SELECT file_id, end_snapshot, claim_token, claim_expires_at > now(), row_count, size_bytes
        FROM data_files WHERE table_id = %s AND file_id = ANY(%s)
        ORDER BY file_id FOR UPDATE
        """,
        (info.table_id, sorted(set(remove))),
    ).fetchall()
    found = {int(r[0]): r for r in rows}
    for file_id in remove:
        row = found.get(file_id)
        if row is None:
            raise CommitConflictError(f"{info.name!r}: input file {file_id} does not exist")
        if row[1] is not None:
            raise CommitConflictError(
                f"{info.name!r}: input file {file_id} was removed by snapshot {row[1]}"
            )
        holder, lease_active = row[2], bool(row[3])
        if claim_token is not None and holder != claim_token:
            raise CommitConflictError(
                f"{info.name!r}: input file {file_id} is no longer claimed by this job"
            )
        if claim_token is None and respect_claims and holder is not None and lease_active:
            raise CommitConflictError(f"{info.name!r}: input file {file_id} is claimed by a merge")
    return sum(int(r[4]) for r in rows), sum(int(r[5]) for r in rows)


def _check_commit_input(
    operation: Operation, add: Sequence[NewFile], remove: Sequence[int]
) -> None:
    if operation == "append" and (remove or not add):
        raise InvalidInputError("an append adds at least one file and removes none")
    if operation in ("replace", "delete") and not remove:
        raise InvalidInputError(f"a {operation} removes at least one file")
    if operation == "rollback" and not (add or remove):
        raise InvalidInputError("a rollback that changes no file is not committed")
    if len(remove) != len(set(remove)):
        raise InvalidInputError("a commit names the same input file twice")
    paths = [f.path for f in add]
    if len(paths) != len(set(paths)):
        raise InvalidInputError("a commit adds the same path twice")


def check_same_batch(
    table: str, key: str | None, snapshot_id: int, committed: str | None, retried: str | None
) -> None:
    """Refuse a retry of an idempotency key whose batch differs from the one it committed
    (snapshots committed before digests were kept, or without one, are trusted)."""
    if committed is not None and retried is not None and committed != retried:
        raise IdempotencyKeyReusedError(
            f"idempotency key {key!r} of {table!r} committed snapshot {snapshot_id} with another"
            " batch; a retry must send the same rows, and new rows need a new key"
        )


def _naive_utc(moment: datetime | None) -> datetime | None:
    """A partition start as stored (``timestamp``, UTC): an aware one as its UTC instant,
    whatever the session's time zone."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def _utc_text(moment: datetime | None) -> str | None:
    utc = _naive_utc(moment)
    return None if utc is None else utc.isoformat()


def _recreated(table: str) -> TableNotFoundError:
    return TableNotFoundError(
        f"table {table!r} was dropped (and created again) while this commit was prepared;"
        " nothing was committed"
    )


def _spec_changed(table: str, written: int | None, current: int) -> SpecChangedError:
    return SpecChangedError(
        f"the spec of {table!r} changed (version {written} to {current}) while this batch was"
        " written; nothing was committed"
    )


def _already_committed(table: str, snapshot_id: int) -> CommitResult:
    return CommitResult(
        table=table,
        snapshot_id=snapshot_id,
        committed=False,
        files_added=0,
        files_removed=0,
        rows_added=0,
    )


def _unique_violation(table: str, error: pgerrors.UniqueViolation) -> Exception:
    """What a commit's unique violation means, told by the constraint that was violated (the
    idempotency key and the receipts are looked up under the head lock, so only a file path
    is expected to collide)."""
    constraint = error.diag.constraint_name or ""
    if constraint == "data_files_path_key":
        return CommitConflictError(f"a file path of this commit is registered already in {table!r}")
    return CommitConflictError(
        f"commit to {table!r} violates the meta store constraint {constraint or '(unnamed)'}:"
        f" {str(error).strip().splitlines()[0]}"
    )


class _AppendAnswerLost(Exception):
    """An append statement got no answer (its connection broke, or any error came back but a
    unique violation): it may have committed."""


def _committed_before(conn: Conn, request: _CommitRequest) -> CommitResult | None:
    """The snapshot holding the append's files, if an attempt whose answer was lost committed
    them (their paths are unique: committed once or not at all); None when none is there."""
    if request.operation != "append" or not request.add:
        return None
    paths = sorted({f.path for f in request.add})
    with _statements_commit_alone(conn):
        found = conn.execute(
            "SELECT begin_snapshot, count(*) FROM data_files WHERE path = ANY(%s)"
            " GROUP BY begin_snapshot",
            (paths,),
        ).fetchall()
    if not found:
        return None
    if len(found) != 1 or int(found[0][1]) != len(paths):
        raise CommitConflictError(
            f"{request.info.name!r}: files of this append are registered already, not all of"
            " them in one snapshot"
        )
    snapshot_id = int(found[0][0])
    logger.warning(
        "the lost answer to an append to %s is found: it committed snapshot %d",
        request.info.name,
        snapshot_id,
    )
    return CommitResult(
        table=request.info.name,
        snapshot_id=snapshot_id,
        committed=True,
        files_added=len(request.add),
        files_removed=0,
        rows_added=sum(f.row_count for f in request.add),
    )


@contextmanager
def _statements_commit_alone(conn: Conn) -> Iterator[None]:
    """Autocommit (each statement its own transaction) for the block, then back, as every
    pooled connection must be; a connection that cannot go back (it broke) is closed, and
    the pool discards it."""
    conn.autocommit = True
    try:
        yield
    finally:
        try:
            conn.autocommit = False
        except psycopg.Error:
            conn.close()


def _rollback_quietly(conn: Conn) -> None:
    # A broken connection cannot roll back; the pool discards it and the server rolled back.
    with suppress(psycopg.Error):
        conn.rollback()


def _file_params(table_id: int, f: NewFile, snapshot_id: int) -> tuple[Any, ...]:
    return (
        table_id,
        f.path,
        f.partition_path,
        Jsonb(dict(f.partition_values)),
        _naive_utc(f.partition_start),
        f.size_bytes,
        f.row_count,
        f.row_group_count,
        Jsonb({name: stats.to_json() for name, stats in f.column_stats.items()}),
        snapshot_id,
        f.copy_of,
        f.spec_version,
    )


def _table_info(row: Sequence[Any]) -> TableInfo:
    return TableInfo(
        table_id=int(row[0]),
        name=str(row[1]),
        spec=_spec(row[2]),
        head_snapshot_id=int(row[3]),
        created_at=row[4],
    )


_SPECS: dict[str, TableSpec] = {}
_SPECS_KEPT = 256


def _spec(stored: Mapping[str, Any]) -> TableSpec:
    """The spec of a stored document; a document seen before is not parsed again (every query
    reads its tables' specs)."""
    key = json.dumps(stored, sort_keys=True)
    spec = _SPECS.get(key)
    if spec is None:
        spec = TableSpec.from_dict(stored)
        if len(_SPECS) >= _SPECS_KEPT:
            _SPECS.clear()
        _SPECS[key] = spec
    return spec


def _snapshot(row: Sequence[Any]) -> Snapshot:
    return Snapshot(
        snapshot_id=int(row[0]),
        parent_id=None if row[1] is None else int(row[1]),
        operation=row[2],
        committed_at=row[3],
        idempotency_key=row[4],
        files_added=int(row[5]),
        files_removed=int(row[6]),
        rows_added=int(row[7]),
        rows_removed=int(row[8]),
        bytes_added=int(row[9]),
        bytes_removed=int(row[10]),
        expired=bool(row[11]),
        batch_digest=row[12],
        rolled_back_to=None if row[13] is None else int(row[13]),
        spec_version=int(row[14]),
    )


def _data_file(row: Sequence[Any]) -> DataFile:
    stats: Mapping[str, Any] = row[8] or {}
    return DataFile(
        file_id=int(row[0]),
        path=str(row[1]),
        partition_path=str(row[2]),
        partition_values=row[3],
        partition_start=row[4],
        size_bytes=int(row[5]),
        row_count=int(row[6]),
        row_group_count=int(row[7]),
        column_stats=_column_stats(stats),
        begin_snapshot=int(row[9]),
        end_snapshot=None if row[10] is None else int(row[10]),
        created_at=row[11],
        claim_token=row[12],
        claimed=bool(row[13]),
        copy_of=None if row[14] is None else int(row[14]),
        spec_version=int(row[15]),
    )


@dataclass(frozen=True, slots=True)
class _Pin:
    table: str
    table_id: int
    snapshot_id: int
    spec_version: int  # the snapshot's (the table's current one at its head)


class PinnedSnapshot:
    """A resolved snapshot and the connection that resolved it (see :meth:`MetaStore.pin` and
    :meth:`MetaStore.read_tables`)."""

    def __init__(self, conn: Conn, pin: _Pin) -> None:
        self._conn = conn
        self._pin = pin
        self.table = pin.table
        self.snapshot_id = pin.snapshot_id
        self.spec_version = pin.spec_version

    def spec(self, current: TableSpec) -> TableSpec:
        """The spec a read of this snapshot uses: the version the snapshot was committed at
        (``current``, the table's spec now, unless the schema changed since)."""
        if current.version == self.spec_version:
            return current
        row = self._conn.execute(
            "SELECT spec FROM table_specs WHERE table_id = %s AND spec_version = %s",
            (self._pin.table_id, self.spec_version),
        ).fetchone()
        if row is None:
            raise SnapshotNotFoundError(
                f"table {self.table!r}: spec version {self.spec_version} of snapshot"
                f" {self.snapshot_id} is not recorded"
            )
        return _spec(row[0])

    def files(
        self,
        *,
        start_from: datetime | None = None,
        start_before: datetime | None = None,
        partition_equals: Mapping[str, JsonScalar] | None = None,
        may_match: FileCondition | None = None,
        renamed: StatNames | None = None,
    ) -> FileListing:
        """The snapshot's live files whose partition period starts in the window (and whose
        partition values equal ``partition_equals``), of which those ``may_match`` lets through
        (:mod:`icefloe.metastore.file_filter`) are returned: one lean query, so that planning
        stays cheap at 10^5 files. In no particular order (sorting 10^5 rows cost a third of
        the listing); the set is what a snapshot guarantees."""
        if self.snapshot_id == 0:
            return FileListing(paths=(), sizes=(), row_counts=(), spec_versions=(), considered=0)
        where, params = _live_at(
            self._pin.table_id,
            self.snapshot_id,
            start_from=start_from,
            start_before=start_before,
        )
        for i, (name, value) in enumerate(sorted((partition_equals or {}).items())):
            where = sql.SQL("{} AND partition_values -> {} = {}").format(
                where, sql.Literal(name), sql.Placeholder(f"partition_{i}")
            )
            params[f"partition_{i}"] = Jsonb(value)
        # One statement, one row: the files to read as one text (a row per file, four fields
        # each), their count, how many live files the window left (only when statistics
        # narrow them further, else the same number), and whether the snapshot is still
        # unexpired (an expired one's files may be partly forgotten). One row, not a row per
        # file: 10^5 row objects cost a plan two passes of the garbage collector (about 90 ms
        # of a 160 ms listing); one text costs a split.
        query = sql.SQL(
            "SELECT string_agg(path || E'\\t' || size_bytes || E'\\t' || row_count || E'\\t'"
            " || spec_version, E'\\n'), count(*), {considered},"
            " EXISTS (SELECT FROM snapshots WHERE table_id = %(table_id)s"
            " AND snapshot_id = %(at)s AND expired_at IS NULL)"
            " FROM data_files WHERE {where}{needed}"
        ).format(
            considered=sql.SQL("(SELECT count(*) FROM data_files WHERE {})").format(where)
            if may_match is not None
            else sql.SQL("NULL"),
            where=where,
            needed=sql.SQL(" AND {}").format(render(may_match, renamed=renamed))
            if may_match is not None
            else sql.SQL(""),
        )
        # Not prepared: a generic plan (Postgres's choice after a few runs of a prepared
        # statement) cannot use the snapshot id to pick the index, and was 1.7x slower at 10^5.
        row = self._conn.execute(query, params, prepare=False).fetchone()
        assert row is not None  # an aggregate without GROUP BY answers one row
        text, matched, considered, unexpired = row
        if not unexpired:
            raise SnapshotNotFoundError(
                f"snapshot {self.snapshot_id} of table {self.table!r} expired before its"
                " files were listed (older than the table's retention); query again"
            )
        fields = text.replace("\t", "\n").split("\n") if text is not None else []
        if len(fields) != 4 * matched:
            # Only a path holding a tab or a line break, which no valid key does.
            raise InvalidInputError(
                f"table {self.table!r}, snapshot {self.snapshot_id}: a file path in the meta"
                " store holds a control character"
            )
        paths = tuple(fields[0::4])
        sizes, row_counts, spec_versions = (tuple(map(int, fields[k::4])) for k in (1, 2, 3))
        if considered is None:
            considered = len(paths)
        return FileListing(
            paths=paths,
            sizes=sizes,
            row_counts=row_counts,
            spec_versions=spec_versions,
            considered=considered,
        )


class TablesRead:
    """Tables read in one transaction (see :meth:`MetaStore.read_tables`)."""

    def __init__(self, conn: Conn, tables: Mapping[str, TableInfo]) -> None:
        self._conn = conn
        self.tables = dict(tables)

    def pin(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> PinnedSnapshot:
        """The snapshot a read of ``table`` pins (as :meth:`MetaStore.resolve_snapshot`), in
        this transaction."""
        info = self.tables.get(table)
        if info is None:
            raise TableNotFoundError(f"no table named {table!r}")
        pin = _resolve_from(
            self._conn,
            table,
            info.table_id,
            info.head_snapshot_id,
            info.spec.version,
            snapshot_id=snapshot_id,
            as_of=as_of,
        )
        return PinnedSnapshot(self._conn, pin)


def _resolve(conn: Conn, table: str, *, snapshot_id: int | None, as_of: datetime | None) -> _Pin:
    head = conn.execute(
        "SELECT table_id, head_snapshot_id, spec_version FROM lake_tables"
        " WHERE name = %s AND dropped_at IS NULL",
        (table,),
    ).fetchone()
    if head is None:
        raise TableNotFoundError(f"no table named {table!r}")
    return _resolve_from(
        conn,
        table,
        int(head[0]),
        int(head[1]),
        int(head[2]),
        snapshot_id=snapshot_id,
        as_of=as_of,
    )


def _resolve_from(
    conn: Conn,
    table: str,
    table_id: int,
    head_snapshot_id: int,
    head_spec_version: int,
    *,
    snapshot_id: int | None,
    as_of: datetime | None,
) -> _Pin:
    if snapshot_id is None and as_of is None:
        return _Pin(table, table_id, head_snapshot_id, head_spec_version)
    if snapshot_id is not None:
        row = conn.execute(
            "SELECT snapshot_id, expired_at, spec_version FROM snapshots"
            " WHERE table_id = %s AND snapshot_id = %s",
            (table_id, snapshot_id),
        ).fetchone()
        wanted = f"snapshot {snapshot_id}"
    else:
        row = conn.execute(
            "SELECT snapshot_id, expired_at, spec_version FROM snapshots"
            " WHERE table_id = %s AND committed_at <= %s"
            " ORDER BY snapshot_id DESC LIMIT 1",
            (table_id, as_of),
        ).fetchone()
        wanted = f"a snapshot as of {as_of}"
    if row is None:
        raise SnapshotNotFoundError(f"table {table!r} has no {wanted}")
    if row[1] is not None:
        raise SnapshotNotFoundError(
            f"table {table!r}: {wanted} (snapshot {row[0]}) has expired"
            " (older than the table's retention)"
        )
    return _Pin(table, table_id, int(row[0]), int(row[2]))


def _live_at(
    table_id: int,
    snapshot_id: int,
    *,
    partitions: Sequence[str] | None = None,
    start_from: datetime | None = None,
    start_before: datetime | None = None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """The WHERE clause (and its parameters) of the files live at a snapshot."""
    where = [
        sql.SQL("table_id = %(table_id)s"),
        sql.SQL("begin_snapshot <= %(at)s"),
        sql.SQL("(end_snapshot IS NULL OR end_snapshot > %(at)s)"),
    ]
    params: dict[str, Any] = {"table_id": table_id, "at": snapshot_id}
    if partitions is not None:
        where.append(sql.SQL("partition_path = ANY(%(partitions)s)"))
        params["partitions"] = list(partitions)
    if start_from is not None:
        where.append(sql.SQL("partition_start >= %(start_from)s"))
        params["start_from"] = start_from
    if start_before is not None:
        where.append(sql.SQL("partition_start < %(start_before)s"))
        params["start_before"] = start_before
    return sql.SQL(" AND ").join(where), params


def _column_stats(value: Mapping[str, Any] | None) -> dict[str, ColumnStats]:
    return {name: ColumnStats.from_json(v) for name, v in (value or {}).items() if v is not None}


def _files_at(
    conn: Conn,
    table_id: int,
    snapshot_id: int,
    *,
    partitions: Sequence[str] | None = None,
    start_from: datetime | None = None,
    start_before: datetime | None = None,
) -> list[DataFile]:
    where, params = _live_at(
        table_id,
        snapshot_id,
        partitions=partitions,
        start_from=start_from,
        start_before=start_before,
    )
    query = sql.SQL("SELECT {columns} FROM data_files WHERE {where} ORDER BY file_id").format(
        columns=sql.SQL(_FILE_COLUMNS), where=where
    )
    return [_data_file(row) for row in conn.execute(query, params).fetchall()]
