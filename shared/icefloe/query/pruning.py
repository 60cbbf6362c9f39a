"""File pruning: from the filters DuckDB bound for each scan to the partition periods to list
and the condition the meta store checks against each file's statistics.

Pure functions over the table spec and the scans' filters (:mod:`icefloe.query.scan_filters`).
A file is skipped only when, for every scan of its table, its statistics prove that no row of
it passes that scan's filters; the meta store evaluates that proof in SQL
(:mod:`icefloe.metastore.file_filter`, which also says how each type is compared), so planning
fetches only the files a query reads. A filter on a struct leaf (keyed by its dotted path,
``context.page.url``) is checked against the statistics kept under that path, compared as a
column of the leaf's type; a file without them is kept. The partition window is worked out
here, in the scans' comparison domain (integers for DATE, TIME and TIMESTAMP[TZ]; see
:func:`~icefloe.query.scan_filters.constant_value`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from icefloe.datafiles import membership_column
from icefloe.metastore.file_filter import (
    CompareOp,
    FileCondition,
    MayAll,
    MayAny,
    MayBeNotNull,
    MayBeNull,
    MayCompare,
    MayHoldAnyOf,
    StatKind,
    StatValue,
)
from icefloe.query.scan_filters import (
    AllOf,
    AnyOf,
    Compare,
    InList,
    IsNotNull,
    IsNull,
    Opaque,
    ScanFilter,
    TableScans,
)
from icefloe.spec import TableSpec
from icefloe.spec.types import INTEGER_TYPES, is_orderable, struct_field_type

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ColumnRange:
    """Values a column may take: ``lower``/``upper`` are None when unbounded."""

    lower: Any = None
    lower_inclusive: bool = True
    upper: Any = None
    upper_inclusive: bool = True

    def tighten(self, op: str, value: Any) -> ColumnRange:
        lower, lower_inc, upper, upper_inc = (
            self.lower,
            self.lower_inclusive,
            self.upper,
            self.upper_inclusive,
        )
        if op in (">", ">=", "="):
            inclusive = op != ">"
            if lower is None or value > lower or (value == lower and not inclusive):
                lower, lower_inc = value, inclusive
        if op in ("<", "<=", "="):
            inclusive = op != "<"
            if upper is None or value < upper or (value == upper and not inclusive):
                upper, upper_inc = value, inclusive
        return ColumnRange(lower, lower_inc, upper, upper_inc)

    def hull(self, other: ColumnRange) -> ColumnRange:
        """The smallest range holding both."""
        if self.lower is None or other.lower is None:
            lower, lower_inc = None, True
        elif self.lower == other.lower:
            lower, lower_inc = self.lower, self.lower_inclusive or other.lower_inclusive
        else:
            lower, lower_inc = min(
                (self.lower, self.lower_inclusive), (other.lower, other.lower_inclusive)
            )
        if self.upper is None or other.upper is None:
            upper, upper_inc = None, True
        elif self.upper == other.upper:
            upper, upper_inc = self.upper, self.upper_inclusive or other.upper_inclusive
        else:
            upper, upper_inc = max(
                (self.upper, self.upper_inclusive), (other.upper, other.upper_inclusive)
            )
        return ColumnRange(lower, lower_inc, upper, upper_inc)

    def intersect(self, other: ColumnRange) -> ColumnRange:
        r = self
        if other.lower is not None:
            r = r.tighten(">=" if other.lower_inclusive else ">", other.lower)
        if other.upper is not None:
            r = r.tighten("<=" if other.upper_inclusive else "<", other.upper)
        return r

    @property
    def unbounded(self) -> bool:
        return self.lower is None and self.upper is None


# -- files ------------------------------------------------------------------------------------

_INTEGER: StatKind = "integer"
_STAT_KINDS: dict[str, StatKind] = dict.fromkeys(INTEGER_TYPES, _INTEGER) | {
    "FLOAT": "float",
    "DOUBLE": "float",
    "VARCHAR": "text",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "TIME": "time",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPTZ": "timestamptz",
}
_ANY_FILE: FileCondition = MayAll(())


def file_condition(scans: TableScans, spec: TableSpec) -> FileCondition | None:
    """What a file must be able to hold for at least one scan of the table to read a row of
    it, for the meta store to check against each file's statistics; None when every file is
    needed."""
    if scans.scans is None or scans.reads_everything:
        return None
    key = membership_column(spec)
    return MayAny(
        tuple(
            MayAll(
                tuple(
                    _column_condition(column, condition, stats_type(spec, column), key == column)
                    for column, condition in scan.items()
                )
            )
            for scan in scans.scans
        )
    )


def stats_type(spec: TableSpec, name: str) -> str | None:
    """The type the statistics kept under ``name`` are compared as: a column's type, or for a
    dotted path (``context.page.url``) the type of that struct leaf when it is orderable and
    reached through structs only (one value per row, so its null count counts rows); None
    otherwise (its statistics prove nothing)."""
    column, dot, rest = name.partition(".")
    column_type = spec.column(column).type
    if not dot:
        return column_type
    leaf_type = struct_field_type(column_type, tuple(rest.split(".")))
    return leaf_type if leaf_type is not None and is_orderable(leaf_type) else None


def _column_condition(
    column: str, condition: ScanFilter, column_type: str | None, has_membership: bool
) -> FileCondition:
    if column_type is None:
        return _ANY_FILE
    kind = _STAT_KINDS.get(column_type) or (
        "decimal" if column_type.startswith("DECIMAL(") else None
    )
    if isinstance(condition, IsNull):
        return MayBeNull(column)
    if isinstance(condition, IsNotNull):
        return MayBeNotNull(column)
    if isinstance(condition, AllOf | AnyOf):
        children = tuple(
            _column_condition(column, c, column_type, has_membership) for c in condition.children
        )
        return MayAll(children) if isinstance(condition, AllOf) else MayAny(children)
    if kind is None or isinstance(condition, Opaque):
        return _ANY_FILE
    if isinstance(condition, Compare):
        compare = _compare(column, kind, condition.op, condition.value)
        if has_membership and condition.op == "=":
            return MayAll((compare, MayHoldAnyOf(column, (condition.value,))))
        return compare
    equal_to_one = MayAny(tuple(_compare(column, kind, "=", v) for v in condition.values))
    if has_membership:
        return MayAll((equal_to_one, MayHoldAnyOf(column, condition.values)))
    return equal_to_one


def _compare(column: str, kind: StatKind, op: CompareOp, value: Any) -> FileCondition:
    """A comparison with a constant of the column's comparison domain, as the meta store
    compares statistics; any file when the constant has no such form."""
    stat = stat_constant(value, kind)
    return _ANY_FILE if stat is None else MayCompare(column, kind, op, stat)


def stat_constant(value: Any, kind: StatKind) -> StatValue | None:
    """A comparison-domain constant (see :mod:`icefloe.query.scan_filters`) as the meta store
    compares it with statistics, or None when it has no such form (a time outside Python's
    range, for one)."""
    try:
        if kind == "float":
            is_nan, number = value
            return math.nan if is_nan else float(number)
        if kind == "date":
            return _EPOCH_DATE + timedelta(days=value)
        if kind == "time":
            if not 0 <= value < 86_400_000_000:
                return None
            seconds, micros = divmod(value, 1_000_000)
            return time(seconds // 3600, seconds // 60 % 60, seconds % 60, micros)
        if kind in ("timestamp", "timestamptz"):
            moment = _EPOCH + timedelta(microseconds=value)
            return moment.replace(tzinfo=UTC) if kind == "timestamptz" else moment
    except (OverflowError, TypeError, ValueError):
        return None
    return value if isinstance(value, int | Decimal | str | bool) else None


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICRO


# -- partition periods ------------------------------------------------------------------------


def time_range(scans: TableScans, spec: TableSpec) -> ColumnRange:
    """The values of the time partition column any scan can need (unbounded when unknown), as
    Python dates or datetimes for :func:`listing_window`."""
    field = spec.time_partition_field
    if field is None or scans.scans is None or not scans.scans:
        return ColumnRange()
    column_type = spec.column(field.source).type
    hull: ColumnRange | None = None
    for scan in scans.scans:
        condition = scan.get(field.source)
        r = _range(condition) if condition is not None else ColumnRange()
        hull = r if hull is None else hull.hull(r)
        if hull.unbounded:
            return hull
    assert hull is not None
    return ColumnRange(
        _to_python(hull.lower, column_type),
        hull.lower_inclusive,
        _to_python(hull.upper, column_type),
        hull.upper_inclusive,
    )


def _range(condition: ScanFilter) -> ColumnRange:
    """Values that may pass ``condition``; any bound also means NULL cannot pass."""
    try:
        if isinstance(condition, Compare):
            if condition.op == "!=":
                return ColumnRange()
            return ColumnRange().tighten(condition.op, condition.value)
        if isinstance(condition, InList):
            return ColumnRange(min(condition.values), True, max(condition.values), True)
        if isinstance(condition, AllOf):
            r = ColumnRange()
            for child in condition.children:
                r = r.intersect(_range(child))
            return r
        if isinstance(condition, AnyOf):
            ranges = [_range(c) for c in condition.children]
            hull = ranges[0]
            for r in ranges[1:]:
                hull = hull.hull(r)
            return hull
    except TypeError:
        return ColumnRange()
    return ColumnRange()


def _to_python(value: Any, column_type: str) -> Any:
    """A time-column domain value back to a date or datetime; None when out of Python's range
    (then that side is unbounded)."""
    if value is None or not isinstance(value, int):
        return None
    try:
        if column_type == "DATE":
            return _EPOCH_DATE + timedelta(days=value)
        moment = _EPOCH + timedelta(microseconds=value)
        return moment.replace(tzinfo=UTC) if column_type == "TIMESTAMPTZ" else moment
    except OverflowError:
        return None


def listing_window(
    spec: TableSpec, ranges: Mapping[str, ColumnRange]
) -> tuple[datetime | None, datetime | None]:
    """``(start_from, start_before)`` of the partition periods that can hold matching rows."""
    field = spec.time_partition_field
    if field is None or field.source not in ranges:
        return None, None
    r = ranges[field.source]
    # Every bound as the naive UTC instant it stands for (a date at its midnight), as the
    # view's window conditions read it (:func:`icefloe.query.views.window_conditions`); one
    # out of Python's range leaves its side open.
    lower, upper = _as_naive(r.lower), _as_naive(r.upper)
    start_from = start_before = None
    if lower is not None:
        start = field.apply(lower)
        start_from = start if isinstance(start, datetime) else None
    if upper is not None:
        start = field.apply(upper)
        if isinstance(start, datetime):
            exact_start = upper == start
            if exact_start and not r.upper_inclusive:
                start_before = start
            else:
                period = field.value_range(start)
                upper = period.upper if period is not None else None
                start_before = upper if isinstance(upper, datetime) else None
    return start_from, start_before


def _as_naive(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        try:
            return value.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            return None
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day)
    return value
