"""File layouts: which columns, under which names and types, the files of one spec version hold.

Columns are tracked by id, never by name alone. Every column gets an id when it is created
(1, 2, ... in schema order for a new table; the next unused id when one is added) and keeps
it through renames and widenings; a dropped column's id is never given again. Each data file
records the spec version it was written at, and the spec keeps the layout of every earlier
version, so a reader maps a file's physical columns to the current ones by id: a column the
file does not have reads as NULL, a renamed one is read under its old name, and a column of
the same name but another id (dropped, then added again) is not read at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from icefloe.errors import SpecError
from icefloe.spec.field_ids import NestedField, nested_fields
from icefloe.spec.types import type_tree


@dataclass(frozen=True, slots=True)
class LayoutColumn:
    """One column as files of some spec version hold it."""

    id: int
    name: str
    type: str
    nested_ids: tuple[int, ...] = ()  # of the fields inside ``type``, in walk order

    @property
    def fields(self) -> tuple[NestedField, ...]:
        """The fields inside this column's type, with their ids; none for a layout written
        before nested fields had ids (its files carry none)."""
        if not self.nested_ids:
            return ()
        return nested_fields(type_tree(self.type), self.nested_ids)


@dataclass(frozen=True, slots=True)
class FileLayout:
    """The columns of the files written at spec ``version`` (the row id is not among them)."""

    version: int
    columns: tuple[LayoutColumn, ...]

    def __post_init__(self) -> None:
        if isinstance(self.version, bool) or not isinstance(self.version, int):
            raise SpecError(f"layouts: version {self.version!r} must be an integer")
        if self.version < 1:
            raise SpecError(f"layouts: version {self.version} must be at least 1")
        ids = [i for c in self.columns for i in (c.id, *c.nested_ids)]
        if len(set(ids)) != len(ids):
            raise SpecError(f"layouts: version {self.version} repeats a field id")

    def to_dict(self) -> dict[str, object]:
        """``{"version": v, "columns": [[id, name, type], ...]}``; a column with fields inside
        its type has a fourth item, their ids in walk order."""
        return {
            "version": self.version,
            "columns": [
                [c.id, c.name, c.type, list(c.nested_ids)]
                if c.nested_ids
                else [c.id, c.name, c.type]
                for c in self.columns
            ],
        }

    @classmethod
    def from_dict(cls, value: object) -> FileLayout:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(value, dict) or set(value) != {"version", "columns"}:
            raise SpecError(f"layouts: {value!r} is not {{'version', 'columns'}}")
        columns = value["columns"]
        if not isinstance(columns, list):
            raise SpecError("layouts: columns must be a list")
        parsed = []
        for item in columns:
            if (
                not isinstance(item, list)
                or len(item) not in (3, 4)
                or not _is_id(item[0])
                or not isinstance(item[1], str)
                or not isinstance(item[2], str)
                or (len(item) == 4 and not _are_ids(item[3]))
            ):
                raise SpecError(f"layouts: column {item!r} is not [id, name, type(, [ids])]")
            nested = tuple(item[3]) if len(item) == 4 else ()
            parsed.append(LayoutColumn(item[0], item[1], item[2], nested))
        return cls(version=value["version"], columns=tuple(parsed))


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _are_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(map(_is_id, value))
