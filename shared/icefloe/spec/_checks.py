"""Cross-reference checks of a :class:`TableSpec`: every name it uses exists and fits its role."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from icefloe.errors import SpecError
from icefloe.spec import types
from icefloe.spec._text import show
from icefloe.spec.field_ids import nested_id_count
from icefloe.spec.layout import FileLayout
from icefloe.spec.merge import AggregateMode, AppendMode, CustomMode, ReplaceMode
from icefloe.spec.names import validate_table_name
from icefloe.spec.partitioning import PartitionField, check_unique_field_names
from icefloe.spec.policy import Retention, SizeTargets
from icefloe.spec.schema import Column, check_unique_columns
from icefloe.spec.type_tree import walk_leaves

if TYPE_CHECKING:
    from icefloe.spec.table_spec import TableSpec

EXTRA_FIELDS_MODES = ("reject", "keep")
PUBLISH_FORMATS = ("none", "iceberg")


def check_spec(spec: TableSpec) -> None:
    """Raise SpecError (or InvalidNameError) naming the first field of ``spec`` that is invalid."""
    validate_table_name(spec.name)
    _check_parts(spec)
    _check_partitioning(spec)
    _check_ordering(spec)
    _check_merge(spec)
    _check_ingest(spec)
    _check_generated(spec)


def _check_partitioning(spec: TableSpec) -> None:
    check_unique_field_names(spec.partition_by)
    for f in spec.partition_by:
        f.validate_source_type(lookup_column(spec, f.source, where="partition_by").type)
        same_name = next((c for c in spec.columns if c.name.lower() == f.name.lower()), None)
        if same_name is not None and not (f.transform == "identity" and f.source == same_name.name):
            raise SpecError(
                f"partition_by: field {f.to_text()!r} is named like column "
                f"{same_name.name!r}; rename it with 'AS other_name'"
            )


def _check_ordering(spec: TableSpec) -> None:
    if spec.row_group_by is not None:
        _orderable(spec, spec.row_group_by, where="row_group_by")
    for key in spec.sort_by:
        _orderable(spec, key, where="sort_by")
    if len(set(spec.sort_by)) != len(spec.sort_by):
        raise SpecError(f"sort_by: keys must be unique, got {show(spec.sort_by)}")


def _check_merge(spec: TableSpec) -> None:
    mode = spec.merge
    if isinstance(mode, ReplaceMode):
        for key in mode.key:
            lookup_column(spec, key, where="merge: replace key")
        if mode.version is not None:
            lookup_column(spec, mode.version, where="merge: replace version")
            _orderable(spec, mode.version, where="merge: replace version")
    elif isinstance(mode, AggregateMode):
        for key in mode.group_by:
            lookup_column(spec, key, where="merge: aggregate key")
        for col, fn in mode.aggregates:
            t = lookup_column(spec, col, where="merge: aggregate").type
            fits = {"sum": types.is_numeric, "count": types.is_integer}.get(fn, types.is_orderable)
            if fn != "any" and not fits(t):
                raise SpecError(f"merge: aggregate {fn!r} cannot apply to {col!r} of type {t}")
        covered = set(mode.group_by) | {col for col, _ in mode.aggregates}
        missing = [name for name in spec.column_names if name not in covered]
        if missing:
            raise SpecError(
                f"merge: column {missing[0]!r} is neither a group key nor aggregated; "
                f"add '{missing[0]}:any' to keep one of its values"
            )
        # min, max and any return one of the partition's own values; sum and count do not,
        # and would move rolled-up rows out of the partition they were merged in.
        for col, fn in mode.aggregates:
            if fn in ("sum", "count") and col in {f.source for f in spec.partition_by}:
                raise SpecError(
                    f"merge: aggregate {col!r} is a partition source and cannot be {fn!r}med; "
                    f"make it a group key or use min, max or any"
                )


def _check_ingest(spec: TableSpec) -> None:
    if spec.tenant_column is not None:
        lookup_column(spec, spec.tenant_column, where="tenant_column")
        if not any(
            f.transform == "identity" and f.source == spec.tenant_column for f in spec.partition_by
        ):
            raise SpecError(
                f"tenant_column: {spec.tenant_column!r} must also be an identity partition "
                f"source (add it to partition_by)"
            )
    if spec.publish not in PUBLISH_FORMATS:
        raise SpecError(f"publish: {show(spec.publish)} is not 'iceberg' or 'none'")
    if spec.publish == "iceberg":
        for column in spec.columns:
            for path, leaf, _ in walk_leaves(types.type_tree(column.type)):
                if leaf not in types.ICEBERG_PUBLISHABLE_TYPES and not leaf.startswith("DECIMAL("):
                    where = ".".join((column.name, *path))
                    raise SpecError(
                        f"publish: {'field' if path else 'column'} {where!r} is {leaf}, which"
                        " has no Iceberg type icefloe publishes (unsigned integers and HUGEINT"
                        " have none)"
                    )
        for field in spec.partition_by:
            if field.transform == "bucket" and spec.column(field.source).type == "UUID":
                raise SpecError(
                    f"publish: partition {field.to_text()!r} buckets a UUID by its 16 bytes,"
                    " and UUIDs are published as strings, which Iceberg readers bucket by their"
                    " text: they would skip the wrong files (partition by another column)"
                )
    if spec.extra_fields not in EXTRA_FIELDS_MODES:
        raise SpecError(f"extra_fields: {show(spec.extra_fields)} is not 'reject' or 'keep'")
    if spec.overflow_column is None:
        if spec.extra_fields == "keep":
            raise SpecError("overflow_column: extra_fields='keep' needs a JSON overflow column")
        return
    if spec.extra_fields != "keep":
        raise SpecError("overflow_column: only used with extra_fields='keep'")
    t = lookup_column(spec, spec.overflow_column, where="overflow_column").type
    if t != "JSON":
        raise SpecError(f"overflow_column: {spec.overflow_column!r} must be JSON, not {t}")


def _check_generated(spec: TableSpec) -> None:
    """Where a generated column may not stand. Its expression is checked against DuckDB
    where a table is created or altered (icefloe.query.generated)."""
    generated = [c.name for c in spec.columns if c.expression is not None]
    if not generated:
        return
    for role, name in (
        ("overflow_column", spec.overflow_column),
        ("tenant_column", spec.tenant_column),
    ):
        if name in generated:
            raise SpecError(f"{role}: {name!r} is a generated column; it must be an input column")
    if isinstance(spec.merge, AggregateMode | CustomMode):
        raise SpecError(
            f"merge: generated column {generated[0]!r} in a table whose merges aggregate rows"
            " (a merged row's stored value would not be its expression's); use append or replace"
        )


def _check_parts(spec: TableSpec) -> None:
    """Type checks of the parts, so a hand-built spec fails here rather than deep in a writer."""
    parts: list[tuple[str, object, type | tuple[type, ...]]] = [
        ("merge", spec.merge, (AppendMode, ReplaceMode, AggregateMode, CustomMode)),
        ("sizes", spec.sizes, SizeTargets),
        ("retention", spec.retention, Retention),
    ]
    parts += [("columns", c, Column) for c in _tuple(spec.columns, where="columns")]
    parts += [
        ("partition_by", f, PartitionField) for f in _tuple(spec.partition_by, where="partition_by")
    ]
    parts += [("sort_by", k, str) for k in _tuple(spec.sort_by, where="sort_by")]
    for where, value, expected in parts:
        if not isinstance(value, expected):
            raise SpecError(f"{where}: unexpected value {show(value)}")
    if not spec.columns:
        raise SpecError("columns: a table needs at least one column")
    check_unique_columns(spec.columns)
    _check_versions(spec)


def _check_versions(spec: TableSpec) -> None:
    """Column ids and layouts: one positive, unique id per column, none above the last id
    given, and earlier layouts of earlier versions, oldest first."""
    if isinstance(spec.version, bool) or not isinstance(spec.version, int) or spec.version < 1:
        raise SpecError(f"version: {show(spec.version)} must be an integer of at least 1")
    ids = _tuple(spec.column_ids, where="column_ids")
    if len(ids) != len(spec.columns):
        raise SpecError(f"column_ids: {len(ids)} ids for {len(spec.columns)} columns")
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in ids):
        raise SpecError(f"column_ids: {show(ids)} must be positive integers")
    if len(set(ids)) != len(ids):
        raise SpecError(f"column_ids: {show(ids)} repeats an id")
    nested = _tuple(spec.nested_ids, where="nested_ids")
    if len(nested) != len(spec.columns):
        raise SpecError(f"nested_ids: {len(nested)} entries for {len(spec.columns)} columns")
    for column, column_nested in zip(spec.columns, nested, strict=True):
        inside = _tuple(column_nested, where="nested_ids")
        expected = nested_id_count(types.type_tree(column.type))
        if len(inside) != expected:
            raise SpecError(
                f"nested_ids: column {column.name!r} has {expected} fields inside its type,"
                f" given {len(inside)} ids"
            )
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in inside):
            raise SpecError(f"nested_ids: {show(inside)} must be positive integers")
        ids = ids + inside
    if len(set(ids)) != len(ids):
        raise SpecError(f"column_ids, nested_ids: {show(ids)} repeats an id")
    if max(cast(tuple[int, ...], ids)) > spec.last_column_id:
        raise SpecError(f"last_column_id: {spec.last_column_id} is below a field's id")
    layouts = _tuple(spec.past_layouts, where="past_layouts")
    if not all(isinstance(layout, FileLayout) for layout in layouts):
        raise SpecError(f"past_layouts: unexpected value {show(layouts)}")
    versions = [layout.version for layout in spec.past_layouts]
    if versions != sorted(set(versions)) or (versions and versions[-1] >= spec.version):
        raise SpecError(
            f"past_layouts: versions {versions} must rise and stay below version {spec.version}"
        )


def _tuple(value: object, *, where: str) -> tuple[object, ...]:
    if not isinstance(value, tuple):
        raise SpecError(f"{where}: expected a tuple, got {show(value)}")
    return value


def lookup_column(spec: TableSpec, name: str, *, where: str) -> Column:
    for column in spec.columns:
        if column.name == name:
            return column
    hint = next(
        (
            f"; did you mean {c.name!r}?"
            for c in spec.columns
            if isinstance(name, str) and c.name.lower() == name.lower()
        ),
        "",
    )
    raise SpecError(f"{where}: unknown column {show(name)}{hint}")


def _orderable(spec: TableSpec, name: str, *, where: str) -> None:
    t = key_type(spec, name, where=where)
    if not types.is_orderable(t):
        what = "field" if "." in name else "column"
        raise SpecError(f"{where}: {what} {name!r} of type {t} cannot be ordered")


def key_type(spec: TableSpec, key: str, *, where: str) -> str:
    """The type of a key naming a column or, dotted, a leaf reached through structs only."""
    column, *path = key.split(".") if isinstance(key, str) else (key,)
    t = lookup_column(spec, column, where=where).type
    if not path:
        return t
    leaf = types.struct_field_type(t, tuple(path))
    if leaf is None:
        raise SpecError(
            f"{where}: {show(key)} is not a field of column {column!r} reached through structs"
            f" only ({t})"
        )
    return leaf
