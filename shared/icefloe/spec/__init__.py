"""The table spec: names, types, hidden partitioning, Hive paths, merge modes, policies.

Pure values and functions: no I/O. Everything a writer, merger, pruner or janitor needs to know
about a table's layout is decided here.
"""

from __future__ import annotations

from icefloe.spec.hashing import bucket_of, iceberg_hash, murmur3_32
from icefloe.spec.hive import (
    NULL_PARTITION,
    escape_path_value,
    parse_partition_path,
    partition_path,
    partition_start,
    unescape_path_value,
)
from icefloe.spec.merge import (
    AGGREGATE_FUNCTIONS,
    AggregateFunction,
    AggregateMode,
    AppendMode,
    CustomMode,
    MergeMode,
    ReplaceMode,
    parse_merge_mode,
)
from icefloe.spec.names import SYSTEM_COLUMNS, validate_column_name, validate_table_name
from icefloe.spec.partitioning import (
    TIME_TRANSFORMS,
    TRANSFORMS,
    PartitionField,
    PartitionValue,
    Transform,
    ValueRange,
    default_field_name,
    format_partition_by,
    parse_partition_by,
)
from icefloe.spec.policy import Retention, SizeTargets
from icefloe.spec.schema import Column, format_schema, parse_schema
from icefloe.spec.table_spec import FORMAT_VERSION, ExtraFields, Publish, TableSpec
from icefloe.spec.types import (
    is_integer,
    is_list,
    is_numeric,
    is_orderable,
    is_string,
    is_temporal,
    is_timestamp,
    normalize_type,
)

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "FORMAT_VERSION",
    "NULL_PARTITION",
    "SYSTEM_COLUMNS",
    "TIME_TRANSFORMS",
    "TRANSFORMS",
    "AggregateFunction",
    "AggregateMode",
    "AppendMode",
    "Column",
    "CustomMode",
    "ExtraFields",
    "MergeMode",
    "PartitionField",
    "PartitionValue",
    "Publish",
    "ReplaceMode",
    "Retention",
    "SizeTargets",
    "TableSpec",
    "Transform",
    "ValueRange",
    "bucket_of",
    "default_field_name",
    "escape_path_value",
    "format_partition_by",
    "format_schema",
    "iceberg_hash",
    "is_integer",
    "is_list",
    "is_numeric",
    "is_orderable",
    "is_string",
    "is_temporal",
    "is_timestamp",
    "murmur3_32",
    "normalize_type",
    "parse_merge_mode",
    "parse_partition_by",
    "parse_partition_path",
    "parse_schema",
    "partition_path",
    "partition_start",
    "unescape_path_value",
    "validate_column_name",
    "validate_table_name",
]
