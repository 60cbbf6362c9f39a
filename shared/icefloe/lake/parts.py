"""The composition root: one settings tree in; the meta store, the object store and every
collaborator out, each built once with the part of the settings it needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, get_args

from icefloe.config import CoreSettings
from icefloe.errors import ConfigError
from icefloe.iceberg.catalogs import IcebergSettings
from icefloe.ingest import Inserter
from icefloe.janitor import Janitor
from icefloe.lifecycle import DeletePartRunner
from icefloe.merge import MergeWorker
from icefloe.merge.worker import merge_database
from icefloe.metastore.secrets import SecretDsn, with_database_secret
from icefloe.query import QueryEngine, QueryLimits
from icefloe.query.database import WorkDatabase
from icefloe.query.engine import Isolation
from icefloe.query.s3_access import S3Endpoint, configure_s3_from_settings
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings
from icefloe.storage import ObjectStore, open_object_store

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from icefloe.notebook import NotebookViews


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


class LakeParts:
    """What a lake is made of: the meta store and object store, and every collaborator, built
    once from one settings tree. :class:`~icefloe.lake.Lake` adds what a lake does.

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
    ) -> Self:
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
