"""The fast path for typed Arrow input: prove a batch clean with Arrow compute, or step aside.

A caller's Arrow table whose columns already have the exact types the DuckDB conversion would
produce needs no conversion, only checks: nulls in NOT NULL columns, finite floats, dates and
timestamps in years 1 to 9999, value sizes, NUL in identity partition values. When every check
passes, the columns are used as they are (absent nullable columns become nulls). Anything else
(another type, an unknown column, a value that fails a check) returns None, and the DuckDB
conversion, which names the row and field at fault, decides. JSON columns are always checked
by that conversion (JSON text must be parsed), over their own columns only.

Also what any Arrow input goes through before the conversion reads it: two columns or struct
fields of one name (:func:`duplicate_names`), parts of Arrow's null type given the declared
type (:func:`null_children_typed`), parts of types DuckDB cannot read
(:func:`unreadable_types`); its values are checked at any depth by
:mod:`icefloe.ingest.arrow_values`.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, datetime

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.errors import RowProblem
from icefloe.ingest.sources import InsertLimits, repeated_names
from icefloe.ingest.strict_json import as_one_value, value_bytes
from icefloe.spec import Column, TableSpec
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode
from icefloe.spec.types import type_tree

# The Arrow type the DuckDB conversion gives each column type it can be skipped for.
ARROW_TYPES: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
}
_BOUNDS: dict[str, tuple[pa.Scalar, pa.Scalar]] = {
    "DATE": (pa.scalar(date(1, 1, 1)), pa.scalar(date(9999, 12, 31))),
    "TIMESTAMP": (
        pa.scalar(datetime(1, 1, 1), pa.timestamp("us")),
        pa.scalar(datetime(9999, 12, 31, 23, 59, 59, 999999), pa.timestamp("us")),
    ),
}


def json_columns_to_check(spec: TableSpec, table: pa.Table) -> list[Column]:
    """The JSON columns present in ``table``: the ones the fast path leaves to DuckDB."""
    return [c for c in spec.columns if c.type == "JSON" and c.name in table.column_names]


def proven_clean(
    spec: TableSpec,
    table: pa.Table,
    *,
    limits: InsertLimits,
    partition_sources: Collection[str],
) -> pa.Table | None:
    """The columns of ``spec``, in order, as the conversion would give them, if Arrow's checks
    prove the batch holds no bad value; None when the conversion must decide. JSON columns
    are passed as they are: their text is the caller's to check."""
    names = set(table.column_names)
    if not names <= set(spec.column_names):
        return None  # an unknown column: the conversion names it
    columns: dict[str, pa.ChunkedArray] = {}
    for col in spec.columns:
        target = ARROW_TYPES.get(col.type)
        if col.name not in names:
            if not col.nullable or target is None:
                return None
            columns[col.name] = pa.chunked_array([pa.nulls(table.num_rows, target)])
            continue
        values = table.column(col.name)
        if target is None or values.type != target:
            return None
        if col.type != "JSON" and not _holds(
            col, values, limits=limits, partition_source=col.name in partition_sources
        ):
            return None
        columns[col.name] = values
    return pa.table(columns)


def _holds(
    col: Column, values: pa.ChunkedArray, *, limits: InsertLimits, partition_source: bool
) -> bool:
    """Whether every value of a column of the right type passes the conversion's checks."""
    if not col.nullable and values.null_count > 0:
        return False
    if values.null_count == len(values):
        return True
    if col.type in ("FLOAT", "DOUBLE"):
        return bool(pc.all(pc.is_finite(values)).as_py())
    if col.type in _BOUNDS:
        low, high = _BOUNDS[col.type]
        extremes = pc.min_max(values)  # compared in Arrow: Python has no year 10000
        return bool(
            pc.greater_equal(extremes["min"], low).as_py()
            and pc.less_equal(extremes["max"], high).as_py()
        )
    if col.type == "VARCHAR":
        longest = pc.max(pc.binary_length(values)).as_py()
        if longest is not None and longest > limits.max_value_bytes:
            return False
        if partition_source and pc.any(pc.match_substring(values, "\x00")).as_py():
            return False
        if not utf8_valid(values):
            return False  # the conversion refuses it, naming the row
    return True


def utf8_valid(values: pa.ChunkedArray) -> bool:
    """Whether every value of a string column is UTF-8 (a caller's Arrow memory need not be:
    stored as it is, it would make the table's files unreadable). Each chunk's bytes are
    validated as one value, in a fraction of a millisecond a megabyte; only text that is not
    ASCII then needs each value validated (a character could be split between two values)."""
    for chunk in values.chunks:
        data = value_bytes(chunk)
        if data is None:
            return False
        whole = as_one_value(data).view(pa.large_string())
        try:
            whole.validate(full=True)
        except pa.ArrowInvalid:
            return False
        if pc.utf8_length(whole)[0].as_py() == data.size:
            continue  # ASCII: no character to split
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            return False
    return True


def duplicate_names(table: pa.Table) -> list[RowProblem]:
    """A problem for each name that two columns of ``table``, or two fields of one of its
    structs (at any depth), share in any case: which of them the name means cannot be told."""
    problems = _twice(table.column_names, "")
    pending: list[tuple[pa.DataType, str]] = [(f.type, f.name) for f in table.schema]
    while pending:  # (how deep a type nests is bounded before: see sources.arrow_batch)
        kind, path = pending.pop(0)
        if isinstance(kind, pa.BaseExtensionType):
            pending.append((kind.storage_type, path))
        elif isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType):
            pending.append((kind.value_type, path))
        elif isinstance(kind, pa.StructType):
            names = [kind.field(i).name for i in range(kind.num_fields)]
            problems += _twice(names, path)
            pending += [(kind.field(i).type, f"{path}.{name}") for i, name in enumerate(names)]
        elif isinstance(kind, pa.MapType):
            pending += [(kind.key_type, f"{path}.key"), (kind.item_type, f"{path}[]")]
        elif isinstance(kind, LIST_TYPES):
            pending.append((kind.value_type, f"{path}[]"))
    return problems


LIST_TYPES = (
    pa.ListType,
    pa.LargeListType,
    pa.FixedSizeListType,
    pa.ListViewType,
    pa.LargeListViewType,
)


def _twice(names: list[str], parent: str) -> list[RowProblem]:
    """A problem for each of ``names`` given more than once (once each), as DuckDB tells
    names apart: not by case (it would read a second ``A`` beside ``a`` as ``A_1``)."""
    problems = []
    for twice in repeated_names(names):
        spellings = dict.fromkeys(twice.spellings)
        cased = (
            ": " + ", ".join(repr(s) for s in spellings) + ", which case does not tell apart"
            if len(spellings) > 1
            else ""
        )
        problems.append(
            RowProblem(
                row=None,
                field=f"{parent}.{twice.name}" if parent else twice.name,
                message="more than one "
                + ("field" if parent else "column")
                + f" of this name{cased} (which one it means cannot be told)",
            )
        )
    return problems


def null_children_typed(spec: TableSpec, table: pa.Table) -> pa.Table:
    """``table`` with each part of Arrow's null type (what pyarrow infers for a struct field,
    a list element or a map value that is None in every row) inside a column of the spec
    given the type the column declares there: all NULL either way, but DuckDB reads the null
    type as INTEGER, which a nested column's declared shape would refuse."""
    for i, name in enumerate(table.column_names):
        kind = table.schema.field(i).type
        if name not in spec.column_names or not _holds_null(kind):
            continue
        typed = _nulls_typed(kind, type_tree(spec.column(name).type))
        if not typed.equals(kind):
            table = table.set_column(
                i, table.schema.field(i).with_type(typed), table.column(i).cast(typed)
            )
    return table


def _holds_null(kind: pa.DataType) -> bool:
    if pa.types.is_null(kind):
        return True
    if isinstance(kind, pa.MapType):
        return _holds_null(kind.item_type)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType):
        return _holds_null(kind.value_type)
    if isinstance(kind, pa.StructType):
        return any(_holds_null(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _nulls_typed(kind: pa.DataType, node: TypeNode) -> pa.DataType:
    """``kind`` with each null type in it that ``node`` declares a type for given that type."""
    if pa.types.is_null(kind):
        return _arrow_type(node)
    if isinstance(kind, pa.StructType) and isinstance(node, Struct):
        declared = dict(node.fields)
        fields = [kind.field(i) for i in range(kind.num_fields)]
        return pa.struct(
            [
                f.with_type(_nulls_typed(f.type, declared[f.name])) if f.name in declared else f
                for f in fields
            ]
        )
    if isinstance(kind, pa.MapType) and isinstance(node, MapOf):
        item = kind.item_field.with_type(_nulls_typed(kind.item_type, node.value))
        return pa.map_(kind.key_field, item, keys_sorted=kind.keys_sorted)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType) and isinstance(
        node, ListOf
    ):
        element = kind.value_field.with_type(_nulls_typed(kind.value_type, node.element))
        if isinstance(kind, pa.LargeListType):
            return pa.large_list(element)
        if isinstance(kind, pa.FixedSizeListType):
            return pa.list_(element, kind.list_size)
        return pa.list_(element)
    return kind


def _arrow_type(node: TypeNode) -> pa.DataType:
    """An Arrow type of the declared type's shape whose NULL the conversion reads as a NULL of
    it (a leaf the fast path has no type for: text, which every leaf type takes)."""
    if isinstance(node, Leaf):
        return ARROW_TYPES.get(node.name, pa.string())
    if isinstance(node, Struct):
        return pa.struct([(name, _arrow_type(child)) for name, child in node.fields])
    if isinstance(node, ListOf):
        return pa.list_(_arrow_type(node.element))
    return pa.map_(_arrow_type(node.key), _arrow_type(node.value))


# -- what DuckDB cannot read, and TIME values outside the day ----------------------------------


def unreadable_types(table: pa.Table) -> list[RowProblem]:
    """A problem for each column (or part of one, at any depth) of an Arrow type DuckDB
    cannot read: a half float, a 256-bit decimal, a dense union, a struct with no fields.
    DuckDB's scan fails on them with its own errors, before any row is looked at."""
    problems = []
    for name, kind in zip(table.column_names, table.schema.types, strict=True):
        found = _unreadable(kind)
        if found is not None:
            path, why = found
            problems.append(RowProblem(row=None, field=name + path, message=why))
    return problems


def _unreadable(data_type: pa.DataType) -> tuple[str, str] | None:
    """Where in ``data_type`` (a path below it) a type DuckDB cannot read is, and why."""
    pending: list[tuple[pa.DataType, str]] = [(data_type, "")]
    while pending:  # (how deep a type nests is bounded before: see sources.arrow_batch)
        kind, path = pending.pop(0)
        if pa.types.is_float16(kind):
            return path, "Arrow type float16 (a half float) is not supported: cast it to float32"
        if pa.types.is_decimal256(kind):
            return path, (
                f"Arrow type {kind} is not supported (decimals up to 38 digits are:"
                " cast it to decimal128)"
            )
        if isinstance(kind, pa.UnionType) and kind.mode == "dense":
            return path, "Arrow type dense_union is not supported"
        if isinstance(kind, pa.StructType) and kind.num_fields == 0:
            return path, "Arrow type struct<> (a struct with no fields) is not supported"
        if isinstance(kind, pa.BaseExtensionType):
            pending.append((kind.storage_type, path))
        elif isinstance(kind, pa.DictionaryType | pa.RunEndEncodedType):
            pending.append((kind.value_type, path))
        elif isinstance(kind, pa.StructType):
            pending += [(f.type, f"{path}.{f.name}") for f in kind]
        elif isinstance(kind, pa.MapType):
            pending += [(kind.key_type, f"{path}.key"), (kind.item_type, f"{path}[]")]
        elif isinstance(kind, LIST_TYPES):
            pending.append((kind.value_type, f"{path}[]"))
        elif isinstance(kind, pa.UnionType):
            pending += [(f.type, f"{path}.{f.name}") for f in kind]
    return None
