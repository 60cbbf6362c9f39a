"""The query sandbox: the caller's SQL reads the snapshot's views and nothing else.

Two layers. Before running, the SQL must be exactly one plain SELECT (or WITH ... SELECT):
``COPY``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``/``PRAGMA``, DDL and several statements are
refused with a message saying which. While running, the connection is locked down: external
access off except the snapshot's own files (``allowed_paths``), no extension loading, no Python
replacement scans, configuration locked, a memory limit, a thread count and a timeout.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from icefloe.duck import string_literal
from icefloe.errors import ConfigError, InvalidInputError, TableNotFoundError
from icefloe.query.sql_refs import SqlRefs

# A memory size as DuckDB takes it (KB = 1000, KiB = 1024): queries' and merges' limits.
MEMORY_SIZE = re.compile(r"^\d+(\.\d+)?\s*[KMGT]i?B$")


class QueryRefusedError(InvalidInputError):
    """The caller's SQL tries something the sandbox does not allow."""


class QueryTimeoutError(InvalidInputError):
    """The query ran longer than its time limit and was interrupted."""


class QueryLimitError(InvalidInputError):
    """The query's result (or its memory) passed a limit; the message names the limit."""


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """Resources one query may use."""

    memory_limit: str = "1GB"
    threads: int = 2
    timeout_s: float = 60.0
    max_sql_chars: int = 100_000
    max_result_rows: int = 10_000_000
    # None: half the memory limit (the result is held while it is written out).
    max_result_bytes: int | None = None

    @property
    def memory_bytes(self) -> int:
        """The memory limit in bytes (DuckDB's units: KB = 1000, KiB = 1024)."""
        match = re.match(r"^(\d+(?:\.\d+)?)\s*([KMGT])(i?)B$", self.memory_limit)
        assert match is not None  # checked in __post_init__
        base = 1024 if match.group(3) else 1000
        return int(float(match.group(1)) * base ** "KMGT".index(match.group(2)) * base)

    @property
    def result_bytes(self) -> int:
        """The cap on a result's Arrow bytes."""
        return (
            self.max_result_bytes if self.max_result_bytes is not None else self.memory_bytes // 2
        )

    def __post_init__(self) -> None:
        if not MEMORY_SIZE.match(self.memory_limit):
            raise ConfigError(f"query memory limit {self.memory_limit!r} is not like 512MB or 2GB")
        if self.threads < 1 or self.timeout_s <= 0:
            raise ConfigError("query threads must be at least 1 and the timeout positive")
        if self.max_result_rows < 1 or (
            self.max_result_bytes is not None and self.max_result_bytes < 1
        ):
            raise ConfigError("query result caps must be positive")


_LEADING = re.compile(r"^(?:--[^\n]*\n|/\*.*?\*/|\s|\()*([A-Za-z]+)", re.DOTALL)
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


def check_sql(sql: str, *, limits: QueryLimits) -> str:
    """Return the one SELECT statement of ``sql``, or refuse it saying why."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefusedError("query refused: the SQL is empty")
    if len(sql) > limits.max_sql_chars:
        raise QueryRefusedError(
            f"query refused: SQL longer than {limits.max_sql_chars:,} characters"
        )
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryRefusedError(f"query refused: {e}") from e
    if len(statements) != 1:
        raise QueryRefusedError(f"query refused: one statement per query, found {len(statements)}")
    (statement,) = statements
    if statement.type != duckdb.StatementType.SELECT:
        what = _NAMED.get(statement.type, statement.type.name)
        raise QueryRefusedError(
            f"query refused: {what} statements are not allowed; send one SELECT"
        )
    leading = _LEADING.match(sql)
    keyword = leading.group(1).upper() if leading else ""
    if keyword not in ("SELECT", "WITH", "FROM", "VALUES", "TABLE"):
        # PRAGMA and SHOW parse as SELECTs over settings; refuse them by name.
        raise QueryRefusedError(
            f"query refused: {keyword or 'this'} statements are not allowed; send one SELECT"
        )
    return str(statement.query)


# Table functions a caller's query may read from: generators only, nothing that reads a file,
# a URL, a setting, a secret or the catalog.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"range", "generate_series", "unnest", "json_each", "json_tree"}
)
# Scalar functions that reveal the host or the session (settings hold paths, and could hold keys).
_DENIED_FUNCTIONS = frozenset({"current_setting", "getenv", "getvariable", "which_secret"})
_DENIED_PREFIXES = ("duckdb_", "pragma_")


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
    denied = sorted(
        f for f in refs.functions if f in _DENIED_FUNCTIONS or f.startswith(_DENIED_PREFIXES)
    )
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
