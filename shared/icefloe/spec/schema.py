"""Columns and the schema text form: ``"ts TIMESTAMP NOT NULL, price DECIMAL(10, 2)"``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec._text import show, split_top_level
from icefloe.spec.names import validate_column_name
from icefloe.spec.types import normalize_type

_COLUMN = re.compile(r"(?P<name>\S+)\s+(?P<type>.+?)(?P<null>\s+(?:NOT\s+)?NULL)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Column:
    """One user column; ``type`` is normalized to its canonical DuckDB spelling on creation."""

    name: str
    type: str
    nullable: bool = True

    def __post_init__(self) -> None:
        validate_column_name(self.name)
        try:
            canonical = normalize_type(self.type)
        except SpecError as e:
            raise SpecError(f"schema: column {self.name!r}: {e}") from e
        object.__setattr__(self, "type", canonical)
        if not isinstance(self.nullable, bool):
            raise SpecError(f"schema: column {self.name!r}: nullable must be a bool")

    def to_text(self) -> str:
        """``name TYPE`` with `` NOT NULL`` when the column is required."""
        return f"{self.name} {self.type}" + ("" if self.nullable else " NOT NULL")


def parse_schema(text: str) -> tuple[Column, ...]:
    """Parse comma-separated ``name TYPE [NOT NULL|NULL]`` items; commas inside ``()`` are kept."""
    if not isinstance(text, str):
        raise SpecError(f"schema: {show(text)} must be a string")
    if not text.strip():
        raise SpecError("schema: at least one column is needed")
    columns = tuple(
        _parse_column(item.strip()) for item in split_top_level(text, sep=",", where="schema")
    )
    check_unique_columns(columns)
    return columns


def format_schema(columns: Iterable[Column]) -> str:
    """The text :func:`parse_schema` reads back into ``columns``."""
    return ", ".join(column.to_text() for column in columns)


def check_unique_columns(columns: Iterable[Column]) -> None:
    """Raise SpecError if two columns share a name, ignoring case (DuckDB ignores it too)."""
    seen: dict[str, str] = {}
    for column in columns:
        key = column.name.lower()
        if key in seen:
            raise SpecError(f"schema: duplicate column {column.name!r} (same as {seen[key]!r})")
        seen[key] = column.name


def _parse_column(item: str) -> Column:
    match = _COLUMN.fullmatch(item)
    if match is None:
        raise SpecError(f"schema: cannot parse column {show(item)}; expected 'name TYPE'")
    try:
        return Column(
            match["name"],
            match["type"],
            nullable=match["null"] is None or "NOT" not in match["null"].upper(),
        )
    except InvalidNameError as e:
        raise InvalidNameError(f"schema: {e}") from e
