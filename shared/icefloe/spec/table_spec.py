"""The table spec: schema, hidden partitioning, sort and row-group keys, merge mode, policies.

A :class:`TableSpec` is valid once built: every cross reference is checked in ``__post_init__``.
``to_dict()`` is its stored form (JSON-safe, ``format_version`` 1); ``from_dict`` reads it back.

A spec has a ``version``: 1 when the table is created, one more at each schema change
(:mod:`icefloe.spec.evolution`). Its columns carry ids, and it keeps the file layout of every
earlier version (:mod:`icefloe.spec.layout`), so that files written at any version can be read.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, cast

from icefloe.errors import SpecError
from icefloe.spec import _codec
from icefloe.spec._checks import check_spec, key_type, lookup_column
from icefloe.spec._text import show
from icefloe.spec.field_ids import fresh_nested_ids
from icefloe.spec.hive import parse_partition_path, partition_path
from icefloe.spec.layout import FileLayout, LayoutColumn
from icefloe.spec.merge import AppendMode, MergeMode, parse_merge_mode
from icefloe.spec.partitioning import PartitionField, PartitionValue, parse_partition_by
from icefloe.spec.policy import Retention, SizeTargets
from icefloe.spec.schema import Column, parse_schema
from icefloe.spec.type_tree import walk_leaves
from icefloe.spec.types import is_orderable, type_tree

FORMAT_VERSION = 1
# Nested leaves per table whose min, max and null count the meta store keeps (TableSpec.stats_leaves).
MAX_STATS_LEAVES = 32
ExtraFields = Literal["reject", "keep"]
# Where the table is published and kept current: "iceberg" (icefloe.iceberg.current), or not.
Publish = Literal["none", "iceberg"]
_REQUIRED_KEYS = ("format_version", "name", "columns")


@dataclass(frozen=True, slots=True)
class TableSpec:
    """Everything icefloe knows about one table's layout; immutable and validated."""

    name: str
    columns: tuple[Column, ...]
    partition_by: tuple[PartitionField, ...] = ()
    sort_by: tuple[str, ...] = ()
    row_group_by: str | None = None
    merge: MergeMode = field(default_factory=AppendMode)
    sizes: SizeTargets = field(default_factory=SizeTargets)
    retention: Retention = field(default_factory=Retention)
    tenant_column: str | None = None
    extra_fields: ExtraFields = "reject"
    overflow_column: str | None = None
    publish: Publish = "none"
    # Schema evolution: this spec's version, its columns' ids (parallel to ``columns``; empty
    # means 1, 2, ... as a new table numbers them), the ids of the fields inside each column's
    # type (parallel to ``columns``, in icefloe.spec.field_ids' walk order; empty means fresh
    # ones after the columns'), the highest id ever given (0: the highest of those), and the
    # file layouts of the earlier versions, oldest first.
    version: int = 1
    column_ids: tuple[int, ...] = ()
    nested_ids: tuple[tuple[int, ...], ...] = ()
    last_column_id: int = 0
    past_layouts: tuple[FileLayout, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.columns, tuple) and all(isinstance(c, Column) for c in self.columns):
            if not self.column_ids:
                object.__setattr__(self, "column_ids", tuple(range(1, len(self.columns) + 1)))
            if self.last_column_id == 0 and self.column_ids:
                object.__setattr__(self, "last_column_id", max(self.column_ids))
            if not self.nested_ids:
                self._number_nested_fields()
        check_spec(self)

    def _number_nested_fields(self) -> None:
        trees = [type_tree(c.type) for c in self.columns]
        fresh = fresh_nested_ids(trees, first_id=self.last_column_id + 1)
        object.__setattr__(self, "nested_ids", fresh)
        object.__setattr__(
            self, "last_column_id", max([self.last_column_id, *(i for ids in fresh for i in ids)])
        )

    @classmethod
    def create(
        cls,
        *,
        name: str,
        schema: str,
        partition_by: str = "",
        sort_by: str = "",
        row_group_by: str | None = None,
        merge: str = "append",
        sizes: SizeTargets | None = None,
        retention: Retention | None = None,
        tenant_column: str | None = None,
        extra_fields: ExtraFields = "reject",
        overflow_column: str | None = None,
        publish: Publish = "none",
    ) -> TableSpec:
        """Build a spec from the text forms the CLI takes."""
        sort_keys = tuple(key.strip() for key in sort_by.split(",")) if sort_by.strip() else ()
        row_group_by = row_group_by or None
        return cls(
            name=name,
            columns=parse_schema(schema),
            partition_by=parse_partition_by(partition_by),
            sort_by=sort_keys,
            row_group_by=row_group_by,
            merge=parse_merge_mode(merge),
            sizes=sizes or SizeTargets(),
            retention=retention or Retention(),
            tenant_column=tenant_column or None,
            extra_fields=extra_fields,
            overflow_column=overflow_column or None,
            publish=publish,
        )

    @property
    def column_names(self) -> tuple[str, ...]:
        """User column names in schema order (``_row_id`` is not among them)."""
        return tuple(column.name for column in self.columns)

    @property
    def source_types(self) -> dict[str, str]:
        """Column name -> canonical DuckDB type."""
        return {column.name: column.type for column in self.columns}

    @property
    def has_nested(self) -> bool:
        """True when a column's type has fields inside it (a STRUCT, MAP or list)."""
        return any(self.nested_ids)

    @property
    def stats_leaves(self) -> tuple[str, ...]:
        """The nested leaves whose min, max and null count each file's record keeps, by dotted
        path (``context.page.url``): leaves reached through structs only (one value per row;
        a file's null count of such a leaf counts the rows where it, or a struct above it, is
        NULL) of an orderable type; the sort and row-group keys' first, then in schema order;
        at most :data:`MAX_STATS_LEAVES`."""
        return _stats_leaves(
            tuple((c.name, c.type) for c in self.columns if self.has_nested),
            (*self.file_sort_keys,),
        )

    @property
    def time_partition_field(self) -> PartitionField | None:
        """The first year/month/day/hour field: its period start is what the meta store indexes."""
        return next((f for f in self.partition_by if f.is_time), None)

    @property
    def file_sort_keys(self) -> tuple[str, ...]:
        """The order rows are written in: the row-group key first (so each key value forms one
        contiguous run that row groups can be cut around), then the sort keys."""
        if self.row_group_by is None:
            return self.sort_by
        return (self.row_group_by, *(k for k in self.sort_by if k != self.row_group_by))

    @property
    def partition_source_columns(self) -> tuple[str, ...]:
        """Source columns of the partition fields, each once, in field order."""
        return tuple(dict.fromkeys(f.source for f in self.partition_by))

    @property
    def layout(self) -> FileLayout:
        """The layout of the files written at this spec's version."""
        return FileLayout(
            version=self.version,
            columns=tuple(
                LayoutColumn(i, c.name, c.type, nested)
                for i, c, nested in zip(self.column_ids, self.columns, self.nested_ids, strict=True)
            ),
        )

    def layout_at(self, version: int) -> FileLayout:
        """The layout of files written at ``version`` (this one or an earlier one)."""
        if version == self.version:
            return self.layout
        for layout in self.past_layouts:
            if layout.version == version:
                return layout
        raise SpecError(
            f"table {self.name!r}: spec version {version} is not known to version"
            f" {self.version} (a file newer than this spec?)"
        )

    def column_id(self, name: str) -> int:
        """The id of the column called ``name``."""
        column = self.column(name)
        return self.column_ids[self.columns.index(column)]

    def key_type(self, key: str) -> str:
        """The type of a sort or row-group key: a column's, or a struct leaf's
        (``context.page.url``); SpecError if it names neither."""
        return key_type(self, key, where="key")

    def column(self, name: str) -> Column:
        """The column called ``name`` (exact case); SpecError if there is none."""
        return lookup_column(self, name, where="column")

    def partition_values(self, row: Mapping[str, object]) -> tuple[PartitionValue, ...]:
        """The partition values of one row (a missing source column counts as null)."""
        return tuple(f.apply(row.get(f.source)) for f in self.partition_by)

    def partition_path(self, values: tuple[PartitionValue, ...]) -> str:
        """The Hive path of a partition of this table: ``day=2026-11-22/tenant=acme``."""
        return partition_path(self.partition_by, values)

    def parse_partition_path(self, path: str) -> tuple[PartitionValue, ...]:
        """Inverse of :meth:`partition_path`, typed by this table's columns."""
        return parse_partition_path(self.partition_by, path, source_types=self.source_types)

    def to_dict(self) -> dict[str, object]:
        """The stored, JSON-safe form; :meth:`from_dict` reads it back to an equal spec."""
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "columns": [_codec.column_to_dict(c) for c in self.columns],
            "partition_by": [_codec.field_to_dict(f) for f in self.partition_by],
            "sort_by": list(self.sort_by),
            "row_group_by": self.row_group_by,
            "merge": _codec.merge_to_dict(self.merge),
            "sizes": _codec.policy_to_dict(self.sizes),
            "retention": _codec.policy_to_dict(self.retention),
            "tenant_column": self.tenant_column,
            "extra_fields": self.extra_fields,
            "overflow_column": self.overflow_column,
            "publish": self.publish,
            "version": self.version,
            "column_ids": list(self.column_ids),
            **({"nested_ids": [list(ids) for ids in self.nested_ids]} if self.has_nested else {}),
            "last_column_id": self.last_column_id,
            "past_layouts": [layout.to_dict() for layout in self.past_layouts],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> TableSpec:
        """Read :meth:`to_dict`'s output; optional keys may be absent, unknown keys are refused."""
        optional = [f.name for f in fields(cls)]
        d = _codec.mapping(d, where="spec", required=_REQUIRED_KEYS, optional=optional)
        version = d["format_version"]
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise SpecError(f"spec: format_version {show(version)} is not {FORMAT_VERSION}")
        return cls(
            name=_codec.string(d["name"], where="name"),
            columns=tuple(
                map(_codec.column_from_dict, _codec.items(d["columns"], where="columns"))
            ),
            partition_by=tuple(
                map(
                    _codec.field_from_dict,
                    _codec.items(d.get("partition_by", []), where="partition_by"),
                )
            ),
            sort_by=_codec.strings(d.get("sort_by", []), where="sort_by"),
            row_group_by=_codec.optional_string(d.get("row_group_by"), where="row_group_by"),
            merge=_codec.merge_from_dict(d.get("merge", {"mode": "append"})),
            sizes=_codec.sizes_from_dict(d.get("sizes", {})),
            retention=_codec.retention_from_dict(d.get("retention", {})),
            tenant_column=_codec.optional_string(d.get("tenant_column"), where="tenant_column"),
            extra_fields=cast(ExtraFields, d.get("extra_fields", "reject")),
            overflow_column=_codec.optional_string(
                d.get("overflow_column"), where="overflow_column"
            ),
            publish=cast(Publish, d.get("publish", "none")),
            version=_codec.integer(d.get("version", 1), where="version"),
            column_ids=tuple(
                _codec.integer(i, where="column_ids")
                for i in _codec.items(d.get("column_ids", []), where="column_ids")
            ),
            nested_ids=tuple(
                tuple(
                    _codec.integer(i, where="nested_ids")
                    for i in _codec.items(ids, where="nested_ids")
                )
                for ids in _codec.items(d.get("nested_ids", []), where="nested_ids")
            ),
            last_column_id=_codec.integer(d.get("last_column_id", 0), where="last_column_id"),
            past_layouts=tuple(
                map(
                    FileLayout.from_dict,
                    _codec.items(d.get("past_layouts", []), where="past_layouts"),
                )
            ),
        )


@functools.lru_cache(maxsize=256)
def _stats_leaves(columns: tuple[tuple[str, str], ...], keys: tuple[str, ...]) -> tuple[str, ...]:
    leaves = [
        ".".join((name, *path))
        for name, column_type in columns
        for path, leaf_type, repeated in walk_leaves(type_tree(column_type))
        if path and not repeated and is_orderable(leaf_type)
    ]
    first = [key for key in keys if key in leaves]
    return tuple(dict.fromkeys([*first, *leaves]))[:MAX_STATS_LEAVES]
