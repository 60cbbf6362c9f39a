"""What a SELECT names: its base tables, and the range predicates that can prune files.

Reads DuckDB's own parse tree (``json_serialize_sql``), so nothing here re-implements SQL
parsing. Pruning predicates are taken only where they are sure to restrict every row read from
the table: the outermost SELECT reads one base table, and the predicates are top-level AND
conjuncts of its WHERE comparing a column of that table with a constant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import duckdb

from icefloe import duck
from icefloe.errors import InvalidInputError

Op = Literal["=", "<", "<=", ">", ">="]
_COMPARISONS: dict[str, Op] = {
    "COMPARE_EQUAL": "=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}
_FLIPPED: dict[Op, Op] = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Bound:
    """``column op value``; ``value`` is the constant's text (cast by the caller to the column's
    type) or a Python number or bool."""

    column: str
    op: Op
    value: object


@dataclass(frozen=True, slots=True)
class SqlRefs:
    tables: frozenset[str]
    ctes: frozenset[str]
    # Per table, the bounds that hold for every row the query reads from it.
    bounds: dict[str, tuple[Bound, ...]]


def analyze(sql: str, *, con: duckdb.DuckDBPyConnection | None = None) -> SqlRefs:
    """Base tables and pruning bounds of one SELECT statement (parsed by ``con``, or a
    throwaway connection: opening one costs several milliseconds)."""
    own = con is None
    parser = duck.connect() if con is None else con
    try:
        raw = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    finally:
        if own:
            parser.close()
    assert raw is not None
    tree = json.loads(raw[0])
    if tree.get("error"):
        raise InvalidInputError(
            f"query refused: {tree.get('error_message', 'cannot parse the SQL')}"
        )
    node = tree["statements"][0]["node"]
    ctes = frozenset(_cte_names(node))
    tables = frozenset(_base_tables(node)) - ctes
    bounds: dict[str, tuple[Bound, ...]] = {}
    single = _single_table(node)
    if single is not None:
        name, alias = single
        found = tuple(_bounds(node.get("where_clause"), qualifiers={name, alias} - {""}))
        if found:
            bounds[name] = found
    return SqlRefs(tables=tables, ctes=ctes, bounds=bounds)


def _cte_names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for entry in (value.get("cte_map") or {}).get("map", []):
            yield str(entry["key"])
        for child in value.values():
            yield from _cte_names(child)
    elif isinstance(value, list):
        for child in value:
            yield from _cte_names(child)


def _base_tables(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if value.get("type") == "BASE_TABLE" and "table_name" in value:
            yield str(value["table_name"])
        for child in value.values():
            yield from _base_tables(child)
    elif isinstance(value, list):
        for child in value:
            yield from _base_tables(child)


def _single_table(node: dict[str, Any]) -> tuple[str, str] | None:
    if node.get("type") != "SELECT_NODE":
        return None
    source = node.get("from_table") or {}
    if (
        source.get("type") != "BASE_TABLE"
        or source.get("schema_name")
        or source.get("catalog_name")
    ):
        return None
    return str(source["table_name"]), str(source.get("alias") or "")


def _bounds(expr: Any, *, qualifiers: set[str]) -> Iterator[Bound]:
    if not isinstance(expr, dict):
        return
    kind = expr.get("type")
    if kind == "CONJUNCTION_AND":
        for child in expr.get("children", []):
            yield from _bounds(child, qualifiers=qualifiers)
    elif kind in _COMPARISONS:
        op = _COMPARISONS[kind]
        left, right = _column(expr["left"], qualifiers), _constant(expr["right"])
        if left is not None and right is not None:
            yield Bound(left, op, right[0])
            return
        left_value, right_column = _constant(expr["left"]), _column(expr["right"], qualifiers)
        if left_value is not None and right_column is not None:
            yield Bound(right_column, _FLIPPED[op], left_value[0])
    elif kind == "COMPARE_BETWEEN":
        column = _column(expr["input"], qualifiers)
        lower, upper = _constant(expr["lower"]), _constant(expr["upper"])
        if column is not None and lower is not None:
            yield Bound(column, ">=", lower[0])
        if column is not None and upper is not None:
            yield Bound(column, "<=", upper[0])


def _column(expr: Any, qualifiers: set[str]) -> str | None:
    if not isinstance(expr, dict) or expr.get("class") != "COLUMN_REF":
        return None
    names = expr.get("column_names") or []
    if len(names) == 1:
        return str(names[0])
    if len(names) == 2 and names[0] in qualifiers:
        return str(names[1])
    return None


def _constant(expr: Any) -> tuple[object] | None:
    """The constant's value (wrapped, so that a SQL NULL is told apart from 'not a constant')."""
    if not isinstance(expr, dict):
        return None
    if expr.get("class") == "CAST" and not expr.get("try_cast"):
        return _constant(expr.get("child"))
    if expr.get("class") != "CONSTANT":
        return None
    value = expr["value"]
    if value.get("is_null"):
        return None
    return (value.get("value"),)
