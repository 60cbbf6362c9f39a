"""The Postgres meta store: tables, snapshots, files, and the commit protocol.

:class:`MetaStore` holds the connection pool and hands out connections and transactions; its
methods come from one class per concern, each in a module of its own: the table catalog
(:mod:`~icefloe.metastore.catalog`), snapshot and file reads (:mod:`~icefloe.metastore.snapshots`,
with pinned reads in :mod:`~icefloe.metastore.pinned`), claims and leases
(:mod:`~icefloe.metastore.claims`) and commits (:mod:`~icefloe.metastore.commits`, their
statements in :mod:`~icefloe.metastore.commit_sql`). The companion stores (compaction jobs,
delete jobs, maintenance, Iceberg publications) send their statements through
:meth:`MetaStore.transaction` and :meth:`MetaStore.read_transaction`, on the same pool.

Only the package ``icefloe.metastore`` talks to Postgres: no other module of icefloe imports
psycopg. Every statement is parameterized; the schema name, the one identifier that varies,
goes through ``psycopg.sql``.

Commit protocol: the caller writes its objects first, then :meth:`MetaStore.commit`
runs one short transaction that locks the table's head row, validates the commit's assumptions,
takes ``head + 1`` as the snapshot id, adds and ends file rows, records the snapshot and moves the
head. Locking the head makes snapshot ids follow commit order.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import ConnectionPool, PoolTimeout

from icefloe.errors import (
    InvalidInputError,
    MetaStoreNotInitializedError,
    MetaStoreUnavailableError,
)
from icefloe.metastore.access import TRANSIENT, Conn, statements_commit_alone
from icefloe.metastore.catalog import Catalog
from icefloe.metastore.claims import Claims
from icefloe.metastore.commit_sql import check_same_batch
from icefloe.metastore.commits import Commits
from icefloe.metastore.credentials import (
    DEFAULT_MIN_REFRESH_INTERVAL_S,
    DsnSource,
    FixedDsn,
    RefreshGate,
    refreshing_connection_class,
)
from icefloe.metastore.migrate import MigrationReport, migrate
from icefloe.metastore.pinned import PinnedSnapshot, TablesRead
from icefloe.metastore.snapshots import SnapshotReads

# Re-exported: callers import these from here.
__all__ = [
    "CHECK_AFTER_IDLE_S",
    "Conn",
    "MetaStore",
    "PinnedSnapshot",
    "TablesRead",
    "check_same_batch",
]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


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


class MetaStore(Catalog, SnapshotReads, Claims, Commits):
    """Tables, snapshots and files in Postgres, with validated optimistic commits.

    Thread-safe: connections come from a pool, one per operation. This class holds the pool
    and hands out its connections and transactions; the methods of each concern come from
    the class it derives from (catalog, snapshot reads, claims, commits).
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
            # search_path and a UTC session (a naive time is UTC, whatever the server's
            # default zone) as startup options: no statement per new connection.
            kwargs={"options": f"-c search_path={schema} -c TimeZone=UTC"},
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
        except TRANSIENT:
            raise
        except psycopg.OperationalError as e:
            raise MetaStoreUnavailableError(f"meta store connection failed: {e}") from e

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        """A read-write transaction on a pooled connection: committed when the block ends,
        rolled back when it raises. What the meta store's companion stores (compaction jobs,
        delete jobs, maintenance, publications) write through, so that the pool, the errors it raises and
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
        with self._connection() as conn, statements_commit_alone(conn):
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
