"""DuckDB plumbing shared by insert, merge and query: connections, identifiers, literals.

DuckDB has no composer like ``psycopg.sql``; identifiers that reach SQL text are validated
names (see :mod:`icefloe.spec.names`) and are quoted here. Values go in as parameters.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path

import duckdb

from icefloe.errors import InvalidArgumentError, InvalidInputError, InvalidNameError

_SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def ident(name: str) -> str:
    """A quoted DuckDB identifier for a validated name."""
    if not _SAFE_NAME.match(name):
        raise InvalidNameError(f"not a safe identifier: {name!r}")
    return f'"{name}"'


def key_sql(key: str) -> str:
    """A sort or row-group key as DuckDB SQL: a column, or a struct leaf
    (``context.page.url`` is ``struct_extract(struct_extract("context", 'page'), 'url')``,
    never one identifier)."""
    column, *path = key.split(".")
    sql = ident(column)
    for name in path:
        sql = f"struct_extract({sql}, {name_literal(name)})"
    return sql


def name_literal(name: str) -> str:
    """A SQL string literal holding a validated name (a JSON key, a column name)."""
    if not _SAFE_NAME.match(name):
        raise InvalidNameError(f"not a safe name: {name!r}")
    return f"'{name}'"


def duckdb_home() -> Path:
    """DuckDB's home under the temporary directory: ``/tmp/icefloe-duckdb`` in Lambda.

    Lambda sets no usable ``HOME`` and only ``/tmp`` is writable there; DuckDB's defaults (its
    home, ``~/.duckdb/extensions``, and an in-memory database's spill directory ``.tmp`` in the
    working directory, ``/var/task``) would all fail.
    """
    return Path(tempfile.gettempdir()) / "icefloe-duckdb"


def connection_config() -> dict[str, str | bool | int | float | list[str]]:
    """What every icefloe DuckDB connection starts with: home, extension, secret and spill
    directories under :func:`duckdb_home`, and no extension ever downloaded or auto-loaded
    (httpfs is loaded from its wheel by path; json and parquet are built in).

    The spill directory is unique to the connection: DuckDB creates it on the first spill and
    removes it when the connection closes, so concurrent connections never share spill files.
    """
    home = duckdb_home()
    home.mkdir(parents=True, exist_ok=True)
    return {
        "home_directory": str(home),
        "extension_directory": str(home / "extensions"),
        "secret_directory": str(home / "secrets"),
        "temp_directory": str(home / f"spill-{uuid.uuid4().hex}"),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }


def connect(
    *, threads: int | None = None, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection in UTC (set up by :func:`connection_config`), optionally
    bounded in threads and memory."""
    con = duckdb.connect(":memory:", config=connection_config())
    con.execute("SET GLOBAL TimeZone = 'UTC'")  # cursors do not inherit a session SET
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit is not None:
        if not re.match(r"^\d+(\.\d+)?\s*[KMGT]i?B$", memory_limit):
            raise InvalidArgumentError(f"bad DuckDB memory limit {memory_limit!r}")
        con.execute(f"SET memory_limit = '{memory_limit}'")
    return con


def string_literal(value: str) -> str:
    """A SQL string literal for a value DuckDB cannot take as a parameter (a file list inside a
    view definition): quotes are doubled, control characters refused."""
    if _CONTROL.search(value):
        raise InvalidInputError(f"control character in SQL string {value!r}")
    return "'" + value.replace("'", "''") + "'"
