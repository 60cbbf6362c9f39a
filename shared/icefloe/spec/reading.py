"""How files written at any spec version are read as the current spec.

Each data file records the spec version it was written at, and the spec keeps every earlier
version's layout (:mod:`icefloe.spec.layout`). :func:`scan_groups` groups files by the layout
they hold, so every reader (DuckDB views, Spark) scans one group at a time, mapping each
column by id (struct fields too, see :mod:`icefloe.spec.remap`); :func:`stat_names` tells the
meta store under which name or path each file's statistics of a column or struct leaf are kept.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from icefloe.spec import types
from icefloe.spec.field_ids import NestedField
from icefloe.spec.layout import FileLayout, LayoutColumn
from icefloe.spec.table_spec import TableSpec
from icefloe.spec.type_tree import Leaf, Struct


@dataclass(frozen=True, slots=True)
class ScanGroup:
    """Files one scan can read together, and how their columns map to the current ones."""

    # Per current column (in spec order): its name, and the column as these files hold it
    # (None: they lack it; it reads as NULL). None: they hold exactly the current columns.
    held: tuple[tuple[str, LayoutColumn | None], ...] | None
    uris: tuple[str, ...]
    # The generated columns these files were written without: readers compute them from
    # their expressions (see icefloe.query.views.files_source).
    computed: frozenset[str] = frozenset()

    @property
    def columns(self) -> Mapping[str, str | None] | None:
        """Current name -> the name these files hold it under (None: they lack it); None for
        a plain read."""
        if self.held is None:
            return None
        return {name: (None if old is None else old.name) for name, old in self.held}


def scan_groups(spec: TableSpec, files: Sequence[tuple[str, int]]) -> list[ScanGroup]:
    """``files`` (uri, spec version written at) grouped by the layout they hold, as seen from
    ``spec``'s columns: what every reader (DuckDB views, Spark) scans one group at a time. A
    table never altered gives one plain group. Files of two versions whose columns map the
    same way (names, types and the ids of the fields inside) share a group; a widened column
    or a changed struct does not share one with the current files."""
    layouts: dict[int, tuple[tuple[str, LayoutColumn | None], ...] | None] = {}
    groups: dict[object, tuple[tuple[tuple[str, LayoutColumn | None], ...] | None, list[str]]] = {}
    for uri, version in files:
        if version not in layouts:
            layouts[version] = _held_columns(spec, version)
        held = layouts[version]
        key = (
            None
            if held is None
            else tuple(None if h is None else (h.name, h.type, h.nested_ids) for _, h in held)
        )
        groups.setdefault(key, (held, []))[1].append(uri)
    generated = {c.name for c in spec.columns if c.generated}
    return [
        ScanGroup(
            held=held,
            uris=tuple(uris),
            computed=frozenset(
                () if held is None else (n for n, h in held if h is None and n in generated)
            ),
        )
        for held, uris in groups.values()
    ]


def _held_columns(
    spec: TableSpec, version: int
) -> tuple[tuple[str, LayoutColumn | None], ...] | None:
    """For each current column, its name and the column as files of ``version`` hold it
    (None: they lack it); None when they hold exactly the current columns (names, types and
    the ids of the fields inside)."""
    if version == spec.version:
        return None
    physical = {c.id: c for c in spec.layout_at(version).columns}
    held = tuple(physical.get(column_id) for column_id in spec.column_ids)
    if held == spec.layout.columns:
        return None  # names are unique in a layout: no other column can hold one of these
    return tuple(zip(spec.column_names, held, strict=True))


def versions_lacking_generated(spec: TableSpec) -> frozenset[int]:
    """The spec versions whose files lack a generated column of ``spec`` (it was added after
    them): readers compute it for their rows, and merges rewrite them to hold it."""
    generated = {i for c, i in zip(spec.columns, spec.column_ids, strict=True) if c.generated}
    if not generated or not spec.past_layouts:
        return frozenset()
    return frozenset(
        layout.version
        for layout in spec.past_layouts
        if not generated <= {c.id for c in layout.columns}
    )


def stat_names(spec: TableSpec) -> Mapping[str, Mapping[int, str | None]]:
    """For each current column whose name is not the same in every version: version -> the
    name files of that version hold it (and key its statistics) under, or None. Empty for a
    table never altered, and for one whose changes renamed nothing and reused no name."""
    if not spec.past_layouts:
        return {}  # without hashing the spec: every plan of a table never altered asks
    return _stat_names(spec)


@functools.lru_cache(maxsize=256)
def _stat_names(spec: TableSpec) -> Mapping[str, Mapping[int, str | None]]:
    by_version = {
        layout.version: {c.id: c.name for c in layout.columns}
        for layout in (*spec.past_layouts, spec.layout)
    }
    names: dict[str, Mapping[int, str | None]] = {}
    for column_id, column in zip(spec.column_ids, spec.columns, strict=True):
        versions = {v: physical.get(column_id) for v, physical in by_version.items()}
        if any(name != column.name for name in versions.values()):
            names[column.name] = MappingProxyType(versions)
    # Struct leaves by id: a renamed field's statistics are under its old path, and a field
    # dropped and added again under the same name has none in files of before.
    leaves_by_version = {
        layout.version: _struct_leaf_paths(layout) for layout in (*spec.past_layouts, spec.layout)
    }
    for leaf_id, path in _struct_leaf_paths(spec.layout).items():
        versions = {v: leaves.get(leaf_id) for v, leaves in leaves_by_version.items()}
        if any(old != path for old in versions.values()):
            names[path] = MappingProxyType(versions)
    return MappingProxyType(names)


def _struct_leaf_paths(layout: FileLayout) -> dict[int, str]:
    """Each leaf reached through structs only, by id: its dotted path in ``layout``."""
    paths: dict[int, str] = {}

    def walk(fields: tuple[NestedField, ...], prefix: str) -> None:
        for f in fields:
            if isinstance(f.type, Leaf):
                paths[f.id] = f"{prefix}.{f.name}"
            elif isinstance(f.type, Struct):
                walk(f.fields, f"{prefix}.{f.name}")

    for column in layout.columns:
        if isinstance(types.type_tree(column.type), Struct):
            walk(column.fields, column.name)
    return paths
