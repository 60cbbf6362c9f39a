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
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import duckdb

from icefloe import duck
from icefloe.duck import ident
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
    """The engine's DuckDB: built on first use, locked down, rebuilt when old.

    Queries of several threads may run at once, each in a :meth:`session`. A database being
    replaced (older than its age, or after :meth:`forget_views`) is closed when its last
    session ends, and a shared view is dropped only when no session is using it, so neither
    ever breaks a query that is running.
    """

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
        settings: Sequence[str] = (),
    ) -> None:
        """``settings``: statements run on each new database before it is locked, beside
        the query database's own."""
        self._root = root_uri.rstrip("/") + "/"
        self.limits = limits
        self._configure = configure
        self._settings = tuple(settings)
        self._max_age_s = max_age_s
        self._max_views = max_views
        self._max_idle = max_idle_cursors
        self._clock = clock
        # Guards _current and the state of every _Views (the lock's holder calls the
        # methods whose docstrings say so).
        self._lock = threading.Lock()
        self._current: _Views | None = None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A fresh connection to the warm database, outside any session: it stays valid until
        the database is replaced or closed."""
        with self._lock:
            return self._fresh().db.cursor()

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
        keys: ViewKeys = tuple((table, shared_view_name(body)) for table, body in views)
        with self._lock:
            built = self._fresh()
            built.sessions += 1
            built.in_use.update(key for _, key in keys)
            cursor = built.take_idle(keys)
        reused = cursor is not None
        ended_normally = False
        try:
            if cursor is None:
                cursor = built.db.cursor()
            with time_limit(cursor, seconds=time_limit_s, fired=fired):
                if not reused:
                    for table, body in views:
                        self._bind(built, cursor, table, body)
                if fired.is_set():
                    # The limit passed between statements (binding waits for the lock): DuckDB
                    # forgets an interrupt sent when nothing runs, so the query would run on.
                    raise duckdb.InterruptException("the time limit passed before the query ran")
                yield cursor
            ended_normally = not fired.is_set()
        finally:
            with self._lock:
                built.sessions -= 1
                built.release(keys)
                kept = (
                    cursor is not None
                    and ended_normally
                    and built is self._current
                    and built.keep_idle(keys, cursor, max_idle=self._max_idle)
                )
                try:
                    if cursor is not None and not kept:
                        cursor.close()
                    if built is self._current:
                        built.drop_unused()
                except duckdb.Error:
                    # A database that cannot close a cursor or drop a view is replaced; the
                    # query's own outcome stands.
                    if built is self._current:
                        self._retire()
                if built is not self._current and built.sessions == 0:
                    built.db.close()

    def bind_view(self, cursor: duckdb.DuckDBPyConnection, table: str, body: str) -> None:
        """Make ``table`` in ``cursor`` (a cursor of the current database) a view of ``body``
        (a SELECT), sharing the database's cached view of the same definition."""
        with self._lock:
            built = self._fresh()
        self._bind(built, cursor, table, body)

    def _bind(
        self, built: _Views, cursor: duckdb.DuckDBPyConnection, table: str, body: str
    ) -> None:
        key = shared_view_name(body)
        with self._lock:
            built.define(key, body, max_views=self._max_views)
        cursor.execute(f"CREATE TEMP VIEW {ident(table)} AS SELECT * FROM {VIEW_SCHEMA}.{key}")

    def forget_views(self) -> None:
        """Start afresh after a read failed (a cached view or footer may name a file that is
        gone): the next session gets a new database; this one closes when its last session
        ends."""
        with self._lock:
            self._retire()

    def close(self) -> None:
        """Close the database once its sessions end (a later session opens a new one)."""
        with self._lock:
            self._retire()

    def _fresh(self) -> _Views:
        """The current database, replaced first when it is older than its age (the lock's
        holder)."""
        built = self._current
        if built is None or self._clock() - built.born > self._max_age_s:
            self._retire()
            built = self._current = _Views(self._open(), born=self._clock())
        return built

    def _retire(self) -> None:
        """Stop handing out the current database; close it now if no session runs on it
        (the lock's holder)."""
        built, self._current = self._current, None
        if built is None:
            return
        built.close_idle()
        if built.sessions == 0:
            built.db.close()

    def _open(self) -> duckdb.DuckDBPyConnection:
        return open_locked(
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
                *self._settings,
            ),
        )


@dataclass(eq=False)
class _Views:
    """One query database and what is kept on it: the shared views (least recently used
    first), the idle cursors by the views bound on them, and how many running sessions use
    each view. Every method is called by the holder of the :class:`QueryDatabase`'s lock."""

    db: duckdb.DuckDBPyConnection
    born: float
    sessions: int = 0
    views: OrderedDict[str, None] = field(default_factory=OrderedDict)
    idle: OrderedDict[ViewKeys, list[duckdb.DuckDBPyConnection]] = field(
        default_factory=OrderedDict
    )
    in_use: Counter[str] = field(default_factory=Counter)
    # Views evicted from ``views`` while a session used them: dropped when none does.
    evicted: set[str] = field(default_factory=set)

    def define(self, key: str, body: str, *, max_views: int) -> None:
        """Make ``key`` a shared view of ``body`` (kept if it exists), evicting the least
        recently used views past ``max_views``."""
        if key in self.views:
            self.views.move_to_end(key)
            return
        if key in self.evicted:
            self.evicted.discard(key)
        else:
            self.db.execute(f"CREATE VIEW {VIEW_SCHEMA}.{key} AS {body}")
        self.views[key] = None
        while len(self.views) > max_views:
            oldest, _ = self.views.popitem(last=False)
            self.evicted.add(oldest)
        self.drop_unused()

    def drop_unused(self) -> None:
        """Drop the evicted views no running session uses, and the idle cursors bound to
        them."""
        for key in [key for key in self.evicted if key not in self.in_use]:
            self.evicted.discard(key)
            for keys in [k for k in self.idle if any(view == key for _, view in k)]:
                for idle in self.idle.pop(keys):
                    idle.close()
            self.db.execute(f"DROP VIEW IF EXISTS {VIEW_SCHEMA}.{key}")

    def release(self, keys: ViewKeys) -> None:
        """A session using the views of ``keys`` ended."""
        for _, key in keys:
            self.in_use[key] -= 1
            if self.in_use[key] <= 0:
                del self.in_use[key]

    def take_idle(self, keys: ViewKeys) -> duckdb.DuckDBPyConnection | None:
        """An idle cursor bound to the views of ``keys``, which count as used now."""
        idle = self.idle.get(keys)
        if not idle:
            return None
        cursor = idle.pop()
        if not idle:
            del self.idle[keys]
        for _, key in keys:
            if key in self.views:
                self.views.move_to_end(key)
        return cursor

    def keep_idle(
        self, keys: ViewKeys, cursor: duckdb.DuckDBPyConnection, *, max_idle: int
    ) -> bool:
        """Keep ``cursor`` for the next session bound to ``keys`` if its views still stand."""
        if any(key not in self.views for _, key in keys):
            return False
        self.idle.setdefault(keys, []).append(cursor)
        self.idle.move_to_end(keys)
        while sum(len(c) for c in self.idle.values()) > max_idle:
            _, oldest = self.idle.popitem(last=False)
            for idle in oldest:
                idle.close()
        return True

    def close_idle(self) -> None:
        for cursors in self.idle.values():
            for idle in cursors:
                idle.close()
        self.idle.clear()


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


def shared_view_name(body: str) -> str:
    """The shared view's name for a definition."""
    return "v_" + hashlib.sha256(body.encode()).hexdigest()[:24]
