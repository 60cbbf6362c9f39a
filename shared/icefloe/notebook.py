"""The notebook views: the lake's tables in your own DuckDB, pandas or polars.

Unlike the query service this is not sandboxed: it is the caller's own process. It gives the
same snapshot-pinned view of the tables, through :class:`icefloe.lake.Lake`::

    import icefloe
    lake = icefloe.connect()
    con = lake.duckdb()                           # every table is a view at its head snapshot
    con.sql("SELECT event, count(*) FROM events GROUP BY ALL").show()
    lake.relation("events", start=datetime(2026, 2, 1), end=datetime(2026, 3, 1)).df()
    pandas.read_parquet(lake.file_urls("events"))  # or polars.read_parquet(...)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from duckdb import DuckDBPyConnection, DuckDBPyRelation

from icefloe import duck
from icefloe.duck import ident
from icefloe.errors import ConfigError
from icefloe.metastore.models import TableInfo
from icefloe.metastore.store import MetaStore
from icefloe.query.engine import QueryEngine
from icefloe.query.views import TimeRange, files_source, view_sql
from icefloe.spec import TableSpec
from icefloe.storage import ObjectStore


class NotebookViews:
    """Snapshot-pinned views of a lake's tables for interactive use (read only)."""

    def __init__(
        self, *, meta: MetaStore, objects: ObjectStore, engine: QueryEngine, local: bool
    ) -> None:
        if not local:
            raise ConfigError("the notebook views read local warehouses only so far")
        self._meta = meta
        self._objects = objects
        self._engine = engine

    def file_urls(
        self,
        table: str,
        *,
        snapshot_id: int | None = None,
        as_of: datetime | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> list[str]:
        """The Parquet files of ``table`` at a snapshot (default head), pruned to ``[start, end)``.
        After a schema change, files written before it hold the columns as they were then
        (:meth:`connect` and :meth:`table` read them as the current schema)."""
        window = TimeRange(start, end) if start or end else None
        plan = self._engine.plan(table, snapshot_id=snapshot_id, as_of=as_of, time_range=window)
        return [self._objects.uri(p) for p in plan.paths]

    def _source(
        self,
        info: TableInfo,
        *,
        snapshot_id: int | None = None,
        as_of: datetime | None = None,
        window: TimeRange | None = None,
    ) -> tuple[TableSpec, str | None]:
        """The spec a read of the pinned snapshot uses, and the FROM source of its files."""
        plan = self._engine.plan(info.name, snapshot_id=snapshot_id, as_of=as_of, time_range=window)
        spec = (
            info.spec
            if plan.spec_version == info.spec.version
            else self._meta.table_spec(info.name, version=plan.spec_version)
        )
        files = [
            (self._objects.uri(path), version)
            for path, version in zip(plan.paths, plan.file_versions, strict=True)
        ]
        return spec, files_source(spec, files)

    def duckdb(
        self,
        *,
        as_of: datetime | None = None,
        snapshots: Mapping[str, int] | None = None,
        con: DuckDBPyConnection | None = None,
    ) -> DuckDBPyConnection:
        """A DuckDB connection where every lake table is a view at a pinned snapshot (its head,
        ``snapshots[table]``, or the last one at ``as_of``), plus a table macro
        ``<table>_between(start, end)`` for tables partitioned by time (IceDB's range macro)."""
        con = con or duck.connect()
        for info in self._meta.list_tables():
            pinned = (snapshots or {}).get(info.name)
            spec, source = self._source(info, snapshot_id=pinned, as_of=as_of)
            con.execute(view_sql(spec, source, None, replace=True))
            field = spec.time_partition_field
            if field is not None:
                con.execute(  # names through ident(): validated identifiers
                    f"CREATE OR REPLACE MACRO {ident(info.name + '_between')}(start_at, end_at) AS TABLE"
                    f" SELECT * FROM {ident(info.name)}"
                    f" WHERE {ident(field.source)} >= start_at AND {ident(field.source)} < end_at"
                )
        return con

    def relation(
        self,
        table: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        snapshot_id: int | None = None,
        con: DuckDBPyConnection | None = None,
    ) -> DuckDBPyRelation:
        """One table as a DuckDB relation over only the files of ``[start, end)``; call
        ``.df()``, ``.pl()`` or ``.arrow()`` on it."""
        window = TimeRange(start, end) if start or end else None
        spec, source = self._source(
            self._meta.get_table(table), snapshot_id=snapshot_id, window=window
        )
        con = con or duck.connect()
        con.execute(view_sql(spec, source, window, replace=True))
        return con.table(table)
