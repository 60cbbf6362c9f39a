"""The query sandbox: the caller's SQL reads the snapshot's views and nothing else.

Two layers. Before running, the SQL must be exactly one plain SELECT (or WITH ... SELECT,
PIVOT, UNPIVOT): ``COPY``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``/``PRAGMA``, DDL and several
statements are refused with a message saying which. While running, the connection is locked
down: external access off except the snapshot's own files (``allowed_paths``), no extension
loading, no Python replacement scans, configuration locked, a memory limit, a thread count and
a timeout.

A PIVOT whose values come from the data (``PIVOT events ON event``, no ``IN`` list) is one
statement that DuckDB's parser expands into several: a ``CREATE TEMPORARY TYPE`` per such
column, an enum of the column's distinct values over the PIVOT's own source, then the SELECT.
The sandbox counts the caller's statements (``;`` outside strings and comments), not the
expansion's, and checks a stand-in of the statement that parses as one SELECT: each such column
bound to a placeholder enum (``ON event IN __icefloe_pivot_0``), which names every table,
function and expression the expansion reads. The expansion itself runs in the locked-down
connection, where the caller's tables are the snapshot's views.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from icefloe import duck
from icefloe.duck import string_literal
from icefloe.errors import InvalidInputError, TableNotFoundError
from icefloe.query.sql_refs import SqlRefs, load_tree, walk
from icefloe.settings.limits import QueryLimits


# A memory size as DuckDB takes it (KB = 1000, KiB = 1024): queries' and merges' limits.
class QueryRefusedError(InvalidInputError):
    """The caller's SQL tries something the sandbox does not allow."""


class QueryTimeoutError(InvalidInputError):
    """The query ran longer than its time limit and was interrupted."""


class QueryLimitError(InvalidInputError):
    """The query's result (or its memory) passed a limit; the message names the limit."""


_LEADING = re.compile(r"^(?:--[^\n]*\n|/\*.*?\*/|\s|\()*([A-Za-z_]+)", re.DOTALL)
_LEADING_KEYWORDS = frozenset(
    {"SELECT", "WITH", "FROM", "VALUES", "TABLE", "PIVOT", "PIVOT_WIDER", "UNPIVOT", "PIVOT_LONGER"}
)
# The stand-in enum of the N-th PIVOT column whose values come from the data.
PIVOT_PLACEHOLDER = "__icefloe_pivot_{}"
_PIVOT_KEYWORDS = frozenset({"PIVOT", "PIVOT_WIDER"})
# Keywords that end a PIVOT statement's ON list (or the PIVOT statement itself).
_ON_LIST_ENDS = frozenset(
    {"USING", "GROUP", "ORDER", "LIMIT", "OFFSET", "UNION", "EXCEPT", "INTERSECT"}
)
_SUBQUERY_STARTS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "PIVOT", "UNPIVOT"})
PIVOT_VALUES_HINT = "list its values instead: PIVOT ... ON column IN ('a', 'b', ...)"
_NAMED = {
    duckdb.StatementType.COPY: "COPY",
    duckdb.StatementType.ATTACH: "ATTACH",
    duckdb.StatementType.DETACH: "DETACH",
    duckdb.StatementType.LOAD: "INSTALL/LOAD",
    duckdb.StatementType.SET: "SET",
    duckdb.StatementType.VARIABLE_SET: "SET",
    duckdb.StatementType.PRAGMA: "PRAGMA",
    duckdb.StatementType.CREATE: "CREATE",
    duckdb.StatementType.DROP: "DROP",
    duckdb.StatementType.INSERT: "INSERT",
    duckdb.StatementType.UPDATE: "UPDATE",
    duckdb.StatementType.DELETE: "DELETE",
    duckdb.StatementType.ALTER: "ALTER",
    duckdb.StatementType.EXPORT: "EXPORT",
    duckdb.StatementType.CALL: "CALL",
    duckdb.StatementType.TRANSACTION: "transaction control",
}


@dataclass(frozen=True, slots=True)
class CheckedQuery:
    """A caller's query as the sandbox passed it: ``statement`` is what DuckDB runs;
    ``analyzed``, what the reference check and the planner read. They differ only for a PIVOT
    whose values come from the data (``pivots_from_data`` columns): see the module's text."""

    statement: str
    analyzed: str
    pivots_from_data: int = 0


def check_sql(sql: str, *, limits: QueryLimits) -> str:
    """Return the one SELECT statement of ``sql``, or refuse it saying why. A PIVOT that takes
    its values from the data (DuckDB runs it as several statements) is refused here, with the
    form to write instead; :func:`check_query` accepts it."""
    checked = check_query(sql, limits=limits)
    if checked.pivots_from_data:
        raise QueryRefusedError(
            "query refused: a PIVOT that takes its values from the data is not allowed here; "
            + PIVOT_VALUES_HINT
        )
    return checked.statement


def check_query(sql: str, *, limits: QueryLimits) -> CheckedQuery:
    """The caller's one SELECT (or PIVOT, UNPIVOT), or refuse it saying why."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefusedError("query refused: the SQL is empty")
    if len(sql) > limits.max_sql_chars:
        raise QueryRefusedError(
            f"query refused: SQL longer than {limits.max_sql_chars:,} characters"
        )
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:
        # A lone surrogate (U+D800 to U+DFFF) is a Python str but no text DuckDB can take.
        raise QueryRefusedError(
            f"query refused: the SQL is not valid Unicode text ({e.reason}: character"
            f" {e.start + 1} is {sql[e.start]!r})"
        ) from None
    try:
        statements = duckdb.extract_statements(sql)
        tokens = _tokens(sql)
    except duckdb.Error as e:
        raise QueryRefusedError(f"query refused: {without_depth_advice(str(e))}") from e
    written = _statement_count(tokens)
    if written != 1 or not statements:
        raise QueryRefusedError(f"query refused: one statement per query, found {written}")
    *expanded, statement = statements
    if statement.type != duckdb.StatementType.SELECT:
        what = _NAMED.get(statement.type, statement.type.name)
        raise QueryRefusedError(
            f"query refused: {what} statements are not allowed; send one SELECT"
        )
    leading = _LEADING.match(sql)
    keyword = leading.group(1).upper() if leading else ""
    if keyword not in _LEADING_KEYWORDS:
        # PRAGMA and SHOW parse as SELECTs over settings; refuse them by name.
        raise QueryRefusedError(
            f"query refused: {keyword or 'this'} statements are not allowed; send one SELECT"
        )
    if not expanded:
        return CheckedQuery(statement=str(statement.query), analyzed=str(statement.query))
    # One written SELECT that the parser expanded: only a PIVOT with values from the data does
    # that (into a CREATE TEMPORARY TYPE per such column, then the SELECT).
    if any(s.type != duckdb.StatementType.CREATE for s in expanded):
        raise QueryRefusedError(
            f"query refused: this statement runs as {len(statements)} statements; send one SELECT"
        )
    analyzed = _bind_pivots_from_data(sql, tokens, expected=len(expanded))
    return CheckedQuery(statement=sql, analyzed=analyzed, pivots_from_data=len(expanded))


# A token: its position, its depth in parentheses, and its text when it matters here (a
# keyword upper-cased, or one of "(", ")", ",", ";"), else "".
_Token = tuple[int, int, str]
_KEYWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def _tokens(sql: str) -> list[_Token]:
    """DuckDB's own tokens of ``sql`` (strings and comments are one token or none), at
    character positions (DuckDB gives byte offsets into the UTF-8 text)."""
    tokens: list[_Token] = []
    depth = 0
    encoded = sql.encode("utf-8")
    byte_at = char_at = 0
    for offset, kind in duckdb.tokenize(sql):
        # Tokens start on character boundaries: decode only what lies between two of them.
        char_at += len(encoded[byte_at:offset].decode("utf-8"))
        byte_at = offset
        position = char_at
        text = ""
        if kind == duckdb.token_type.keyword:
            word = _KEYWORD.match(sql, position)
            text = word.group(0).upper() if word else ""
        elif kind == duckdb.token_type.operator and sql[position] in "(),;":
            text = sql[position]
        if text == ")":
            depth -= 1
        tokens.append((position, depth, text))
        if text == "(":
            depth += 1
    return tokens


def _statement_count(tokens: Sequence[_Token]) -> int:
    """How many statements the caller wrote: runs of tokens between semicolons."""
    count = 0
    previous = ";"
    for _, _, text in tokens:
        if text != ";" and previous == ";":
            count += 1
        previous = text
    return count


def _bind_pivots_from_data(sql: str, tokens: Sequence[_Token], *, expected: int) -> str:
    """``sql`` with each PIVOT column that has no IN list bound to a placeholder enum, checked
    to parse as one SELECT whose PIVOT columns take exactly those placeholders."""
    inserts: list[int] = []
    for index, (_, depth, text) in enumerate(tokens):
        # Not the SQL-standard form, FROM t PIVOT (... FOR c IN (...)), which always lists.
        if text in _PIVOT_KEYWORDS and (
            index + 1 == len(tokens)
            or tokens[index + 1][2] != "("
            or _opens_subquery(tokens, index + 1)
        ):
            inserts += _unlisted_pivot_columns(sql, tokens, index, depth)
    placeholders = [PIVOT_PLACEHOLDER.format(n) for n in range(len(inserts))]
    pieces, last = [], 0
    for at, name in zip(inserts, placeholders, strict=True):
        # A newline first: the column may end in a line comment.
        pieces += [sql[last:at], f"\nIN {name} "]
        last = at
    analyzed = "".join([*pieces, sql[last:]])
    if len(inserts) != expected or not _binds_exactly(analyzed, placeholders):
        raise QueryRefusedError(
            "query refused: the columns of this PIVOT whose values come from the data could"
            f" not be told apart; {PIVOT_VALUES_HINT}"
        )
    return analyzed


def _unlisted_pivot_columns(
    sql: str, tokens: Sequence[_Token], start: int, depth: int
) -> list[int]:
    """Where the ON list of the PIVOT statement at ``tokens[start]`` has a column without an
    IN list: the position just past each such column."""
    end = next(
        (
            i
            for i in range(start + 1, len(tokens))
            if tokens[i][1] < depth
            or (tokens[i][1] == depth and tokens[i][2] in {";", "UNION", "EXCEPT", "INTERSECT"})
        ),
        len(tokens),
    )
    # The last ON at this depth: an earlier one belongs to a join in the PIVOT's source.
    on = next((i for i in range(end - 1, start, -1) if tokens[i][1:] == (depth, "ON")), None)
    if on is None:
        return []
    found: list[int] = []
    column_start, listed = on + 1, False
    for i in range(on + 1, end + 1):
        text = tokens[i][2] if i < end and tokens[i][1] == depth else None
        if i < end and text not in {",", *_ON_LIST_ENDS}:
            if text == "IN":
                listed = True
                if _opens_subquery(tokens, i + 1):
                    raise QueryRefusedError(
                        "query refused: a PIVOT's IN list may not be a subquery; leave IN out to"
                        f" pivot on every value of the column, or {PIVOT_VALUES_HINT}"
                    )
            continue
        if i > column_start and not listed:
            found.append(tokens[i][0] if i < len(tokens) else len(sql))
        if text != ",":
            break
        column_start, listed = i + 1, False
    return found


def _opens_subquery(tokens: Sequence[_Token], at: int) -> bool:
    """Whether ``tokens[at:]`` starts with "(" and a query (through any more "(")."""
    if at >= len(tokens) or tokens[at][2] != "(":
        return False
    while at < len(tokens) and tokens[at][2] == "(":
        at += 1
    return at < len(tokens) and tokens[at][2] in _SUBQUERY_STARTS


def _binds_exactly(analyzed: str, placeholders: Sequence[str]) -> bool:
    """Whether ``analyzed`` is one SELECT in which each placeholder is the enum of one PIVOT
    column and appears nowhere else."""
    try:
        statements = duckdb.extract_statements(analyzed)
    except duckdb.Error:
        return False
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        return False
    con = duck.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [analyzed]).fetchone()
    finally:
        con.close()
    assert raw is not None
    tree = load_tree(raw[0], refused="query refused", error=QueryRefusedError)
    if tree.get("error"):
        return False
    enums = [
        str(column["pivot_enum"])
        for node in walk(tree)
        for column in node.get("pivots") or ()
        if isinstance(column, dict) and column.get("pivot_enum")
    ]
    return sorted(enums) == sorted(placeholders) and all(
        raw[0].count(f'"{name}"') == 1 for name in placeholders
    )


# Table functions a caller's query may read from: generators only, nothing that reads a file,
# a URL, a setting, a secret or the catalog.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "json_each", "json_tree"}
)
# Scalar functions that reveal the host or the session (settings hold paths, and could hold keys).
# DuckDB's advice on its expression depth limit: a SET the sandbox refuses.
_DEPTH_ADVICE = re.compile(
    r"""\.?\s*Use "SET max_expression_depth TO [^"]*" to increase the maximum expression depth\.?"""
)


def without_depth_advice(message: str) -> str:
    """DuckDB's message without its advice to raise the expression depth limit (a SET no
    query may run): what to do instead is to nest fewer levels."""
    return _DEPTH_ADVICE.sub("; nest fewer levels", message)


_DENIED_FUNCTIONS = frozenset({"current_setting", "getenv", "getvariable", "which_secret"})
_DENIED_PREFIXES = ("duckdb_", "pragma_")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _denied(name: str, macros: Collection[str] = ()) -> bool:
    return name in _DENIED_FUNCTIONS or name.startswith(_DENIED_PREFIXES) or name in macros


@functools.cache
def denied_macros() -> frozenset[str]:
    """DuckDB's built-in macros that call a denied function, or another such macro: a parse
    tree shows only the macro's name (``pg_get_viewdef`` is ``duckdb_views()``'s SQL of every
    view, ``get_block_size`` reads ``pragma_database_size()``). Read once from this DuckDB."""
    con = duck.connect()
    try:
        bodies = con.execute(
            "SELECT DISTINCT lower(function_name), lower(macro_definition) FROM duckdb_functions()"
            " WHERE function_type IN ('macro', 'table_macro') AND macro_definition IS NOT NULL"
        ).fetchall()
    finally:
        con.close()
    found: set[str] = set()
    while True:
        more = {
            name
            for name, body in bodies
            if name not in found and any(_denied(n, found) for n in _NAME.findall(body))
        }
        if not more:
            return frozenset(found)
        found |= more


def check_references(refs: SqlRefs, *, lake_tables: Collection[str]) -> None:
    """Refuse a query that reaches anything but the lake's tables, its own CTEs and
    generator functions: no catalog views, no other schema, no reader, no setting."""
    if refs.qualified_tables:
        first = sorted(str(t) for t in refs.qualified_tables)[0]
        raise QueryRefusedError(
            f"query refused: {first!r} is not a table of this lake (name tables without a schema)"
        )
    unknown = sorted(refs.tables - set(lake_tables))
    if unknown:
        raise TableNotFoundError(f"no table named {unknown[0]!r}")
    refused = sorted(refs.table_functions - ALLOWED_TABLE_FUNCTIONS)
    if refused:
        raise QueryRefusedError(
            f"query refused: table function {refused[0]}() is not allowed; allowed are"
            f" {', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))}"
        )
    macros = denied_macros()
    denied = sorted(f for f in refs.functions | refs.table_functions if _denied(f, macros))
    if denied:
        raise QueryRefusedError(f"query refused: function {denied[0]}() is not allowed")
    if "SHOW_REF" in refs.source_kinds:
        raise QueryRefusedError("query refused: DESCRIBE, SHOW and SUMMARIZE are not allowed")


def lock_down(
    con: duckdb.DuckDBPyConnection,
    *,
    allowed_paths: Sequence[str] = (),
    allowed_directories: Sequence[str] = (),
    limits: QueryLimits,
) -> None:
    """Make ``con`` read only ``allowed_paths`` and files under ``allowed_directories``, and
    change nothing, for the rest of its life."""

    def listed(values: Sequence[str]) -> str:
        return "[" + ", ".join(string_literal(v) for v in values) + "]"

    con.execute(f"SET GLOBAL memory_limit = {string_literal(limits.memory_limit)}")
    con.execute(f"SET GLOBAL threads = {int(limits.threads)}")
    con.execute("SET GLOBAL python_enable_replacements = false")
    con.execute("SET GLOBAL autoinstall_known_extensions = false")
    con.execute("SET GLOBAL autoload_known_extensions = false")
    con.execute(f"SET GLOBAL allowed_paths = {listed(allowed_paths)}")
    con.execute(f"SET GLOBAL allowed_directories = {listed(allowed_directories)}")
    con.execute("SET GLOBAL enable_external_access = false")
    con.execute("SET GLOBAL lock_configuration = true")


@contextmanager
def time_limit(
    con: duckdb.DuckDBPyConnection, *, seconds: float, fired: threading.Event | None = None
) -> Iterator[threading.Event]:
    """Interrupt ``con`` if the block runs longer than ``seconds``; the event (``fired``, or a
    new one) tells whether it did."""
    fired = fired if fired is not None else threading.Event()

    def interrupt() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
