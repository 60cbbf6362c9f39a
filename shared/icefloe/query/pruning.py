"""File pruning: from a query's bounds to the partition periods to list and the files to read.

Pure functions over the table spec, the bounds and each file's min/max statistics. Pruning is
always safe: a bound that cannot be typed, or a file without statistics for the column, prunes
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from icefloe.metastore.models import ColumnStats, DataFile
from icefloe.query.sql_refs import Bound
from icefloe.spec import TableSpec
from icefloe.spec.types import is_integer

Caster = Callable[[object, str], object]


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

    def excludes(self, low: Any, high: Any) -> bool:
        """True when no value in ``[low, high]`` can fall in this range."""
        below = (
            self.lower is not None
            and high is not None
            and (high < self.lower or (high == self.lower and not self.lower_inclusive))
        )
        above = (
            self.upper is not None
            and low is not None
            and (low > self.upper or (low == self.upper and not self.upper_inclusive))
        )
        return bool(below or above)


def column_ranges(spec: TableSpec, bounds: Sequence[Bound], cast: Caster) -> dict[str, ColumnRange]:
    """Intersect the bounds per column, each value cast to the column's type by ``cast``."""
    ranges: dict[str, ColumnRange] = {}
    types = {c.name: c.type for c in spec.columns}
    for bound in bounds:
        column_type = types.get(bound.column)
        if column_type is None or column_type == "JSON" or column_type.endswith("[]"):
            continue
        value = cast(bound.value, column_type)
        if value is None:
            continue
        current = ranges.get(bound.column, ColumnRange())
        try:
            ranges[bound.column] = current.tighten(bound.op, value)
        except TypeError:  # incomparable values: leave this column unpruned
            continue
    return ranges


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


def file_may_match(file: DataFile, ranges: Mapping[str, ColumnRange], spec: TableSpec) -> bool:
    """False only when the file's statistics prove no row can match."""
    for column, r in ranges.items():
        stats = file.column_stats.get(column)
        if stats is None:
            continue
        low, high = _stat_bounds(stats, spec.column(column).type)
        try:
            if r.excludes(low, high):
                return False
        except TypeError:
            continue
    return True


def _stat_bounds(stats: ColumnStats, column_type: str) -> tuple[Any, Any]:
    return _stat_value(stats.min, column_type), _stat_value(stats.max, column_type)


def _stat_value(value: object, column_type: str) -> Any:
    if value is None:
        return None
    try:
        if column_type in ("TIMESTAMP", "TIMESTAMPTZ"):
            return datetime.fromisoformat(str(value))
        if column_type == "DATE":
            return date.fromisoformat(str(value))
        if column_type.startswith("DECIMAL"):
            return Decimal(str(value))
        if is_integer(column_type):
            return int(str(value))
        if column_type in ("FLOAT", "DOUBLE"):
            return float(str(value))
        if column_type == "VARCHAR":
            return str(value)
    except (ValueError, InvalidOperation):
        return None
    return None  # other types are not pruned on


def _as_naive(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day)
    return value
