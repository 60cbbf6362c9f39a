"""Partition value helpers: UTC normalization, time periods, and typed text for Hive paths."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Literal, TypeGuard
from uuid import UUID

from icefloe.spec import types

TimeTransform = Literal["year", "month", "day", "hour"]
PartitionValue = str | int | bool | Decimal | date | datetime | time | UUID | None
"""One partition value; None is the null partition."""

_PERIOD_PARTS: dict[str, int] = {"year": 1, "month": 2, "day": 3, "hour": 4}
_PERIOD_DEFAULTS = (1, 1, 1, 0)  # year, month, day, hour of a period's start
_INTEGER_TEXT = re.compile(r"-?\d+")


def is_int(value: object) -> TypeGuard[int]:
    """True for ints that are not bools."""
    return isinstance(value, int) and not isinstance(value, bool)


def as_naive_utc(value: date) -> datetime:
    """A date or datetime as a naive UTC datetime (naive input is taken as UTC already)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    return datetime(value.year, value.month, value.day)


def period_start(transform: TimeTransform, value: date) -> datetime:
    """The start of the year, month, day or hour (UTC) that ``value`` falls in."""
    ts = as_naive_utc(value)
    fields = (ts.year, ts.month, ts.day, ts.hour)
    kept = _PERIOD_PARTS[transform]
    year, month, day, hour = (*fields[:kept], *_PERIOD_DEFAULTS[kept:])
    return datetime(year, month, day, hour)


def next_period(transform: TimeTransform, start: datetime) -> datetime:
    """The start of the period after the one starting at ``start``; OverflowError past 9999."""
    if transform == "year":
        return datetime(start.year + 1, 1, 1)
    if transform == "month":
        year, month = divmod(start.year * 12 + start.month, 12)
        return datetime(year, month + 1, 1)
    return start + (timedelta(days=1) if transform == "day" else timedelta(hours=1))


def format_period(transform: TimeTransform, start: datetime) -> str:
    """``2026``, ``2026-11``, ``2026-11-22`` or ``2026-11-22-13``."""
    parts = (f"{start.year:04d}", f"{start.month:02d}", f"{start.day:02d}", f"{start.hour:02d}")
    return "-".join(parts[: _PERIOD_PARTS[transform]])


def parse_period(transform: TimeTransform, text: str) -> datetime:
    """Inverse of :func:`format_period`; ValueError on anything else."""
    parts = text.split("-")
    widths = [4, 2, 2, 2][: _PERIOD_PARTS[transform]]
    if len(parts) != len(widths) or any(
        len(part) != width or not part.isascii() or not part.isdigit()
        for part, width in zip(parts, widths, strict=False)
    ):
        raise ValueError(f"not a {transform} period: {text!r}")
    numbers = tuple(int(part) for part in parts)
    year, month, day, hour = (*numbers, *_PERIOD_DEFAULTS[len(numbers) :])
    return datetime(year, month, day, hour)


def format_value(value: PartitionValue) -> str:
    """Text of a non-null identity, bucket or truncate value (booleans as ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)


def parse_value(text: str, duckdb_type: str) -> PartitionValue:
    """Inverse of :func:`format_value` for a column of ``duckdb_type``; ValueError if malformed."""
    t = types.normalize_type(duckdb_type)
    if types.is_integer(t):
        if _INTEGER_TEXT.fullmatch(text) is None:
            raise ValueError(f"not an integer: {text!r}")
        return int(text)
    if t == "BOOLEAN":
        if text not in ("true", "false"):
            raise ValueError(f"not a boolean: {text!r}")
        return text == "true"
    if t == "DATE":
        return date.fromisoformat(text)
    if t == "TIME":
        return time.fromisoformat(text)
    if types.is_timestamp(t):
        return datetime.fromisoformat(text)
    if t == "UUID":
        return UUID(text)
    if t.startswith("DECIMAL("):
        try:
            return Decimal(text)
        except InvalidOperation as e:
            raise ValueError(f"not a decimal: {text!r}") from e
    return text
