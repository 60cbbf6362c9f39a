"""The lake, assembled once: every front door gets the same system from the same settings.

    import icefloe

    with icefloe.connect() as lake:               # the environment's lake (ICEFLOE_*)
        lake.create_table("events", schema="ts TIMESTAMP NOT NULL, event VARCHAR",
                          partition_by="day(ts)")
        lake.insert("events", [{"ts": "2026-11-02T10:00:00Z", "event": "click"}])
        lake.query("SELECT event, count(*) AS n FROM events GROUP BY event")  # a pyarrow Table

:class:`Lake` is the composition root. Built from one reading of the settings
(:class:`~icefloe.settings.IcefloeSettings`), it opens the meta store (through the secret
when ``ICEFLOE_DATABASE_SECRET_ARN`` names one) and the object store, and builds every
collaborator from the same tree: the inserter with its DuckDB bounds, the query engine with its
limits, the merge worker with its limits and lease, the delete part runner, the janitor, the
Iceberg catalog. The command line, the Python API, the notebook views, the Lambda functions
and the Spark reader all obtain the system from a ``Lake``; nothing else opens the meta store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

import pyarrow as pa

from icefloe.config import CoreSettings
from icefloe.errors import ConfigError, PublicationError, TableExistsError
from icefloe.iceberg.catalogs import IcebergSettings
from icefloe.ingest import Inserter, InsertResult, format_from_suffix
from icefloe.ingest.arrow_stream import arrow_stream
from icefloe.janitor import Janitor, JanitorReport
from icefloe.lifecycle import (
    AlterResult,
    DeletePartRunner,
    DeleteResult,
    RollbackResult,
    alter_table,
    delete_rows,
    rollback_table,
)
from icefloe.lifecycle.alter import add_column, check_spec_sql, drop_column, widen_column
from icefloe.merge import LocalMergeReport, MergeWorker, merge_locally
from icefloe.merge.worker import merge_database
from icefloe.metastore.models import Snapshot, TableInfo, TableStatus
from icefloe.metastore.secrets import SecretDsn, with_database_secret
from icefloe.query import QueryEngine, QueryLimits
from icefloe.query.changes import ChangeFeed, read_changes
from icefloe.query.database import WorkDatabase
from icefloe.query.engine import Isolation, QueryResult
from icefloe.query.json_paths import JsonPathReport, json_paths
from icefloe.query.s3_access import S3Endpoint, configure_s3_from_settings
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings, process_environment
from icefloe.spec import Publish, TableSpec
from icefloe.spec.evolution import RenameColumn, SchemaChange
from icefloe.storage import ObjectStore, open_object_store

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation
    from pyiceberg.catalog import Catalog

    from icefloe.iceberg import PublicationPass, PublishResult
    from icefloe.notebook import NotebookViews

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
) -> Lake:
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
    # Four connections, or one more than the merges lake.merge() may run at once.
    connections = max(4, settings.merge.local_workers + 1)
    lake = Lake.open(settings, max_connections=connections, query_isolation=query_isolation)
    try:
        lake.meta.migrate()
    except BaseException:
        lake.close()
        raise
    return lake


def resolve_database(
    settings: IcefloeSettings, *, embedded_refused: str | None = None
) -> tuple[CoreSettings, SecretDsn | None]:
    """The core settings with the meta store's DSN (read from the secret when no URL is set),
    and the secret to read again when a connection fails. Where the embedded Postgres would be
    a fresh, empty database (a Lambda container, or where ``embedded_refused`` says: an EMR
    job's driver), a missing meta store is an error saying what to set."""
    core, secret = with_database_secret(settings.core, secret_arn=settings.database_secret_arn)
    if core.database_url is None and (settings.in_lambda or embedded_refused is not None):
        where = f" ({embedded_refused})" if embedded_refused else ""
        raise ConfigError(
            "no meta store configured: set ICEFLOE_DATABASE_URL or ICEFLOE_DATABASE_SECRET_ARN"
            + where
        )
    return core, secret


class Lake:
    """A lake: its collaborators, built once from one settings tree, and everything a lake
    does (tables, inserts, queries, merges, deletes, rollbacks, gc, Iceberg publication).

    Collaborators are built on first use and kept: :meth:`inserter`, :meth:`query_engine`,
    :meth:`merge_worker`, :meth:`delete_part_runner`, :meth:`janitor` and
    :meth:`iceberg_catalog`, each with the part of :attr:`settings` it needs."""

    def __init__(
        self,
        *,
        settings: IcefloeSettings,
        runtime: Runtime,
        query_isolation: Isolation = "child_process",
    ) -> None:
        if query_isolation not in get_args(Isolation):
            raise ConfigError(
                f"query_isolation must be one of {', '.join(get_args(Isolation))},"
                f" not {query_isolation!r}"
            )
        self.settings = settings
        self.runtime = runtime
        self.meta = runtime.meta
        self.objects = runtime.objects
        self._query_isolation: Isolation = query_isolation
        core = runtime.settings
        self.duckdb_configure: Callable[[Any], None] | None = (
            (lambda con: configure_s3_from_settings(con, core))
            if core.warehouse.scheme == "s3"
            else None
        )
        self._inserter: Inserter | None = None
        self._engine: QueryEngine | None = None
        self._merge_worker: MergeWorker | None = None
        self._work_database: WorkDatabase | None = None
        self._views: NotebookViews | None = None
        self._catalog: Catalog | None = None

    @classmethod
    def open(
        cls,
        settings: IcefloeSettings,
        *,
        max_connections: int = 4,
        query_isolation: Isolation = "child_process",
        embedded_refused: str | None = None,
    ) -> Lake:
        """The lake ``settings`` describe. The meta store is the one ``ICEFLOE_DATABASE_URL``
        names, else the one in the secret ``ICEFLOE_DATABASE_SECRET_ARN`` names (read again
        when a connection fails: a rotated secret), else the embedded Postgres under
        ``ICEFLOE_HOME``, which a Lambda container refuses (it would be a fresh, empty one), as
        does any caller that says where with ``embedded_refused``."""
        core, secret = resolve_database(settings, embedded_refused=embedded_refused)
        runtime = Runtime.open(core, max_connections=max_connections, dsn=secret)
        return cls(settings=settings, runtime=runtime, query_isolation=query_isolation)

    @property
    def core(self) -> CoreSettings:
        """Where the meta store and the data are (the secret's DSN resolved)."""
        return self.runtime.settings

    @property
    def query_limits(self) -> QueryLimits:
        return self.settings.query

    @property
    def iceberg(self) -> IcebergSettings:
        return self.settings.iceberg

    # -- collaborators -------------------------------------------------------------------------

    def inserter(self) -> Inserter:
        """The inserter, its DuckDB bounded as the settings say (in Lambda: a share of the
        function's memory), staging in the temporary directory."""
        if self._inserter is None:
            insert = self.settings.insert
            self._inserter = Inserter(
                meta=self.meta,
                objects=self.objects,
                duckdb_threads=insert.duckdb_threads,
                duckdb_memory_limit=insert.duckdb_memory_limit,
            )
        return self._inserter

    def query_engine(self) -> QueryEngine:
        """The query engine, within ``ICEFLOE_QUERY_*``: DuckDB in a watched child process
        unless the lake was opened with ``query_isolation="in_process"``."""
        if self._engine is None:
            in_process = self._query_isolation == "in_process"
            self._engine = QueryEngine(
                meta=self.meta,
                objects=self.objects,
                limits=self.settings.query,
                isolation=self._query_isolation,
                # The child reads S3 through the endpoint (a callable cannot cross to it).
                configure=self.duckdb_configure if in_process else None,
                s3=None if in_process else S3Endpoint.from_settings(self.core),
                tenant_read_role=self.core.tenant_read_role_arn,
            )
        return self._engine

    def work_database(self) -> WorkDatabase:
        """The warm DuckDB that merges and deletes rewrite files in, within
        ``ICEFLOE_MERGE_*``'s limits."""
        if self._work_database is None:
            limits = self.settings.merge.limits
            if limits.temp_directory is not None:
                limits.temp_directory.mkdir(parents=True, exist_ok=True)
            self._work_database = merge_database(self.objects, limits, self.duckdb_configure)
        return self._work_database

    def merge_worker(self) -> MergeWorker:
        """The merge worker, with ``ICEFLOE_MERGE_*``'s limits and lease."""
        if self._merge_worker is None:
            merge = self.settings.merge
            self._merge_worker = MergeWorker(
                meta=self.meta,
                objects=self.objects,
                limits=merge.limits,
                lease=merge.lease,
                configure=self.duckdb_configure,
                database=self.work_database(),
            )
        return self._merge_worker

    def delete_part_runner(self) -> DeletePartRunner:
        """What runs a delete job's parts: merges' database and S3 set-up."""
        return DeletePartRunner(meta=self.meta, objects=self.objects, database=self.work_database())

    def results_store(self) -> ObjectStore:
        """Where large query results (and EMR query jobs' results) are written."""
        core = self.core
        return open_object_store(
            core.results_location, endpoint_url=core.s3_endpoint_url, region=core.aws_region
        )

    def janitor(self) -> Janitor:
        return Janitor(meta=self.meta, objects=self.objects)

    def views(self) -> NotebookViews:
        """Snapshot-pinned views of the tables for your own DuckDB, pandas or polars (local
        warehouses); :meth:`duckdb`, :meth:`relation` and :meth:`file_urls` use them."""
        if self._views is None:
            from icefloe.notebook import NotebookViews

            self._views = NotebookViews(
                meta=self.meta,
                objects=self.objects,
                engine=self.query_engine(),
                local=self.core.warehouse.scheme == "file",
            )
        return self._views

    def iceberg_catalog(self) -> Catalog:
        """The catalog ``ICEFLOE_ICEBERG_*`` names (pyiceberg: ``icefloe[iceberg]``). A
        catalog kept inside a Lambda container (the default SQL catalog under
        ``ICEFLOE_HOME``) would be lost with it: there one outside it must be configured."""
        if self._catalog is None:
            iceberg = self.settings.iceberg
            if self.settings.in_lambda and iceberg.catalog == "sql" and not iceberg.catalog_uri:
                raise ConfigError(
                    "Iceberg publication in Lambda needs a catalog outside the container: set"
                    " ICEFLOE_ICEBERG_CATALOG=glue (or ICEFLOE_ICEBERG_CATALOG_URI)"
                )
            from icefloe.iceberg import open_catalog

            try:
                self._catalog = open_catalog(iceberg, self.core)
            except ImportError as e:  # pragma: no cover - the dev install has the extra
                raise ConfigError(f"Iceberg publication needs icefloe[iceberg]: {e}") from e
        return self._catalog

    # -- lifecycle of the handle ---------------------------------------------------------------

    def close(self) -> None:
        if self._inserter is not None:
            self._inserter.close()
        if self._engine is not None:
            self._engine.close()
        if self._work_database is not None:
            self._work_database.close()
        self.runtime.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tables --------------------------------------------------------------------------------

    def create_table(
        self, name: str, *, schema: str, if_not_exists: bool = False, **spec: Any
    ) -> TableInfo:
        """Create a table; ``spec`` takes :meth:`TableSpec.create`'s other arguments
        (``partition_by``, ``sort_by``, ``row_group_by``, ``merge``, ``publish``, ...)."""
        table = TableSpec.create(name=name, schema=schema, **spec)
        check_spec_sql(table)
        try:
            return self.meta.create_table(table)
        except TableExistsError:
            if not if_not_exists:
                raise
            return self.meta.get_table(name)

    def tables(self) -> list[TableInfo]:
        return self.meta.list_tables()

    def table(self, name: str) -> TableInfo:
        return self.meta.get_table(name)

    def drop_table(self, name: str) -> TableInfo:
        return self.meta.drop_table(name)

    def changes(
        self,
        table: str,
        *,
        since_snapshot: int,
        until_snapshot: int | None = None,
        table_id: int | None = None,
    ) -> ChangeFeed:
        """The rows ``table`` gained and lost after ``since_snapshot`` up to ``until_snapshot``
        (the head by default): ``.rows`` holds the columns, ``_row_id``, ``_change``
        (``insert``/``delete``) and ``_snapshot``; merges that keep rows are invisible. Store
        ``.until_snapshot`` and ``.table_id``, and ask from them next time: with ``table_id``
        given, a position of another table (one dropped and created again under this name) is
        refused with SnapshotNotFoundError instead of being read as one in this table."""
        return read_changes(
            meta=self.meta,
            objects=self.objects,
            table=table,
            since_snapshot=since_snapshot,
            until_snapshot=until_snapshot,
            table_id=table_id,
            configure=self.duckdb_configure,
        )

    def json_paths(
        self,
        table: str,
        *,
        column: str | None = None,
        max_files: int = 10,
        max_rows: int = 100_000,
    ) -> JsonPathReport:
        """The JSON paths in the newest files' ``column`` (the table's one JSON column by
        default): how often each appears, its type, and the generated column declaring it."""
        return json_paths(
            meta=self.meta,
            objects=self.objects,
            table=table,
            column=column,
            max_files=max_files,
            max_rows=max_rows,
            configure=self.duckdb_configure,
        )

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
            return self.meta.set_publish(name, publish)
        result = alter_table(
            meta=self.meta,
            table=name,
            changes=changes,
            objects=self.objects,
            configure=self.duckdb_configure,
        )
        if publish is not None:
            self.meta.set_publish(name, publish)
        return result

    def status(self, name: str) -> TableStatus:
        return self.meta.status(name)

    def snapshots(self, name: str) -> list[Snapshot]:
        return self.meta.snapshots(name)

    # -- data ----------------------------------------------------------------------------------

    def insert(
        self,
        table: str,
        data: Sequence[Mapping[str, object]] | pa.Table | pa.RecordBatch | str | Path | object,
        *,
        idempotency_key: str | None = None,
    ) -> InsertResult:
        """Insert rows (dicts), an Arrow table, a file (.json, .ndjson, .csv, .parquet), or
        anything that exports an Arrow stream (a pandas or polars DataFrame, a DuckDB relation,
        a ``pyarrow.RecordBatchReader`` or dataset), the stream in one snapshot."""
        inserter = self.inserter()
        if isinstance(data, pa.Table | pa.RecordBatch):
            return inserter.insert_arrow(table, data, idempotency_key=idempotency_key)
        if isinstance(data, str | Path):
            path = Path(data)
            return inserter.insert_file(
                table, path, fmt=format_from_suffix(path), idempotency_key=idempotency_key
            )
        stream = arrow_stream(data)
        if stream is not None:
            return inserter.insert_arrow_stream(table, stream, idempotency_key=idempotency_key)
        return inserter.insert_rows(
            table, cast(Sequence[Mapping[str, object]], data), idempotency_key=idempotency_key
        )

    def query(
        self, sql: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> pa.Table:
        """One SELECT over snapshot-pinned tables (the heads by default), as a pyarrow Table,
        within :attr:`query_limits` (a :class:`QueryLimitError` or :class:`QueryTimeoutError`
        names the limit it passed)."""
        return self.query_result(sql, snapshot_id=snapshot_id, as_of=as_of).rows

    def query_result(
        self, sql: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> QueryResult:
        """As :meth:`query`, with what pruning did: ``.rows``, and ``.stats`` (one
        :class:`ScanStats` per table read: snapshot, files considered and scanned, bytes
        scanned)."""
        return self.query_engine().query(sql, snapshot_id=snapshot_id, as_of=as_of)

    def duckdb(
        self,
        *,
        as_of: datetime | None = None,
        snapshots: Mapping[str, int] | None = None,
        con: DuckDBPyConnection | None = None,
    ) -> DuckDBPyConnection:
        """A DuckDB connection of your own (not sandboxed) where every table is a view at a
        pinned snapshot (its head, ``snapshots[table]``, or the last one at ``as_of``), with a
        table macro ``<table>_between(start, end)`` for tables partitioned by time."""
        return self.views().duckdb(as_of=as_of, snapshots=snapshots, con=con)

    def relation(
        self,
        table: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        snapshot_id: int | None = None,
        con: DuckDBPyConnection | None = None,
    ) -> DuckDBPyRelation:
        """One table as a DuckDB relation over only the files of ``[start, end)``: ``.df()``,
        ``.pl()`` or ``.arrow()`` it."""
        return self.views().relation(table, start=start, end=end, snapshot_id=snapshot_id, con=con)

    def file_urls(
        self,
        table: str,
        *,
        snapshot_id: int | None = None,
        as_of: datetime | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> list[str]:
        """The Parquet files of ``table`` at a snapshot, pruned to ``[start, end)``, for
        pandas or polars (files written before a schema change hold the columns as they were
        then; :meth:`duckdb` and :meth:`relation` read them as the current schema)."""
        return self.views().file_urls(
            table, snapshot_id=snapshot_id, as_of=as_of, start=start, end=end
        )

    def delete(self, table: str, where: str, *, dry_run: bool = False) -> DeleteResult:
        """Delete the rows for which ``where`` is true, in one snapshot."""
        return delete_rows(
            meta=self.meta,
            objects=self.objects,
            table=table,
            where=where,
            dry_run=dry_run,
            configure=self.duckdb_configure,
            database=self.work_database(),
        )

    def rollback(self, table: str, *, to_snapshot: int) -> RollbackResult:
        """A new snapshot whose live files are exactly those of ``to_snapshot``."""
        return rollback_table(
            meta=self.meta,
            objects=self.objects,
            table=table,
            to_snapshot=to_snapshot,
        )

    def publish_iceberg(self, table: str, *, catalog: Catalog | None = None) -> PublishResult:
        """Commit ``table``'s head snapshot to an Iceberg table in ``catalog`` (default: the
        one ``ICEFLOE_ICEBERG_*`` names, else the SQL catalog under the lake's home), as
        ``icefloe publish iceberg`` does. Needs ``icefloe[iceberg]``."""
        from icefloe.iceberg import publish_iceberg

        return publish_iceberg(
            meta=self.meta,
            objects=self.objects,
            table=table,
            catalog=catalog or self.iceberg_catalog(),
            namespace=self.iceberg.namespace,
        )

    def publish_all(self, *, catalog: Catalog | None = None) -> PublicationPass:
        """Publish every table created or altered with ``publish="iceberg"`` whose head
        moved, and drop the Iceberg tables of dropped tables past their retention, as
        ``icefloe publish iceberg --all`` does (:meth:`merge` and :meth:`gc` do it too)."""
        from icefloe.iceberg import publish_due

        return publish_due(
            meta=self.meta,
            objects=self.objects,
            catalog=catalog or self.iceberg_catalog(),
            namespace=self.iceberg.namespace,
        )

    def keep_published(
        self, table: str | None = None, *, retention: timedelta | None = None
    ) -> PublicationPass | None:
        """Publish the opted-in tables whose head moved (``table``, or all), at ``retention``
        in place of each table's own; None when no table is opted in (pyiceberg is then never
        imported). What ``merge --wait`` and ``gc`` run, in the CLI and here."""
        from icefloe.iceberg.current import publication_wanted

        if not publication_wanted(self.meta):
            return None
        from icefloe.iceberg import publish_due

        return publish_due(
            meta=self.meta,
            objects=self.objects,
            catalog=self.iceberg_catalog(),
            namespace=self.iceberg.namespace,
            tables=None if table is None else [table],
            retention=retention,
        )

    def _keep_published(self, table: str | None, *, retention: timedelta | None = None) -> None:
        """After a merge, before a gc: :meth:`keep_published`, and PublicationError naming
        each table that failed (the others are published)."""
        done = self.keep_published(table, retention=retention)
        if done is not None and done.failed:
            raise PublicationError(
                "; ".join(f"{f.table}: publication failed: {f.error}" for f in done.failed)
            )

    # -- maintenance ---------------------------------------------------------------------------

    def merge(self, table: str | None = None) -> LocalMergeReport:
        """Merge small files (``table``, or every table) until nothing is left to merge, within
        ``ICEFLOE_MERGE_*``'s limits, then publish the opted-in tables whose head moved."""
        report = merge_locally(
            meta=self.meta,
            worker=self.merge_worker(),
            table=table,
            until_quiet=True,
            workers=self.settings.merge.local_workers,
        )
        self._keep_published(table)
        return report

    def gc(self, table: str | None = None, *, retention: timedelta | None = None) -> JanitorReport:
        """Expire snapshots past the retention (the table's, or ``retention``), delete what no
        snapshot needs, sweep orphans."""
        self._keep_published(table, retention=retention)
        return self.janitor().run(table=table, retention=retention)
