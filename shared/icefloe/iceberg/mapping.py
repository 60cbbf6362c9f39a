"""How icefloe's tables map to Iceberg's: types, the schema (field ids are icefloe's column
ids), the name mapping of files without Parquet field ids, partition transforms and values, and
the data file record of one icefloe file (its statistics read from its footer)."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pyarrow.parquet as pq

from icefloe.errors import InvalidInputError
from icefloe.metastore.models import DataFile as IcefloeFile
from icefloe.spec import PartitionField as IcefloePartitionField
from icefloe.spec import TableSpec
from icefloe.spec.field_ids import NestedField
from icefloe.spec.layout import FileLayout
from icefloe.spec.names import ROW_ID_COLUMN, ROW_ID_FIELD_ID
from icefloe.spec.type_tree import Leaf, ListOf, Struct, TypeNode, format_type
from icefloe.spec.types import decimal_precision_scale, type_tree

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType, PrimitiveType

NAMESPACE = "icefloe"  # the default namespace (in Glue: the database) of published tables
PARTITION_FIELD_IDS = 1000  # Iceberg's convention: partition fields from 1000


class IcebergPublishError(InvalidInputError):
    """The table cannot be published as it is (a type, a transform or a name mapping)."""


class PublicationWaitsError(IcebergPublishError):
    """The head cannot be published yet: a live file lacks a generated column added after it
    was written (Iceberg readers would read NULL there), until merges write it in."""


def iceberg_type(duckdb_type: str, fields: tuple[NestedField, ...] = ()) -> IcebergType:
    """The Iceberg type of a column of ``duckdb_type``, whose nested fields (and their ids) are
    ``fields``; IcebergPublishError if there is none."""
    return _iceberg_type(type_tree(duckdb_type), fields)


def _iceberg_type(node: TypeNode, fields: tuple[NestedField, ...]) -> IcebergType:
    from pyiceberg import types as t

    if isinstance(node, Leaf):
        return _primitive_type(node.name)
    if len(fields) != _field_count(node):
        raise IcebergPublishError(f"type {format_type(node)} has no field ids to publish")
    if isinstance(node, Struct):
        return t.StructType(
            *(
                t.NestedField(f.id, f.name, _iceberg_type(f.type, f.fields), required=False)
                for f in fields
            )
        )
    if isinstance(node, ListOf):
        (element,) = fields
        return t.ListType(
            element.id, _iceberg_type(element.type, element.fields), element_required=False
        )
    key, value = fields
    return t.MapType(
        key.id,
        _iceberg_type(key.type, key.fields),
        value.id,
        _iceberg_type(value.type, value.fields),
        value_required=False,
    )


def _field_count(node: TypeNode) -> int:
    """How many fields are directly inside ``node``: a struct's, a list's element, a map's
    key and value."""
    if isinstance(node, Struct):
        return len(node.fields)
    return 1 if isinstance(node, ListOf) else 2


def _primitive_type(duckdb_type: str) -> PrimitiveType:
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
        # The files hold a UUID as its text (a Parquet string); an Iceberg uuid is 16 fixed
        # bytes, so a reader would find the wrong physical type.
        "UUID": t.StringType(),
    }
    if duckdb_type in simple:
        return simple[duckdb_type]
    decimal = decimal_precision_scale(duckdb_type)
    if decimal is not None:
        return t.DecimalType(*decimal)
    raise IcebergPublishError(f"type {duckdb_type} has no Iceberg counterpart icefloe publishes")


def iceberg_schema(spec: TableSpec) -> Schema:
    """The table's columns as an Iceberg schema whose field ids are icefloe's ids (each nested
    field's too)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField as IcebergField

    fields = []
    for column, held in zip(spec.columns, spec.layout.columns, strict=True):
        try:
            kind = iceberg_type(column.type, held.fields)
        except IcebergPublishError as e:
            raise IcebergPublishError(f"table {spec.name!r}: column {column.name!r}: {e}") from e
        fields.append(IcebergField(held.id, column.name, kind, required=not column.nullable))
    return Schema(*fields)


def name_mapping(spec: TableSpec, versions: set[int]) -> str:
    """The name mapping (JSON) of the files written at ``versions`` (and the current one):
    every id with every name it had in them, the fields inside each column, and the row id.
    Readers use it for files without Parquet field ids (written before icefloe wrote them)."""
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    names: dict[int, list[str]] = {}
    inside: dict[int, list[dict[str, object]]] = {}  # the newest version's nested fields
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
            if column.fields:
                inside[column.id] = [_mapped(f) for f in column.fields]
    names[ROW_ID_FIELD_ID] = [ROW_ID_COLUMN]
    fields = [
        MappedField.model_validate(
            {"field-id": i, "names": n, **({"fields": inside[i]} if i in inside else {})}
        )
        for i, n in sorted(names.items())
    ]
    return NameMapping(fields).model_dump_json()


def _mapped(field: NestedField) -> dict[str, object]:
    """A nested field's name mapping: a list's element is ``element``, a map's parts ``key``
    and ``value``, as Parquet names them."""
    mapped: dict[str, object] = {"field-id": field.id, "names": [field.name]}
    if field.fields:
        mapped["fields"] = [_mapped(f) for f in field.fields]
    return mapped


def iceberg_partition_spec(spec: TableSpec) -> PartitionSpec:
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    return PartitionSpec(
        *(
            PartitionField(
                source_id=spec.column_id(f.source),
                field_id=PARTITION_FIELD_IDS + n,
                transform=iceberg_transform(f),
                name=f.name,
            )
            for n, f in enumerate(spec.partition_by)
        )
    )


def iceberg_transform(field: IcefloePartitionField) -> Any:
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


def partition_fields(partition_spec: PartitionSpec) -> list[tuple[int, str, str]]:
    return [(f.source_id, str(f.transform), f.name) for f in partition_spec.fields]


def data_file_record(
    table: Table, schema: Schema, spec: TableSpec, uri: str, f: IcefloeFile
) -> DataFile:
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
    ids = footer_field_ids(spec.layout_at(f.spec_version))
    current = footer_field_ids(spec.layout)
    plan = compute_statistics_plan(schema, table.properties)
    held = dict(ids.values())  # each leaf's type as the file holds it, by id
    widened = {
        leaf_id
        for leaf_id, leaf_type in current.values()
        if held.get(leaf_id, leaf_type) != leaf_type
    }
    for field_id, leaf_type in current.values():
        if (leaf_type == "JSON" or field_id in widened) and field_id in plan:
            # Parquet's JSON text gives its bounds as bytes, and a widened column's are of
            # the file's narrower physical type (a DECIMAL(9,2) is INT32, a DECIMAL(20,2) is
            # fixed-length bytes): count them only.
            plan[field_id] = StatisticsCollector(
                field_id=field_id,
                iceberg_type=plan[field_id].iceberg_type,
                mode=MetricsMode(type=MetricModeTypes.COUNTS),
                column_name=plan[field_id].column_name,
            )
    current_ids = {field_id for field_id, _ in current.values()}
    columns: dict[str, int] = {}
    for position in range(footer.num_columns):
        path = footer.schema.column(position).path
        field_id = ids[path][0] if path in ids else -1 - position
        if field_id not in current_ids:
            field_id = -1 - position  # not a field of the schema: no statistics
            plan[field_id] = StatisticsCollector(
                field_id=field_id,
                iceberg_type=BinaryType(),
                mode=MetricsMode(type=MetricModeTypes.NONE),
                column_name=path,
            )
        columns[path] = field_id
    # pyiceberg warns once per file about each column whose bounds are not read (JSON and
    # widened columns, counted only on purpose): 10^4 lines on a first publication.
    quiet = _QuietMissingStatistics()
    pyiceberg_log = logging.getLogger("pyiceberg.io.pyarrow")
    pyiceberg_log.addFilter(quiet)
    try:
        statistics = data_file_statistics_from_parquet_metadata(footer, plan, columns)
    finally:
        pyiceberg_log.removeFilter(quiet)
    stats = statistics.to_serialized_dict()
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


def footer_field_ids(layout: FileLayout) -> dict[str, tuple[int, str]]:
    """Each leaf of ``layout`` by its path in a Parquet footer (``context.page.url``,
    ``tags.list.element.k``, ``m.key_value.value``): its field id and type. A layout written
    before nested fields had ids gives its nested columns' leaves none."""
    leaves: dict[str, tuple[int, str]] = {}
    for column in layout.columns:
        if isinstance(type_tree(column.type), Leaf):
            leaves[column.name] = (column.id, column.type)
        else:
            _nested_leaves(type_tree(column.type), column.fields, column.name, leaves)
    return leaves


def _nested_leaves(
    node: TypeNode,
    fields: tuple[NestedField, ...],
    path: str,
    leaves: dict[str, tuple[int, str]],
) -> None:
    for field in fields:
        if isinstance(node, Struct):
            step = f"{path}.{field.name}"
        elif isinstance(node, ListOf):
            step = f"{path}.list.element"
        else:
            step = f"{path}.key_value.{field.name}"
        if isinstance(field.type, Leaf):
            leaves[step] = (field.id, field.type.name)
        else:
            _nested_leaves(field.type, field.fields, step, leaves)


class _QuietMissingStatistics(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("PyArrow statistics missing for column")


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
        if isinstance(value, int) and not isinstance(value, bool):
            _check_fits(spec, field, value)
        return _identity_value(value)
    source = iceberg_type(spec.column(field.source).type)
    transform = iceberg_transform(field).transform(source)
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        if spec.column(field.source).type == "DATE":
            return transform((moment.date() - date(1970, 1, 1)).days)
        return transform(_epoch_micros(moment))
    if isinstance(value, date):
        return transform((value - date(1970, 1, 1)).days)
    raise IcebergPublishError(f"partition value {value!r} of {field.name!r} is not a time")


_INT_RANGE = range(-(2**31), 2**31)


def _check_fits(spec: TableSpec, field: IcefloePartitionField, value: int) -> None:
    """Refuse a partition value outside its Iceberg type: icefloe truncates in exact integers,
    so ``truncate[W]`` of a value near an INTEGER column's minimum is below what Iceberg's int
    partition value holds (Iceberg's Java library wraps it around to a positive number)."""
    from pyiceberg.types import IntegerType

    if field.transform == "bucket" or value in _INT_RANGE:
        return
    if isinstance(iceberg_type(spec.column(field.source).type), IntegerType):
        raise IcebergPublishError(
            f"table {spec.name!r}: partition {field.name!r} holds {value}, outside Iceberg's"
            f" int ({field.to_text()} of a value near the column's minimum); delete those rows"
            " or widen the column to BIGINT and compact the partition to publish it"
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _epoch_micros(moment: datetime) -> int:
    """Microseconds since 1970 of an aware ``moment``, in exact integers: through a float
    (``timestamp() * 1e6``) a value past about 2240 or before 1700 is off by a microsecond."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _identity_value(value: Any) -> Any:
    """A partition value as Iceberg's Avro manifests hold it: dates as days since 1970,
    timestamps as microseconds (UTC), times as microseconds since midnight."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return _epoch_micros(moment)
    if isinstance(value, date):
        return (value - date(1970, 1, 1)).days
    if isinstance(value, time):
        return (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1_000_000 + value.microsecond
    if isinstance(value, UUID):  # published as its text (see _primitive_type)
        return str(value)
    return value
