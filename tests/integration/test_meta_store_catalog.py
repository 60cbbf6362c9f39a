"""The catalog's guard on a schema change: a spec version must follow the current one."""

from __future__ import annotations

import dataclasses

import pytest

from icefloe.errors import SpecError
from icefloe.metastore.store import MetaStore
from icefloe.spec import Column, TableSpec
from icefloe.spec.evolution import AddColumn, evolve


@pytest.mark.parametrize(
    "evolve",
    [
        pytest.param(lambda spec: spec, id="same-version"),
        pytest.param(lambda spec: dataclasses.replace(spec, version=spec.version + 2), id="skips"),
        pytest.param(
            lambda spec: dataclasses.replace(spec, version=spec.version + 1, name="other"),
            id="renames",
        ),
    ],
)
def test_an_alter_that_does_not_give_the_next_version_is_a_spec_error_and_changes_nothing(
    meta: MetaStore, events_spec: TableSpec, evolve: object
) -> None:
    meta.create_table(events_spec)
    before = meta.get_table(events_spec.name)
    with pytest.raises(SpecError, match=rf"must give version {before.spec.version + 1}"):
        meta.alter_table(events_spec.name, evolve)  # type: ignore[arg-type]
    after = meta.get_table(events_spec.name)
    assert after.spec == before.spec
    assert after.head_snapshot_id == before.head_snapshot_id


def test_a_table_with_nested_columns_is_created_and_altered_with_its_field_ids(
    meta: MetaStore,
) -> None:
    nested = TableSpec.create(
        name="nested_ev", schema="ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR)"
    )
    meta.create_table(nested)
    assert meta.get_table("nested_ev").spec == nested
    meta.alter_table(
        "nested_ev", lambda spec: evolve(spec, [AddColumn(Column("m", "MAP(VARCHAR, INTEGER)"))])
    )
    stored = meta.get_table("nested_ev").spec
    assert stored.nested_ids == ((), (3,), (5, 6))  # m takes 4, then its key 5 and value 6
    assert stored.layout_at(1) == nested.layout
