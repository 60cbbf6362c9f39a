"""Whether user SQL gives the same answer every time it is evaluated, by DuckDB's own metadata.

A delete evaluates its predicate once per file and a merge runs its custom query once per
group; a retry, a redelivery or a plan followed by a rewrite evaluates them again. SQL that
could answer differently between those evaluations (``random()``, ``now()``,
``current_query()``) is refused. What counts as such is read from DuckDB itself: every
function whose ``duckdb_functions().stability`` is not ``CONSISTENT``, every macro whose body
calls one (followed through macros calling macros), and every bare name the binder turns into
a value (``current_date``, ``localtimestamp``) unless it is a consistent function. A function
DuckDB does not list is refused too, so a new release can add a volatile function without
slipping it past this check.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from icefloe import duck

CONSISTENT = "CONSISTENT"
SAMPLE = "USING SAMPLE"
_BARE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class UnstableCall:
    """One call in user SQL whose value may differ between evaluations."""

    name: str
    stability: str  # VOLATILE, CONSISTENT_WITHIN_QUERY, or UNKNOWN (DuckDB does not list it)
    bare: bool = False  # a name without parentheses that DuckDB binds as a value

    def describe(self) -> str:
        if self.name == SAMPLE:
            return "a sample (USING SAMPLE, TABLESAMPLE) draws other rows each time it runs"
        shown = self.name if self.bare else f"{self.name}()"
        if self.stability == "UNKNOWN":
            return f"{shown} is not a function DuckDB lists as consistent, so its value may change"
        return f"{shown} is {self.stability} in DuckDB (it may answer differently each time)"


class FunctionStabilities:
    """Each function name's least stable overload, macros resolved through their bodies."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._lock = threading.Lock()
        self._value_names: dict[str, bool] = {}
        rows = con.execute(
            "SELECT lower(function_name), function_type, stability, macro_definition, parameters"
            " FROM duckdb_functions()"
        ).fetchall()
        stabilities: dict[str, str] = {}
        macro_calls: dict[str, set[str]] = {}
        for name, kind, stability, definition, parameters in rows:
            if kind in ("macro", "table_macro"):
                calls = macro_calls.setdefault(name, set())
                calls.update(self._macro_body_calls(definition or "", parameters or []))
            elif stability is not None:
                stabilities[name] = _worst(stabilities.get(name, CONSISTENT), stability)
        self._stabilities = stabilities
        self._macro_calls = {name: sorted(calls) for name, calls in macro_calls.items()}
        self._resolved: dict[str, str] = {}

    def stability(self, name: str) -> str:
        """``name``'s stability (``UNKNOWN`` when DuckDB lists no such function)."""
        with self._lock:
            return self._stability(name.lower())

    def _stability(self, key: str) -> str:
        if key in self._resolved:
            return self._resolved[key]
        # A macro that names itself wraps the function of that name (current_query); any
        # other cycle is not shown stable.
        self._resolved[key] = self._stabilities.get(key, "UNKNOWN")
        if key in self._stabilities or key in self._macro_calls:
            result = self._stabilities.get(key, CONSISTENT)
            for call in self._macro_calls.get(key, ()):
                result = _worst(result, self._stability(call))
        else:
            result = "UNKNOWN"
        self._resolved[key] = result
        return result

    def binds_as_value(self, name: str) -> bool:
        """Whether a bare ``name`` means a value with no table in scope (``current_date``)."""
        with self._lock:
            return self._binds_as_value(name)

    def _binds_as_value(self, name: str) -> bool:
        if not _BARE_NAME.match(name):
            return False
        key = name.lower()
        if key not in self._value_names:
            try:  # bound, never evaluated
                self._con.execute(f"DESCRIBE SELECT {key}").fetchall()
                self._value_names[key] = True
            except duckdb.Error:
                self._value_names[key] = False
        return self._value_names[key]

    def _macro_body_calls(self, body: str, parameters: list[str]) -> Iterator[str]:
        """The functions a macro's body calls, bare value names (``current_timestamp``)
        included; a body that does not parse as an expression reaches an unlisted name."""
        raw = self._con.execute("SELECT json_serialize_sql(?)", [f"SELECT {body}"]).fetchone()
        try:
            tree = json.loads(raw[0]) if raw is not None else {"error": True}
        except RecursionError:  # nested past Python's JSON reader: not proven stable
            tree = {"error": True}
        if tree.get("error"):
            yield "\x00unparsable macro"
            return
        own = {p.lower() for p in parameters}
        for value, bound in _walk_scoped(tree, frozenset(own)):
            if value.get("class") == "FUNCTION" and "function_name" in value:
                yield str(value["function_name"]).lower()
            elif value.get("type") == "TABLE_FUNCTION":
                yield "\x00table function"  # reads a table: not an expression of a row
            elif value.get("class") == "COLUMN_REF":
                names = [str(n) for n in value.get("column_names") or []]
                if (
                    len(names) == 1
                    and names[0].lower() not in bound
                    and self._binds_as_value(names[0])
                ):
                    yield names[0].lower()


_ORDER = {CONSISTENT: 0, "CONSISTENT_WITHIN_QUERY": 1, "VOLATILE": 2, "UNKNOWN": 3}
_lock = threading.Lock()
_cached: FunctionStabilities | None = None


def _worst(a: str, b: str) -> str:
    return a if _ORDER.get(a, 3) >= _ORDER.get(b, 3) else b


def stabilities() -> FunctionStabilities:
    """The process's table of function stabilities (built once: a few tens of milliseconds)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = FunctionStabilities(duck.connect())
        return _cached


def unstable_calls(node: Any, *, columns: Collection[str]) -> list[UnstableCall]:
    """The calls in a parse tree (``json_serialize_sql`` output, or a part of one) whose value
    may differ between evaluations. ``columns`` are the names a bare reference may mean as a
    column (a table's columns, aliases); any other bare name that DuckDB binds as a value is a
    call of a value function (``current_date``)."""
    table = stabilities()
    known = {c.lower() for c in columns}
    found: dict[str, UnstableCall] = {}
    for value, bound in _walk_scoped(node, frozenset()):
        if value.get("sample") is not None and "sample" in value:
            found.setdefault(SAMPLE, UnstableCall(SAMPLE, "VOLATILE", bare=True))
        kind = value.get("class")
        name: str | None = None
        bare = False
        if kind == "FUNCTION" and "function_name" in value:
            name = str(value["function_name"])
        elif kind == "COLUMN_REF":
            names = [str(n) for n in value.get("column_names") or []]
            if (
                len(names) == 1
                and names[0].lower() not in known
                and names[0].lower() not in bound
                and table.binds_as_value(names[0])
            ):
                name, bare = names[0], True
        if name is None:
            continue
        stability = table.stability(name)
        if stability != CONSISTENT:
            found.setdefault(name.lower(), UnstableCall(name, stability, bare))
    return list(found.values())


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    for item, _ in _walk_scoped(value, frozenset()):
        yield item


def _walk_scoped(
    value: Any, bound: frozenset[str]
) -> Iterator[tuple[dict[str, Any], frozenset[str]]]:
    """Every object of a tree with the lambda parameters in scope at it."""
    if isinstance(value, dict):
        if value.get("class") == "LAMBDA":
            params = {
                str(n).lower()
                for ref in _walk(value.get("lhs"))
                if ref.get("class") == "COLUMN_REF"
                for n in ref.get("column_names") or []
            }
            yield value, bound
            yield from _walk_scoped(value.get("expr"), bound | params)
            return
        yield value, bound
        for child in value.values():
            yield from _walk_scoped(child, bound)
    elif isinstance(value, list):
        for child in value:
            yield from _walk_scoped(child, bound)
