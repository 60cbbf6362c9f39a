"""Schema changes inside a struct column, by field id: add a field, drop one, rename one,
widen a leaf. A path names struct fields from the column down (``context.page.title``); a
field inside a list or a map is not changed here.

Each change gives the column's new type and the ids of the fields inside it (walk order, see
:mod:`icefloe.spec.field_ids`): an added field takes the next unused id, then the fields
inside its type take theirs; a renamed or widened field keeps its id; a dropped field's ids
are retired. Readers map a file's fields to the current ones by these ids
(:func:`icefloe.spec.field_ids.nested_fields` of each layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec.field_ids import NestedField, fresh_nested_ids, nested_fields
from icefloe.spec.names import validate_column_name
from icefloe.spec.schema import Column
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode, format_type
from icefloe.spec.types import type_tree

# A change at the struct holding the field: (that struct's fields, the field's name) -> fields.
FieldEdit = Callable[[list[NestedField], str], list[NestedField]]


def change_field(
    column: Column, ids: tuple[int, ...], path: tuple[str, ...], edit: FieldEdit
) -> tuple[Column, tuple[int, ...]]:
    """``column`` with ``edit`` applied at ``path`` (the field's names below the column), and
    the ids inside its new type."""
    node = type_tree(column.type)
    fields = _edit(node, nested_fields(node, ids), path, edit, where=column.name)
    new_node = _rebuild(node, fields)
    return replace(column, type=format_type(new_node)), tuple(_walk(fields))


def add(name: str, type_text: str, *, first_id: int) -> tuple[FieldEdit, int]:
    """An edit adding field ``name`` of ``type_text`` at the end of its struct, and how many
    ids it takes (the field's, then those inside its type, from ``first_id``)."""
    try:
        validate_column_name(name)
    except InvalidNameError as e:
        raise SpecError(str(e)) from e
    node = type_tree(type_text)
    (inside,) = fresh_nested_ids([node], first_id=first_id + 1)

    def edit(fields: list[NestedField], _: str) -> list[NestedField]:
        if any(f.name.lower() == name.lower() for f in fields):
            raise SpecError(f"the struct has a field {name!r} already")
        return [*fields, NestedField(first_id, name, node, nested_fields(node, inside))]

    return edit, 1 + len(inside)


def drop(fields: list[NestedField], name: str) -> list[NestedField]:
    """An edit dropping the field (not the struct's only one: a STRUCT needs a field)."""
    _field(fields, name)
    if len(fields) == 1:
        raise SpecError("it is its struct's only field; drop the struct instead")
    return [f for f in fields if f.name != name]


def rename(new: str) -> FieldEdit:
    """An edit renaming the field ``new`` within its struct (its id and data stay)."""
    try:
        validate_column_name(new)
    except InvalidNameError as e:
        raise SpecError(str(e)) from e

    def edit(fields: list[NestedField], name: str) -> list[NestedField]:
        _field(fields, name)
        if any(f.name.lower() == new.lower() and f.name != name for f in fields):
            raise SpecError(f"the struct has a field {new!r} already")
        return [replace(f, name=new) if f.name == name else f for f in fields]

    return edit


def widen(wider: str, is_widening: Callable[[str, str], bool]) -> FieldEdit:
    """An edit giving a leaf field the wider type ``wider`` (its id and data stay)."""

    def edit(fields: list[NestedField], name: str) -> list[NestedField]:
        field = _field(fields, name)
        old = field.type.name if isinstance(field.type, Leaf) else format_type(field.type)
        if not isinstance(field.type, Leaf) or not is_widening(old, wider):
            raise SpecError(
                f"{old} to {wider} is not a widening (allowed: a wider integer of the same"
                " signedness, FLOAT to DOUBLE, a DECIMAL of larger precision and the same scale)"
            )
        return [replace(f, type=Leaf(wider)) if f.name == name else f for f in fields]

    return edit


def _field(fields: list[NestedField], name: str) -> NestedField:
    found = next((f for f in fields if f.name == name), None)
    if found is None:
        raise SpecError(f"no field {name!r}")
    return found


def _edit(
    node: TypeNode, fields: tuple[NestedField, ...], path: tuple[str, ...], edit: FieldEdit, *,
    where: str,
) -> tuple[NestedField, ...]:  # fmt: skip
    if isinstance(node, Leaf):
        raise SpecError(f"{where!r} is {node.name}, which has no fields")
    if not isinstance(node, Struct):
        raise SpecError(
            f"{where!r} is a {_kind(node)}: fields inside a list or a map cannot be changed"
        )
    name, rest = path[0], path[1:]
    if not rest:
        try:
            return tuple(edit(list(fields), name))
        except SpecError as e:
            raise SpecError(f"{where!r}: {e}") from e
    out = []
    found = False
    for f in fields:
        if f.name == name:
            found = True
            inner = _edit(f.type, f.fields, rest, edit, where=f"{where}.{name}")
            f = replace(f, type=_rebuild(f.type, inner), fields=inner)
        out.append(f)
    if not found:
        raise SpecError(f"{where!r}: no field {name!r}")
    return tuple(out)


def _rebuild(node: TypeNode, fields: tuple[NestedField, ...]) -> TypeNode:
    if isinstance(node, Struct):
        return Struct(tuple((f.name, f.type) for f in fields))
    if isinstance(node, ListOf):
        return ListOf(fields[0].type)
    if isinstance(node, MapOf):
        return MapOf(fields[0].type, fields[1].type)
    return node


def _walk(fields: tuple[NestedField, ...]) -> list[int]:
    out: list[int] = []
    for f in fields:
        out += [f.id, *_walk(f.fields)]
    return out


def _kind(node: TypeNode) -> str:
    return "list" if isinstance(node, ListOf) else "map"
