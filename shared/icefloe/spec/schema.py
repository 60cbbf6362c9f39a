"""Columns and the schema text form: ``"ts TIMESTAMP NOT NULL, price DECIMAL(10, 2)"``, and
generated columns in DuckDB's syntax: ``"n BIGINT AS (CAST(properties->>'n' AS BIGINT))"``
(``GENERATED ALWAYS AS (...)`` and a trailing ``VIRTUAL`` or ``STORED`` are read too)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec._text import show, split_top_level
from icefloe.spec.names import validate_column_name
from icefloe.spec.types import is_nested, normalize_type

_COLUMN = re.compile(r"(?P<name>\S+)\s+(?P<type>.+?)(?P<null>\s+(?:NOT\s+)?NULL)?", re.IGNORECASE)
_GENERATED = re.compile(
    r"(?P<head>.+?)\s+(?:GENERATED\s+ALWAYS\s+)?AS\s*\((?P<expression>.*)\)"
    r"(?:\s+(?:VIRTUAL|STORED))?",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Column:
    """One user column; ``type`` is normalized to its canonical DuckDB spelling on creation.

    A generated column has an ``expression``: DuckDB SQL over the table's other columns that
    insert computes for every row and stores as the column's value (input may not give one)."""

    name: str
    type: str
    nullable: bool = True
    expression: str | None = None

    def __post_init__(self) -> None:
        validate_column_name(self.name)
        try:
            canonical = normalize_type(self.type)
        except SpecError as e:
            raise SpecError(f"schema: column {self.name!r}: {e}") from e
        object.__setattr__(self, "type", canonical)
        if not isinstance(self.nullable, bool):
            raise SpecError(f"schema: column {self.name!r}: nullable must be a bool")
        if self.expression is not None:
            self._check_generated()

    def _check_generated(self) -> None:
        where = f"schema: generated column {self.name!r}"
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise SpecError(f"{where}: its expression is empty")
        object.__setattr__(self, "expression", self.expression.strip())
        split_top_level(self.expression, sep=",", where=where)  # balanced brackets
        if not self.nullable:
            raise SpecError(
                f"{where}: cannot be NOT NULL (a row its expression gives NULL for, such as"
                " one without the JSON path, holds NULL)"
            )
        if is_nested(self.type):
            raise SpecError(
                f"{where}: its type {self.type} holds fields; a generated column is of a"
                " scalar type (a number, text, a time, a boolean, JSON)"
            )

    @property
    def generated(self) -> bool:
        """True when insert computes this column from its expression."""
        return self.expression is not None

    def to_text(self) -> str:
        """``name TYPE`` with `` NOT NULL`` when the column is required, or ``name TYPE AS
        (expression)`` for a generated column."""
        if self.expression is not None:
            return f"{self.name} {self.type} AS ({self.expression})"
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
    expression = None
    generated = _GENERATED.fullmatch(item)
    if generated is not None and _COLUMN.fullmatch(generated["head"].strip()):
        item, expression = generated["head"].strip(), generated["expression"]
    match = _COLUMN.fullmatch(item)
    if match is None:
        raise SpecError(
            f"schema: cannot parse column {show(item)}; expected 'name TYPE' or"
            " 'name TYPE AS (expression)'"
        )
    try:
        return Column(
            match["name"],
            match["type"],
            nullable=match["null"] is None or "NOT" not in match["null"].upper(),
            expression=expression,
        )
    except InvalidNameError as e:
        raise InvalidNameError(f"schema: {e}") from e
