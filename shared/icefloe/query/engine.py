"""Snapshot-pinned SQL: each table the query names becomes a view over exactly the files of
one snapshot, pruned by partition and statistics, and the query runs in a locked-down DuckDB.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa

from icefloe import duck
from icefloe.errors import InvalidInputError, SnapshotNotFoundError
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query.pruning import ColumnRange, listing_window, needed_files
from icefloe.query.pruning import time_range as time_range_of
from icefloe.query.sandbox import (
    QueryLimits,
    QueryRefusedError,
    QueryTimeoutError,
    check_references,
    check_sql,
    lock_down,
    time_limit,
)
from icefloe.query.scan_filters import ScanPlanner, TableScans
from icefloe.query.sql_refs import analyze
from icefloe.query.views import TimeRange, parquet_source, standin_source, view_sql
from icefloe.spec import TableSpec
from icefloe.storage import ObjectStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What a query read of one table: the snapshot, and the files before and after pruning."""

    table: str
    snapshot_id: int
    files_considered: int
    files_scanned: int
    bytes_scanned: int
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QueryResult:
    rows: pa.Table
    plans: tuple[TablePlan, ...]

    def plan(self, table: str) -> TablePlan:
        return next(p for p in self.plans if p.table == table)


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
        configure: Any = None,
        pruning: bool = True,
    ) -> None:
        self._meta = meta
        self._objects = objects
        self.limits = limits or QueryLimits()
        # Called on each query's connection after planning and before lock-down (S3
        # credentials, the httpfs extension).
        self._configure = configure
        self.pruning = pruning
        self._planner = ScanPlanner()

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
        each table; by default each table's head. ``time_range`` restricts a table's view.
        ``tenant`` scopes every table to that tenant's partition, whatever the SQL says."""
        statement = check_sql(sql, limits=self.limits)
        con = duck.connect()
        try:
            return self._query(con, statement, snapshot_id, as_of, time_range, tenant)
        finally:
            con.close()

    def _query(
        self,
        con: duckdb.DuckDBPyConnection,
        statement: str,
        snapshot_id: int | None,
        as_of: datetime | None,
        time_range: Mapping[str, TimeRange] | None,
        tenant: str | None,
    ) -> QueryResult:
        refs = analyze(statement, con=con)
        lake_tables = {t.name: t for t in self._meta.list_tables()}
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
        specs = {name: lake_tables[name].spec for name in named}
        windows = {name: (time_range or {}).get(name) for name in named}
        scans = self._scans(statement, specs, windows, tenant)
        planned = [
            self._plan(
                specs[name],
                scans[name],
                snapshot_id=snapshot_id,
                as_of=as_of,
                window=windows[name],
                tenant=tenant,
            )
            for name in named
        ]
        if self._configure is not None:
            self._configure(con)
        plans = tuple(plan for plan, _ in planned)
        uris = {plan.table: [self._objects.uri(f.path) for f in files] for plan, files in planned}
        try:
            for plan in plans:
                source = parquet_source(uris[plan.table]) if uris[plan.table] else None
                con.execute(view_sql(specs[plan.table], source, windows[plan.table], tenant=tenant))
            lock_down(
                con,
                allowed_paths=[uri for table_uris in uris.values() for uri in table_uris],
                limits=self.limits,
            )
            rows = self._run(con, statement)
        except (duckdb.IOException, duckdb.HTTPException, QueryFailedError) as e:
            cause = e.__cause__ if isinstance(e, QueryFailedError) else e
            if isinstance(cause, duckdb.IOException | duckdb.HTTPException):
                self._check_still_live(plans)
            raise
        return QueryResult(rows=rows, plans=plans)

    def _scans(
        self,
        statement: str,
        specs: Mapping[str, TableSpec],
        windows: Mapping[str, TimeRange | None],
        tenant: str | None,
    ) -> dict[str, TableScans]:
        if not self.pruning or not specs:
            return {name: TableScans(name, None) for name in specs}
        for spec in specs.values():
            self._planner.prepare(spec)
        views = {
            name: view_sql(spec, standin_source(name), windows[name], tenant=tenant, replace=True)
            for name, spec in specs.items()
        }
        return self._planner.scans(statement, views)

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
        """The files a read of ``table`` at a snapshot needs, pruned to ``time_range``."""
        spec = self._meta.get_table(table).spec
        plan, _ = self._plan(
            spec,
            TableScans(table, None),
            snapshot_id=snapshot_id,
            as_of=as_of,
            window=time_range,
            tenant=None,
        )
        return plan

    def _plan(
        self,
        spec: TableSpec,
        scans: TableScans,
        *,
        snapshot_id: int | None,
        as_of: datetime | None,
        window: TimeRange | None,
        tenant: str | None,
    ) -> tuple[TablePlan, list[DataFile]]:
        field = spec.time_partition_field
        ranges: dict[str, ColumnRange] = {}
        if field is not None and self.pruning:
            r = time_range_of(scans, spec)
            if window is not None and window.start is not None:
                r = r.tighten(">=", window.start)
            if window is not None and window.end is not None:
                r = r.tighten("<", window.end)
            ranges[field.source] = r
        start_from, start_before = listing_window(spec, ranges)
        with self._meta.pin(spec.name, snapshot_id=snapshot_id, as_of=as_of) as pinned:
            considered = pinned.files(start_from=start_from, start_before=start_before)
            pinned_id = pinned.snapshot_id
        if tenant is not None:
            considered = [f for f in considered if _in_tenant(f, spec, tenant)]
        scanned = needed_files(considered, scans, spec)
        plan = TablePlan(
            table=spec.name,
            snapshot_id=pinned_id,
            files_considered=len(considered),
            files_scanned=len(scanned),
            bytes_scanned=sum(f.size_bytes for f in scanned),
            paths=tuple(f.path for f in scanned),
        )
        logger.debug("query plan %s", plan)
        return plan, scanned

    def _run(self, con: duckdb.DuckDBPyConnection, statement: str) -> pa.Table:
        with time_limit(con, seconds=self.limits.timeout_s) as fired:
            try:
                return con.execute(statement).to_arrow_table()
            except duckdb.InterruptException as e:
                if fired.is_set():
                    raise QueryTimeoutError(
                        f"query interrupted after {self.limits.timeout_s:g} s (the time limit)"
                    ) from e
                raise
            except duckdb.PermissionException as e:
                raise QueryRefusedByDuckDB(f"query refused: {_first_line(e)}") from e
            except duckdb.Error as e:
                raise QueryFailedError(f"query failed: {_first_line(e)}") from e


class QueryFailedError(InvalidInputError):
    """DuckDB refused or failed the caller's SQL (a syntax error, an unknown column, ...)."""


class QueryRefusedByDuckDB(QueryFailedError):
    """The locked-down connection refused an access (another file or URL)."""


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]


def _in_tenant(file: DataFile, spec: TableSpec, tenant: str) -> bool:
    field = next(
        f for f in spec.partition_by if f.transform == "identity" and f.source == spec.tenant_column
    )
    return file.partition_values.get(field.name) == field.to_path_value(tenant)
