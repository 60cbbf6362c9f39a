"""Hidden partitioning, as in Apache Iceberg: partition values derive from source columns.

Queries filter on the source column (``ts``); the pruner maps a predicate on ``ts`` to the
partitions whose :meth:`PartitionField.value_range` can match. Time transforms give the START of
their period as a naive UTC datetime, so one field's values share a type and sort in time order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Literal, cast
from uuid import UUID

from icefloe.errors import InvalidInputError, InvalidNameError, SpecError
from icefloe.spec import _values, types
from icefloe.spec._text import show, split_top_level
from icefloe.spec._values import PartitionValue as PartitionValue
from icefloe.spec._values import TimeTransform
from icefloe.spec.hashing import bucket_of
from icefloe.spec.names import validate_column_name

Transform = Literal["identity", "year", "month", "day", "hour", "bucket", "truncate"]
TRANSFORMS: tuple[Transform, ...] = (
    "identity",
    "year",
    "month",
    "day",
    "hour",
    "bucket",
    "truncate",
)
TIME_TRANSFORMS: frozenset[Transform] = frozenset({"year", "month", "day", "hour"})
MAX_BUCKETS = 2**16

_ITEM = re.compile(
    r"(?:(?P<fn>[A-Za-z]+)\s*(?:\[\s*(?P<param>[+-]?\d+)\s*\])?\s*\(\s*(?P<src>[^\s()]+)\s*\)"
    r"|(?P<bare>[^\s()\[\],]+))"
    r"(?:\s+[Aa][Ss]\s+(?P<alias>\S+))?"
)


@dataclass(frozen=True, slots=True)
class ValueRange:
    """The source values one partition value stands for: ``[lower, upper)`` or ``[lower, upper]``."""

    lower: PartitionValue
    upper: PartitionValue
    upper_inclusive: bool

    def contains(self, value: PartitionValue) -> bool:
        """True if ``value`` lies in the range; dates and aware datetimes compare as naive UTC."""
        if isinstance(self.lower, datetime) and isinstance(value, date):
            value = _values.as_naive_utc(value)
        lower: Any = self.lower
        upper: Any = self.upper
        try:
            return bool(
                lower <= value and (value < upper or (self.upper_inclusive and value == upper))
            )
        except TypeError:  # a value of another type is in no range of this field
            return False


@dataclass(frozen=True, slots=True)
class PartitionField:
    """One partition field: ``transform[param](source) AS name``."""

    source: str
    transform: Transform
    param: int | None
    name: str

    def __post_init__(self) -> None:
        where = f"partition_by: {show(self.to_text())}"
        if self.transform not in TRANSFORMS:
            raise SpecError(f"{where}: unknown transform {show(self.transform)}")
        for name in (self.source, self.name):
            try:
                validate_column_name(name)
            except InvalidNameError as e:
                raise InvalidNameError(f"{where}: {e}") from e
        param = self.param
        if self.transform == "bucket":
            if not _values.is_int(param) or not 1 <= param <= MAX_BUCKETS:
                raise SpecError(f"{where}: bucket count must be 1..{MAX_BUCKETS}, got {param!r}")
        elif self.transform == "truncate":
            if not _values.is_int(param) or param < 1:
                raise SpecError(f"{where}: truncate width must be >= 1, got {param!r}")
        elif param is not None:
            raise SpecError(f"{where}: transform {self.transform!r} takes no parameter")

    @classmethod
    def create(
        cls,
        source: str,
        *,
        transform: Transform = "identity",
        param: int | None = None,
        name: str | None = None,
    ) -> PartitionField:
        """Build a field; without ``name`` it gets :func:`default_field_name`."""
        return cls(
            source, transform, param, name or default_field_name(source, transform=transform)
        )

    @property
    def is_time(self) -> bool:
        """True for year, month, day and hour."""
        return self.transform in TIME_TRANSFORMS

    def to_text(self) -> str:
        """This field as a ``partition_by`` item, e.g. ``bucket[16](user_id) AS b``."""
        param = "" if self.param is None else f"[{self.param}]"
        text = f"{self.transform}{param}({self.source})"
        if self.name != default_field_name(self.source, transform=self.transform):
            text += f" AS {self.name}"
        return text

    def validate_source_type(self, duckdb_type: str) -> None:
        """Raise SpecError unless the transform can apply to a column of ``duckdb_type``."""
        t = types.normalize_type(duckdb_type)
        if self.transform == "hour":
            ok = types.is_timestamp(t)
        elif self.is_time:
            ok = types.is_temporal(t)
        elif self.transform == "bucket":
            # Not HUGEINT: a bucket hashes an integer as Iceberg's 64-bit long.
            ok = (types.is_integer(t) and t != "HUGEINT") or t in ("VARCHAR", "UUID")
            ok = ok or types.is_temporal(t)
        elif self.transform == "truncate":
            ok = types.is_integer(t) or types.is_string(t)
        else:
            ok = types.is_orderable(t) and t not in types.FLOAT_TYPES
        if not ok:
            raise SpecError(
                f"partition_by: transform {self.transform!r} cannot apply to column "
                f"{self.source!r} of type {t}"
            )

    def apply(self, value: object) -> PartitionValue:
        """The partition value of one source value; None goes to the null partition."""
        if value is None:
            return None
        if self.is_time:
            if not isinstance(value, date) or (
                self.transform == "hour" and not isinstance(value, datetime)
            ):
                raise self._bad_value(value)
            return _values.period_start(cast(TimeTransform, self.transform), value)
        if self.transform == "bucket":
            if isinstance(value, bool) or not isinstance(value, int | str | date | UUID):
                raise self._bad_value(value)
            return bucket_of(value, buckets=cast(int, self.param))
        if self.transform == "truncate":
            width = cast(int, self.param)
            if _values.is_int(value):
                return value - value % width  # Python's % floors: -1 -> -W for W > 1
            if isinstance(value, str):
                return value[:width]
            raise self._bad_value(value)
        if isinstance(value, date):
            # One spelling per instant: aware timestamps become naive UTC, like time transforms.
            return _values.as_naive_utc(value) if isinstance(value, datetime) else value
        if isinstance(value, str | int | Decimal | time | UUID):
            return value
        raise self._bad_value(value)

    def value_range(self, value: PartitionValue) -> ValueRange | None:
        """The source values ``value`` stands for; None where no range applies (bucket, prefix)."""
        if value is None:
            return None
        if self.is_time:
            if not isinstance(value, datetime):
                raise self._bad_value(value)
            try:
                upper = _values.next_period(cast(TimeTransform, self.transform), value)
            except (OverflowError, ValueError):  # the last period before year 10000
                return ValueRange(value, datetime.max, upper_inclusive=True)
            return ValueRange(value, upper, upper_inclusive=False)
        if self.transform == "truncate" and _values.is_int(value):
            return ValueRange(value, value + cast(int, self.param), upper_inclusive=False)
        if self.transform == "identity":
            return ValueRange(value, value, upper_inclusive=True)
        return None

    def to_path_value(self, value: PartitionValue) -> str:
        """A non-null partition value as Hive path text (before escaping): ``2026-11-22``."""
        if self.is_time:
            transform = cast(TimeTransform, self.transform)
            if not isinstance(value, datetime) or _values.period_start(transform, value) != value:
                raise self._bad_value(value)
            return _values.format_period(transform, value)
        if value is None:
            raise self._bad_value(value)
        return _values.format_value(value)

    def from_path_value(self, text: str, *, source_type: str | None = None) -> PartitionValue:
        """Inverse of :meth:`to_path_value`; identity and truncate values stay str without a type."""
        canonical = None if source_type is None else types.normalize_type(source_type)
        try:
            if self.is_time:
                return _values.parse_period(cast(TimeTransform, self.transform), text)
            if self.transform == "bucket":
                bucket = _values.parse_value(text, "INTEGER")
                if not 0 <= cast(int, bucket) < cast(int, self.param):
                    raise ValueError(f"bucket {bucket} out of range")
                return bucket
            return text if canonical is None else _values.parse_value(text, canonical)
        except ValueError as e:
            raise InvalidInputError(
                f"partition {self.name!r}: {show(text)} is not a valid {self.transform} value"
            ) from e

    def _bad_value(self, value: object) -> InvalidInputError:
        return InvalidInputError(
            f"partition {self.name!r} ({self.to_text()}): cannot use value {show(value)} "
            f"of type {type(value).__name__}"
        )


def default_field_name(source: str, *, transform: Transform) -> str:
    """Name without ``AS``: ``day`` for time, the column for identity, ``<col>_bucket|_trunc``."""
    if transform in TIME_TRANSFORMS:
        return transform
    return {"bucket": f"{source}_bucket", "truncate": f"{source}_trunc"}.get(transform, source)


def parse_partition_by(text: str) -> tuple[PartitionField, ...]:
    """Parse ``"day(ts), bucket[16](user_id) AS ub, tenant"``; blank text means unpartitioned."""
    if not isinstance(text, str):
        raise SpecError(f"partition_by: {show(text)} must be a string")
    if not text.strip():
        return ()
    items = split_top_level(text, sep=",", where="partition_by")
    fields = tuple(_parse_item(item.strip()) for item in items)
    check_unique_field_names(fields)
    return fields


def format_partition_by(fields: Iterable[PartitionField]) -> str:
    """The text :func:`parse_partition_by` reads back into ``fields``."""
    return ", ".join(field.to_text() for field in fields)


def check_unique_field_names(fields: Iterable[PartitionField]) -> None:
    """Raise SpecError if two fields share a name (case-insensitively)."""
    seen: dict[str, PartitionField] = {}
    for field in fields:
        other = seen.get(field.name.lower())
        if other is not None:
            raise SpecError(
                f"partition_by: {other.to_text()!r} and {field.to_text()!r} are both named "
                f"{field.name!r}; rename one with 'AS other_name'"
            )
        seen[field.name.lower()] = field


def _parse_item(item: str) -> PartitionField:
    match = _ITEM.fullmatch(item)
    if match is None:
        raise SpecError(f"partition_by: cannot parse item {show(item)}")
    transform = (match["fn"] or "identity").lower()
    if transform not in TRANSFORMS:
        raise SpecError(f"partition_by: unknown transform {transform!r} in item {show(item)}")
    param = None if match["param"] is None else int(match["param"])
    if transform in ("bucket", "truncate") and param is None:
        raise SpecError(f"partition_by: {transform} needs a parameter, e.g. {transform}[16](col)")
    return PartitionField.create(
        match["src"] or match["bare"],
        transform=cast(Transform, transform),
        param=param,
        name=match["alias"],
    )
