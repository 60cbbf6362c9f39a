"""Merge modes: what a merge does with the rows of the files it combines.

Text grammar (keywords case-insensitive, spaces free), read by :func:`parse_merge_mode` and
written by each mode's ``to_text()``:

- ``append``: keep every row.
- ``replace(KEY[, KEY...][; version=COL])``: keep one row per key, the one with the highest
  ``version`` value; ties, and every row when there is no version column, go to the highest
  ``_row_id`` (the newest insert).
- ``aggregate(KEY[, KEY...]; COL:FN[, COL:FN...])``: one row per key; every other column is
  combined with FN: ``sum``, ``min``, ``max``, ``count`` (the column holds counts: they add up) or
  ``any`` (any one value).
- ``sql:QUERY``: a custom DuckDB query the merge worker runs over the input rows.

Merges work per partition: rows with the same key in different partitions are not combined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast, get_args

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec._text import show
from icefloe.spec.names import validate_column_name

AggregateFunction = Literal["sum", "min", "max", "count", "any"]
AGGREGATE_FUNCTIONS: tuple[AggregateFunction, ...] = get_args(AggregateFunction)

_CALL = re.compile(r"(?P<kind>[A-Za-z]+)\s*\((?P<args>.*)\)", re.DOTALL)
_SQL_PREFIX = "sql:"


@dataclass(frozen=True, slots=True)
class AppendMode:
    """Keep every row: merging only rewrites small files into bigger ones."""

    def to_text(self) -> str:
        """``append``."""
        return "append"


@dataclass(frozen=True, slots=True)
class ReplaceMode:
    """Keep the newest row per key: highest ``version``, then highest ``_row_id``."""

    key: tuple[str, ...]
    version: str | None = None

    def __post_init__(self) -> None:
        _check_names("replace", self.key)
        if self.version is not None:
            _check_names("replace", (self.version,))
            if self.version in self.key:
                raise SpecError(f"merge: replace version column {self.version!r} is also a key")

    def to_text(self) -> str:
        """``replace(a, b; version=ts)``."""
        version = "" if self.version is None else f"; version={self.version}"
        return f"replace({', '.join(self.key)}{version})"


@dataclass(frozen=True, slots=True)
class AggregateMode:
    """One row per ``group_by`` key; each other column combined by its aggregate function."""

    group_by: tuple[str, ...]
    aggregates: tuple[tuple[str, AggregateFunction], ...]

    def __post_init__(self) -> None:
        _check_names("aggregate", self.group_by)
        if not self.aggregates:
            raise SpecError("merge: aggregate needs at least one COL:FN after ';'")
        _check_names("aggregate", tuple(col for col, _ in self.aggregates), what="column")
        for col, fn in self.aggregates:
            if fn not in AGGREGATE_FUNCTIONS:
                raise SpecError(
                    f"merge: aggregate {col!r}: unknown function {show(fn)}, "
                    f"expected one of {', '.join(AGGREGATE_FUNCTIONS)}"
                )
            if col in self.group_by:
                raise SpecError(f"merge: aggregate column {col!r} is also a group key")

    def to_text(self) -> str:
        """``aggregate(day, event; n:sum, last_seen:max)``."""
        aggregates = ", ".join(f"{col}:{fn}" for col, fn in self.aggregates)
        return f"aggregate({', '.join(self.group_by)}; {aggregates})"


@dataclass(frozen=True, slots=True)
class CustomMode:
    """A custom DuckDB query over the input rows (outer whitespace is dropped)."""

    sql: str

    def __post_init__(self) -> None:
        if not isinstance(self.sql, str) or not self.sql.strip():
            raise SpecError(f"merge: custom sql must be a non-empty query, got {show(self.sql)}")
        object.__setattr__(self, "sql", self.sql.strip())

    def to_text(self) -> str:
        """``sql:SELECT ...``."""
        return _SQL_PREFIX + self.sql


MergeMode = AppendMode | ReplaceMode | AggregateMode | CustomMode


def parse_merge_mode(text: str) -> MergeMode:
    """Parse the grammar in this module's docstring; ``mode.to_text()`` parses back to ``mode``."""
    if not isinstance(text, str):
        raise SpecError(f"merge: {show(text)} must be a string")
    stripped = text.strip()
    if stripped[: len(_SQL_PREFIX)].lower() == _SQL_PREFIX:
        return CustomMode(stripped[len(_SQL_PREFIX) :])
    if stripped.lower() == "append":
        return AppendMode()
    match = _CALL.fullmatch(stripped)
    kind = "" if match is None else match["kind"].lower()
    if match is None or kind not in ("replace", "aggregate"):
        raise SpecError(
            f"merge: cannot parse {show(text)}; expected append, replace(KEY[, ...][; version=COL]), "
            f"aggregate(KEY[, ...]; COL:FN[, ...]) or sql:QUERY"
        )
    keys_text, sep, rest = match["args"].partition(";")
    keys = _names(keys_text)
    if kind == "replace":
        if not sep:
            return ReplaceMode(keys)
        option, eq, version = rest.partition("=")
        if option.strip().lower() != "version" or not eq:
            raise SpecError(f"merge: replace option {show(rest.strip())} is not 'version=COL'")
        return ReplaceMode(keys, version.strip())
    if not sep:
        raise SpecError(f"merge: aggregate needs '; COL:FN[, ...]' after its keys in {show(text)}")
    return AggregateMode(keys, tuple(_aggregate(item) for item in _names(rest)))


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",")) if text.strip() else ()


def _aggregate(item: str) -> tuple[str, AggregateFunction]:
    col, colon, fn = item.partition(":")
    if not colon:
        raise SpecError(f"merge: aggregate item {show(item)} is not 'COL:FN'")
    return col.strip(), cast(AggregateFunction, fn.strip().lower())


def _check_names(mode: str, names: tuple[str, ...], *, what: str = "key") -> None:
    if not isinstance(names, tuple) or not names:
        raise SpecError(f"merge: {mode} needs at least one {what}, got {show(names)}")
    for name in names:
        try:
            validate_column_name(name)
        except InvalidNameError as e:
            raise InvalidNameError(f"merge: {mode}: {e}") from e
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecError(f"merge: {mode} names {duplicates[0]!r} twice")
