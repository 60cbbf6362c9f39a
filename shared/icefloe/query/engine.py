"""Snapshot-pinned SQL: each table the query names becomes a view over exactly the files of
one snapshot, pruned by partition and statistics, and the query runs in a locked-down DuckDB.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

import pyarrow as pa

from icefloe.errors import (
    ConfigError,
    InvalidInputError,
    SnapshotNotFoundError,
    TableNotFoundError,
)
from icefloe.metastore.store import MetaStore, PinnedSnapshot
from icefloe.query.database import Configure
from icefloe.query.executor import (
    Executor,
    InProcessExecutor,
    QueryFailedError,
    QueryReadError,
    QueryRefusedByDuckDB,
)
from icefloe.query.isolation import ChildProcessExecutor
from icefloe.query.lru import LruCache
from icefloe.query.pruning import ColumnRange, file_condition, listing_window
from icefloe.query.pruning import time_range as time_range_of
from icefloe.query.s3_access import S3Endpoint
from icefloe.query.sandbox import CheckedQuery, QueryRefusedError, check_query, check_references
from icefloe.query.scan_filters import TableScans, shared_scan_planner
from icefloe.query.tenant_access import TenantRead, tenant_partition, tenant_read
from icefloe.query.views import (
    TimeRange,
    check_window,
    files_source,
    standin_source,
    view_body,
    view_sql,
)
from icefloe.settings.limits import QueryLimits
from icefloe.spec import TableSpec
from icefloe.spec.reading import stat_names
from icefloe.storage import ObjectStore
from icefloe.tracing import span

logger = logging.getLogger(__name__)

Isolation = Literal["in_process", "child_process"]
PLAN_CACHE_SIZE = 256
# Tenants whose read sessions (each a database of its own) are kept warm.
TENANT_EXECUTORS = 4
__all__ = [
    "QueryEngine",
    "QueryFailedError",
    "QueryRefusedByDuckDB",
    "QueryResult",
    "ScanStats",
    "TablePlan",
]


@dataclass(frozen=True, slots=True)
class ScanStats:
    """What pruning left of one table a query read: the snapshot, the files it held, the files
    and bytes read (the figure Athena calls data scanned)."""

    table: str
    snapshot_id: int
    files_considered: int
    files_scanned: int
    bytes_scanned: int

    def to_dict(self) -> dict[str, str | int]:
        return {
            "table": self.table,
            "snapshot_id": self.snapshot_id,
            "files_considered": self.files_considered,
            "files_scanned": self.files_scanned,
            "bytes_scanned": self.bytes_scanned,
        }


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What a query read of one table: the snapshot, and the files before and after pruning."""

    table: str
    snapshot_id: int
    files_considered: int
    files_scanned: int
    bytes_scanned: int
    paths: tuple[str, ...]
    # The schema version the read used (the snapshot's), and the version each path was
    # written at (see icefloe.spec.layout): what a reader of ``paths`` needs to map columns.
    spec_version: int = 1
    file_versions: tuple[int, ...] = ()

    @property
    def stats(self) -> ScanStats:
        return ScanStats(
            table=self.table,
            snapshot_id=self.snapshot_id,
            files_considered=self.files_considered,
            files_scanned=self.files_scanned,
            bytes_scanned=self.bytes_scanned,
        )


@dataclass(frozen=True, slots=True)
class QueryResult:
    rows: pa.Table
    plans: tuple[TablePlan, ...]

    def plan(self, table: str) -> TablePlan:
        return next(p for p in self.plans if p.table == table)

    @property
    def stats(self) -> tuple[ScanStats, ...]:
        """One per table the query read (a table it names twice is read through one view)."""
        return tuple(p.stats for p in self.plans)


class QueryEngine:
    """Runs callers' SELECTs over snapshot-pinned views of the lake's tables.

    ``pruning=False`` reads every file of each pinned snapshot: the reference the differential
    tests compare the pruned answers with.
    """

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        limits: QueryLimits | None = None,
        configure: Configure | None = None,
        pruning: bool = True,
        on_plan: Callable[[tuple[TablePlan, ...]], None] | None = None,
        isolation: Isolation = "in_process",
        s3: S3Endpoint | None = None,
        tenant_read_role: str | None = None,
    ) -> None:
        """``configure`` runs once on each new DuckDB database before it is locked down (S3
        credentials, the httpfs extension). ``on_plan`` sees each query's plans after the
        files are listed and before DuckDB reads them (logging, metrics).

        ``isolation="child_process"`` runs DuckDB in a watched child process (see
        :mod:`icefloe.query.isolation`): the memory and time limits then hold even for
        queries DuckDB's own limits miss. The child reads S3 through ``s3``, as a callable
        ``configure`` cannot cross to another process.

        ``tenant_read_role`` (an S3 warehouse's role ARN) makes each tenant's queries run in a
        database of their own whose S3 credentials are that role narrowed to the tenant's
        objects (see :mod:`icefloe.query.tenant_access`)."""
        if tenant_read_role is not None and s3 is None:
            raise ConfigError("a tenant read role needs an S3 warehouse (s3=)")
        if isolation == "child_process" and configure is not None:
            raise ConfigError("a child-process engine takes s3=, not configure=")
        self._meta = meta
        self._objects = objects
        self.limits = limits or QueryLimits()
        self._configure = configure
        self.pruning = pruning
        self._on_plan = on_plan
        self._isolation: Isolation = isolation
        self._s3 = s3
        self._tenant_read_role = tenant_read_role
        self._planner = shared_scan_planner()
        self._executor: Executor | None = None
        self._tenant_executors: LruCache[TenantRead, Executor] = LruCache(
            TENANT_EXECUTORS, on_evict=lambda _, executor: executor.close()
        )
        self._scan_cache: LruCache[Hashable, dict[str, TableScans]] = LruCache(PLAN_CACHE_SIZE)
        # A plan and its view's FROM source (None: no file).
        self._plan_cache: LruCache[Hashable, tuple[TablePlan, str | None]] = LruCache(
            PLAN_CACHE_SIZE
        )

    def close(self) -> None:
        """Close the warm DuckDB (a later query opens a new one)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        for _, executor in self._tenant_executors.clear():
            executor.close()

    @property
    def executor(self) -> Executor:
        """Where queries run; rebuilt when the limits change."""
        if self._executor is None or self._executor.limits != self.limits:
            self.close()
            self._executor = self._new_executor(self._s3)
        return self._executor

    def _new_executor(self, s3: S3Endpoint | None) -> Executor:
        if self._isolation == "child_process":
            return ChildProcessExecutor(root_uri=self._objects.root_uri, limits=self.limits, s3=s3)
        configure = self._configure
        if configure is None and s3 is not None:
            configure = s3.configure
        return InProcessExecutor(
            root_uri=self._objects.root_uri, limits=self.limits, configure=configure
        )

    def _executor_for(self, tenant: str | None, specs: Mapping[str, TableSpec]) -> Executor:
        """The tenant's own executor when tenants read through IAM, else the shared one."""
        shared = self.executor  # also closes every executor when the limits changed
        if tenant is None or self._tenant_read_role is None:
            return shared
        assert self._s3 is not None
        read = tenant_read(
            role_arn=self._tenant_read_role,
            root_uri=self._objects.root_uri,
            specs=specs,
            tenant=tenant,
        )
        executor = self._tenant_executors.get(read)
        if executor is None:
            executor = self._new_executor(
                replace(
                    self._s3,
                    role_arn=read.role_arn,
                    session_policy=read.session_policy,
                    session_name=read.session_name,
                )
            )
            self._tenant_executors.put(read, executor)
        return executor

    def query(
        self,
        sql: str,
        *,
        snapshot_id: int | None = None,
        as_of: datetime | None = None,
        time_range: Mapping[str, TimeRange] | None = None,
        tenant: str | None = None,
    ) -> QueryResult:
        """Run one SELECT. ``snapshot_id`` (one table only) or ``as_of`` pins the snapshot of
        each table; by default each table's head. ``time_range`` restricts a table's view (a
        table with no time partition refuses a window; so does a table the query does not
        read). ``tenant`` scopes every table to that
        tenant's partition, whatever the SQL says."""
        if tenant is not None:
            check_tenant(tenant)
        checked = check_query(sql, limits=self.limits)
        return self._query(checked, snapshot_id, as_of, time_range, tenant)

    def _query(
        self,
        checked: CheckedQuery,
        snapshot_id: int | None,
        as_of: datetime | None,
        time_range: Mapping[str, TimeRange] | None,
        tenant: str | None,
    ) -> QueryResult:
        refs = self._planner.analyze(checked.analyzed)
        # The named tables' specs, their snapshots and files: one transaction, one moment.
        with span("icefloe.query.plan"), self._meta.read_tables(refs.tables) as read:
            lake_tables = read.tables
            check_references(refs, lake_tables=lake_tables)
            named = sorted(refs.tables)
            if snapshot_id is not None and len(named) != 1:
                raise InvalidInputError("a snapshot id pins one table; use as_of for several")
            if tenant is not None:
                unscoped = [t for t in named if lake_tables[t].spec.tenant_column is None]
                if unscoped:
                    raise QueryRefusedError(
                        f"query refused: table {unscoped[0]!r} has no tenant column,"
                        " so a tenant's query cannot read it"
                    )
            pins = {name: read.pin(name, snapshot_id=snapshot_id, as_of=as_of) for name in named}
            # Each table read with the schema of the snapshot it pins.
            specs = {name: pins[name].spec(lake_tables[name].spec) for name in named}
            unread = sorted(set(time_range or {}) - set(named))
            if unread:
                raise InvalidInputError(
                    f"time_range names table {unread[0]!r}, which the query does not read"
                    f" (it reads {', '.join(map(repr, named))})"
                )
            windows = {name: (time_range or {}).get(name) for name in named}
            for name in named:
                check_window(specs[name], windows[name])
            scans = self._scans(checked, specs, windows, tenant)
            planned = [
                self._plan(
                    pins[name],
                    read.tables[name].table_id,
                    specs[name],
                    scans[name],
                    window=windows[name],
                    tenant=tenant,
                )
                for name in named
            ]
        plans = tuple(plan for plan, _ in planned)
        if self._on_plan is not None:
            self._on_plan(plans)
        views = []
        for plan, source in planned:
            views.append(
                (
                    plan.table,
                    view_body(specs[plan.table], source, windows[plan.table], tenant=tenant),
                )
            )
        executor = self._executor_for(tenant, specs)
        try:
            with span("icefloe.query.execute"):
                rows = executor.execute(
                    checked.statement, views, without_filter_pushdown=refs.may_lose_null_rows
                )
        except QueryReadError:
            executor.forget_views()
            self._check_still_live(plans)
            raise
        return QueryResult(rows=rows, plans=plans)

    def _scans(
        self,
        checked: CheckedQuery,
        specs: Mapping[str, TableSpec],
        windows: Mapping[str, TimeRange | None],
        tenant: str | None,
    ) -> dict[str, TableScans]:
        # A PIVOT with values from the data also reads its source for the distinct values,
        # which the planned statement does not show: such a query reads every file (of the
        # tenant, in the window).
        if not self.pruning or not specs or checked.pivots_from_data:
            return {name: TableScans(name, None) for name in specs}
        statement = checked.analyzed
        views = {
            name: view_sql(spec, standin_source(name), windows[name], tenant=tenant, replace=True)
            for name, spec in specs.items()
        }
        # The same SQL over the same view definitions (spec, window, tenant) plans the same
        # scans; the key also names them in the plan cache.
        key = (statement, tuple(sorted(views.items())))
        cached = self._scan_cache.get(key)
        if cached is None:
            cached = self._planner.scans(statement, views, specs=specs.values())
            self._scan_cache.put(key, cached)
        return {name: replace(table_scans, key=key) for name, table_scans in cached.items()}

    def _check_still_live(self, plans: Sequence[TablePlan]) -> None:
        """After a read failed: a snapshot the janitor expired (and collected) while the query
        ran is named as such, not reported as a broken file."""
        for plan in plans:
            if plan.snapshot_id:
                try:
                    self._meta.resolve_snapshot(plan.table, snapshot_id=plan.snapshot_id)
                except SnapshotNotFoundError as e:
                    raise SnapshotNotFoundError(
                        f"table {plan.table!r}: snapshot {plan.snapshot_id} expired while the"
                        f" query ran and its files were collected; query again ({e})"
                    ) from e

    def plan(
        self,
        table: str,
        *,
        snapshot_id: int | None = None,
        as_of: datetime | None = None,
        time_range: TimeRange | None = None,
    ) -> TablePlan:
        """The files a read of ``table`` at a snapshot needs, pruned to ``time_range`` (refused
        on a table with no time partition, see :func:`icefloe.query.views.check_window`)."""
        with self._meta.read_tables([table]) as read:
            info = read.tables.get(table)
            if info is None:
                raise TableNotFoundError(f"no table named {table!r}")
            pinned = read.pin(table, snapshot_id=snapshot_id, as_of=as_of)
            plan, _ = self._plan(
                pinned,
                info.table_id,
                pinned.spec(info.spec),
                TableScans(table, None),
                window=time_range,
                tenant=None,
            )
        return plan

    def _plan(
        self,
        pinned: PinnedSnapshot,
        table_id: int,
        spec: TableSpec,
        scans: TableScans,
        *,
        window: TimeRange | None,
        tenant: str | None,
    ) -> tuple[TablePlan, str | None]:
        check_window(spec, window)
        field = spec.time_partition_field
        ranges: dict[str, ColumnRange] = {}
        if field is not None and self.pruning:
            ranges[field.source] = _with_window(time_range_of(scans, spec), window)
        start_from, start_before = listing_window(spec, ranges)
        # A snapshot never changes, so a plan of the same scans over it stays right (the table
        # id tells a dropped table's snapshot from that of a new table of the same name).
        key = (scans.key, spec.name, table_id, pinned.snapshot_id)
        hit = self._plan_cache.get(key) if scans.key is not None else None
        if hit is not None:
            return hit
        listing = pinned.files(
            start_from=start_from,
            start_before=start_before,
            partition_equals=tenant_partition(spec, tenant) if tenant is not None else None,
            may_match=file_condition(scans, spec) if self.pruning else None,
            renamed=stat_names(spec),
        )
        plan = TablePlan(
            table=spec.name,
            snapshot_id=pinned.snapshot_id,
            files_considered=listing.considered,
            files_scanned=len(listing.paths),
            bytes_scanned=sum(listing.sizes),
            paths=listing.paths,
            spec_version=spec.version,
            file_versions=listing.spec_versions,
        )
        logger.debug("query plan %s", plan)
        uris = map(self._objects.uri, listing.paths)
        source = files_source(spec, list(zip(uris, listing.spec_versions, strict=True)))
        if scans.key is not None:
            self._plan_cache.put(key, (plan, source))
        return plan, source


# The most of a refused tenant an error repeats.
_TENANT_SHOWN = 100


def check_tenant(tenant: str) -> None:
    """Refuse a tenant that is not text DuckDB can take (a lone surrogate, U+D800 to U+DFFF,
    is a Python str but no UTF-8: a non-UTF-8 byte of a command line arrives as one), naming
    it, as :func:`icefloe.query.sandbox.check_query` refuses such SQL."""
    try:
        tenant.encode("utf-8")
    except UnicodeEncodeError as e:
        shown = tenant if len(tenant) <= _TENANT_SHOWN else tenant[:_TENANT_SHOWN] + "..."
        raise QueryRefusedError(
            f"query refused: the tenant {shown!r} is not valid Unicode text ({e.reason}:"
            f" character {e.start + 1} is {tenant[e.start]!r})"
        ) from None


def _with_window(scanned: ColumnRange, window: TimeRange | None) -> ColumnRange:
    """The scans' range of the time column, narrowed by the explicit window. Either alone is
    a safe listing range (the view applies both), so values that do not compare (an aware
    and a naive time) fall back to the window alone."""
    if window is None:
        return scanned
    explicit = ColumnRange()
    if window.start is not None:
        explicit = explicit.tighten(">=", window.start)
    if window.end is not None:
        explicit = explicit.tighten("<", window.end)
    try:
        return scanned.intersect(explicit)
    except TypeError:
        return explicit
