"""Publish a table's head snapshot as an Iceberg v2 table: one Iceberg commit with the files
added and removed since the last publication (a fast append when nothing was removed), which
records the icefloe snapshot it shows in the table's properties (``icefloe.snapshot-id``).

Every publication is recorded in the meta store before its Iceberg commit, and the janitor
expires no icefloe snapshot from the oldest retained publication on: no Iceberg snapshot
names a file icefloe has collected. Each publication expires the Iceberg snapshots older than
the table's retention (or the one given) and releases their files to the next collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from icefloe.errors import CommitConflictError, SnapshotNotFoundError
from icefloe.iceberg.catalogs import catalog_key
from icefloe.iceberg.mapping import (
    NAMESPACE,
    IcebergPublishError,
    PublicationWaitsError,
    data_file_record,
    iceberg_partition_spec,
    iceberg_schema,
    name_mapping,
    partition_fields,
)
from icefloe.metastore.models import DataFile as IcefloeFile
from icefloe.metastore.models import TableInfo
from icefloe.metastore.publications import PublicationStore
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.spec.reading import versions_lacking_generated
from icefloe.storage import ObjectStore

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

SNAPSHOT_PROPERTY = "icefloe.snapshot-id"
TABLE_ID_PROPERTY = "icefloe.table-id"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
# The icefloe spec versions of every file any publication registered (see name_mapping).
VERSIONS_PROPERTY = "icefloe.spec-versions"
# pyiceberg retries a commit that finds the table moved by rebuilding its snapshot on the new
# one (four times by default): a fast append then appends the files already there again. Set
# to 0 on every table icefloe publishes; a failed commit starts the publication over instead.
RETRIES_PROPERTY = "commit.retry.num-retries"
# Heads that expire while being published (gc with no retention running alongside) before
# publication gives up.
PIN_ATTEMPTS = 3
# Publications that start over (the Iceberg table moved, or showed a newer snapshot than the
# head read) before publication gives up.
PUBLISH_ATTEMPTS = 3
UNCONFIRMED_PUBLICATION_GRACE = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class PublishResult:
    table: str
    snapshot_id: int  # the icefloe snapshot published
    iceberg_snapshot_id: int | None  # None: nothing changed since the last publication
    metadata_location: str
    files_added: int
    files_removed: int
    files_live: int
    iceberg_snapshots_expired: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "table": self.table,
            "snapshot_id": self.snapshot_id,
            "iceberg_snapshot_id": self.iceberg_snapshot_id,
            "metadata_location": self.metadata_location,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "files_live": self.files_live,
            "iceberg_snapshots_expired": self.iceberg_snapshots_expired,
        }


def publish_iceberg(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    catalog: Catalog,
    namespace: str = NAMESPACE,
    retention: timedelta | None = None,
) -> PublishResult:
    """Publish ``table``'s head snapshot to ``catalog`` as ``<namespace>.<table>`` (in Glue,
    the namespace is the database), then expire the Iceberg snapshots older than
    ``retention`` (default: the table's snapshot retention; the one current at that age stays,
    as in icefloe) and stop retaining their files.

    The publication is recorded in the meta store before the Iceberg commit, so the janitor
    keeps every file of the published snapshot for as long as an Iceberg snapshot shows it.

    Publications of one table to one catalog run one at a time, from reading the head to the
    confirmation (:meth:`PublicationStore.lock`; another one waits): two that overlapped would
    both diff against the same Iceberg snapshot, or one would diff an older head against a
    newer publication. Should the Iceberg table still move under it (a writer that does not
    take the lock), the commit fails instead of being retried by pyiceberg on a stale diff,
    and the publication starts over from the head; an Iceberg table showing a newer snapshot
    than the head read is never taken back to it."""
    info = meta.get_table(table)
    publications = PublicationStore(meta)
    key = catalog_key(catalog, namespace)
    with publications.lock(table, catalog=key):
        return _publish_locked(
            meta, objects, publications, info, key, catalog, namespace, retention
        )


def _publish_locked(
    meta: MetaStore,
    objects: ObjectStore,
    publications: PublicationStore,
    info: TableInfo,
    key: str,
    catalog: Catalog,
    namespace: str,
    retention: timedelta | None,
) -> PublishResult:
    from pyiceberg.exceptions import CommitFailedException

    table = info.name
    for _ in range(PUBLISH_ATTEMPTS):
        snapshot_id, spec = _pin_head(meta, publications, info, key)
        # A snapshot's files never change: listed after the pin, they are still exactly its own.
        live = meta.files(table, snapshot_id=snapshot_id) if snapshot_id else []
        schema = iceberg_schema(spec)
        iceberg = _load_or_create(catalog, namespace, spec, schema, info.table_id)
        shown = iceberg.properties.get(SNAPSHOT_PROPERTY)
        if shown is not None and int(shown) > snapshot_id:
            # Published past the head read (by a publisher that did not wait for the lock):
            # never take the Iceberg table back; read the head again.
            continue
        # Older Iceberg snapshots still name files of the versions published before, and
        # readers map them through the one name mapping too: it must cover those versions too.
        versions = {f.spec_version for f in live} | _published_versions(iceberg)
        mapping = name_mapping(spec, versions)
        published = _published_files(iceberg)
        wanted = {objects.uri(f.path): f for f in live}
        added = [f for uri, f in wanted.items() if uri not in published]
        removed = [df for uri, df in published.items() if uri not in wanted]
        properties = {
            NAME_MAPPING_PROPERTY: mapping,
            SNAPSHOT_PROPERTY: str(snapshot_id),
            TABLE_ID_PROPERTY: str(info.table_id),
            VERSIONS_PROPERTY: ",".join(map(str, sorted(versions))),
        }
        schema_changed = iceberg.schema().as_struct() != schema.as_struct()
        committed = bool(added or removed or schema_changed)
        try:
            if committed:
                _commit(iceberg, objects, spec, schema, snapshot_id, properties, added, removed)
                iceberg = catalog.load_table((namespace, table))
            elif iceberg.properties.get(SNAPSHOT_PROPERTY) != str(snapshot_id):
                # The same files as the last publication (a rollback, a commit that changed
                # none): no new Iceberg snapshot, but the table says which icefloe snapshot it
                # shows.
                with iceberg.transaction() as tx:
                    tx.set_properties(properties)
                iceberg = catalog.load_table((namespace, table))
        except CommitFailedException:
            # The Iceberg table moved since it was loaded: the diff is stale. Start over.
            continue
        break
    else:
        raise CommitConflictError(
            f"{table!r}: its head expired, or its Iceberg table moved, {PUBLISH_ATTEMPTS} times"
            " while it was published"
        )
    current = iceberg.current_snapshot()
    if snapshot_id and current is not None:
        publications.confirm(
            table, catalog=key, snapshot_id=snapshot_id, iceberg_snapshot_id=current.snapshot_id
        )
    keep = (
        retention
        if retention is not None
        else timedelta(seconds=spec.retention.snapshot_retention_seconds)
    )
    expired = expire_iceberg_snapshots(
        iceberg, publications, table=table, catalog=key, retention=keep, current=snapshot_id
    )
    if expired:
        iceberg = catalog.load_table((namespace, table))
    return PublishResult(
        table=table,
        snapshot_id=snapshot_id,
        iceberg_snapshot_id=(None if current is None or not committed else current.snapshot_id),
        metadata_location=iceberg.metadata_location,
        files_added=len(added),
        files_removed=len(removed),
        files_live=len(wanted),
        iceberg_snapshots_expired=expired,
    )


def _pin_head(
    meta: MetaStore, publications: PublicationStore, info: TableInfo, key: str
) -> tuple[int, TableSpec]:
    """Read the head and record its publication (the head again when it expires meanwhile):
    its snapshot id (0: nothing committed yet) and its spec."""
    table = info.name
    for _ in range(PIN_ATTEMPTS):
        with meta.pin(table) as pinned:
            snapshot_id = pinned.snapshot_id
            # The head's own spec: an alter after get_table is the pinned head's version.
            spec = pinned.spec(info.spec)
        if snapshot_id:
            _check_complete(meta, table, spec, snapshot_id)
        try:
            if snapshot_id:
                publications.pin(table, catalog=key, snapshot_id=snapshot_id)
            return snapshot_id, spec
        except SnapshotNotFoundError:
            continue  # collected past while it was read (gc with no retention): the new head
    raise CommitConflictError(f"{table!r}: its head expired {PIN_ATTEMPTS} times while published")


def _commit(
    iceberg: Table,
    objects: ObjectStore,
    spec: TableSpec,
    schema: Schema,
    snapshot_id: int,
    properties: dict[str, str],
    added: list[IcefloeFile],
    removed: list[DataFile],
) -> None:
    """One Iceberg commit: the schema when it changed, the properties, and a snapshot with
    the files added and removed (a fast append when none is removed). CommitFailedException
    when the table moved since ``iceberg`` was loaded (pyiceberg does not retry it: see
    :data:`RETRIES_PROPERTY`)."""
    schema_changed = iceberg.schema().as_struct() != schema.as_struct()
    with iceberg.transaction() as tx:
        if schema_changed:
            _set_schema(tx, iceberg, schema)
        tx.set_properties(properties)
        if added or removed:
            new_files = [
                data_file_record(iceberg, schema, spec, objects.uri(f.path), f) for f in added
            ]
            summary = {SNAPSHOT_PROPERTY: str(snapshot_id)}
            if removed:
                with tx.update_snapshot(summary).overwrite() as overwrite:
                    for df in removed:
                        overwrite.delete_data_file(df)
                    for df in new_files:
                        overwrite.append_data_file(df)
            else:
                with tx.update_snapshot(summary).fast_append() as append:
                    for df in new_files:
                        append.append_data_file(df)


def expire_iceberg_snapshots(
    iceberg: Table,
    publications: PublicationStore,
    *,
    table: str,
    catalog: str,
    retention: timedelta,
    current: int,
) -> int:
    """Expire the Iceberg snapshots older than ``retention`` (the newest one at or before
    that age stays: it is what a read as of that time sees; the current one always stays),
    then stop retaining the publications no Iceberg snapshot shows any more. The number of
    Iceberg snapshots expired.

    A publication never confirmed that an Iceberg snapshot shows (its publisher died between
    the Iceberg commit and the confirmation) is confirmed first, naming that snapshot: it is
    retained, as any other, until that snapshot expires. Only one that no Iceberg snapshot
    shows is taken as dead, once it has stayed unconfirmed for the grace."""
    snapshots = sorted(iceberg.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    head = iceberg.current_snapshot()
    shown = _shown_snapshots(iceberg)
    for p in publications.retained(table, catalog=catalog):
        if p.iceberg_snapshot_id is None and p.snapshot_id in shown:
            publications.confirm(
                table,
                catalog=catalog,
                snapshot_id=p.snapshot_id,
                iceberg_snapshot_id=shown[p.snapshot_id],
            )
    boundary_ms = int((datetime.now(UTC) - retention).timestamp() * 1000)
    old = [s for s in snapshots if s.timestamp_ms <= boundary_ms]
    kept_at_boundary = old[-1].snapshot_id if old else None
    doomed = [
        s.snapshot_id
        for s in old
        if s.snapshot_id != kept_at_boundary and (head is None or s.snapshot_id != head.snapshot_id)
    ]
    if doomed:
        iceberg.maintenance.expire_snapshots().by_ids(doomed).commit()
    remaining = {s.snapshot_id for s in snapshots} - set(doomed)
    # A publication still unconfirmed is one no Iceberg snapshot showed: it may be another
    # publisher's, between its record and its commit (one that takes no lock), so only one
    # that stayed unconfirmed for an hour is taken as dead.
    stale = datetime.now(UTC) - UNCONFIRMED_PUBLICATION_GRACE
    gone = [
        p.snapshot_id
        for p in publications.retained(table, catalog=catalog)
        if p.snapshot_id != current
        and (
            p.iceberg_snapshot_id not in remaining
            if p.iceberg_snapshot_id is not None
            else p.published_at < stale
        )
    ]
    publications.expire(table, catalog=catalog, snapshot_ids=gone)
    return len(doomed)


def _shown_snapshots(iceberg: Table) -> dict[int, int]:
    """The icefloe snapshots the table's Iceberg snapshots show, each to the newest Iceberg
    snapshot showing it: a publication that committed files names its icefloe snapshot in its
    Iceberg snapshot's summary; one that committed none (the same files as the last one) names
    it in the table's properties only, and shows it in the current Iceberg snapshot."""
    shown: dict[int, int] = {}
    for s in sorted(iceberg.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id)):
        text = s.summary.additional_properties.get(SNAPSHOT_PROPERTY) if s.summary else None
        if text is not None:
            shown[int(text)] = s.snapshot_id
    current = iceberg.current_snapshot()
    text = iceberg.properties.get(SNAPSHOT_PROPERTY)
    if current is not None and text is not None:
        shown[int(text)] = current.snapshot_id
    return shown


def _check_complete(meta: MetaStore, table: str, spec: TableSpec, snapshot_id: int) -> None:
    """Refuse a snapshot with a live file that lacks a generated column: Iceberg readers
    would read NULL where icefloe computes the value. The last publication stays; merges
    rewrite such files (whatever their size) and a later pass publishes."""
    stale = versions_lacking_generated(spec)
    if not stale:
        return
    waiting = [f for f in meta.files(table, snapshot_id=snapshot_id) if f.spec_version in stale]
    if waiting:
        lacking = [
            c.name
            for c in spec.columns
            if c.generated
            and spec.column_id(c.name)
            not in {h.id for h in spec.layout_at(waiting[0].spec_version).columns}
        ]
        raise PublicationWaitsError(
            f"{table!r} is not published yet: {len(waiting)} live file(s) were written before"
            f" generated column {lacking[0]!r} was added, and Iceberg readers would read it as"
            f" NULL there. Merges write it into them (icefloe merge {table}); the publication"
            " stays at its last snapshot until then"
        )


def _load_or_create(
    catalog: Catalog, namespace: str, spec: TableSpec, schema: Schema, table_id: int
) -> Table:
    from pyiceberg.exceptions import NoSuchTableError

    identifier = (namespace, spec.name)
    catalog.create_namespace_if_not_exists(namespace)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        return catalog.create_table(
            identifier,
            schema=schema,
            partition_spec=iceberg_partition_spec(spec),
            properties={
                "format-version": "2",
                TABLE_ID_PROPERTY: str(table_id),
                NAME_MAPPING_PROPERTY: name_mapping(spec, set()),
                RETRIES_PROPERTY: "0",
            },
        )
    published_id = table.properties.get(TABLE_ID_PROPERTY)
    if published_id != str(table_id):
        # The icefloe table was dropped and created again under the same name: start over.
        catalog.drop_table(identifier)
        return _load_or_create(catalog, namespace, spec, schema, table_id)
    if partition_fields(table.spec()) != partition_fields(iceberg_partition_spec(spec)):
        # icefloe never changes a table's partitioning: this is another table of that name
        # (another deployment's meta store, whose table ids start at 1 too).
        raise IcebergPublishError(
            f"{namespace}.{spec.name} in the catalog is partitioned otherwise than icefloe's"
            f" table {spec.name!r}: it was published from another meta store; publish to"
            " another namespace"
        )
    if table.properties.get(RETRIES_PROPERTY) != "0":
        # Published before icefloe turned pyiceberg's retries off: pyiceberg reads the setting
        # from the table as loaded, so it is set by a commit of its own (one with no snapshot,
        # which pyiceberg never retries).
        with table.transaction() as tx:
            tx.set_properties({RETRIES_PROPERTY: "0"})
        table = catalog.load_table(identifier)
    return table


def _published_versions(table: Table) -> set[int]:
    text = table.properties.get(VERSIONS_PROPERTY, "")
    return {int(v) for v in text.split(",") if v}


def _published_files(table: Table) -> dict[str, DataFile]:
    if table.current_snapshot() is None:
        return {}
    return {task.file.file_path: task.file for task in table.scan().plan_files()}


def _set_schema(tx: Any, table: Table, schema: Schema) -> None:
    """Make ``schema`` (with icefloe's ids) the current one, as a new schema version: field
    ids are kept, not reassigned as pyiceberg's schema updates would."""
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate

    schema_id = max(s.schema_id for s in table.metadata.schemas) + 1
    added = AddSchemaUpdate(schema=Schema(*schema.fields, schema_id=schema_id))
    current = SetCurrentSchemaUpdate.model_validate({"schema-id": -1})  # -1: the one just added
    tx._apply((added, current))
