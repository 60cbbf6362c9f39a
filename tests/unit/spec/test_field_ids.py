"""Field ids of nested fields: numbered as Iceberg numbers them, stored in the spec and its
layouts, carried through schema changes."""

from __future__ import annotations

import dataclasses
import random

import pytest
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StringType, StructType
from tests.support.type_trees import random_type

from icefloe.errors import SpecError
from icefloe.spec import Column, TableSpec
from icefloe.spec import field_ids as ids
from icefloe.spec.evolution import AddColumn, DropColumn, RenameColumn, evolve
from icefloe.spec.layout import FileLayout, LayoutColumn
from icefloe.spec.type_tree import Leaf, ListOf, Struct, TypeNode
from icefloe.spec.types import type_tree

ISSUE_SCHEMA = (
    "ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, title VARCHAR)),"
    " tags STRUCT(k VARCHAR, v BIGINT)[], m MAP(VARCHAR, INTEGER), n BIGINT"
)


def _iceberg(node: TypeNode, counter: list[int]) -> IcebergType:
    """``node`` as a pyiceberg type with throwaway ids (pyiceberg numbers them afresh)."""

    def placeholder() -> int:
        counter[0] += 1
        return 10_000 + counter[0]

    if isinstance(node, Leaf):
        return StringType()
    if isinstance(node, Struct):
        return StructType(
            *(
                NestedField(placeholder(), name, _iceberg(child, counter), required=False)
                for name, child in node.fields
            )
        )
    if isinstance(node, ListOf):
        return ListType(placeholder(), _iceberg(node.element, counter), element_required=False)
    return MapType(
        placeholder(),
        _iceberg(node.key, counter),
        placeholder(),
        _iceberg(node.value, counter),
        value_required=False,
    )


def _pyiceberg_ids(field_type: IcebergType) -> list[int]:
    """The ids inside ``field_type`` in icefloe's walk order."""
    if isinstance(field_type, StructType):
        out: list[int] = []
        for f in field_type.fields:
            out += [f.field_id, *_pyiceberg_ids(f.field_type)]
        return out
    if isinstance(field_type, ListType):
        return [field_type.element_id, *_pyiceberg_ids(field_type.element_type)]
    if isinstance(field_type, MapType):
        return [
            field_type.key_id,
            *_pyiceberg_ids(field_type.key_type),
            field_type.value_id,
            *_pyiceberg_ids(field_type.value_type),
        ]
    return []


def _as_pyiceberg_would_number(spec: TableSpec) -> tuple[list[int], list[list[int]]]:
    counter = [0]
    schema = Schema(
        *(
            NestedField(100 + i, c.name, _iceberg(type_tree(c.type), counter), required=False)
            for i, c in enumerate(spec.columns)
        )
    )
    fresh = assign_fresh_schema_ids(schema)
    return [f.field_id for f in fresh.fields], [_pyiceberg_ids(f.field_type) for f in fresh.fields]


def test_a_new_table_numbers_nested_fields_as_iceberg_does() -> None:
    spec = TableSpec.create(name="ev", schema=ISSUE_SCHEMA)
    column_ids, nested = _as_pyiceberg_would_number(spec)
    assert list(spec.column_ids) == column_ids == [1, 2, 3, 4, 5]
    assert [list(n) for n in spec.nested_ids] == nested
    # context: ip 6, page 7, then page's fields url 8, title 9; tags: element 10, k 11, v 12;
    # m: key 13, value 14 (walk order: each field's id, then the ids inside it)
    assert spec.nested_ids == ((), (6, 7, 8, 9), (10, 11, 12), (13, 14), ())
    assert spec.last_column_id == 14
    assert spec.has_nested


def test_random_schemas_number_their_nested_fields_as_pyiceberg_does() -> None:
    rng = random.Random(33)
    for _ in range(300):
        schema = ", ".join(f"c{i} {random_type(rng)}" for i in range(rng.randint(1, 4)))
        spec = TableSpec.create(name="t", schema=schema)
        column_ids, nested = _as_pyiceberg_would_number(spec)
        assert list(spec.column_ids) == column_ids, schema
        assert [list(n) for n in spec.nested_ids] == nested, schema
        every = [*spec.column_ids, *(i for n in spec.nested_ids for i in n)]
        assert sorted(every) == list(range(1, len(every) + 1)), schema
        assert spec.last_column_id == len(every)


def test_the_fields_of_a_layout_column_carry_names_types_and_ids() -> None:
    context = TableSpec.create(name="ev", schema=ISSUE_SCHEMA).layout.columns[1]
    (ip, page) = context.fields
    assert (ip.id, ip.name, ip.type, ip.fields) == (6, "ip", Leaf("VARCHAR"), ())
    assert (page.id, page.name) == (7, "page")
    assert [(f.id, f.name) for f in page.fields] == [(8, "url"), (9, "title")]
    tags = TableSpec.create(name="ev", schema=ISSUE_SCHEMA).layout.columns[2]
    (element,) = tags.fields
    assert (element.id, element.name) == (10, "element")
    assert [(f.id, f.name) for f in element.fields] == [(11, "k"), (12, "v")]
    with pytest.raises(SpecError, match="3 field ids for the 4 fields inside"):
        ids.nested_fields(type_tree(context.type), (1, 2, 3))


def test_a_flat_spec_stores_no_nested_ids_and_a_nested_one_round_trips() -> None:
    flat = TableSpec.create(name="ev", schema="ts TIMESTAMP NOT NULL, n BIGINT")
    assert "nested_ids" not in flat.to_dict()
    assert flat.nested_ids == ((), ())
    assert not flat.has_nested
    assert TableSpec.from_dict(flat.to_dict()) == flat

    nested = TableSpec.create(name="ev", schema=ISSUE_SCHEMA)
    stored = nested.to_dict()
    assert stored["nested_ids"] == [[], [6, 7, 8, 9], [10, 11, 12], [13, 14], []]
    assert TableSpec.from_dict(stored) == nested
    assert nested.layout.to_dict()["columns"][1] == [
        2,
        "context",
        "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, title VARCHAR))",
        [6, 7, 8, 9],
    ]
    assert FileLayout.from_dict(nested.layout.to_dict()) == nested.layout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nested_ids": ((), (6, 7, 8), (), (), ())}, "has 4 fields inside its type, given 3"),
        ({"nested_ids": ((), (6, 7, 8, 9))}, "2 entries for 5 columns"),
        ({"nested_ids": ((), (6, 7, 8, 1), (10, 11, 12), (13, 14), ())}, "repeats an id"),
        ({"last_column_id": 13}, "last_column_id: 13 is below a field's id"),
        ({"nested_ids": ((), (6, 7, 8, 0), (10, 11, 12), (13, 14), ())}, "positive integers"),
    ],
)
def test_inconsistent_nested_ids_are_refused(change: dict[str, object], message: str) -> None:
    spec = TableSpec.create(name="ev", schema=ISSUE_SCHEMA)
    with pytest.raises(SpecError, match=message):
        dataclasses.replace(spec, **change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "item",
    [
        [2, "context", "STRUCT(ip VARCHAR)", []],
        [2, "context", "STRUCT(ip VARCHAR)", [0]],
        [2, "context", "STRUCT(ip VARCHAR)", [True]],
        [2, "context", "STRUCT(ip VARCHAR)", 3],
    ],
)
def test_a_layout_column_with_malformed_nested_ids_is_refused(item: list[object]) -> None:
    with pytest.raises(SpecError, match=r"is not \[id, name, type\(, \[ids\]\)\]"):
        FileLayout.from_dict({"version": 1, "columns": [item]})


def test_a_layout_may_not_give_one_id_to_a_column_and_a_nested_field() -> None:
    with pytest.raises(SpecError, match="repeats a field id"):
        FileLayout(
            version=1,
            columns=(
                LayoutColumn(1, "a", "BIGINT"),
                LayoutColumn(2, "s", "STRUCT(x INTEGER)", (1,)),
            ),
        )


def test_schema_changes_keep_nested_ids_and_an_added_column_numbers_its_own_after_the_last() -> (
    None
):
    spec = TableSpec.create(name="ev", schema=ISSUE_SCHEMA)
    added = evolve(spec, [AddColumn(Column("geo", "STRUCT(lat DOUBLE, lon DOUBLE)[]"))])
    # the column takes 15, then (as Iceberg's addColumn does) its element 16, lat 17, lon 18
    assert added.column_ids[-1] == 15
    assert added.nested_ids[-1] == (16, 17, 18)
    assert added.nested_ids[:-1] == spec.nested_ids
    assert added.last_column_id == 18
    assert added.past_layouts == (spec.layout,)

    renamed = evolve(added, [RenameColumn("context", "ctx")])
    assert renamed.nested_ids == added.nested_ids
    dropped = evolve(renamed, [DropColumn("ctx")])
    assert dropped.nested_ids == ((), (10, 11, 12), (13, 14), (), (16, 17, 18))
    assert dropped.last_column_id == 18  # retired ids are never given again
    again = evolve(dropped, [AddColumn(Column("context", "STRUCT(ip VARCHAR)"))])
    assert again.column_ids[-1] == 19 and again.nested_ids[-1] == (20,)
    # every version's layout keeps its own ids
    assert again.layout_at(1).columns[1].nested_ids == (6, 7, 8, 9)
    assert TableSpec.from_dict(again.to_dict()) == again
