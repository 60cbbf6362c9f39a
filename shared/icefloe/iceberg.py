"""Publish a table's head snapshot as an Iceberg v2 table, so that pyiceberg, DuckDB's
``iceberg_scan``, Spark, Trino and Athena read the same rows icefloe does.

    icefloe publish iceberg events                 # the local catalog under ICEFLOE_HOME
    icefloe publish iceberg events --catalog-uri postgresql+psycopg://...   # any SQL catalog

Nothing is copied or rewritten: the Iceberg snapshot registers icefloe's own Parquet files.
Each publication commits one Iceberg snapshot with the files added and removed since the last
one (a fast append when nothing was removed), and records the icefloe snapshot it shows in the
table's properties (``icefloe.snapshot-id``).

How icefloe's layout maps to Iceberg's:

- **Field ids are icefloe's column ids**, so a schema change in icefloe is the same schema
  change in Iceberg (a rename keeps the id, an added column takes a new one).
- **icefloe's files hold no Parquet field ids**: readers map their columns through the table's
  name mapping (``schema.name-mapping.default``), which lists every name a column has had in
  the files still live, and the dropped columns those files still hold (Iceberg readers ignore
  ids that are not in the schema). ``_row_id`` is mapped to a reserved id outside the schema.
  A name that two different columns had in live files (a column dropped and one of the same
  name added, or two names swapped) cannot be told apart by a name mapping: publication is
  refused until those files are rewritten (``icefloe compact``).
- **Partitions**: ``year``/``month``/``day``/``hour``, ``identity``, ``bucket[N]`` (icefloe
  buckets with Iceberg's hash, so the numbers agree) and ``truncate[W]`` are Iceberg's own
  transforms; each file's partition value comes from icefloe's record of it.
- **Types**: integers up to BIGINT, FLOAT, DOUBLE, DECIMAL, BOOLEAN, VARCHAR and JSON (as
  string), BLOB (binary), DATE, TIME, TIMESTAMP, TIMESTAMPTZ and UUID. Unsigned integers,
  HUGEINT and lists are refused by name.

Every publication is recorded in the meta store before its Iceberg commit, and the janitor
expires no icefloe snapshot from the oldest retained publication on: no Iceberg snapshot
names a file icefloe has collected. Each publication expires the Iceberg snapshots older than
the table's retention (or the one given) and releases their files to the next collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from icefloe.errors import CommitConflictError, InvalidInputError, SnapshotNotFoundError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.metastore.models import DataFile as IcefloeFile
from icefloe.metastore.publications import PublicationStore
from icefloe.metastore.store import MetaStore
from icefloe.spec import PartitionField as IcefloePartitionField
from icefloe.spec import TableSpec
from icefloe.spec.types import decimal_precision_scale
from icefloe.storage import ObjectStore

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import PrimitiveType

NAMESPACE = "icefloe"
SNAPSHOT_PROPERTY = "icefloe.snapshot-id"
TABLE_ID_PROPERTY = "icefloe.table-id"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
# The icefloe spec versions of every file any publication registered (see name_mapping).
VERSIONS_PROPERTY = "icefloe.spec-versions"
# The name mapping's id for the row id: below Iceberg's reserved ids (2147483447 and up), far
# above any column id icefloe gives.
ROW_ID_FIELD_ID = 2_147_483_000
PARTITION_FIELD_IDS = 1000  # Iceberg's convention: partition fields from 1000
# Heads that expire while being published (gc with no retention running alongside) before
# publication gives up.
PIN_ATTEMPTS = 3
UNCONFIRMED_PUBLICATION_GRACE = timedelta(hours=1)


class IcebergPublishError(InvalidInputError):
    """The table cannot be published as it is (a type, a transform or a name mapping)."""


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


def local_catalog(home: Path, *, warehouse: str | None = None) -> Catalog:
    """The SQL catalog kept under ``home/iceberg`` (SQLite), with metadata files beside it
    (or under ``warehouse``, a file:// or s3:// URI)."""
    root = home / "iceberg"
    root.mkdir(parents=True, exist_ok=True)
    return sql_catalog(f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse or root.as_uri())


def sql_catalog(uri: str, *, warehouse: str) -> Catalog:
    """pyiceberg's SQL catalog at a SQLAlchemy ``uri`` (SQLite, Postgres, ...)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("icefloe", uri=uri, warehouse=warehouse)


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
    keeps every file of the published snapshot for as long as an Iceberg snapshot shows it."""
    info = meta.get_table(table)
    publications = PublicationStore(meta)
    key = catalog_key(catalog, namespace)
    for _ in range(PIN_ATTEMPTS):
        with meta.pin(table) as pinned:
            snapshot_id = pinned.snapshot_id
            # The head's own spec: an alter after get_table is the pinned head's version.
            spec = pinned.spec(info.spec)
        try:
            if snapshot_id:
                publications.pin(table, catalog=key, snapshot_id=snapshot_id)
            break
        except SnapshotNotFoundError:
            continue  # collected past while it was read (gc with no retention): the new head
    else:
        raise CommitConflictError(
            f"{table!r}: its head expired {PIN_ATTEMPTS} times while published"
        )
    # A snapshot's files never change: listed after the pin, they are still exactly its own.
    live = meta.files(table, snapshot_id=snapshot_id) if snapshot_id else []
    schema = iceberg_schema(spec)
    iceberg = _load_or_create(catalog, namespace, spec, schema, info.table_id)
    # Older Iceberg snapshots still name files of the versions published before, and readers
    # map them through the one name mapping too: it must cover those versions as well.
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
    if committed:
        with iceberg.transaction() as tx:
            if schema_changed:
                _set_schema(tx, iceberg, schema)
            tx.set_properties(properties)
            if added or removed:
                new_files = [
                    _data_file(iceberg, schema, spec, objects.uri(f.path), f) for f in added
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
        iceberg = catalog.load_table((namespace, table))
    elif iceberg.properties.get(SNAPSHOT_PROPERTY) != str(snapshot_id):
        # The same files as the last publication (a rollback, a commit that changed none):
        # no new Iceberg snapshot, but the table says which icefloe snapshot it shows.
        with iceberg.transaction() as tx:
            tx.set_properties(properties)
        iceberg = catalog.load_table((namespace, table))
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


def catalog_key(catalog: Catalog, namespace: str) -> str:
    """How the meta store names one published table's catalog: its name and namespace."""
    return f"{catalog.name}/{namespace}"


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
    Iceberg snapshots expired."""
    snapshots = sorted(iceberg.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    head = iceberg.current_snapshot()
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
    # A publication not yet confirmed may be another publisher's, between its record and its
    # commit: only one that stayed unconfirmed for an hour is taken as dead.
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


def iceberg_type(duckdb_type: str) -> PrimitiveType:
    """The Iceberg type of a column of ``duckdb_type``; IcebergPublishError if there is none."""
    from pyiceberg import types as t

    simple: dict[str, PrimitiveType] = {
        "BOOLEAN": t.BooleanType(),
        "TINYINT": t.IntegerType(),
        "SMALLINT": t.IntegerType(),
        "INTEGER": t.IntegerType(),
        "BIGINT": t.LongType(),
        "FLOAT": t.FloatType(),
        "DOUBLE": t.DoubleType(),
        "VARCHAR": t.StringType(),
        "JSON": t.StringType(),
        "BLOB": t.BinaryType(),
        "DATE": t.DateType(),
        "TIME": t.TimeType(),
        "TIMESTAMP": t.TimestampType(),
        "TIMESTAMPTZ": t.TimestamptzType(),
        "UUID": t.UUIDType(),
    }
    if duckdb_type in simple:
        return simple[duckdb_type]
    decimal = decimal_precision_scale(duckdb_type)
    if decimal is not None:
        return t.DecimalType(*decimal)
    raise IcebergPublishError(f"type {duckdb_type} has no Iceberg counterpart icefloe publishes")


def iceberg_schema(spec: TableSpec) -> Schema:
    """The table's columns as an Iceberg schema whose field ids are icefloe's column ids."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = []
    for column_id, column in zip(spec.column_ids, spec.columns, strict=True):
        try:
            kind = iceberg_type(column.type)
        except IcebergPublishError as e:
            raise IcebergPublishError(f"table {spec.name!r}: column {column.name!r}: {e}") from e
        fields.append(NestedField(column_id, column.name, kind, required=not column.nullable))
    return Schema(*fields)


def name_mapping(spec: TableSpec, versions: set[int]) -> str:
    """The name mapping (JSON) of the files written at ``versions`` (and the current one):
    every id with every name it had in them, and the row id."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    names: dict[int, list[str]] = {}
    owners: dict[str, int] = {}
    for version in sorted(versions | {spec.version}):
        for column in spec.layout_at(version).columns:
            owner = owners.setdefault(column.name.lower(), column.id)
            if owner != column.id:
                raise IcebergPublishError(
                    f"table {spec.name!r}: files to publish (live now, or published before)"
                    f" hold two different columns named {column.name!r} (ids {owner} and"
                    f" {column.id}: dropped and added again, or renamed); Iceberg's name mapping"
                    " cannot tell them apart. Rewrite the older files (icefloe compact), drop"
                    f" the Iceberg table {NAMESPACE}.{spec.name} if it was published before,"
                    " then publish"
                )
            if column.name not in names.setdefault(column.id, []):
                names[column.id].append(column.name)
    names[ROW_ID_FIELD_ID] = [ROW_ID_COLUMN]
    fields = [
        MappedField.model_validate({"field-id": i, "names": n}) for i, n in sorted(names.items())
    ]
    return NameMapping(fields).model_dump_json()


def iceberg_partition_spec(spec: TableSpec) -> PartitionSpec:
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    return PartitionSpec(
        *(
            PartitionField(
                source_id=spec.column_id(f.source),
                field_id=PARTITION_FIELD_IDS + n,
                transform=_transform(f),
                name=f.name,
            )
            for n, f in enumerate(spec.partition_by)
        )
    )


def _transform(field: IcefloePartitionField) -> Any:
    from pyiceberg import transforms

    if field.transform in ("bucket", "truncate"):
        assert field.param is not None  # the spec requires one
        if field.transform == "bucket":
            return transforms.BucketTransform(field.param)
        return transforms.TruncateTransform(field.param)
    return {
        "identity": transforms.IdentityTransform(),
        "year": transforms.YearTransform(),
        "month": transforms.MonthTransform(),
        "day": transforms.DayTransform(),
        "hour": transforms.HourTransform(),
    }[field.transform]


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
            },
        )
    published_id = table.properties.get(TABLE_ID_PROPERTY)
    if published_id != str(table_id):
        # The icefloe table was dropped and created again under the same name: start over.
        catalog.drop_table(identifier)
        return _load_or_create(catalog, namespace, spec, schema, table_id)
    if _partition_fields(table.spec()) != _partition_fields(iceberg_partition_spec(spec)):
        # icefloe never changes a table's partitioning: this is another table of that name
        # (another deployment's meta store, whose table ids start at 1 too).
        raise IcebergPublishError(
            f"{namespace}.{spec.name} in the catalog is partitioned otherwise than icefloe's"
            f" table {spec.name!r}: it was published from another meta store; publish to"
            " another namespace"
        )
    return table


def _partition_fields(partition_spec: PartitionSpec) -> list[tuple[int, str, str]]:
    return [(f.source_id, str(f.transform), f.name) for f in partition_spec.fields]


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


def _data_file(table: Table, schema: Schema, spec: TableSpec, uri: str, f: IcefloeFile) -> DataFile:
    """An Iceberg data file record of an icefloe file: its statistics read from the footer by
    the names its spec version gave the columns (the file's other columns are left out)."""
    from pyiceberg.io.pyarrow import (
        MetricModeTypes,
        MetricsMode,
        StatisticsCollector,
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.types import BinaryType

    with table.io.new_input(uri).open() as stream:
        footer = pq.read_metadata(stream)
    ids = {c.name: c.id for c in spec.layout_at(f.spec_version).columns}
    current = set(spec.column_ids)
    plan = compute_statistics_plan(schema, table.properties)
    held = {c.id: c.type for c in spec.layout_at(f.spec_version).columns}
    for column_id, column in zip(spec.column_ids, spec.columns, strict=True):
        widened = held.get(column_id, column.type) != column.type
        if (column.type == "JSON" or widened) and column_id in plan:
            # Parquet's JSON columns give their bounds as bytes, and a widened column's are of
            # the file's narrower physical type (a DECIMAL(9,2) is INT32, a DECIMAL(20,2) is
            # fixed-length bytes): count them only.
            plan[column_id] = StatisticsCollector(
                field_id=column_id,
                iceberg_type=plan[column_id].iceberg_type,
                mode=MetricsMode(type=MetricModeTypes.COUNTS),
                column_name=plan[column_id].column_name,
            )
    columns: dict[str, int] = {}
    for position in range(footer.num_columns):
        path = footer.schema.column(position).path
        field_id = ids.get(path)
        if field_id is None or field_id not in current:
            field_id = -1 - position  # not a column of the schema: no statistics
            plan[field_id] = StatisticsCollector(
                field_id=field_id,
                iceberg_type=BinaryType(),
                mode=MetricsMode(type=MetricModeTypes.NONE),
                column_name=path,
            )
        columns[path] = field_id
    stats = data_file_statistics_from_parquet_metadata(footer, plan, columns).to_serialized_dict()
    for key, value in stats.items():
        if isinstance(value, dict):
            stats[key] = {i: v for i, v in value.items() if i > 0}
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=_partition_record(spec, f.partition_path),
        file_size_in_bytes=f.size_bytes,
        spec_id=0,
        **stats,
    )


def _partition_record(spec: TableSpec, partition_path: str) -> Any:
    from pyiceberg.typedef import Record

    values = spec.parse_partition_path(partition_path) if spec.partition_by else ()
    return Record(
        *(_partition_value(spec, f, v) for f, v in zip(spec.partition_by, values, strict=True))
    )


def _partition_value(spec: TableSpec, field: IcefloePartitionField, value: Any) -> Any:
    """Iceberg's partition value: a time transform's count of periods since 1970, else the
    value icefloe recorded (a bucket's number, a truncated value, the value itself)."""
    if value is None:
        return None
    if not field.is_time:
        return _identity_value(value)
    source = iceberg_type(spec.column(field.source).type)
    transform = _transform(field).transform(source)
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        if spec.column(field.source).type == "DATE":
            return transform((moment.date() - date(1970, 1, 1)).days)
        return transform(round(moment.timestamp() * 1_000_000))
    if isinstance(value, date):
        return transform((value - date(1970, 1, 1)).days)
    raise IcebergPublishError(f"partition value {value!r} of {field.name!r} is not a time")


def _identity_value(value: Any) -> Any:
    """A partition value as Iceberg's Avro manifests hold it: dates as days since 1970,
    timestamps as microseconds (UTC), times as microseconds since midnight."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return round(moment.timestamp() * 1_000_000)
    if isinstance(value, date):
        return (value - date(1970, 1, 1)).days
    if isinstance(value, time):
        return (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1_000_000 + value.microsecond
    return value
