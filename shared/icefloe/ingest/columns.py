"""Per-column SQL that turns raw input values into the table's types, and flags bad ones.

For each column the batch loader gets two DuckDB expressions: the typed value, and an error
code that is NULL when the value is fine (``missing``, ``null``, ``type``, ``size``, or
``depth?`` for a JSON value that may be nested too deeply and is checked exactly afterwards).
Everything runs vectorized inside DuckDB; Python only formats the messages of a refused batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from icefloe.duck import ident
from icefloe.spec import Column
from icefloe.spec.types import is_integer, is_list

_INTEGER_JSON = "('BIGINT', 'UBIGINT')"
_NUMBER_JSON = "('BIGINT', 'UBIGINT', 'DOUBLE')"
# Epoch milliseconds accepted for timestamps: years 1677..2262, the range of int64 nanoseconds.
_EPOCH_MS_MIN, _EPOCH_MS_MAX = -9_223_372_036_854, 9_223_372_036_854


@dataclass(frozen=True, slots=True)
class ColumnSQL:
    column: Column
    value: str
    error: str


EXPECTED: dict[str, str] = {
    "VARCHAR": "a string",
    "BOOLEAN": "true or false",
    "DATE": "an ISO-8601 date string",
    "TIME": "an ISO-8601 time string",
    "TIMESTAMP": "an ISO-8601 timestamp string or epoch milliseconds",
    "TIMESTAMPTZ": "an ISO-8601 timestamp string or epoch milliseconds",
    "UUID": "a UUID string",
    "BLOB": "a base64 string",
    "JSON": "any JSON value",
}


def expected(type_name: str) -> str:
    if type_name in EXPECTED:
        return EXPECTED[type_name]
    if is_integer(type_name):
        return f"an integer that fits {type_name}"
    if is_list(type_name):
        return f"a JSON array of {type_name[:-2]} values"
    return f"a number that fits {type_name}"


def _error_case(col: Column, *, absent: str, ok: str, size: str | None, depth: str | None) -> str:
    parts = [f"WHEN {absent} THEN {'NULL' if col.nullable else _missing_code(col)}"]
    parts.append(f"WHEN NOT ({ok}) THEN 'type'")
    if size is not None:
        parts.append(f"WHEN {size} THEN 'size'")
    if depth is not None:
        parts.append(f"WHEN {depth} THEN 'depth?'")
    return "CASE " + " ".join(parts) + " END"


def _missing_code(col: Column) -> str:
    return "'missing'"


def json_column(col: Column, *, max_value_bytes: int, max_json_depth: int) -> ColumnSQL:
    """SQL over a JSON-typed raw column (read from JSON records) named like the column."""
    r = ident(col.name)
    t = f"json_type({r})"
    text = f"({r} ->> '$')"
    absent = f"({r} IS NULL OR {t} = 'NULL')"
    kind = col.type
    size: str | None = None
    depth: str | None = None
    if kind == "VARCHAR":
        ok, value = f"{t} = 'VARCHAR'", text
        size = f"strlen({text}) > {max_value_bytes}"
    elif kind == "JSON":
        raw = f"CAST({r} AS VARCHAR)"
        ok, value = "true", raw
        size = f"strlen({raw}) > {max_value_bytes}"
        # An upper bound of the depth, cheap to compute; suspects are checked exactly later.
        depth = (
            f"strlen({raw}) - strlen(replace(replace({raw}, '[', ''), '{{', '')) > {max_json_depth}"
        )
    elif kind == "BOOLEAN":
        ok, value = f"{t} = 'BOOLEAN'", f"TRY_CAST({text} AS BOOLEAN)"
    elif is_integer(kind):
        value = f"TRY_CAST({text} AS {kind})"
        ok = f"{t} IN {_INTEGER_JSON} AND {value} IS NOT NULL"
    elif kind in ("FLOAT", "DOUBLE") or kind.startswith("DECIMAL"):
        value = f"TRY_CAST({text} AS {kind})"
        ok = f"{t} IN {_NUMBER_JSON} AND {value} IS NOT NULL"
    elif kind in ("TIMESTAMP", "TIMESTAMPTZ"):
        from_text = f"TRY_CAST({text} AS TIMESTAMPTZ)"
        ms = f"TRY_CAST({text} AS BIGINT)"
        from_ms = f"make_timestamptz({ms} * 1000)"
        in_range = f"{ms} BETWEEN {_EPOCH_MS_MIN} AND {_EPOCH_MS_MAX}"
        tz_value = (
            f"CASE WHEN {t} = 'VARCHAR' THEN {from_text}"
            f" WHEN {t} IN {_INTEGER_JSON} AND {in_range} THEN {from_ms} END"
        )
        value = tz_value if kind == "TIMESTAMPTZ" else f"({tz_value}) AT TIME ZONE 'UTC'"
        ok = f"({tz_value}) IS NOT NULL"
    elif kind == "BLOB":
        value = f"CASE WHEN {t} = 'VARCHAR' THEN TRY(from_base64({text})) END"
        ok = f"{value} IS NOT NULL"
        size = f"octet_length({value}) > {max_value_bytes}"
    elif is_list(kind):
        value = f"TRY_CAST({r} AS {kind})"
        element_types = f"json_type({r}, '$[*]')"
        json_nulls = f"len(list_filter({element_types}, x -> x = 'NULL'))"
        allowed = _element_json_types(kind[:-2])
        ok = (
            f"{t} = 'ARRAY' AND {value} IS NOT NULL"
            f" AND len(list_filter({element_types}, x -> x NOT IN {allowed})) = 0"
            f" AND len({value}) - list_count({value}) = {json_nulls}"
        )
    else:  # DATE, TIME, UUID, HUGEINT-like text forms
        value = f"CASE WHEN {t} = 'VARCHAR' THEN TRY_CAST({text} AS {kind}) END"
        ok = f"{value} IS NOT NULL"
    error = _error_case(col, absent=absent, ok=ok, size=size, depth=depth)
    return ColumnSQL(
        column=col, value=f"CASE WHEN {absent} THEN NULL ELSE {value} END", error=error
    )


def _element_json_types(element: str) -> str:
    """The JSON value types a list element of ``element`` type may have (null always may)."""
    if element == "JSON":
        return "('NULL', 'VARCHAR', 'BIGINT', 'UBIGINT', 'DOUBLE', 'BOOLEAN', 'OBJECT', 'ARRAY')"
    if element == "BOOLEAN":
        return "('NULL', 'BOOLEAN')"
    if is_integer(element):
        return "('NULL', 'BIGINT', 'UBIGINT')"
    if element in ("FLOAT", "DOUBLE") or element.startswith("DECIMAL"):
        return "('NULL', 'BIGINT', 'UBIGINT', 'DOUBLE')"
    if element in ("TIMESTAMP", "TIMESTAMPTZ"):
        return "('NULL', 'VARCHAR', 'BIGINT', 'UBIGINT')"
    return "('NULL', 'VARCHAR')"


def sql_column(
    col: Column, *, source_type: str | None, max_value_bytes: int, max_json_depth: int
) -> ColumnSQL:
    """SQL over a typed raw column (CSV: VARCHAR; Parquet: its own type), or an absent one."""
    if source_type is None:
        absent_error = "NULL" if col.nullable else "'missing'"
        return ColumnSQL(
            column=col, value=f"CAST(NULL AS {_storage_type(col.type)})", error=absent_error
        )
    r = ident(col.name)
    kind = col.type
    absent = f"({r} IS NULL)"
    size: str | None = None
    depth: str | None = None
    source = source_type.upper()
    if kind == "JSON":
        if source == "VARCHAR":
            value, ok = r, f"json_valid({r})"
        else:
            value, ok = f"CAST(to_json({r}) AS VARCHAR)", "true"
        size = f"strlen({value}) > {max_value_bytes}"
        depth = (
            f"strlen({value}) - strlen(replace(replace({value}, '[', ''), '{{', ''))"
            f" > {max_json_depth}"
        )
    elif kind in ("TIMESTAMP", "TIMESTAMPTZ"):
        if source == "VARCHAR":
            ms = f"TRY_CAST({r} AS BIGINT)"
            tz_value = (
                f"CASE WHEN regexp_full_match({r}, '-?[0-9]+') THEN"
                f" CASE WHEN {ms} BETWEEN {_EPOCH_MS_MIN} AND {_EPOCH_MS_MAX}"
                f" THEN make_timestamptz({ms} * 1000) END"
                f" ELSE TRY_CAST({r} AS TIMESTAMPTZ) END"
            )
        elif source.startswith("TIMESTAMP WITH TIME ZONE") or source == "TIMESTAMPTZ":
            tz_value = r
        else:
            tz_value = f"TRY_CAST({r} AS TIMESTAMP) AT TIME ZONE 'UTC'"
        value = tz_value if kind == "TIMESTAMPTZ" else f"({tz_value}) AT TIME ZONE 'UTC'"
        ok = f"({tz_value}) IS NOT NULL"
    elif kind == "VARCHAR":
        value = r if source == "VARCHAR" else f"TRY_CAST({r} AS VARCHAR)"
        ok = "true" if source == "VARCHAR" else f"{value} IS NOT NULL"
        size = f"strlen({value}) > {max_value_bytes}"
    else:
        value = f"TRY_CAST({r} AS {_storage_type(kind)})"
        ok = f"{value} IS NOT NULL"
    error = _error_case(col, absent=absent, ok=ok, size=size, depth=depth)
    return ColumnSQL(
        column=col, value=f"CASE WHEN {absent} THEN NULL ELSE {value} END", error=error
    )


def _storage_type(kind: str) -> str:
    return "VARCHAR" if kind == "JSON" else kind
