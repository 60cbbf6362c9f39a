"""Table and column name rules: names appear in S3 keys, Hive paths and SQL, so they are plain."""

from __future__ import annotations

import re

from icefloe.errors import InvalidNameError
from icefloe.spec._text import show

ROW_ID_COLUMN = "_row_id"  # see icefloe.ingest.row_ids
# The row id's field id in every file and in Iceberg: below Iceberg's reserved ids
# (2147483447 and up), far above any id a column or a nested field is given.
ROW_ID_FIELD_ID = 2_147_483_000
SYSTEM_COLUMNS: tuple[str, ...] = (ROW_ID_COLUMN,)
"""Columns icefloe adds to every row; user columns may not take these names."""

MAX_NAME_LENGTH = 63  # Postgres' identifier limit, so a name never gets truncated in SQL.

_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
_COLUMN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is a valid table name: lower-case ASCII, digits, ``_``, 1 to 63 chars."""
    if not isinstance(name, str) or _TABLE_NAME.fullmatch(name) is None:
        raise InvalidNameError(
            f"table name {show(name)} must start with a lower-case letter and contain only "
            f"a-z, 0-9 and '_' ({MAX_NAME_LENGTH} characters at most)"
        )
    return name


def validate_column_name(name: str) -> str:
    """Return ``name`` if it is a valid user column name (mixed case allowed, e.g. ``messageId``)."""
    if not isinstance(name, str):
        raise InvalidNameError(f"column name {show(name)} must be a string")
    if name.lower() in SYSTEM_COLUMNS:
        raise InvalidNameError(f"column name {show(name)} is reserved for a system column")
    if name.startswith("_"):
        raise InvalidNameError(
            f"column name {show(name)} must not start with '_': that prefix is reserved for "
            f"system columns such as {SYSTEM_COLUMNS[0]!r}"
        )
    if _COLUMN_NAME.fullmatch(name) is None:
        raise InvalidNameError(
            f"column name {show(name)} must start with a letter and contain only "
            f"A-Z, a-z, 0-9 and '_' ({MAX_NAME_LENGTH} characters at most)"
        )
    return name
