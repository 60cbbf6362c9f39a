"""The front door for Python users: one object for everything a lake does on this machine.

    import icefloe

    with icefloe.connect() as lake:               # the environment's lake (ICEFLOE_*)
        lake.create_table("events", schema="ts TIMESTAMP NOT NULL, event VARCHAR",
                          partition_by="day(ts)")
        lake.insert("events", [{"ts": "2026-11-02T10:00:00Z", "event": "click"}])
        lake.query("SELECT event, count(*) AS n FROM events GROUP BY event")  # a pyarrow Table

Queries hold the ``ICEFLOE_QUERY_*`` limits (memory, time, result size) as the CLI's do: DuckDB
runs in a child process that is stopped when it passes the memory or the time limit.

The classes underneath (:class:`icefloe.runtime.Runtime`, :class:`icefloe.ingest.Inserter`,
:class:`icefloe.query.QueryEngine`, :mod:`icefloe.lifecycle`, :class:`icefloe.janitor.Janitor`)
stay available for finer control.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import pyarrow as pa

from icefloe.errors import ConfigError, PublicationError, TableExistsError
from icefloe.iceberg.catalogs import IcebergSettings
from icefloe.ingest import Inserter, InsertResult, format_from_suffix
from icefloe.janitor import Janitor, JanitorReport
from icefloe.lifecycle import (
    AlterResult,
    DeleteResult,
    RollbackResult,
    alter_table,
    delete_rows,
    rollback_table,
)
from icefloe.lifecycle.alter import add_column, drop_column, widen_column
from icefloe.merge import LocalMergeReport, MergeWorker, merge_locally
from icefloe.metastore.models import Snapshot, TableInfo, TableStatus
from icefloe.query import QueryEngine, QueryLimits
from icefloe.query.engine import Isolation
from icefloe.query.s3_access import S3Endpoint, configure_s3_from_settings
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings, process_environment
from icefloe.spec import Publish, TableSpec
from icefloe.spec.evolution import RenameColumn, SchemaChange

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icefloe.iceberg import PublicationPass, PublishResult

_VARIABLES = {
    "home": "ICEFLOE_HOME",
    "warehouse": "ICEFLOE_WAREHOUSE",
    "database_url": "ICEFLOE_DATABASE_URL",
    "database_schema": "ICEFLOE_DATABASE_SCHEMA",
}


def connect(
    *,
    home: str | Path | None = None,
    warehouse: str | None = None,
    database_url: str | None = None,
    database_schema: str | None = None,
    query_isolation: Isolation = "child_process",
) -> IcefloeLake:
    """Open the lake: the environment's (``ICEFLOE_*``), with any of these arguments in place
    of their variables. The meta store schema is created or upgraded on the way (as
    ``icefloe init`` does; idempotent). Close it, or use it as a context manager.

    Queries hold the ``ICEFLOE_QUERY_*`` limits as the CLI's do: DuckDB runs in a watched
    child process, stopped at the memory or time limit. ``query_isolation="in_process"`` runs
    DuckDB in this process instead (no process start, no copy of the result), where only
    DuckDB's own limits apply: a query can pass the memory limit, and stop late."""
    given = {
        "home": home,
        "warehouse": warehouse,
        "database_url": database_url,
        "database_schema": database_schema,
    }
    environ = process_environment()
    environ.update({_VARIABLES[k]: str(v) for k, v in given.items() if v is not None})
    settings = IcefloeSettings.from_environ(environ)
    runtime = Runtime.open(settings.core, max_connections=4)
    try:
        runtime.meta.migrate()
        return IcefloeLake(
            runtime,
            query_limits=settings.query,
            query_isolation=query_isolation,
            iceberg=settings.iceberg,
        )
    except BaseException:
        runtime.close()
        raise


class IcefloeLake:
    """A lake on this machine: tables, inserts, queries, merges, deletes, rollbacks, gc."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        query_limits: QueryLimits | None = None,
        query_isolation: Isolation = "child_process",
        iceberg: IcebergSettings | None = None,
    ) -> None:
        if query_isolation not in get_args(Isolation):
            raise ConfigError(
                f"query_isolation must be one of {', '.join(get_args(Isolation))},"
                f" not {query_isolation!r}"
            )
        self.runtime = runtime
        self.query_limits = query_limits or QueryLimits()
        self.iceberg = iceberg or IcebergSettings()
        self._query_isolation: Isolation = query_isolation
        settings = runtime.settings
        self._configure = (
            (lambda con: configure_s3_from_settings(con, settings))
            if settings.warehouse.scheme == "s3"
            else None
        )
        self._inserter: Inserter | None = None
        self._engine: QueryEngine | None = None

    # -- lifecycle of the handle ---------------------------------------------------------------

    def close(self) -> None:
        if self._inserter is not None:
            self._inserter.close()
        if self._engine is not None:
            self._engine.close()
        self.runtime.close()

    def __enter__(self) -> IcefloeLake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tables --------------------------------------------------------------------------------

    def create_table(
        self, name: str, *, schema: str, if_not_exists: bool = False, **spec: Any
    ) -> TableInfo:
        """Create a table; ``spec`` takes :meth:`TableSpec.create`'s other arguments
        (``partition_by``, ``sort_by``, ``row_group_by``, ``merge``, ``publish``, ...)."""
        try:
            return self.runtime.meta.create_table(
                TableSpec.create(name=name, schema=schema, **spec)
            )
        except TableExistsError:
            if not if_not_exists:
                raise
            return self.runtime.meta.get_table(name)

    def tables(self) -> list[TableInfo]:
        return self.runtime.meta.list_tables()

    def table(self, name: str) -> TableInfo:
        return self.runtime.meta.get_table(name)

    def drop_table(self, name: str) -> TableInfo:
        return self.runtime.meta.drop_table(name)

    def alter_table(
        self,
        name: str,
        *,
        add_columns: Sequence[str] = (),
        drop_columns: Sequence[str] = (),
        rename_columns: Mapping[str, str] | None = None,
        widen: Sequence[str] = (),
        publish: Publish | None = None,
    ) -> AlterResult | TableInfo:
        """Change the schema in one new version: ``add_columns`` ("c TYPE"), then
        ``drop_columns``, ``rename_columns`` (old -> new) and ``widen`` ("c TYPE"). With
        ``publish`` ("iceberg" or "none"), also turn publication on or off; that alone changes
        no schema and gives the table's new :class:`TableInfo`."""
        changes: list[SchemaChange] = [add_column(text) for text in add_columns]
        changes += [drop_column(text) for text in drop_columns]
        changes += [RenameColumn(old, new) for old, new in (rename_columns or {}).items()]
        changes += [widen_column(text) for text in widen]
        if not changes and publish is not None:
            return self.runtime.meta.set_publish(name, publish)
        result = alter_table(meta=self.runtime.meta, table=name, changes=changes)
        if publish is not None:
            self.runtime.meta.set_publish(name, publish)
        return result

    def status(self, name: str) -> TableStatus:
        return self.runtime.meta.status(name)

    def snapshots(self, name: str) -> list[Snapshot]:
        return self.runtime.meta.snapshots(name)

    # -- data ----------------------------------------------------------------------------------

    def insert(
        self,
        table: str,
        data: Sequence[Mapping[str, object]] | pa.Table | pa.RecordBatch | str | Path,
        *,
        idempotency_key: str | None = None,
    ) -> InsertResult:
        """Insert rows (dicts), an Arrow table, or a file (.json, .ndjson, .csv, .parquet)."""
        inserter = self._inserter or Inserter(meta=self.runtime.meta, objects=self.runtime.objects)
        self._inserter = inserter
        if isinstance(data, pa.Table | pa.RecordBatch):
            return inserter.insert_arrow(table, data, idempotency_key=idempotency_key)
        if isinstance(data, str | Path):
            path = Path(data)
            return inserter.insert_file(
                table, path, fmt=format_from_suffix(path), idempotency_key=idempotency_key
            )
        return inserter.insert_rows(table, data, idempotency_key=idempotency_key)

    def query(
        self, sql: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> pa.Table:
        """One SELECT over snapshot-pinned tables (the heads by default), as a pyarrow Table,
        within :attr:`query_limits` (a :class:`QueryLimitError` or :class:`QueryTimeoutError`
        names the limit it passed)."""
        engine = self._engine or self._query_engine()
        self._engine = engine
        return engine.query(sql, snapshot_id=snapshot_id, as_of=as_of).rows

    def _query_engine(self) -> QueryEngine:
        in_process = self._query_isolation == "in_process"
        return QueryEngine(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            limits=self.query_limits,
            isolation=self._query_isolation,
            # The child reads S3 through the endpoint (a callable cannot cross to it).
            configure=self._configure if in_process else None,
            s3=None if in_process else S3Endpoint.from_settings(self.runtime.settings),
        )

    def delete(self, table: str, where: str, *, dry_run: bool = False) -> DeleteResult:
        """Delete the rows for which ``where`` is true, in one snapshot."""
        return delete_rows(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            table=table,
            where=where,
            dry_run=dry_run,
            configure=self._configure,
        )

    def rollback(self, table: str, *, to_snapshot: int) -> RollbackResult:
        """A new snapshot whose live files are exactly those of ``to_snapshot``."""
        return rollback_table(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            table=table,
            to_snapshot=to_snapshot,
        )

    def publish_iceberg(self, table: str, *, catalog: Catalog | None = None) -> PublishResult:
        """Commit ``table``'s head snapshot to an Iceberg table in ``catalog`` (default: the
        one ``ICEFLOE_ICEBERG_*`` names, else the SQL catalog under the lake's home), as
        ``icefloe publish iceberg`` does. Needs ``icefloe[iceberg]``."""
        from icefloe.iceberg import open_catalog, publish_iceberg

        return publish_iceberg(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            table=table,
            catalog=catalog or open_catalog(self.iceberg, self.runtime.settings),
            namespace=self.iceberg.namespace,
        )

    def publish_all(self, *, catalog: Catalog | None = None) -> PublicationPass:
        """Publish every table created or altered with ``publish="iceberg"`` whose head
        moved, and drop the Iceberg tables of dropped tables past their retention, as
        ``icefloe publish iceberg --all`` does (:meth:`merge` and :meth:`gc` do it too)."""
        from icefloe.iceberg import open_catalog, publish_due

        return publish_due(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            catalog=catalog or open_catalog(self.iceberg, self.runtime.settings),
            namespace=self.iceberg.namespace,
        )

    def _keep_published(self, table: str | None, *, retention: timedelta | None = None) -> None:
        """After a merge, before a gc: publish the opted-in tables (``table``, or all);
        PublicationError naming each table that failed (the others are published)."""
        from icefloe.iceberg.current import publication_wanted

        if not publication_wanted(self.runtime.meta):
            return
        from icefloe.iceberg import open_catalog, publish_due

        done = publish_due(
            meta=self.runtime.meta,
            objects=self.runtime.objects,
            catalog=open_catalog(self.iceberg, self.runtime.settings),
            namespace=self.iceberg.namespace,
            tables=None if table is None else [table],
            retention=retention,
        )
        if done.failed:
            raise PublicationError(
                "; ".join(f"{f.table}: publication failed: {f.error}" for f in done.failed)
            )

    # -- maintenance ---------------------------------------------------------------------------

    def merge(self, table: str | None = None) -> LocalMergeReport:
        """Merge small files (``table``, or every table) until nothing is left to merge."""
        worker = MergeWorker(
            meta=self.runtime.meta, objects=self.runtime.objects, configure=self._configure
        )
        report = merge_locally(meta=self.runtime.meta, worker=worker, table=table, until_quiet=True)
        self._keep_published(table)
        return report

    def gc(self, table: str | None = None, *, retention: timedelta | None = None) -> JanitorReport:
        """Expire snapshots past the retention (the table's, or ``retention``), delete what no
        snapshot needs, sweep orphans."""
        self._keep_published(table, retention=retention)
        janitor = Janitor(meta=self.runtime.meta, objects=self.runtime.objects)
        return janitor.run(table=table, retention=retention)
