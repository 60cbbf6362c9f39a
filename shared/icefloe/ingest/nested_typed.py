"""Nested columns (STRUCT, MAP, lists of them) from typed input (Parquet, Arrow), by name.

A source struct's fields are matched to the column's by name, at every level, and each leaf is
converted with the checks a top-level column of its type gets from a typed source
(:func:`~icefloe.ingest.columns.typed_leaf_value`, :func:`~icefloe.ingest.columns.accepts`,
:func:`~icefloe.ingest.columns.value_checks`). A struct is never CAST as a whole: DuckDB casts
structs by name and reads a field it cannot match as NULL, silently. A field the column lacks,
or a source of another shape (a list where a struct is expected, a leaf of another type
family), refuses the batch naming its path, before any row is read. A field the source lacks
is NULL. The conversion's scan gives one code per column (``nested``); the paths at fault are
named by a second query over the failing rows only.
"""

from __future__ import annotations

import duckdb
from duckdb.sqltypes import DuckDBPyType

from icefloe.duck import ident
from icefloe.errors import RowProblem
from icefloe.ingest.columns import (
    ColumnSQL,
    accepts,
    present_ident,
    text_offset_out_of_range,
    typed_leaf_value,
    value_checks,
)
from icefloe.spec import Column
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode, format_type
from icefloe.spec.types import is_integer, type_tree

_PROBLEM = "STRUCT(path VARCHAR, kind VARCHAR, type VARCHAR)"
_NONE = f"CAST([] AS {_PROBLEM}[])"
_INTEGER_KEY = "-?(0|[1-9][0-9]*)"
_KINDS = {"struct": Struct, "list": ListOf, "map": MapOf}


def layout_problems(col: Column, source_type: str) -> list[RowProblem]:
    """Why a typed source column of DuckDB type ``source_type`` cannot fill the nested column
    ``col`` (a field the column lacks, another shape, a leaf of another type family), by path;
    empty when it can."""
    problems: list[RowProblem] = []
    _check(type_tree(col.type), duckdb.sqltype(source_type), col.name, problems)
    return problems


def _check(node: TypeNode, source: DuckDBPyType, path: str, problems: list[RowProblem]) -> None:
    expected = _KINDS.get(source.id, Leaf)
    if not isinstance(node, expected):
        problems.append(_mismatch(node, source, path))
        return
    if isinstance(node, Leaf):
        if not accepts(node.name, str(source).upper()):
            problems.append(_mismatch(node, source, path))
        return
    children = _children(source)
    if isinstance(node, Struct):
        declared = {name for name, _ in node.fields}
        problems += [
            RowProblem(row=None, field=f"{path}.{name}", message=_UNKNOWN)
            for name in children
            if name not in declared
        ]
        for name, child in node.fields:
            if name in children:
                _check(child, children[name], f"{path}.{name}", problems)
    elif isinstance(node, ListOf):
        _check(node.element, children["child"], f"{path}[]", problems)
    else:
        assert isinstance(node, MapOf)
        _check(node.key, children["key"], f"{path}.key", problems)
        _check(node.value, children["value"], f"{path}[]", problems)


_UNKNOWN = "unknown field (the struct has no such field)"


def _mismatch(node: TypeNode, source: DuckDBPyType, path: str) -> RowProblem:
    return RowProblem(
        row=None,
        field=path,
        message=f"expected {format_type(node)}, but the input's type is {source}",
    )


def typed_nested_column(col: Column, source_type: str, *, max_value_bytes: int) -> ColumnSQL:
    """SQL over the typed source column named like ``col``, whose layout
    :func:`layout_problems` found none in."""
    tree = type_tree(col.type)
    source = duckdb.sqltype(source_type)
    r = ident(col.name)
    raw = '"__raw_' + ident(col.name)[1:]
    convert = _Typed(max_value_bytes)
    missing = "NULL" if col.nullable else "'missing'"
    bad = convert.bad(tree, source, raw, r, depth=0)
    return ColumnSQL(
        column=col,
        value=convert.value(tree, source, r, depth=0),
        present=f"({r} IS NOT NULL)",
        error=f"CASE WHEN NOT {present_ident(col.name)} THEN {missing} WHEN {bad} THEN 'nested' END",
        layers=(((raw, r),),),
        diagnosis=convert.diagnosis(tree, source, r, _lit(col.name), depth=0),
    )


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _one(path: str, kind: str, type_text: str) -> str:
    return f"[struct_pack(path := {path}, kind := '{kind}', type := {_lit(type_text)})]"


class _Typed:
    def __init__(self, max_value_bytes: int) -> None:
        self._max_value_bytes = max_value_bytes

    def _key(self, node: MapOf, source: DuckDBPyType, k: str) -> str:
        """The converted map key ``k``: NULL when it does not convert (text must spell an
        integer key exactly)."""
        kind = node.key.name if isinstance(node.key, Leaf) else "VARCHAR"
        source_key = str(_children(source)["key"]).upper()
        value = typed_leaf_value(k, kind, source_key)
        if is_integer(kind) and source_key == "VARCHAR":
            value = f"CASE WHEN regexp_full_match({k}, '{_INTEGER_KEY}') THEN {value} END"
        return value

    def _keys_fit(self, node: MapOf, source: DuckDBPyType, s: str, depth: int) -> str:
        k = f"k{depth}"
        converted = f"list_transform(map_keys({s}), lambda {k}: {self._key(node, source, k)})"
        return f"(list_count({converted}) = cardinality({s}) AND len(list_distinct({converted})) = cardinality({s}))"

    def value(self, node: TypeNode, source: DuckDBPyType, s: str, *, depth: int) -> str:
        if isinstance(node, Leaf):
            return typed_leaf_value(s, node.name, str(source).upper())
        children = _children(source)
        if isinstance(node, Struct):
            fields = ", ".join(
                f"{ident(name)} := "
                + (
                    self.value(
                        child, children[name], f"struct_extract({s}, {_lit(name)})", depth=depth
                    )
                    if name in children
                    else f"CAST(NULL AS {_null_type(child)})"
                )
                for name, child in node.fields
            )
            return f"CASE WHEN {s} IS NOT NULL THEN struct_pack({fields}) END"
        e = f"e{depth}"
        if isinstance(node, ListOf):
            inner = self.value(node.element, children["child"], e, depth=depth + 1)
            return f"list_transform({s}, lambda {e}: {inner})"
        assert isinstance(node, MapOf)
        inner = self.value(node.value, children["value"], f"{e}.value", depth=depth + 1)
        entries = (
            f"list_transform(map_entries({s}), lambda {e}:"
            f" struct_pack(key := {self._key(node, source, f'{e}.key')}, value := {inner}))"
        )
        fit = self._keys_fit(node, source, s, depth)
        return f"CASE WHEN {fit} THEN map_from_entries({entries}) END"

    def bad(self, node: TypeNode, source: DuckDBPyType, s: str, v: str, *, depth: int) -> str:
        """SQL true when a part of the source value ``s`` is present but its value in ``v``
        is NULL or fails a check."""
        if isinstance(node, Leaf):
            checks = value_checks(node.name, v, max_value_bytes=self._max_value_bytes)
            failing = " OR ".join([f"{v} IS NULL", *(condition for condition, _ in checks)])
            return f"({s} IS NOT NULL AND ({failing}))"
        children = _children(source)
        if isinstance(node, Struct):
            parts = [
                self.bad(
                    child,
                    children[name],
                    f"struct_extract({s}, {_lit(name)})",
                    f"struct_extract({v}, {_lit(name)})",
                    depth=depth,
                )
                for name, child in node.fields
                if name in children
            ]
            return "(" + " OR ".join(parts or ["false"]) + ")"
        e, i = f"e{depth}", f"i{depth}"
        if isinstance(node, ListOf):
            inner = self.bad(
                node.element, children["child"], e, f"list_extract({v}, {i})", depth=depth + 1
            )
            return f"coalesce(list_bool_or(list_transform({s}, lambda {e}, {i}: {inner})), false)"
        assert isinstance(node, MapOf)
        inner = self.bad(
            node.value, children["value"], e, f"list_extract(map_values({v}), {i})", depth=depth + 1
        )
        return (
            f"CASE WHEN {s} IS NULL THEN false WHEN NOT {self._keys_fit(node, source, s, depth)}"
            f" THEN true ELSE coalesce(list_bool_or(list_transform(map_values({s}),"
            f" lambda {e}, {i}: {inner})), false) END"
        )

    def diagnosis(
        self, node: TypeNode, source: DuckDBPyType, s: str, path: str, *, depth: int
    ) -> str:
        """SQL of the problems of the source value ``s``: (path, kind, type) of each."""
        if isinstance(node, Leaf):
            v = f"({typed_leaf_value(s, node.name, str(source).upper())})"
            branches = [f"WHEN {s} IS NULL THEN {_NONE}"]
            offset = text_offset_out_of_range(s, node.name, str(source).upper())
            if offset is not None:
                branches.append(f"WHEN {offset} THEN {_one(path, 'offset', node.name)}")
            branches.append(f"WHEN {v} IS NULL THEN {_one(path, 'type', node.name)}")
            branches += [
                f"WHEN {condition} THEN {_one(path, code, node.name)}"
                for condition, code in value_checks(
                    node.name, v, max_value_bytes=self._max_value_bytes
                )
            ]
            return f"CASE {' '.join(branches)} ELSE {_NONE} END"
        children = _children(source)
        head = f"CASE WHEN {s} IS NULL THEN {_NONE} ELSE"
        if isinstance(node, Struct):
            parts = [
                self.diagnosis(
                    child,
                    children[name],
                    f"struct_extract({s}, {_lit(name)})",
                    f"{path} || {_lit('.' + name)}",
                    depth=depth,
                )
                for name, child in node.fields
                if name in children
            ]
            return f"{head} flatten([{_NONE}, {', '.join(parts)}]) END" if parts else _NONE
        e, i = f"e{depth}", f"i{depth}"
        if isinstance(node, ListOf):
            element_path = f"{path} || '[' || CAST({i} - 1 AS VARCHAR) || ']'"
            inner = self.diagnosis(
                node.element, children["child"], e, element_path, depth=depth + 1
            )
            return f"{head} flatten(list_transform({s}, lambda {e}, {i}: {inner})) END"
        assert isinstance(node, MapOf)
        entry_path = f"{path} || '[''' || CAST({e}.key AS VARCHAR) || ''']'"
        key_type = node.key.name if isinstance(node.key, Leaf) else "VARCHAR"
        key_bad = (
            f"CASE WHEN ({self._key(node, source, f'{e}.key')}) IS NULL"
            f" THEN {_one(entry_path, 'key', key_type)} ELSE {_NONE} END"
        )
        inner = self.diagnosis(
            node.value, children["value"], f"{e}.value", entry_path, depth=depth + 1
        )
        k = f"k{depth}"
        converted = f"list_transform(map_keys({s}), lambda {k}: {self._key(node, source, k)})"
        twice = (
            f"CASE WHEN len(list_distinct({converted})) < list_count({converted})"
            f" THEN {_one(path, 'same_keys', format_type(node))} ELSE {_NONE} END"
        )
        entries = (
            f"flatten(list_transform(map_entries({s}), lambda {e}: flatten([{key_bad}, {inner}])))"
        )
        return f"{head} flatten([{twice}, {entries}]) END"


def _children(source: DuckDBPyType) -> dict[str, DuckDBPyType]:
    """A nested source type's children by name (``child`` of a list, ``key`` and ``value`` of
    a map)."""
    return {str(name): t for name, t in source.children if isinstance(t, DuckDBPyType)}


def _null_type(node: TypeNode) -> str:
    """The DuckDB type of a NULL of ``node``'s type (JSON is stored as VARCHAR)."""
    if isinstance(node, Leaf):
        return "VARCHAR" if node.name == "JSON" else node.name
    if isinstance(node, Struct):
        return "STRUCT(" + ", ".join(f"{ident(n)} {_null_type(c)}" for n, c in node.fields) + ")"
    if isinstance(node, ListOf):
        return f"{_null_type(node.element)}[]"
    return f"MAP({_null_type(node.key)}, {_null_type(node.value)})"
