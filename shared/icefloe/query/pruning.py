"""File pruning: from the filters DuckDB bound for each scan to the partition periods to list
and the files to read.

Pure functions over the table spec, the scans' filters (:mod:`icefloe.query.scan_filters`) and
each file's statistics. A file is skipped only when, for every scan of its table, the statistics
prove that no row of the file passes that scan's filters. Values are compared in one domain per
column type, the one DuckDB orders by:

- integers, DATE (days), TIME and TIMESTAMP[TZ] (microseconds since the epoch, UTC) as ints;
- DECIMAL as :class:`~decimal.Decimal`; VARCHAR as str (code point order, which is the byte
  order of UTF-8 that DuckDB compares); BOOLEAN as bool;
- FLOAT and DOUBLE as ``(is_nan, value)``: DuckDB puts NaN above every number, and Parquet
  statistics leave NaN out, so a floating-point file has no known upper bound.

A statistic that is missing, truncated past use or of another type bounds nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol, TypeVar

from icefloe.membership import may_contain
from icefloe.metastore.models import ColumnStats
from icefloe.query.scan_filters import (
    AllOf,
    AnyOf,
    Compare,
    InList,
    IsNotNull,
    IsNull,
    Opaque,
    ScanFilter,
    ScanFilters,
    TableScans,
    float_key,
)
from icefloe.spec import TableSpec
from icefloe.spec.types import is_integer

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


class FileStatistics(Protocol):
    @property
    def row_count(self) -> int: ...

    @property
    def column_stats(self) -> Mapping[str, ColumnStats]: ...


F = TypeVar("F", bound=FileStatistics)


def needed_files(files: Iterable[F], scans: TableScans, spec: TableSpec) -> list[F]:
    """The files at least one scan of the table may read a row from."""
    if scans.scans is None or scans.reads_everything:
        return list(files)
    return [f for f in files if any(file_may_match(f, scan, spec) for scan in scans.scans)]


def file_may_match(file: FileStatistics, scan: ScanFilters, spec: TableSpec) -> bool:
    """False only when the file's statistics prove no row passes the scan's filters."""
    for column, condition in scan.items():
        stats = file.column_stats.get(column)
        if stats is None:
            continue
        bounds = _StatBounds.of(stats, spec.column(column).type, file.row_count)
        try:
            if not bounds.may_pass(condition):
                return False
        except TypeError:  # values of different domains: no proof
            continue
    return True


@dataclass(frozen=True, slots=True)
class _StatBounds:
    low: Any
    high: Any
    null_count: int
    row_count: int
    membership: str | None = None

    @classmethod
    def of(cls, stats: ColumnStats, column_type: str, row_count: int) -> _StatBounds:
        low = stat_value(stats.min, column_type)
        high = stat_value(stats.max, column_type)
        if column_type in ("FLOAT", "DOUBLE"):
            high = None  # a NaN may hide above the recorded maximum
        exact = column_type == "VARCHAR" or is_integer(column_type)
        membership = stats.membership if exact else None
        return cls(low, high, stats.null_count, row_count, membership)

    @property
    def all_null(self) -> bool:
        return self.row_count > 0 and self.null_count >= self.row_count

    def may_pass(self, condition: ScanFilter) -> bool:
        if isinstance(condition, Compare):
            return not self.all_null and self._may_compare(condition.op, condition.value)
        if isinstance(condition, InList):
            return not self.all_null and any(self._may_compare("=", v) for v in condition.values)
        if isinstance(condition, IsNull):
            return self.null_count > 0
        if isinstance(condition, IsNotNull):
            return not self.all_null
        if isinstance(condition, AllOf):
            return all(self.may_pass(c) for c in condition.children)
        if isinstance(condition, AnyOf):
            return any(self.may_pass(c) for c in condition.children)
        assert isinstance(condition, Opaque)
        return True

    def _may_compare(self, op: str, value: Any) -> bool:
        low, high = self.low, self.high
        if op == "=":
            if self.membership is not None and not may_contain(self.membership, value):
                return False
            return not ((low is not None and value < low) or (high is not None and value > high))
        if op == "<":
            return low is None or low < value
        if op == "<=":
            return low is None or low <= value
        if op == ">":
            return high is None or high > value
        if op == ">=":
            return high is None or high >= value
        if op == "!=":
            return not (low is not None and high is not None and low == high == value)
        return True


def stat_value(value: object, column_type: str) -> Any:
    """A statistic (as the meta store keeps it) in the column's comparison domain, or None."""
    if value is None:
        return None
    try:
        if column_type == "TIMESTAMP":
            return _micros(datetime.fromisoformat(str(value)))
        if column_type == "TIMESTAMPTZ":
            moment = datetime.fromisoformat(str(value))
            if moment.tzinfo is None:
                return None
            return _micros(moment.astimezone(UTC).replace(tzinfo=None))
        if column_type == "DATE":
            return (date.fromisoformat(str(value)) - _EPOCH_DATE).days
        if column_type == "TIME":
            t = time.fromisoformat(str(value))
            if t.tzinfo is not None:
                return None
            return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
        if column_type.startswith("DECIMAL("):
            return Decimal(str(value))
        if is_integer(column_type):
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if column_type in ("FLOAT", "DOUBLE"):
            number = float(str(value))
            return float_key(number) if math.isfinite(number) else None
        if column_type == "VARCHAR":
            return value if isinstance(value, str) else None
        if column_type == "BOOLEAN":
            return value if isinstance(value, bool) else None
    except (ValueError, InvalidOperation, OverflowError):
        return None
    return None  # other types are not pruned on


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
    start_from = start_before = None
    if r.lower is not None:
        start = field.apply(r.lower)
        start_from = start if isinstance(start, datetime) else None
    if r.upper is not None:
        start = field.apply(r.upper)
        if isinstance(start, datetime):
            exact_start = _as_naive(r.upper) == start
            if exact_start and not r.upper_inclusive:
                start_before = start
            else:
                period = field.value_range(start)
                upper = period.upper if period is not None else None
                start_before = upper if isinstance(upper, datetime) else None
    return start_from, start_before


def _as_naive(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day)
    return value
