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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from icefloe import duck
from icefloe.duck import ident
from icefloe.query.lru import LruCache
from icefloe.query.sandbox import lock_down, time_limit
from icefloe.settings.limits import QueryLimits

VIEW_SCHEMA = "icefloe_views"
DEFAULT_MAX_VIEWS = 256
# The secret a database was configured with may hold temporary credentials: rebuild after this.
DEFAULT_MAX_AGE_S = 15 * 60.0
DEFAULT_MAX_IDLE_CURSORS = 16

Configure = Callable[[duckdb.DuckDBPyConnection], None]
# The views bound on a cursor: (table, shared view name) pairs.
ViewKeys = tuple[tuple[str, str], ...]


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
        max_idle_cursors: int = DEFAULT_MAX_IDLE_CURSORS,
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
        self._generation = 0
        # Names of the shared views (called by the lock's holder, so the drop needs no lock).
        self._views: LruCache[str, bool] = LruCache(max_views, on_evict=self._drop_view)
        # Idle cursors by the views bound on them, least recently returned first.
        self._idle: OrderedDict[ViewKeys, list[duckdb.DuckDBPyConnection]] = OrderedDict()
        self._max_idle = max_idle_cursors

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A fresh connection to the warm database, for one query."""
        with self._lock:
            return self._fresh_db().cursor()

    @contextmanager
    def session(
        self, views: Sequence[tuple[str, str]], *, time_limit_s: float, fired: threading.Event
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on which each ``(table, body)`` of ``views`` is a TEMP view of ``body``,
        interrupted when binding the views and the block take longer than ``time_limit_s``
        (then ``fired`` is set).

        A cursor bound to the same views by an earlier query is reused when one is idle (the
        sandbox lets a query change nothing on it), which saves binding the views again; after
        a query that ended normally in time the cursor is kept for the next one."""
        keys: ViewKeys = tuple((table, _view_key(body)) for table, body in views)
        with self._lock:
            self._fresh_db()
            generation = self._generation
            idle = self._idle.get(keys)
            cursor = idle.pop() if idle else None
            if idle is not None and not idle:
                del self._idle[keys]
        reused = cursor is not None
        ended_normally = False
        try:
            if cursor is None:
                cursor = self.cursor()
            with time_limit(cursor, seconds=time_limit_s, fired=fired):
                if not reused:
                    for table, body in views:
                        self.bind_view(cursor, table, body)
                yield cursor
            ended_normally = not fired.is_set()
        finally:
            if cursor is not None and not (
                ended_normally and self._keep_idle(keys, cursor, generation)
            ):
                cursor.close()

    def _keep_idle(
        self, keys: ViewKeys, cursor: duckdb.DuckDBPyConnection, generation: int
    ) -> bool:
        with self._lock:
            if generation != self._generation or any(
                self._views.get(key) is None for _, key in keys
            ):
                return False
            self._idle.setdefault(keys, []).append(cursor)
            self._idle.move_to_end(keys)
            while sum(len(c) for c in self._idle.values()) > self._max_idle:
                _, oldest = self._idle.popitem(last=False)
                for idle in oldest:
                    idle.close()
            return True

    def bind_view(self, cursor: duckdb.DuckDBPyConnection, table: str, body: str) -> None:
        """Make ``table`` in ``cursor`` a view of ``body`` (a SELECT), sharing the database's
        cached view of the same definition."""
        key = _view_key(body)
        with self._lock:
            assert self._db is not None
            if self._views.get(key) is None:
                self._db.execute(f"CREATE VIEW {VIEW_SCHEMA}.{key} AS {body}")
                self._views.put(key, True)
        cursor.execute(f"CREATE TEMP VIEW {ident(table)} AS SELECT * FROM {VIEW_SCHEMA}.{key}")

    def forget_views(self) -> None:
        """Drop the cached views (after a read failed, their files may be gone)."""
        with self._lock:
            self._close_idle()
            for key, _ in self._views.clear():
                self._drop_view(key)

    def _drop_view(self, key: str, _: object = None) -> None:
        for keys in [k for k in self._idle if any(view == key for _, view in k)]:
            for idle in self._idle.pop(keys):
                idle.close()
        if self._db is not None:
            self._db.execute(f"DROP VIEW IF EXISTS {VIEW_SCHEMA}.{key}")

    def _close_idle(self) -> None:
        for cursors in self._idle.values():
            for idle in cursors:
                idle.close()
        self._idle.clear()

    def _fresh_db(self) -> duckdb.DuckDBPyConnection:
        """The database, rebuilt first when it is older than its age (the lock's holder)."""
        if self._db is None or self._clock() - self._born > self._max_age_s:
            self._rebuild()
        assert self._db is not None
        return self._db

    def close(self) -> None:
        with self._lock:
            self._close_idle()
            if self._db is not None:
                self._db.close()
            self._db = None
            self._views.clear()
            self._generation += 1

    def _rebuild(self) -> None:
        self._close_idle()
        if self._db is not None:
            self._db.close()
        self._views.clear()
        self._generation += 1
        self._db = open_locked(
            root_uri=self._root,
            limits=self.limits,
            configure=self._configure,
            settings=(
                f"CREATE SCHEMA {VIEW_SCHEMA}",
                # Objects are never overwritten and their keys never reused, so a footer or a
                # byte range read once stays true: neither cache needs to look at the file
                # again. NO_VALIDATION also spares the lock-down one path check per cached
                # file per query.
                "SET GLOBAL parquet_metadata_cache = true",
                "SET GLOBAL validate_external_file_cache = 'NO_VALIDATION'",
            ),
        )
        self._born = self._clock()


class WorkDatabase:
    """A locked-down DuckDB for icefloe's own work over the warehouse's files (merges, the
    rewrites of deletes), shared by the jobs of one process: each job runs in a
    :meth:`session`, a cursor of its own whose TEMP views and tables no other job sees.

    Opening a DuckDB costs about 16 ms of CPU (registering its built-in functions) and closing
    it 2 ms: more than a small merge spends reading and writing its files. This one is built
    on first use and rebuilt when older than its age (its ``configure`` may hold temporary
    credentials) or after a session failed (a DuckDB error can leave a database invalidated).
    A database being replaced is closed when its last session ends.

    Jobs running at once share its ``limits``: the memory limit and threads bound the process's
    DuckDB work, not each job's. The lock-down lets it read files under the warehouse root;
    the SQL it runs is icefloe's own, around expressions checked as a query's are (a delete's
    predicate, a custom merge query).
    """

    def __init__(
        self,
        *,
        root_uri: str,
        limits: QueryLimits,
        configure: Configure | None = None,
        settings: Callable[[], Sequence[str]] = tuple,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``settings`` gives the statements run on each new database before it is locked
        down, asked once per database (a spill directory must be the database's own: two
        databases spilling into one overwrite each other's files)."""
        self._root = root_uri.rstrip("/") + "/"
        self.limits = limits
        self._configure = configure
        self._settings = settings
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._current: _Built | None = None
        # How many databases it opened (each an open and a lock-down).
        self.opened = 0

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the database for one job, closed after it."""
        with self._lock:
            built = self._current
            if built is None or self._clock() - built.born > self._max_age_s:
                self._retire(built)
                built = self._current = _Built(
                    open_locked(
                        root_uri=self._root,
                        limits=self.limits,
                        configure=self._configure,
                        settings=self._settings(),
                    ),
                    born=self._clock(),
                )
                self.opened += 1
            cursor = built.db.cursor()
            built.sessions += 1
        failed = True
        try:
            yield cursor
            failed = False
        finally:
            try:
                cursor.close()
            finally:
                self._end(built, failed=failed)

    def _end(self, built: _Built, *, failed: bool) -> None:
        """A session of ``built`` ended: retire it if the session failed, close it if it was
        retired and this was its last session."""
        with self._lock:
            built.sessions -= 1
            if failed and built is self._current:
                self._retire(built)
            elif built is not self._current and built.sessions == 0:
                built.db.close()

    def close(self) -> None:
        """Close the database once its sessions end (a later session opens a new one)."""
        with self._lock:
            self._retire(self._current)

    def _retire(self, built: _Built | None) -> None:
        """Stop handing out ``built`` (the lock's holder); close it when no session runs."""
        if built is None:
            return
        if built is self._current:
            self._current = None
        if built.sessions == 0:
            built.db.close()


@dataclass(eq=False)
class _Built:
    db: duckdb.DuckDBPyConnection
    born: float
    sessions: int = 0


def open_locked(
    *,
    root_uri: str,
    limits: QueryLimits,
    configure: Configure | None,
    settings: Sequence[str] = (),
) -> duckdb.DuckDBPyConnection:
    """A new DuckDB: ``configure`` run on it, then ``settings``, then locked down to read
    files under ``root_uri`` only."""
    db = duck.connect()
    try:
        if configure is not None:
            configure(db)
        for statement in settings:
            db.execute(statement)
        lock_down(db, allowed_directories=[root_uri.rstrip("/") + "/"], limits=limits)
    except BaseException:
        db.close()
        raise
    return db


def _view_key(body: str) -> str:
    """The shared view's name for a definition."""
    return "v_" + hashlib.sha256(body.encode()).hexdigest()[:24]
