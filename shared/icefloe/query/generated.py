"""Generated columns' expressions, checked where a table is created or altered.

An expression is one value per row: DuckDB SQL naming only the table's input columns (not
another generated column), each by its name (no ``*``, ``COLUMNS(...)``, ``#n`` or the whole
row by the table's name), deterministic by DuckDB's own function stability (``random()``,
``now()``, ``uuid()`` are refused), with no aggregate, window or subquery, and nothing the
query sandbox refuses (settings, environment, catalog functions). It must bind over the
table's columns and cast to the column's type. The check runs it over no rows, on a
connection locked down as a query's is.

A new version of the spec keeps what each generated column it had already reads: every name
in the expression reaches the same column (and struct field) by id, with the same type, as at
the version before (:func:`icefloe.spec.evolution.source_change`). The values stored so far
were computed from those; renaming, dropping or widening one, or swapping names in one alter,
would leave them disagreeing with the expression.
"""

from __future__ import annotations

from typing import Any

import duckdb

from icefloe import duck
from icefloe.duck import ident
from icefloe.errors import InvalidInputError, SpecError
from icefloe.query.sandbox import check_references, lock_down
from icefloe.query.sql_refs import analyze, load_tree, walk
from icefloe.settings.limits import QueryLimits
from icefloe.spec import Column, TableSpec
from icefloe.spec.evolution import source_change
from icefloe.spec.layout import FileLayout

# Function stability DuckDB reports (duckdb_functions()) for which a row's value may change
# from one evaluation to the next.
_UNSTABLE = frozenset({"VOLATILE", "CONSISTENT_WITHIN_QUERY"})


class GeneratedColumnError(InvalidInputError):
    """A generated column's expression cannot be computed for a row as the rules require."""


def check_generated_columns(spec: TableSpec) -> None:
    """Refuse, naming the column, a generated column whose expression breaks a rule above."""
    generated = [c for c in spec.columns if c.generated]
    if not generated:
        return
    inputs = [c for c in spec.columns if not c.generated]
    before = _previous_layout(spec)
    had = set() if before is None else {c.id for c in before.columns}
    con = duck.connect()
    try:
        nulls = ", ".join(f"CAST(NULL AS {c.type}) AS {ident(c.name)}" for c in inputs)
        con.execute(f"CREATE TABLE {ident(spec.name)} AS SELECT {nulls} WHERE false")
        functions = _function_kinds(con)
        lock_down(con, limits=QueryLimits())
        for column in generated:
            kept = before if spec.column_id(column.name) in had else None
            _check_one(con, spec, column, functions, before=kept)
    finally:
        con.close()


def _previous_layout(spec: TableSpec) -> FileLayout | None:
    """The layout of the spec version before ``spec``'s; None for a table's first."""
    if spec.version == 1:
        return None
    try:
        return spec.layout_at(spec.version - 1)
    except SpecError:
        return None


def _check_one(
    con: duckdb.DuckDBPyConnection,
    spec: TableSpec,
    column: Column,
    functions: dict[str, set[str]],
    *,
    before: FileLayout | None,
) -> None:
    """``before``: the layout of the version before, when ``column`` was in it."""
    assert column.expression is not None
    where = f"generated column {column.name!r} of {spec.name!r}"
    try:
        column.expression.encode("utf-8")
    except UnicodeEncodeError as e:
        raise GeneratedColumnError(
            f"{where}: its expression is not valid Unicode text ({e.reason}: character"
            f" {e.start} is {column.expression[e.start]!r})"
        ) from None
    select = f"SELECT ({column.expression}) FROM {ident(spec.name)}"
    tree = _parse(con, select, where)
    refs = analyze(select, con=con)
    if (
        refs.tables != {spec.name}
        or refs.ctes
        or refs.table_functions
        or len(refs.source_kinds - {"BASE_TABLE"})
    ):
        raise GeneratedColumnError(
            f"{where}: its expression reads one row's columns only (no table, subquery or"
            " table function)"
        )
    try:
        check_references(refs, lake_tables=[spec.name])
    except InvalidInputError as e:
        raise GeneratedColumnError(f"{where}: {str(e).removeprefix('query refused: ')}") from e
    objects = walk(tree)
    if before is not None:
        _check_sources(spec, objects, before, where)
    try:
        con.execute(
            f"SELECT CAST(({column.expression}) AS {column.type}) FROM {ident(spec.name)}"
        ).fetchall()
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GeneratedColumnError(
            f"{where}: its expression does not bind over the table's input columns"
            f" (generated columns are not among them) as {column.type}: {first}"
        ) from e
    inputs = {c.name.lower() for c in spec.columns if not c.generated}
    parameters = _lambda_parameters(objects)
    names = inputs | parameters | {spec.name.lower()}
    for node in objects:
        kind = node.get("class")
        if kind in ("STAR", "POSITIONAL_REFERENCE"):
            raise GeneratedColumnError(
                f"{where}: its expression names each column it reads (no *, COLUMNS(...) or"
                " #n: which columns it reads must not depend on the table's other columns)"
            )
        if kind == "COLUMN_REF" and _is_the_row(node, spec.name, inputs | parameters):
            raise GeneratedColumnError(
                f"{where}: {node['column_names'][0]} is the whole row; the expression names"
                " each column it reads (the row's value would change with the table's other"
                " columns)"
            )
        if kind == "COLUMN_REF" and str(node["column_names"][0]).lower() not in names:
            # a name DuckDB binds to a function when no column has it: current_date,
            # current_timestamp, localtime, current_user, ...
            raise GeneratedColumnError(
                f"{where}: {node['column_names'][0]} is not one of the table's input columns"
                " (a value that depends on when or by whom a row is computed is not allowed)"
            )
        if kind in ("WINDOW", "SUBQUERY"):
            raise GeneratedColumnError(
                f"{where}: its expression is one row's value; a {kind.lower()} is not allowed"
            )
        if kind == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            kinds = functions.get(name, set())
            if "aggregate" in kinds:
                raise GeneratedColumnError(
                    f"{where}: {name}() is an aggregate; the expression is one row's value"
                )
            if kinds & _UNSTABLE:
                raise GeneratedColumnError(
                    f"{where}: {name}() is not deterministic (DuckDB marks it"
                    f" {sorted(kinds & _UNSTABLE)[0]}); a row's value must be the same whenever"
                    " it is computed"
                )


def _check_sources(
    spec: TableSpec, objects: list[dict[str, Any]], before: FileLayout, where: str
) -> None:
    """Refuse, naming the column or field, a name in the expression that no longer reads what
    it read at the version before: the generated column's stored values came from that."""
    after = spec.layout
    for path in _read_paths(spec, objects):
        change = source_change(before, after, path)
        if change is not None:
            raise GeneratedColumnError(
                f"{where}: {change}. Its stored values were computed from what its expression"
                " reads now, so a column or struct field it reads may not be renamed, dropped"
                " or widened, nor its name given to another (drop the generated column and add"
                " it again to compute it afresh)"
            )


def _read_paths(spec: TableSpec, objects: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Each name path the expression may read: a column, then struct fields (``ctx.url``). A
    name the table's name qualifies (``ev.ctx.url``) is read both ways, as DuckDB could bind
    it; one that reaches no column (a lambda's parameter) reads nothing."""
    paths: list[tuple[str, ...]] = []
    for node in objects:
        if node.get("class") != "COLUMN_REF":
            continue
        parts = tuple(str(p) for p in node["column_names"])
        paths.append(parts)
        if len(parts) > 1 and parts[0].lower() == spec.name.lower():
            paths.append(parts[1:])
    return list(dict.fromkeys(paths))


def _is_the_row(node: dict[str, Any], table: str, names: set[str]) -> bool:
    """``node`` (a column reference) is the table's name alone, which no column or lambda
    parameter takes: DuckDB binds it to the whole row, a struct of every column."""
    parts = [str(p).lower() for p in node["column_names"]]
    return parts == [table.lower()] and parts[0] not in names


def _lambda_parameters(objects: list[dict[str, Any]]) -> set[str]:
    return {
        str(ref["column_names"][0]).lower()
        for node in objects
        if node.get("class") == "LAMBDA"
        for ref in walk(node.get("lhs"))
        if ref.get("class") == "COLUMN_REF"
    }


def _parse(con: duckdb.DuckDBPyConnection, select: str, where: str) -> Any:
    raw = con.execute("SELECT json_serialize_sql(?)", [select]).fetchone()
    assert raw is not None
    tree = load_tree(raw[0], refused=where, error=GeneratedColumnError)
    if tree.get("error"):
        raise GeneratedColumnError(
            f"{where}: its expression does not parse: {tree.get('error_message', '')}"
        )
    statements = tree["statements"]
    if len(statements) != 1:
        raise GeneratedColumnError(f"{where}: its expression must be one expression")
    return statements[0]["node"]["select_list"]


def _function_kinds(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """Each function's types (scalar, aggregate, ...) and stabilities, over its overloads."""
    kinds: dict[str, set[str]] = {}
    for name, kind, stability in con.execute(
        "SELECT function_name, function_type, stability FROM duckdb_functions()"
    ).fetchall():
        found = kinds.setdefault(str(name).lower(), set())
        found.add(str(kind))
        if stability is not None:
            found.add(str(stability))
    return kinds
