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


@dataclass(frozen=True, slots=True)
class LayoutColumn:
    """One column as files of some spec version hold it."""

    id: int
    name: str
    type: str


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
        ids = [c.id for c in self.columns]
        if len(set(ids)) != len(ids):
            raise SpecError(f"layouts: version {self.version} repeats a column id")

    def to_dict(self) -> dict[str, object]:
        """``{"version": v, "columns": [[id, name, type], ...]}``."""
        return {
            "version": self.version,
            "columns": [[c.id, c.name, c.type] for c in self.columns],
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
                or len(item) != 3
                or isinstance(item[0], bool)
                or not isinstance(item[0], int)
                or not isinstance(item[1], str)
                or not isinstance(item[2], str)
            ):
                raise SpecError(f"layouts: column {item!r} is not [id, name, type]")
            parsed.append(LayoutColumn(item[0], item[1], item[2]))
        return cls(version=value["version"], columns=tuple(parsed))
