"""Nested column types as trees: ``STRUCT(name TYPE, ...)`` (or ``ROW(...)``), ``MAP(K, V)``
and lists ``T[]`` of any type, nested to :data:`MAX_TYPE_DEPTH` levels.

The canonical text is DuckDB's spelling of the tree (``STRUCT(a INTEGER, b VARCHAR)``,
``MAP(VARCHAR, BIGINT)``, ``STRUCT(x DOUBLE)[]``) with icefloe's canonical leaves
(``TIMESTAMPTZ``, ``JSON``, ``DECIMAL(p,s)``), which DuckDB accepts as DDL. Struct field names
follow the column-name rules (ASCII letters, digits and ``_``) and keep their case; one that is
a DuckDB keyword is spelled quoted (``STRUCT("order" INTEGER)``), as DuckDB spells it. Two
fields of one struct may not differ only in case. Refused by name: fixed-size arrays
(``T[3]``), an empty struct, a trailing comma, ``NOT NULL`` inside a struct (nested fields are
always optional, as in DuckDB and Iceberg), and map keys other than VARCHAR or an integer
type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec._keywords import DUCKDB_KEYWORDS
from icefloe.spec._text import show
from icefloe.spec.names import validate_column_name

MAX_TYPE_DEPTH = 8  # STRUCT, MAP and list levels, counting the outermost
MAX_LEAVES = 512  # leaf types in one column's tree

_NESTED_START = re.compile(r"\b(STRUCT|ROW|MAP)\s*\(", re.IGNORECASE)
# A field name, plain or double-quoted (a keyword must be quoted); either way it follows the
# column-name rules, so the quotes never hold anything else.
_NAME = re.compile(r'"(?P<quoted>[A-Za-z_][A-Za-z0-9_]*)"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)')
_MAP_KEYS = frozenset(
    {"VARCHAR", "TINYINT", "SMALLINT", "INTEGER", "BIGINT"}
    | {"UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
)


@dataclass(frozen=True, slots=True)
class Leaf:
    """A type with no children, in its canonical spelling (``VARCHAR``, ``DECIMAL(10,2)``)."""

    name: str


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[tuple[str, TypeNode], ...]


@dataclass(frozen=True, slots=True)
class ListOf:
    element: TypeNode


@dataclass(frozen=True, slots=True)
class MapOf:
    key: TypeNode
    value: TypeNode


TypeNode = Leaf | Struct | ListOf | MapOf


def is_nested_text(text: str) -> bool:
    """True when ``text`` names a STRUCT, ROW or MAP anywhere (a list of them included)."""
    return _NESTED_START.search(text) is not None


def format_type(node: TypeNode) -> str:
    """The canonical text of ``node``."""
    if isinstance(node, Leaf):
        return node.name
    if isinstance(node, ListOf):
        return f"{format_type(node.element)}[]"
    if isinstance(node, MapOf):
        return f"MAP({format_type(node.key)}, {format_type(node.value)})"
    return "STRUCT(" + ", ".join(f"{field_sql(n)} {format_type(t)}" for n, t in node.fields) + ")"


def field_sql(name: str) -> str:
    """A struct field's name as SQL spells it: quoted when it is a DuckDB keyword (``"order"``,
    ``"name"``), as DuckDB spells it; field names never need quoting otherwise."""
    return f'"{name}"' if name.lower() in DUCKDB_KEYWORDS else name


def walk_leaves(
    node: TypeNode, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, bool]]:
    """Each leaf of ``node``: its path of struct field names (``element``, ``key`` and ``value``
    stand for a list's element and a map's parts), its type, and whether it is repeated (under
    a list or a map: its statistics are per element, not per row)."""
    yield from _walk(node, path, repeated=False)


def _walk(
    node: TypeNode, path: tuple[str, ...], *, repeated: bool
) -> Iterator[tuple[tuple[str, ...], str, bool]]:
    if isinstance(node, Leaf):
        yield path, node.name, repeated
    elif isinstance(node, Struct):
        for name, child in node.fields:
            yield from _walk(child, (*path, name), repeated=repeated)
    elif isinstance(node, ListOf):
        yield from _walk(node.element, (*path, "element"), repeated=True)
    else:
        yield from _walk(node.key, (*path, "key"), repeated=True)
        yield from _walk(node.value, (*path, "value"), repeated=True)


def parse_type(text: str, *, leaf: Callable[[str], str]) -> TypeNode:
    """The tree of ``text``; ``leaf`` normalizes a leaf's text (raising SpecError). Errors name
    the whole type and the spot inside it."""
    parser = _Parser(text, leaf)
    node = parser.type(depth=1, where="")
    parser.skip_space()
    if parser.pos != len(text):
        parser.fail("", f"unexpected {show(text[parser.pos :])}")
    leaves = sum(1 for _ in walk_leaves(node))
    if leaves > MAX_LEAVES:
        raise SpecError(f"type {show(text)}: {leaves} leaf types, more than {MAX_LEAVES}")
    return node


class _Parser:
    def __init__(self, text: str, leaf: Callable[[str], str]) -> None:
        self.text = text
        self.pos = 0
        self._leaf = leaf

    def fail(self, where: str, message: str) -> NoReturn:
        spot = f"field {where!r}: " if where else ""
        raise SpecError(f"type {show(self.text)}: {spot}{message}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def take(self, char: str) -> bool:
        self.skip_space()
        if self.text.startswith(char, self.pos):
            self.pos += 1
            return True
        return False

    def type(self, *, depth: int, where: str) -> TypeNode:
        if depth > MAX_TYPE_DEPTH:
            self.fail(where, f"nested deeper than {MAX_TYPE_DEPTH} levels")
        self.skip_space()
        match = _NESTED_START.match(self.text, self.pos)
        node: TypeNode
        if match is not None:
            self.pos = match.end()
            if match[1].upper() == "MAP":
                node = self._map(depth=depth, where=where)
            else:
                node = self._struct(depth=depth, where=where)
        else:
            node = self._leaf_node(where)
        while self.take("["):
            if not self.take("]"):
                self.fail(where, "fixed-size arrays (T[n]) are not supported; use T[]")
            if depth >= MAX_TYPE_DEPTH:
                self.fail(where, f"nested deeper than {MAX_TYPE_DEPTH} levels")
            depth += 1
            node = ListOf(node)
        return node

    def _struct(self, *, depth: int, where: str) -> Struct:
        fields: list[tuple[str, TypeNode]] = []
        seen: dict[str, str] = {}
        if self.take(")"):
            self.fail(where, "a STRUCT needs at least one field")
        while True:
            self.skip_space()
            match = _NAME.match(self.text, self.pos)
            if match is None:
                rest = self.text[self.pos :] or "the end"
                self.fail(where, f"expected a field name at {show(rest)}")
            name = match["quoted"] or match["plain"]
            path = f"{where}.{name}" if where else name
            try:
                validate_column_name(name)
            except InvalidNameError as e:
                self.fail(path, str(e))
            if name.lower() in seen:
                self.fail(path, f"the STRUCT already has a field {seen[name.lower()]!r}")
            seen[name.lower()] = name
            self.pos = match.end()
            fields.append((name, self.type(depth=depth + 1, where=path)))
            if self.take(")"):
                return Struct(tuple(fields))
            if not self.take(","):
                self.fail(path, "expected ',' or ')' after the field's type")
            if self.take(")"):
                self.fail(where, "a trailing ',' in the STRUCT")

    def _map(self, *, depth: int, where: str) -> MapOf:
        key_where = f"{where}.key" if where else "key"
        value_where = f"{where}.value" if where else "value"
        key = self.type(depth=depth + 1, where=key_where)
        if not isinstance(key, Leaf) or key.name not in _MAP_KEYS:
            self.fail(key_where, "map keys must be VARCHAR or an integer type")
        if not self.take(","):
            self.fail(where, "MAP takes (key type, value type)")
        value = self.type(depth=depth + 1, where=value_where)
        if not self.take(")"):
            self.fail(where, "MAP takes (key type, value type)")
        return MapOf(key, value)

    def _leaf_node(self, where: str) -> Leaf:
        start, level = self.pos, 0
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "(":
                level += 1
            elif char == ")":
                if level == 0:
                    break
                level -= 1
            elif level == 0 and char in ",[":
                break
            self.pos += 1
        raw = " ".join(self.text[start : self.pos].split())
        if not raw:
            self.fail(where, "a type is missing")
        words = raw.upper().split()
        if words[-1] == "NULL":
            self.fail(where, "fields inside a STRUCT cannot be NOT NULL (they are always optional)")
        try:
            return Leaf(self._leaf(raw))
        except SpecError as e:
            if not where:
                raise
            self.fail(where, str(e))
