"""A delete's predicate: one boolean SQL expression over one table's own columns.

It is checked on DuckDB's parse tree and bound by DuckDB over a stand-in of the table (so
DuckDB's typing decides what it means, exactly as in a query), and refused when it could mean
something else file by file: a subquery sees only the file being rewritten, a volatile
function answers differently on every evaluation, and the row id is not the user's column.
"""

from __future__ import annotations

import json

import duckdb

from icefloe import duck
from icefloe.duck import ident
from icefloe.errors import InvalidInputError
from icefloe.ingest.row_ids import ROW_ID_COLUMN
from icefloe.query.sql_refs import walk
from icefloe.spec import TableSpec

MAX_PREDICATE_CHARS = 100_000
# Functions whose value changes from one evaluation to the next: a delete counts its rows
# once and rewrites each file again, so both must see the same rows.
# The current time is refused too: each file is rewritten at another moment.
VOLATILE_FUNCTIONS = frozenset(
    {
        "random",
        "setseed",
        "uuid",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "nextval",
        "currval",
        "now",
        "current_timestamp",
        "get_current_timestamp",
        "transaction_timestamp",
        "current_date",
        "current_time",
        "get_current_time",
        "current_localtimestamp",
        "current_localtime",
        "today",
    }
)


def check_predicate(spec: TableSpec, where: str) -> str:
    """``where`` in parentheses (embed it in parentheses of your own too: ``a) OR (b`` is an
    expression), or InvalidInputError naming what is wrong."""
    if not where.strip():
        raise InvalidInputError("delete refused: the --where predicate is empty")
    if len(where) > MAX_PREDICATE_CHARS:
        raise InvalidInputError(
            f"delete refused: a predicate longer than {MAX_PREDICATE_CHARS:,} characters"
        )
    predicate = f"({where})"
    statement = f"SELECT count(*) FROM {ident(spec.name)} WHERE {predicate}"
    con = duck.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
        assert raw is not None
        tree = json.loads(raw[0])
        if tree.get("error"):
            raise InvalidInputError(
                f"delete refused: the predicate does not parse: {tree.get('error_message')}"
            )
        _check_shape(spec, tree)
        columns = ", ".join(f"{ident(c.name)} {c.type}" for c in spec.columns)
        con.execute(f"CREATE TABLE {ident(spec.name)} ({columns})")
        try:
            con.execute(statement).fetchall()
        except duckdb.Error as e:
            message = str(e).strip().splitlines()[0]
            raise InvalidInputError(f"delete refused: {message}") from e
    finally:
        con.close()
    return predicate


def _check_shape(spec: TableSpec, tree: dict[str, object]) -> None:
    statements = tree.get("statements")
    if not isinstance(statements, list) or len(statements) != 1:
        raise InvalidInputError("delete refused: the predicate must be one expression")
    node = statements[0]["node"]
    from_table = node.get("from_table") or {}
    if (
        node.get("type") != "SELECT_NODE"
        or from_table.get("type") != "BASE_TABLE"
        or from_table.get("table_name") != spec.name
        or (node.get("cte_map") or {}).get("map")
        or node.get("group_expressions")
        or node.get("having")
        or node.get("modifiers")
        or len(node.get("select_list") or []) != 1
    ):
        raise InvalidInputError("delete refused: the predicate must be one boolean expression")
    where = node.get("where_clause")
    for value in walk(where):
        kind = value.get("class")
        if kind == "SUBQUERY":
            raise InvalidInputError(
                "delete refused: the predicate may not hold a subquery (name values instead)"
            )
        if kind == "WINDOW":
            raise InvalidInputError("delete refused: the predicate may not hold a window function")
        if kind == "FUNCTION" and str(value.get("function_name", "")).lower() in VOLATILE_FUNCTIONS:
            raise InvalidInputError(
                f"delete refused: {value['function_name']}() gives another value each time it is"
                " evaluated (each file of a delete is rewritten at another moment); use a literal"
            )
        if kind == "COLUMN_REF":
            names = [str(n) for n in value.get("column_names") or []]
            # CURRENT_DATE and the like parse as column names that bind to functions.
            if (
                len(names) == 1
                and names[0].lower() in VOLATILE_FUNCTIONS
                and names[0].lower() not in {c.name.lower() for c in spec.columns}
            ):
                raise InvalidInputError(
                    f"delete refused: {names[0]} gives another value each time it is evaluated"
                    " (each file of a delete is rewritten at another moment); use a literal"
                )
            if names and names[-1].lower() == ROW_ID_COLUMN:
                raise InvalidInputError(
                    f"delete refused: {ROW_ID_COLUMN} is icefloe's row id, not a column of"
                    f" {spec.name!r}"
                )
