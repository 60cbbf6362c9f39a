"""What a lake does: tables, inserts, queries, the change feed, deletes, rollbacks, merges,
gc and Iceberg publication, each a method over the collaborators of :class:`LakeParts`; and
:func:`connect`, which opens the environment's lake."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from icefloe.errors import PublicationError, TableExistsError
from icefloe.ingest import InsertResult, format_from_suffix
from icefloe.ingest.arrow_stream import arrow_stream
from icefloe.janitor import JanitorReport
from icefloe.lake.parts import LakeParts
from icefloe.lifecycle import (
    AlterResult,
    DeleteResult,
    RollbackResult,
    alter_table,
    delete_rows,
    rollback_table,
)
from icefloe.lifecycle.alter import add_column, check_spec_sql, drop_column, widen_column
from icefloe.merge import LocalMergeReport, merge_locally
from icefloe.metastore.models import Snapshot, TableInfo, TableStatus
from icefloe.query.changes import ChangeFeed, read_changes
from icefloe.query.engine import Isolation, QueryResult
from icefloe.query.json_paths import JsonPathReport, json_paths
from icefloe.settings import IcefloeSettings, process_environment
from icefloe.spec import Publish, TableSpec
from icefloe.spec.evolution import RenameColumn, SchemaChange

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection, DuckDBPyRelation
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


class Lake(LakeParts):
    """A lake: everything a lake does (tables, inserts, queries, merges, deletes, rollbacks,
    gc, Iceberg publication), over the collaborators :class:`LakeParts` builds once from one
    settings tree."""

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
