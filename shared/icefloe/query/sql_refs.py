"""What a SELECT names: base tables, CTEs, table functions, functions and other table sources.

Reads DuckDB's own parse tree (``json_serialize_sql``), so nothing here re-implements SQL
parsing. The sandbox decides from these names what a caller's query may reach; which filters
prune which files is DuckDB's bound plan's business (:mod:`icefloe.query.scan_filters`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from icefloe import duck
from icefloe.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class TableName:
    name: str
    schema: str = ""
    catalog: str = ""

    @property
    def qualified(self) -> bool:
        return bool(self.schema or self.catalog)

    def __str__(self) -> str:
        return ".".join(p for p in (self.catalog, self.schema, self.name) if p)


@dataclass(frozen=True, slots=True)
class SqlRefs:
    tables: frozenset[str]  # unqualified base-table names that are not CTEs
    ctes: frozenset[str]
    qualified_tables: frozenset[TableName]  # schema- or catalog-qualified references
    table_functions: frozenset[str]  # FROM f(...)
    functions: frozenset[str]  # every function called, scalar, aggregate or table
    source_kinds: frozenset[str]  # kinds of table source: BASE_TABLE, SUBQUERY, JOIN, ...
    may_lose_null_rows: bool  # see may_lose_null_rows()


_SOURCE_KINDS = frozenset(
    {
        "BASE_TABLE",
        "TABLE_FUNCTION",
        "SUBQUERY",
        "JOIN",
        "EXPRESSION_LIST",
        "EMPTY",
        "EMPTY_FROM",
        "SHOW_REF",
        "PIVOT",
        "COLUMN_DATA",
        "DELIM_GET",
        "CTE",
    }
)


def load_tree(raw: str, *, refused: str, error: type[InvalidInputError] = InvalidInputError) -> Any:
    """A tree DuckDB serialized (``json_serialize_sql``, ``json_serialize_plan``) as Python
    values, or ``error`` ("``refused``: ...") when it nests deeper than Python's JSON reader may
    go: DuckDB parses expressions nested up to its ``max_expression_depth`` (1,000), and each
    level is several levels of JSON, so about 450 nested calls already pass Python's recursion
    limit. Raising that limit could overflow the C stack; the caller is asked to nest less."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise error(
            f"{refused}: the expression nests too deeply to check (calls or operators inside"
            " one another several hundred levels deep); nest fewer levels"
        ) from None


def analyze(sql: str, *, con: duckdb.DuckDBPyConnection | None = None) -> SqlRefs:
    """The names one SELECT statement reaches (parsed by ``con``, or a throwaway connection:
    opening one costs several milliseconds)."""
    own = con is None
    parser = duck.connect() if con is None else con
    try:
        raw = parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    finally:
        if own:
            parser.close()
    assert raw is not None
    tree = load_tree(raw[0], refused="query refused")
    if tree.get("error"):
        raise InvalidInputError(
            f"query refused: {tree.get('error_message', 'cannot parse the SQL')}"
        )
    node = tree["statements"][0]["node"]
    objects = walk(node)
    # DuckDB matches names case-insensitively (quoted or not) and table names are lower case.
    ctes = frozenset(name.lower() for name in _cte_names(objects))
    bases = list(_base_tables(objects))
    return SqlRefs(
        tables=frozenset(t.name.lower() for t in _tables_outside_ctes(node) if not t.qualified),
        ctes=ctes,
        qualified_tables=frozenset(t for t in bases if t.qualified),
        table_functions=frozenset(_table_functions(objects)),
        functions=frozenset(_functions(objects)),
        source_kinds=frozenset(_source_kinds(objects)),
        may_lose_null_rows=may_lose_null_rows(objects),
    )


# DuckDB (1.5.5, and 1.5.6 still) pushes an OR holding an IS [NOT] DISTINCT FROM into a
# Parquet scan as an optional filter that skips a row group whose column is all NULL, though
# NULL IS DISTINCT FROM 5 is true: `x IS DISTINCT FROM 5 OR x = 7` loses the NULL rows. Which
# statements may hold one is read from the parse tree, not the text: a comment between the words
# (`IS DISTINCT /* */ FROM`) hides them from any pattern, and `b IS [NOT] TRUE` / `IS [NOT]
# FALSE` parse as one too. Both expression kinds anywhere in the statement count (a wrong guess
# costs only speed).
_DISTINCT_FROM = frozenset({"COMPARE_DISTINCT_FROM", "COMPARE_NOT_DISTINCT_FROM"})
_OR = "CONJUNCTION_OR"


def may_lose_null_rows(objects: list[dict[str, Any]]) -> bool:
    """Whether a statement (every object of its tree, :func:`walk`) holds both an OR and an IS
    [NOT] DISTINCT FROM, which DuckDB's filter pushdown may answer without NULL rows (above):
    such a statement runs with filter pushdown off."""
    kinds = {kind for node in objects if isinstance(kind := node.get("type"), str)}
    return _OR in kinds and not _DISTINCT_FROM.isdisjoint(kinds)


def walk(value: Any) -> list[dict[str, Any]]:
    """Every object in a serialized tree (a parse tree or a plan), depth first. A list, made
    once and read by each question: a long query's tree holds tens of thousands of objects,
    and a recursive generator passes each one up through every level above it."""
    found: list[dict[str, Any]] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(reversed(item.values()))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


def _cte_names(objects: list[dict[str, Any]]) -> Iterator[str]:
    for value in objects:
        for entry in (value.get("cte_map") or {}).get("map", []):
            yield str(entry["key"])


def _tables_outside_ctes(node: Any) -> Iterator[TableName]:
    """The base-table references that no CTE in scope binds, as DuckDB scopes CTEs: a WITH's
    names are seen by its query and, in order, by the definitions after each one (a definition
    does not see itself or a later one: there the name is a table), and a recursive CTE's own
    name by its recursive part. A name a CTE binds in one place and not in another is a table
    where it is not; the sandbox and the engine must see those (a file path used so was read
    by DuckDB as a file)."""
    stack: list[tuple[Any, frozenset[str]]] = [(node, frozenset())]
    while stack:
        item, scope = stack.pop()
        if isinstance(item, list):
            stack.extend((v, scope) for v in item)
            continue
        if not isinstance(item, dict):
            continue
        if item.get("type") == "BASE_TABLE" and "table_name" in item:
            name = TableName(
                str(item["table_name"]),
                str(item.get("schema_name") or ""),
                str(item.get("catalog_name") or ""),
            )
            if name.qualified or name.name.lower() not in scope:
                yield name
        entries = (item.get("cte_map") or {}).get("map", [])
        inner = scope | {str(e["key"]).lower() for e in entries}
        seen = scope
        for entry in entries:
            stack.append((entry.get("value"), seen))
            seen = seen | {str(entry["key"]).lower()}
        recursive = item.get("type") == "RECURSIVE_CTE_NODE"
        for key, value in item.items():
            if key == "cte_map":
                continue
            if recursive and key == "right":
                stack.append((value, inner | {str(item.get("cte_name", "")).lower()}))
            else:
                stack.append((value, inner))


def _base_tables(objects: list[dict[str, Any]]) -> Iterator[TableName]:
    for value in objects:
        if value.get("type") == "BASE_TABLE" and "table_name" in value:
            yield TableName(
                str(value["table_name"]),
                str(value.get("schema_name") or ""),
                str(value.get("catalog_name") or ""),
            )


def _table_functions(objects: list[dict[str, Any]]) -> Iterator[str]:
    for value in objects:
        if value.get("type") == "TABLE_FUNCTION":
            function = value.get("function") or {}
            yield str(function.get("function_name", "")).lower()


def _functions(objects: list[dict[str, Any]]) -> Iterator[str]:
    for value in objects:
        if value.get("class") == "FUNCTION" and "function_name" in value:
            yield str(value["function_name"]).lower()


def _source_kinds(objects: list[dict[str, Any]]) -> Iterator[str]:
    for value in objects:
        kind = value.get("type")
        if isinstance(kind, str) and kind in _SOURCE_KINDS and "alias" in value:
            yield kind


def without_locations(value: Any) -> Any:
    """A copy of a parse tree without its ``query_location`` fields; by a loop, not one
    Python call per level, so a deeply nested predicate does not reach the recursion limit."""
    copy: list[Any] = [None]
    # (a parsed container, the container its copy goes into, the key or index there)
    stack: list[tuple[Any, Any, Any]] = [(value, copy, 0)]
    while stack:
        item, into, key = stack.pop()
        if isinstance(item, dict):
            made: Any = {}
            for k, v in item.items():
                if k != "query_location":
                    made[k] = None
                    stack.append((v, made, k))
        elif isinstance(item, list):
            made = [None] * len(item)
            stack.extend((v, made, i) for i, v in enumerate(item))
        else:
            made = item
        into[key] = made
    return copy[0]
