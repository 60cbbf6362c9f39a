"""Scan filters on one column or nested leaf: what they mean (the model pruning reads), and
their decoding from DuckDB's serialized table filters and constants.

A decoded filter holds for every row the scan contributes; what is not understood decodes to
:class:`Opaque` (the row may be anything), so that no file is ever skipped on a guess.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any, Literal, TypeAlias

from icefloe.spec.types import INTEGER_TYPES

CompareOp = Literal["=", "!=", "<", "<=", ">", ">="]
COMPARISONS: dict[str, CompareOp] = {
    "COMPARE_EQUAL": "=",
    "COMPARE_NOTEQUAL": "!=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}

# DuckDB's logical type ids of the column types whose statistics are compared.
_TYPE_IDS: dict[str, str] = {t: t for t in INTEGER_TYPES} | {
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
    "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE",
}


@dataclass(frozen=True, slots=True)
class Compare:
    """``column op value``; ``value`` is in the column's comparison domain (see
    :func:`icefloe.query.pruning.stat_constant`)."""

    op: CompareOp
    value: Any


@dataclass(frozen=True, slots=True)
class InList:
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class IsNull:
    pass


@dataclass(frozen=True, slots=True)
class IsNotNull:
    pass


@dataclass(frozen=True, slots=True)
class AllOf:
    children: tuple[ScanFilter, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    children: tuple[ScanFilter, ...]


@dataclass(frozen=True, slots=True)
class Opaque:
    """A filter DuckDB applies that pruning does not interpret: it may pass any row."""


ScanFilter: TypeAlias = Compare | InList | IsNull | IsNotNull | AllOf | AnyOf | Opaque
# One scan of a table: per column (or dotted path of a struct leaf, ``context.page.url``), a
# filter every row the scan contributes passes.
ScanFilters: TypeAlias = Mapping[str, ScanFilter]


def column_filter(node: Mapping[str, Any], column_type: str) -> ScanFilter:
    """A serialized table filter on a value of ``column_type`` (a column, or a nested leaf reached
    before it), as the filter every passing row satisfies; :class:`Opaque` when not understood."""
    kind = node.get("filter_type")
    if kind == "CONSTANT_COMPARISON":
        op = COMPARISONS.get(str(node.get("comparison_type")))
        value = constant_value(node.get("constant") or {}, column_type)
        return Opaque() if op is None or value is UNKNOWN else Compare(op, value)
    if kind == "IN_FILTER":
        values = [constant_value(v, column_type) for v in node.get("values") or []]
        if not values or any(v is UNKNOWN for v in values):
            return Opaque()
        return InList(tuple(values))
    if kind == "IS_NULL":
        return IsNull()
    if kind == "IS_NOT_NULL":
        return IsNotNull()
    if kind == "OPTIONAL_FILTER":
        # DuckDB keeps the full predicate in a filter above the scan; the optional one is
        # implied by it and exists precisely to skip data, as here.
        return column_filter(node.get("child_filter") or {}, column_type)
    if kind in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
        children = tuple(column_filter(c, column_type) for c in node.get("child_filters") or [])
        if kind == "CONJUNCTION_AND":
            known = tuple(c for c in children if not isinstance(c, Opaque))
            return AllOf(known) if known else Opaque()
        if not children or any(isinstance(c, Opaque) for c in children):
            return Opaque()
        return AnyOf(children)
    return Opaque()


# Wide enough for any DECIMAL constant (DuckDB's widest is 38 digits) without rounding.
_EXACT = Context(prec=80)


class _Unknown:
    pass


UNKNOWN: Any = _Unknown()  # constant_value's "no usable value"


def constant_value(constant: Mapping[str, Any], column_type: str) -> Any:
    """A serialized DuckDB constant in the column's comparison domain, or ``UNKNOWN`` when its
    type is not the column's (then it is not used) or it is NULL."""
    if constant.get("is_null", False) or "value" not in constant:
        return UNKNOWN
    logical = constant.get("type") or {}
    type_id = logical.get("id")
    info = logical.get("type_info") or {}
    value = constant["value"]
    if column_type.startswith("DECIMAL("):
        if (
            type_id != "DECIMAL"
            or f"DECIMAL({info.get('width')},{info.get('scale')})" != column_type
        ):
            return UNKNOWN
        unscaled = _integer(value)
        if unscaled is UNKNOWN or not isinstance(info.get("scale"), int):
            return UNKNOWN
        # Exact: the default context's 28 digits would round a DECIMAL(38,s) constant.
        return Decimal(unscaled).scaleb(-info["scale"], _EXACT)
    expected = _TYPE_IDS.get(column_type)
    if expected is None or type_id != expected or info.get("alias"):
        return UNKNOWN
    try:
        if column_type in INTEGER_TYPES or column_type in (
            "DATE",
            "TIME",
            "TIMESTAMP",
            "TIMESTAMPTZ",
        ):
            return _integer(value)
        if column_type == "FLOAT":
            return float_key(_float32(float(value)))
        if column_type == "DOUBLE":
            return float_key(float(value))
        if column_type == "VARCHAR" and isinstance(value, str):
            return value
        if column_type == "BOOLEAN" and isinstance(value, bool):
            return value
    except (TypeError, ValueError, OverflowError):
        return UNKNOWN
    return UNKNOWN


def float_key(value: float) -> tuple[int, float]:
    """DuckDB's order of floating-point values: NaN above every number (and equal to itself)."""
    return (1, 0.0) if value != value else (0, value)


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _integer(value: Any) -> Any:
    """An integer constant's value (DuckDB serializes HUGEINT as upper and lower halves), or
    ``UNKNOWN`` for anything else."""
    if isinstance(value, bool):
        return UNKNOWN
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and {"upper", "lower"} <= value.keys():
        upper, lower = value["upper"], value["lower"]
        if isinstance(upper, int) and isinstance(lower, int):
            return upper * 2**64 + lower
    return UNKNOWN
