"""A delete's predicate: one boolean SQL expression over one table's own columns.

DuckDB parses it inside a fixed frame (``SELECT count(*) FROM t WHERE (...)``), the frame is
checked to hold nothing but the expression (no ``QUALIFY``, sample, window clause or second
statement smuggled in by a closing parenthesis), the text alone, without the frame's
parentheses, must parse to the same expression (``a) OR (b`` is two), and what icefloe runs from then on is DuckDB's
own rendering of that one expression, checked to parse back to the same tree. It is bound by
DuckDB over a stand-in of the table (so DuckDB's typing decides what it means, exactly as in a
query), and refused when it could mean something else from one evaluation to the next: a
subquery sees only the file being rewritten, a function DuckDB does not mark consistent
answers differently each time (see :mod:`icefloe.stability`), and the row id is not the
user's column.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from icefloe import duck
from icefloe.duck import ident
from icefloe.errors import InvalidInputError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.sql_refs import load_tree, walk, without_locations
from icefloe.spec import TableSpec
from icefloe.stability import unstable_calls

MAX_PREDICATE_CHARS = 100_000


class PredicateEvaluationError(InvalidInputError):
    """DuckDB failed to evaluate the predicate on a row a delete read (a cast of a value that
    does not convert): the delete decides no row and commits nothing."""


# The SELECT node of the frame, as DuckDB serializes it, when the text inside the parentheses
# was one expression: every other field of the node must hold exactly this.
_FRAME_FIELDS: dict[str, Any] = {
    "type": "SELECT_NODE",
    "modifiers": [],
    "cte_map": {"map": []},
    "group_expressions": [],
    "group_sets": [],
    "aggregate_handling": "STANDARD_HANDLING",
    "having": None,
    "sample": None,
    "qualify": None,
}
_FRAME_EXPRESSIONS = ("select_list", "from_table", "where_clause")
_lock = threading.Lock()
_connection: duckdb.DuckDBPyConnection | None = None


def check_predicate(spec: TableSpec, where: str) -> str:
    """DuckDB's rendering of ``where`` in parentheses (it is one expression and stays one
    wherever it is embedded), or InvalidInputError naming what is wrong."""
    if not where.strip():
        raise InvalidInputError("delete refused: the --where predicate is empty")
    if len(where) > MAX_PREDICATE_CHARS:
        raise InvalidInputError(
            f"delete refused: a predicate longer than {MAX_PREDICATE_CHARS:,} characters"
        )
    try:
        where.encode("utf-8")
    except UnicodeEncodeError as e:
        # A lone surrogate (U+D800 to U+DFFF) is a Python str but no text DuckDB can take.
        raise InvalidInputError(
            f"delete refused: the predicate is not valid Unicode text ({e.reason}: character"
            f" {e.start + 1} is {where[e.start]!r})"
        ) from None
    with _checker() as con:
        try:
            expression = _framed_expression(con, spec, where)
            _check_expression(spec, expression)
            predicate = f"({_render(con, spec, expression)})"
        except RecursionError:
            # Reading, checking and rendering the parse tree go one Python call per level.
            raise InvalidInputError(
                "delete refused: the predicate nests too deeply to check (calls or operators"
                " inside one another several hundred levels deep); nest fewer levels"
            ) from None
        columns = ", ".join(f"{ident(c.name)} {c.type}" for c in spec.columns)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {ident(spec.name)} ({columns})")
        try:
            con.execute(f"SELECT count(*) FROM {ident(spec.name)} WHERE {predicate}").fetchall()
        except duckdb.Error as e:
            message = str(e).strip().splitlines()[0]
            raise InvalidInputError(f"delete refused: {message}") from e
        finally:
            con.execute(f"DROP TABLE IF EXISTS {ident(spec.name)}")
    return predicate


@contextmanager
def _checker() -> Iterator[duckdb.DuckDBPyConnection]:
    """The process's connection for checking predicates (opening one costs about 20 ms),
    one check at a time; it holds nothing between checks but an empty catalog."""
    global _connection
    with _lock:
        if _connection is None:
            _connection = duck.connect()
        yield _connection


def _parse(con: duckdb.DuckDBPyConnection, statement: str) -> dict[str, Any]:
    raw = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
    assert raw is not None
    tree: dict[str, Any] = load_tree(raw[0], refused="delete refused")
    if tree.get("error"):
        raise InvalidInputError(
            f"delete refused: the predicate is not one expression: {tree.get('error_message')}"
        )
    return tree


def _framed_expression(
    con: duckdb.DuckDBPyConnection, spec: TableSpec, where: str
) -> dict[str, Any]:
    """The parse tree of ``where`` as the WHERE of the frame, or a refusal when the text
    reaches outside the frame."""
    tree = _parse(con, f"SELECT count(*) FROM {ident(spec.name)} WHERE ({where})")
    statements = tree.get("statements")
    if not isinstance(statements, list) or len(statements) != 1:
        raise InvalidInputError("delete refused: the predicate must be one expression")
    node = statements[0].get("node") or {}
    from_table = node.get("from_table") or {}
    outside = sorted(
        key
        for key in {*node, *_FRAME_FIELDS}
        if key not in _FRAME_EXPRESSIONS and node.get(key) != _FRAME_FIELDS.get(key)
    )
    if (
        outside
        or from_table.get("type") != "BASE_TABLE"
        or from_table.get("table_name") != spec.name
        or from_table.get("sample") is not None
        or len(node.get("select_list") or []) != 1
        or not isinstance(node.get("where_clause"), dict)
    ):
        shown = f" (it adds {', '.join(outside)})" if outside else ""
        raise InvalidInputError(
            f"delete refused: the predicate must be one boolean expression{shown}"
        )
    expression: dict[str, Any] = node["where_clause"]
    # A clause after a closing parenthesis can hide in a SELECT (a WINDOW clause the tree
    # does not show); inside a function's argument list no clause parses at all.
    tree = _parse(con, f"SELECT __icefloe_frame(({where}))")
    select = (tree.get("statements") or [{}])[0].get("node", {}).get("select_list") or [{}]
    argument = (select[0].get("children") or [None])[0] if len(select) == 1 else None
    if len(tree.get("statements") or []) != 1 or without_locations(argument) != without_locations(
        expression
    ):
        raise InvalidInputError("delete refused: the predicate must be one boolean expression")
    # Both frames above wrap the text in parentheses of their own, so ``a) OR (b`` reads as
    # ``(a) OR (b)`` in each: unwrapped, the text must still parse to the same expression.
    tree = _parse(con, f"SELECT count(*) FROM {ident(spec.name)} WHERE {where}")
    bare = (tree.get("statements") or [{}])[0].get("node", {}).get("where_clause")
    if len(tree.get("statements") or []) != 1 or without_locations(bare) != without_locations(
        expression
    ):
        raise InvalidInputError(
            "delete refused: the predicate must be one boolean expression (its parentheses do"
            " not balance)"
        )
    return expression


def _render(con: duckdb.DuckDBPyConnection, spec: TableSpec, expression: dict[str, Any]) -> str:
    """DuckDB's text for ``expression``. The text is what runs, so it passes the frame and
    the expression checks itself, and it is DuckDB's settled writing: read and written again,
    it stays the same (a constant ``true`` is written ``true``, read back as a cast and written
    as one: two rounds settle it)."""
    rendered = _to_text(con, expression)
    for _ in range(3):
        again = _framed_expression(con, spec, rendered)
        _check_expression(spec, again)
        settled = _to_text(con, again)
        if settled == rendered:
            return rendered
        rendered = settled
    raise InvalidInputError(
        "delete refused: the predicate does not read back as the same expression"
    )


def _to_text(con: duckdb.DuckDBPyConnection, expression: dict[str, Any]) -> str:
    tree = _parse(con, "SELECT NULL")
    tree["statements"][0]["node"]["select_list"] = [expression]
    raw = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchone()
    text = str(raw[0]) if raw is not None else ""
    if not text.startswith("SELECT "):
        raise InvalidInputError("delete refused: the predicate cannot be written back as SQL")
    return text[len("SELECT ") :]


def _check_expression(spec: TableSpec, where: dict[str, Any]) -> None:
    for value in walk(where):
        kind = value.get("class")
        if kind == "SUBQUERY":
            raise InvalidInputError(
                "delete refused: the predicate may not hold a subquery (name values instead)"
            )
        if kind == "WINDOW":
            raise InvalidInputError("delete refused: the predicate may not hold a window function")
        if kind == "COLUMN_REF":
            names = [str(n) for n in value.get("column_names") or []]
            if names and names[-1].lower() == ROW_ID_COLUMN:
                raise InvalidInputError(
                    f"delete refused: {ROW_ID_COLUMN} is icefloe's row id, not a column of"
                    f" {spec.name!r}"
                )
    unstable = unstable_calls(where, columns=[spec.name, *(c.name for c in spec.columns)])
    if unstable:
        raise InvalidInputError(
            f"delete refused: {unstable[0].describe()}; a delete decides each row once per"
            " file and must decide it the same way on every evaluation (use a literal)"
        )
