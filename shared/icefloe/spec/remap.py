"""How to read a column held in an older layout as the current one, field by field, by id.

A struct cast will not do: DuckDB casts structs by field name (a renamed field reads NULL, a
field dropped and added again under its old name reads the old data) and Spark by position
(every field after a dropped one shifts). So a reader rebuilds each struct whose fields
changed from the old value's fields, matched by id (:func:`column_remap`), and casts only
leaves (a widened field). Both readers render the same plan: :mod:`icefloe.query.views` in
DuckDB SQL, :mod:`icefloe.spark_files` in Spark expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

from icefloe.errors import SpecError
from icefloe.spec.field_ids import NestedField
from icefloe.spec.layout import LayoutColumn
from icefloe.spec.type_tree import Leaf, Struct, TypeNode, format_type
from icefloe.spec.types import type_tree


@dataclass(frozen=True, slots=True)
class Cast:
    """Read the old value cast to ``type`` (a widened leaf)."""

    type: str


@dataclass(frozen=True, slots=True)
class FieldRemap:
    """One field of the current struct: from the old field ``old`` (None: files lack it, it
    reads as NULL of ``type``), read as is or through ``remap``."""

    name: str
    old: str | None
    type: str
    remap: Remap | None


@dataclass(frozen=True, slots=True)
class StructRemap:
    """Rebuild the struct from these fields (a NULL struct stays NULL)."""

    fields: tuple[FieldRemap, ...]


Remap = Cast | StructRemap


def column_remap(old: LayoutColumn, current: LayoutColumn) -> Remap | None:
    """How to read ``old`` (the same column id in an older layout) as ``current``; None when
    it is held exactly as it is now."""
    return _remap(type_tree(old.type), old.fields, type_tree(current.type), current.fields)


def _remap(
    old: TypeNode,
    old_fields: tuple[NestedField, ...],
    new: TypeNode,
    new_fields: tuple[NestedField, ...],
) -> Remap | None:
    if old == new and [f.id for f in old_fields] == [f.id for f in new_fields]:
        return None
    if isinstance(new, Leaf) or not old_fields or not new_fields:
        return Cast(format_type(new))  # a widened leaf (or a list written before field ids)
    if isinstance(new, Struct):
        by_id = {f.id: f for f in old_fields}
        return StructRemap(
            tuple(
                FieldRemap(
                    name=f.name,
                    old=None if f.id not in by_id else by_id[f.id].name,
                    type=format_type(f.type),
                    remap=None
                    if f.id not in by_id
                    else _remap(by_id[f.id].type, by_id[f.id].fields, f.type, f.fields),
                )
                for f in new_fields
            )
        )
    # Fields inside lists and maps are never changed (icefloe.spec.field_changes refuses it),
    # so their ids and types are the same in every layout.
    raise SpecError(f"a {format_type(new)} whose fields changed cannot be read by id")
