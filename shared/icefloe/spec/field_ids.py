"""Field ids of nested fields: every struct field, list element, map key and map value has one.

A column's own id is in ``TableSpec.column_ids``; the ids inside its type are a flat tuple in
*walk order*: a struct's fields in order, each field's id followed by the ids inside its type;
a list's element id, then the ids inside the element; a map's key id, the ids inside the key,
the value id, the ids inside the value. A leaf column has none.

New ids are *numbered* as Iceberg's ``assignFreshIds`` numbers them, which is what Iceberg
readers and pyiceberg keep: all fields of a struct take consecutive ids before any of their
children are numbered; a list's element, or a map's key then value, take theirs before the
types inside them. A new table's columns take 1..n, then the ids inside column 1's type, then
column 2's, and so on; a column added later takes the next id, then the ones inside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count

from icefloe.errors import SpecError
from icefloe.spec.type_tree import Leaf, ListOf, Struct, TypeNode, format_type


@dataclass(frozen=True, slots=True)
class NestedField:
    """One field inside a column's type: ``name`` is the struct field's name, or ``element``,
    ``key`` or ``value``; ``fields`` are the ones inside its type."""

    id: int
    name: str
    type: TypeNode
    fields: tuple[NestedField, ...]


def nested_id_count(node: TypeNode) -> int:
    """How many ids the fields inside ``node`` take."""
    if isinstance(node, Leaf):
        return 0
    if isinstance(node, Struct):
        return sum(1 + nested_id_count(child) for _, child in node.fields)
    if isinstance(node, ListOf):
        return 1 + nested_id_count(node.element)
    return 2 + nested_id_count(node.key) + nested_id_count(node.value)


def fresh_nested_ids(nodes: Sequence[TypeNode], *, first_id: int) -> tuple[tuple[int, ...], ...]:
    """New ids for the fields inside each of ``nodes`` (columns in order), numbered from
    ``first_id`` in Iceberg's order, each column's given in walk order."""
    numbers = count(first_id)
    trees = [_number(node, numbers) for node in nodes]
    return tuple(tuple(_walk_ids(tree)) for tree in trees)


def nested_fields(node: TypeNode, ids: Sequence[int]) -> tuple[NestedField, ...]:
    """The fields inside ``node``, given their ids in walk order."""
    if len(ids) != nested_id_count(node):
        raise SpecError(
            f"{len(ids)} field ids for the {nested_id_count(node)} fields inside {format_type(node)}"
        )
    taken = iter(ids)
    return _fields(node, taken)


def _fields(node: TypeNode, ids: Iterator[int]) -> tuple[NestedField, ...]:
    out = []
    for name, child in _children(node):
        field_id = next(ids)
        out.append(NestedField(field_id, name, child, _fields(child, ids)))
    return tuple(out)


def _children(node: TypeNode) -> tuple[tuple[str, TypeNode], ...]:
    if isinstance(node, Leaf):
        return ()
    if isinstance(node, Struct):
        return node.fields
    if isinstance(node, ListOf):
        return (("element", node.element),)
    return (("key", node.key), ("value", node.value))


@dataclass(slots=True)
class _Numbered:
    children: list[tuple[int, _Numbered]]


def _number(node: TypeNode, numbers: Iterator[int]) -> _Numbered:
    """Iceberg's order: this level's ids first, then each child's type, in order."""
    children = _children(node)
    ids = [next(numbers) for _ in children]
    return _Numbered(
        [(i, _number(child, numbers)) for i, (_, child) in zip(ids, children, strict=True)]
    )


def _walk_ids(tree: _Numbered) -> Iterator[int]:
    for field_id, child in tree.children:
        yield field_id
        yield from _walk_ids(child)
