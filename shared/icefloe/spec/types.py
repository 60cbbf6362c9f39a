"""Column types: DuckDB type names, normalized to one canonical upper-case spelling.

Canonical forms: ``BOOLEAN``, the integer family, ``FLOAT``, ``DOUBLE``, ``DECIMAL(p,s)`` (no
space), ``VARCHAR``, ``BLOB``, ``DATE``, ``TIME``, ``TIMESTAMP``, ``TIMESTAMPTZ``, ``UUID``,
``JSON``, lists ``T[]`` of any type (``T[][]``), and the nested ``STRUCT(...)`` and ``MAP(K, V)``
of :mod:`icefloe.spec.type_tree`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from icefloe.errors import SpecError
from icefloe.spec._text import show
from icefloe.spec.type_tree import Leaf, Struct, TypeNode, format_type, is_nested_text, parse_type

INTEGER_TYPES: frozenset[str] = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT"}
    | {"UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
)
FLOAT_TYPES: frozenset[str] = frozenset({"FLOAT", "DOUBLE"})
TEMPORAL_TYPES: frozenset[str] = frozenset({"DATE", "TIMESTAMP", "TIMESTAMPTZ"})
TIMESTAMP_TYPES: frozenset[str] = frozenset({"TIMESTAMP", "TIMESTAMPTZ"})
_SIMPLE_TYPES: frozenset[str] = (
    INTEGER_TYPES
    | FLOAT_TYPES
    | TEMPORAL_TYPES
    | {"BOOLEAN", "VARCHAR", "BLOB", "TIME", "UUID", "JSON"}
)
# The types a table published as Iceberg may hold (DECIMAL too): each has an Iceberg type
# (icefloe.iceberg.mapping.iceberg_type; JSON is published as a string).
ICEBERG_PUBLISHABLE_TYPES: frozenset[str] = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT"}
    | FLOAT_TYPES
    | TEMPORAL_TYPES
    | {"BOOLEAN", "VARCHAR", "BLOB", "TIME", "UUID", "JSON"}
)
_ALIASES: dict[str, str] = {
    "BOOL": "BOOLEAN",
    "LOGICAL": "BOOLEAN",
    "INT1": "TINYINT",
    "INT2": "SMALLINT",
    "SHORT": "SMALLINT",
    "INT": "INTEGER",
    "INT4": "INTEGER",
    "SIGNED": "INTEGER",
    "INT8": "BIGINT",
    "LONG": "BIGINT",
    "REAL": "FLOAT",
    "FLOAT4": "FLOAT",
    "FLOAT8": "DOUBLE",
    "DOUBLE PRECISION": "DOUBLE",
    "TEXT": "VARCHAR",
    "STRING": "VARCHAR",
    "CHAR": "VARCHAR",
    "BPCHAR": "VARCHAR",
    "BYTEA": "BLOB",
    "BINARY": "BLOB",
    "VARBINARY": "BLOB",
    "DATETIME": "TIMESTAMP",
    "TIMESTAMP WITHOUT TIME ZONE": "TIMESTAMP",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMPTZ",
    "NUMERIC": "DECIMAL",
}
_LENGTH_ALLOWED = frozenset({"VARCHAR"})  # VARCHAR(n), CHAR(n): DuckDB ignores the length too.
_DEFAULT_DECIMAL = (18, 3)
_MAX_DECIMAL_PRECISION = 38
_TYPE = re.compile(r"(?P<base>[A-Z][A-Z0-9 ]*?)\s*(?:\(\s*(?P<args>[^()]*?)\s*\))?")
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")


def normalize_type(text: str) -> str:
    """Return the canonical DuckDB type name for ``text``; raise SpecError if unsupported."""
    if not isinstance(text, str) or not text.isascii():
        # ASCII only: str.upper() maps some non-ASCII lookalikes onto ASCII letters (dotless i -> "I").
        raise SpecError(f"type {show(text)} must be an ASCII string")
    if is_nested_text(text):
        return _normalize_nested(text)
    return _normalize_flat(text)


@lru_cache(maxsize=1024)
def _normalize_nested(text: str) -> str:
    return format_type(parse_type(text, leaf=_normalize_flat))


@lru_cache(maxsize=1024)
def type_tree(text: str) -> TypeNode:
    """The tree of a type (a flat type is a :class:`Leaf`, or a list of one)."""
    return parse_type(normalize_type(text), leaf=_normalize_flat)


def struct_field_type(column_type: str, path: tuple[str, ...]) -> str | None:
    """The canonical type at ``path`` (struct field names, exact case) inside ``column_type``,
    or None when there is no such field or the path passes through a list or a map (a value
    there is not one per row)."""
    node = type_tree(column_type)
    for name in path:
        if not isinstance(node, Struct):
            return None
        found = next((child for field, child in node.fields if field == name), None)
        if found is None:
            return None
        node = found
    return node.name if isinstance(node, Leaf) else format_type(node)


def _normalize_flat(text: str) -> str:
    cleaned = " ".join(text.upper().split())
    if cleaned.endswith("[]"):
        return _normalize_flat(cleaned[:-2]) + "[]"
    match = _TYPE.fullmatch(cleaned)
    if match is None:
        raise SpecError(f"type {show(text)} is not a supported DuckDB type")
    base = _ALIASES.get(match["base"], match["base"])
    args = match["args"]
    if base == "DECIMAL":
        return _decimal(text, args)
    if base not in _SIMPLE_TYPES:
        raise SpecError(f"type {show(text)} is not a supported DuckDB type")
    if args is not None and (base not in _LENGTH_ALLOWED or not _is_length(args)):
        raise SpecError(f"type {show(text)}: {base} takes no such parameters")
    return base


def _is_length(args: str) -> bool:
    return args.isascii() and args.isdigit() and int(args) >= 1


def _decimal(text: str, args: str | None) -> str:
    if args is None:
        precision, scale = _DEFAULT_DECIMAL
    else:
        parts = [part.strip() for part in args.split(",")]
        if len(parts) > 2 or not all(part.isascii() and part.isdigit() for part in parts):
            raise SpecError(f"type {show(text)}: DECIMAL takes (precision[, scale])")
        precision = int(parts[0])
        scale = int(parts[1]) if len(parts) == 2 else 0
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise SpecError(
            f"type {show(text)}: DECIMAL needs 1 <= precision <= {_MAX_DECIMAL_PRECISION} "
            f"and 0 <= scale <= precision"
        )
    return f"DECIMAL({precision},{scale})"


def decimal_precision_scale(t: str) -> tuple[int, int] | None:
    """Return ``(precision, scale)`` of a DECIMAL type, or None for any other type."""
    match = _DECIMAL.fullmatch(normalize_type(t))
    return None if match is None else (int(match[1]), int(match[2]))


def is_list(t: str) -> bool:
    """True for list types ``T[]``."""
    return normalize_type(t).endswith("[]")


def is_temporal(t: str) -> bool:
    """True for DATE, TIMESTAMP and TIMESTAMPTZ: the types time partitions can derive from."""
    return normalize_type(t) in TEMPORAL_TYPES


def is_timestamp(t: str) -> bool:
    """True for TIMESTAMP and TIMESTAMPTZ."""
    return normalize_type(t) in TIMESTAMP_TYPES


def is_integer(t: str) -> bool:
    """True for the signed and unsigned integer types (TINYINT .. HUGEINT, UTINYINT .. UBIGINT)."""
    return normalize_type(t) in INTEGER_TYPES


def is_string(t: str) -> bool:
    """True for VARCHAR."""
    return normalize_type(t) == "VARCHAR"


def is_numeric(t: str) -> bool:
    """True for integers, FLOAT, DOUBLE and DECIMAL: the types ``sum`` can aggregate."""
    canonical = normalize_type(t)
    return canonical in INTEGER_TYPES | FLOAT_TYPES or canonical.startswith("DECIMAL(")


def is_nested(t: str) -> bool:
    """True for STRUCT and MAP types, and lists of any type."""
    canonical = normalize_type(t)
    return canonical.endswith("[]") or canonical.startswith(("STRUCT(", "MAP("))


def is_orderable(t: str) -> bool:
    """True for types with a total order usable as a sort, version or min/max key."""
    canonical = normalize_type(t)
    return canonical not in {"JSON", "BLOB"} and not is_nested(canonical)
