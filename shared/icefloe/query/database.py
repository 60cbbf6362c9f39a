"""One warm, locked-down DuckDB per query engine, reused by every query it runs.

Opening a DuckDB, loading httpfs, creating the S3 secret and locking the configuration cost
tens of milliseconds; a warm Lambda container or a long-lived process pays them once. Each
query gets its own cursor (a DuckDB connection to the same database): the tables it names are
TEMP views of that cursor, so concurrent queries never see each other's snapshots. The view
over a snapshot's files is created once in a shared schema, named by a hash of its definition,
and kept (least recently used first out), so Parquet footers are read once per file set, and
with DuckDB's Parquet metadata cache once per file.

Access rules are per directory: the database may open files under the warehouse root only.
Which of those files a query reaches is decided by the views and by the parse-tree checks of
:mod:`icefloe.query.sandbox`, which refuse every table function that reads a path.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import duckdb

from icefloe import duck
from icefloe.duck import ident
from icefloe.query.sandbox import QueryLimits, lock_down

VIEW_SCHEMA = "icefloe_views"
DEFAULT_MAX_VIEWS = 256
# The secret a database was configured with may hold temporary credentials: rebuild after this.
DEFAULT_MAX_AGE_S = 15 * 60.0

Configure = Callable[[duckdb.DuckDBPyConnection], None]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A small thread-safe map that forgets its least recently used entry past ``size``."""

    def __init__(self, size: int, *, on_evict: Callable[[K], None] | None = None) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._on_evict = on_evict

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                evicted, _ = self._items.popitem(last=False)
                if self._on_evict is not None:
                    self._on_evict(evicted)

    def clear(self) -> list[K]:
        """Forget everything; returns the keys that were held."""
        with self._lock:
            keys = list(self._items)
            self._items.clear()
            return keys


class QueryDatabase:
    """The engine's DuckDB: built on first use, locked down, rebuilt when old."""

    def __init__(
        self,
        *,
        root_uri: str,
        limits: QueryLimits,
        configure: Configure | None = None,
        max_views: int = DEFAULT_MAX_VIEWS,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._root = root_uri.rstrip("/") + "/"
        self.limits = limits
        self._configure = configure
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._born = 0.0
        # Names of the shared views (called by the lock's holder, so the drop needs no lock).
        self._views: LruCache[str, bool] = LruCache(max_views, on_evict=self._drop_view)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A fresh connection to the warm database, for one query."""
        with self._lock:
            if self._db is None or self._clock() - self._born > self._max_age_s:
                self._rebuild()
            assert self._db is not None
            return self._db.cursor()

    def bind_view(self, cursor: duckdb.DuckDBPyConnection, table: str, body: str) -> None:
        """Make ``table`` in ``cursor`` a view of ``body`` (a SELECT), sharing the database's
        cached view of the same definition."""
        key = "v_" + hashlib.sha256(body.encode()).hexdigest()[:24]
        with self._lock:
            assert self._db is not None
            if self._views.get(key) is None:
                self._db.execute(f"CREATE VIEW {VIEW_SCHEMA}.{key} AS {body}")
                self._views.put(key, True)
        cursor.execute(f"CREATE TEMP VIEW {ident(table)} AS SELECT * FROM {VIEW_SCHEMA}.{key}")

    def forget_views(self) -> None:
        """Drop the cached views (after a read failed, their files may be gone)."""
        with self._lock:
            for key in self._views.clear():
                self._drop_view(key)

    def _drop_view(self, key: str) -> None:
        if self._db is not None:
            self._db.execute(f"DROP VIEW IF EXISTS {VIEW_SCHEMA}.{key}")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
            self._db = None
            self._views.clear()

    def _rebuild(self) -> None:
        if self._db is not None:
            self._db.close()
        self._views.clear()
        db = duck.connect()
        if self._configure is not None:
            self._configure(db)
        db.execute(f"CREATE SCHEMA {VIEW_SCHEMA}")
        db.execute("SET parquet_metadata_cache = true")  # objects are never overwritten
        lock_down(db, allowed_directories=[self._root], limits=self.limits)
        self._db = db
        self._born = self._clock()
