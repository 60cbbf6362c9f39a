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
from icefloe.duck import ident, string_literal
from icefloe.errors import InvalidInputError, TableNotFoundError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query.pruning import ColumnRange, column_ranges, file_may_match, listing_window
from icefloe.query.sandbox import (
    QueryLimits,
    QueryRefusedError,
    QueryTimeoutError,
    check_sql,
    lock_down,
    time_limit,
)
from icefloe.query.sql_refs import analyze
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


@dataclass(frozen=True, slots=True)
class TimeRange:
    """An explicit window on a table's time column: ``start <= ts < end`` (either may be open)."""

    start: datetime | None = None
    end: datetime | None = None


class QueryEngine:
    """Runs callers' SELECTs over snapshot-pinned views of the lake's tables."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        limits: QueryLimits | None = None,
        configure: Any = None,
    ) -> None:
        self._meta = meta
        self._objects = objects
        self.limits = limits or QueryLimits()
        # Called on each new connection before lock-down (S3 credentials, the httpfs extension).
        self._configure = configure

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
        named = sorted(t for t in refs.tables if t in lake_tables)
        if snapshot_id is not None and len(named) != 1:
            raise InvalidInputError("a snapshot id pins one table; use as_of for several")
        unknown = sorted(refs.tables - set(lake_tables))
        if unknown and not named:
            raise TableNotFoundError(f"no table named {unknown[0]!r}")
        if tenant is not None:
            unscoped = [t for t in named if lake_tables[t].spec.tenant_column is None]
            if unscoped:
                raise QueryRefusedError(
                    f"query refused: table {unscoped[0]!r} has no tenant column,"
                    " so a tenant's query cannot read it"
                )
        if self._configure is not None:
            self._configure(con)
        plans = []
        for name in named:
            spec = lake_tables[name].spec
            window = (time_range or {}).get(name)
            plan, files = self._plan(
                spec,
                snapshot_id=snapshot_id,
                as_of=as_of,
                bounds=refs.bounds.get(name, ()),
                window=window,
                tenant=tenant,
                con=con,
            )
            uris = [self._objects.uri(f.path) for f in files]
            con.execute(view_sql(spec, uris, window, tenant=tenant))
            plans.append(plan)
        lock_down(
            con,
            allowed_paths=[self._objects.uri(p) for plan in plans for p in plan.paths],
            limits=self.limits,
        )
        rows = self._run(con, statement)
        return QueryResult(rows=rows, plans=tuple(plans))

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
        # No bounds to cast, so no DuckDB connection is needed for this plan.
        plan, _ = self._plan(
            spec,
            snapshot_id=snapshot_id,
            as_of=as_of,
            bounds=(),
            window=time_range,
            tenant=None,
            con=None,
        )
        return plan

    def _plan(
        self,
        spec: TableSpec,
        *,
        snapshot_id: int | None,
        as_of: datetime | None,
        bounds: Sequence[Any],
        window: TimeRange | None,
        tenant: str | None,
        con: duckdb.DuckDBPyConnection | None,
    ) -> tuple[TablePlan, list[DataFile]]:
        pinned = self._meta.resolve_snapshot(spec.name, snapshot_id=snapshot_id, as_of=as_of)
        ranges = column_ranges(spec, bounds, _caster(con)) if con is not None else {}
        field = spec.time_partition_field
        if window is not None and field is not None:
            r = ranges.get(field.source, ColumnRange())
            if window.start is not None:
                r = r.tighten(">=", window.start)
            if window.end is not None:
                r = r.tighten("<", window.end)
            ranges[field.source] = r
        start_from, start_before = listing_window(spec, ranges)
        considered = (
            self._meta.files(
                spec.name, snapshot_id=pinned, start_from=start_from, start_before=start_before
            )
            if pinned
            else []
        )
        if tenant is not None:
            considered = [f for f in considered if _in_tenant(f, spec, tenant)]
        scanned = [f for f in considered if file_may_match(f, ranges, spec)]
        plan = TablePlan(
            table=spec.name,
            snapshot_id=pinned,
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


def _caster(con: duckdb.DuckDBPyConnection) -> Any:
    def cast(value: object, column_type: str) -> object:
        target = "VARCHAR" if column_type == "JSON" else column_type
        try:
            row = con.execute(f"SELECT TRY_CAST(? AS {target})", [value]).fetchone()
        except duckdb.Error:
            return None
        return None if row is None else row[0]

    return cast


def _in_tenant(file: DataFile, spec: TableSpec, tenant: str) -> bool:
    field = next(
        f for f in spec.partition_by if f.transform == "identity" and f.source == spec.tenant_column
    )
    return file.partition_values.get(field.name) == field.to_path_value(tenant)


def view_sql(
    spec: TableSpec,
    uris: Sequence[str],
    window: TimeRange | None,
    *,
    tenant: str | None = None,
    replace: bool = False,
) -> str:
    """``CREATE VIEW <table>`` over exactly ``uris``, columns cast to the spec's types."""
    create = "CREATE OR REPLACE VIEW" if replace else "CREATE VIEW"
    columns = [(c.name, c.type) for c in spec.columns] + [(ROW_ID_COLUMN, "BLOB")]
    name = ident(spec.name)
    if not uris:
        nulls = ", ".join(f"CAST(NULL AS {t}) AS {ident(c)}" for c, t in columns)
        return f"{create} {name} AS SELECT {nulls} WHERE false"
    select = ", ".join(f"CAST({ident(c)} AS {t}) AS {ident(c)}" for c, t in columns)
    files = "[" + ", ".join(string_literal(u) for u in uris) + "]"
    conditions = []
    if tenant is not None and spec.tenant_column is not None:
        # Files were chosen by tenant partition already; this filter is a second lock.
        conditions.append(f"{ident(spec.tenant_column)} = {string_literal(tenant)}")
    field = spec.time_partition_field
    if window is not None and field is not None:
        if window.start is not None:
            conditions.append(
                f"{ident(field.source)} >= {string_literal(window.start.isoformat())}"
            )
        if window.end is not None:
            conditions.append(f"{ident(field.source)} < {string_literal(window.end.isoformat())}")
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    return (
        f"{create} {name} AS SELECT {select}"
        f" FROM read_parquet({files}, hive_partitioning = false){where}"
    )
