"""Scan filters on the leaves of STRUCT columns, decoded from DuckDB's serialized table filters
and keyed by the leaf's dotted path (``context.page.url``).

DuckDB (1.5) pushes a predicate on a struct leaf into the scan in one of two forms, depending on
how the SQL spells it:

- a ``STRUCT_EXTRACT`` table filter (``context.page.url = 'x'``, ``struct_extract(...)``,
  ``struct_extract_at(context, 1)``): a chain of ``child_idx`` (0-based, authoritative) and
  ``child_name`` (the query's spelling, or null for ``struct_extract_at``) ending in an ordinary
  filter on the leaf; several leaves of one column arrive as a ``CONJUNCTION_AND`` of chains;
- an ``EXPRESSION_FILTER`` holding a bound expression (``context['page']['url'] = 'x'``, and
  ``IN``, ``IS [NOT] NULL`` and ``OR`` over a leaf in any spelling).

Both are resolved against the column's type tree (the stand-in's columns are the spec's types),
so a path names the spec's fields in their own case. Only what is read exactly is kept: a chain
through a list or a map, a cast of the leaf, a constant not of the leaf's type, an ``OR`` over
more than one leaf, a function other than the struct extractions, a filter on a whole struct:
each decodes to nothing (the scan may read any row). Parts of an ``AND`` that decode are kept,
since each alone holds for every row the conjunction passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from icefloe.query.column_filters import (
    COMPARISONS,
    UNKNOWN,
    AllOf,
    AnyOf,
    Compare,
    CompareOp,
    InList,
    IsNotNull,
    IsNull,
    Opaque,
    ScanFilter,
    column_filter,
    constant_value,
)
from icefloe.spec.type_tree import Leaf, Struct, TypeNode

# Field names below the column, in the spec's spelling -> the filter every passing row meets.
_Found: TypeAlias = dict[tuple[str, ...], ScanFilter]

# Functions of a bound expression that take one field of a STRUCT: by name (the dot and
# bracket spellings) or by 1-based position.
_BY_NAME = frozenset({"struct_extract", "array_extract"})
_BY_POSITION = "struct_extract_at"
_POSITION_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT"})
_NOT_LEAVES = frozenset({"STRUCT", "LIST", "MAP", "ARRAY", "UNION"})
_FLIPPED: dict[CompareOp, CompareOp] = {
    "=": "=",
    "!=": "!=",
    "<": ">",
    "<=": ">=",
    ">": "<",
    ">=": "<=",
}


def struct_leaf_filters(
    node: Mapping[str, Any], *, column: str, tree: Struct
) -> dict[str, ScanFilter]:
    """The filters a serialized table filter on the STRUCT column ``column`` (of type ``tree``)
    sets on its leaves, keyed by dotted path (``column.field.leaf``): each holds for every row
    the filter passes. Leaves it says nothing exact about are absent."""
    found = _table_filter(node, (), tree)
    return {".".join((column, *path)): condition for path, condition in found.items()}


def _table_filter(node: Mapping[str, Any], path: tuple[str, ...], type_node: TypeNode) -> _Found:
    if isinstance(type_node, Leaf):
        decoded = column_filter(node, type_node.name)
        return {} if isinstance(decoded, Opaque) else {path: decoded}
    if not isinstance(type_node, Struct):
        return {}  # a list or a map: no one value per row
    kind = node.get("filter_type")
    if kind == "STRUCT_EXTRACT":
        field = _field_at(type_node, node.get("child_idx"), node.get("child_name"))
        if field is None:
            return {}
        name, child = field
        return _table_filter(node.get("child_filter") or {}, (*path, name), child)
    if kind == "OPTIONAL_FILTER":
        return _table_filter(node.get("child_filter") or {}, path, type_node)
    if kind in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
        parts = [_table_filter(c, path, type_node) for c in node.get("child_filters") or []]
        return _all_of(parts) if kind == "CONJUNCTION_AND" else _any_of(parts)
    if kind == "EXPRESSION_FILTER" and not path:
        # Its bound reference is the column itself (measured at the column's level only).
        return _expression(node.get("expr") or {}, type_node)
    return {}


def _field_at(struct: Struct, index: Any, name: Any) -> tuple[str, TypeNode] | None:
    """The field a ``STRUCT_EXTRACT`` takes: by its 0-based index, which must agree with the
    name when one is given (DuckDB matches field names case-insensitively)."""
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(struct.fields):
        return None
    field_name, child = struct.fields[index]
    if name is not None and (not isinstance(name, str) or name.lower() != field_name.lower()):
        return None
    return field_name, child


def _all_of(parts: Sequence[_Found]) -> _Found:
    merged: dict[tuple[str, ...], list[ScanFilter]] = {}
    for part in parts:
        for path, condition in part.items():
            merged.setdefault(path, []).append(condition)
    return {
        path: conditions[0] if len(conditions) == 1 else AllOf(tuple(conditions))
        for path, conditions in merged.items()
    }


def _any_of(parts: Sequence[_Found]) -> _Found:
    """An OR is kept only when every branch is exactly understood and all are on one leaf."""
    if not parts or any(len(part) != 1 for part in parts):
        return {}
    paths = {path for part in parts for path in part}
    if len(paths) != 1:
        return {}
    (path,) = paths
    return {path: AnyOf(tuple(part[path] for part in parts))}


# -- bound expressions (EXPRESSION_FILTER) ----------------------------------------------------


def _expression(expr: Mapping[str, Any], tree: Struct) -> _Found:
    kind = expr.get("type")
    children: list[Mapping[str, Any]] = expr.get("children") or []
    match expr.get("expression_class"):
        case "BOUND_CONJUNCTION":
            parts = [_expression(c, tree) for c in children]
            if kind == "CONJUNCTION_AND":
                return _all_of(parts)
            return _any_of(parts) if kind == "CONJUNCTION_OR" else {}
        case "BOUND_COMPARISON":
            return _comparison(expr, tree)
        case "BOUND_OPERATOR" if kind in ("OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL"):
            leaf = _leaf(children[0], tree) if len(children) == 1 else None
            if leaf is None:
                return {}
            return {leaf[0]: IsNull() if kind == "OPERATOR_IS_NULL" else IsNotNull()}
        case "BOUND_OPERATOR" if kind == "COMPARE_IN" and len(children) >= 2:
            leaf = _leaf(children[0], tree)
            if leaf is None or not all(_is_constant(c) for c in children[1:]):
                return {}
            path, leaf_type = leaf
            values = [constant_value(c.get("value") or {}, leaf_type) for c in children[1:]]
            if any(v is UNKNOWN for v in values):
                return {}
            return {path: InList(tuple(values))}
    return {}


def _comparison(expr: Mapping[str, Any], tree: Struct) -> _Found:
    op = COMPARISONS.get(str(expr.get("type")))
    left: Mapping[str, Any] = expr.get("left") or {}
    right: Mapping[str, Any] = expr.get("right") or {}
    if op is None:
        return {}
    if _is_constant(left) and not _is_constant(right):
        left, right, op = right, left, _FLIPPED[op]
    leaf = _leaf(left, tree)
    if leaf is None or not _is_constant(right):
        return {}
    path, leaf_type = leaf
    value = constant_value(right.get("value") or {}, leaf_type)
    return {} if value is UNKNOWN else {path: Compare(op, value)}


def _leaf(expr: Mapping[str, Any], tree: Struct) -> tuple[tuple[str, ...], str] | None:
    """The path and type of the struct leaf ``expr`` reads, when it is nothing but a chain of
    field extractions from the column; None for anything else (a cast, another function, a
    whole struct, a list element, a map value)."""
    found = _path(expr, tree)
    if found is None or _type_id(expr) in _NOT_LEAVES:
        return None
    path, node = found
    return (path, node.name) if path and isinstance(node, Leaf) else None


def _path(expr: Mapping[str, Any], tree: Struct) -> tuple[tuple[str, ...], TypeNode] | None:
    match expr.get("expression_class"):
        case "BOUND_REF":
            ok = expr.get("index") == 0 and _type_id(expr) == "STRUCT"
            return ((), tree) if ok else None
        case "BOUND_FUNCTION":
            children: list[Mapping[str, Any]] = expr.get("children") or []
            name = expr.get("name")
            if (name not in _BY_NAME and name != _BY_POSITION) or len(children) != 2:
                return None
            base, key = children
            if _type_id(base) != "STRUCT" or not _is_constant(key):
                return None
            found = _path(base, tree)
            if found is None or not isinstance(found[1], Struct):
                return None
            field = _field_by_key(found[1], by_position=name == _BY_POSITION, key=key)
            return None if field is None else ((*found[0], field[0]), field[1])
    return None


def _field_by_key(
    struct: Struct, *, by_position: bool, key: Mapping[str, Any]
) -> tuple[str, TypeNode] | None:
    constant: Mapping[str, Any] = key.get("value") or {}
    if constant.get("is_null", False):
        return None
    type_id = (constant.get("type") or {}).get("id")
    value = constant.get("value")
    if by_position:
        if type_id not in _POSITION_TYPES or not isinstance(value, int) or isinstance(value, bool):
            return None
        return struct.fields[value - 1] if 1 <= value <= len(struct.fields) else None
    if type_id != "VARCHAR" or not isinstance(value, str):
        return None
    return next((f for f in struct.fields if f[0].lower() == value.lower()), None)


def _is_constant(expr: Mapping[str, Any]) -> bool:
    return expr.get("expression_class") == "BOUND_CONSTANT"


def _type_id(expr: Mapping[str, Any]) -> Any:
    return (expr.get("return_type") or {}).get("id")
