"""Struct leaves as sort keys and as the row-group key: which are accepted, and how schema
changes carry them."""

from __future__ import annotations

import pytest

from icefloe.errors import InvalidNameError, SpecError
from icefloe.spec import TableSpec
from icefloe.spec.evolution import DropColumn, RenameColumn, evolve

SCHEMA = (
    "ts TIMESTAMP NOT NULL, context STRUCT(app VARCHAR, page STRUCT(url VARCHAR, n INTEGER),"
    " extra JSON, tags STRUCT(k VARCHAR)[]), m MAP(VARCHAR, INTEGER), other VARCHAR"
)


def test_struct_leaves_may_be_sort_and_row_group_keys_and_lead_the_tracked_leaves() -> None:
    spec = TableSpec.create(
        name="ev", schema=SCHEMA, sort_by="context.page.url, ts", row_group_by="context.app"
    )
    assert spec.file_sort_keys == ("context.app", "context.page.url", "ts")
    assert spec.key_type("context.page.n") == "INTEGER"
    assert spec.stats_leaves[:2] == ("context.app", "context.page.url")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sort_by": "context.nope"}, "sort_by: 'context.nope' is not a field of column 'context'"),
        ({"sort_by": "context.tags.k"}, "'context.tags.k' is not a field of column 'context'"),
        ({"sort_by": "m.key"}, "'m.key' is not a field of column 'm'"),
        ({"sort_by": "context.page"}, "sort_by: field 'context.page' of type STRUCT"),
        ({"row_group_by": "context.extra"}, "row_group_by: field 'context.extra' of type JSON"),
        ({"sort_by": "nope.x"}, "sort_by: unknown column 'nope'"),
    ],
)
def test_a_key_that_is_not_an_orderable_struct_leaf_is_refused(
    overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        TableSpec.create(name="ev", schema=SCHEMA, **overrides)  # type: ignore[arg-type]


def test_merge_keys_stay_columns() -> None:
    with pytest.raises(InvalidNameError, match=r"column name 'context\.page\.n'"):
        TableSpec.create(name="ev", schema=SCHEMA, merge="replace(other; version=context.page.n)")


def test_a_renamed_or_dropped_struct_column_carries_or_drops_its_sort_keys() -> None:
    spec = TableSpec.create(
        name="ev", schema=SCHEMA, sort_by="context.page.url, other", row_group_by="other"
    )
    renamed = evolve(spec, [RenameColumn("context", "ctx")])
    assert renamed.sort_by == ("ctx.page.url", "other")
    assert renamed.key_type("ctx.page.url") == "VARCHAR"
    dropped = evolve(renamed, [DropColumn("ctx")])
    assert dropped.sort_by == ("other",)
    assert [c.name for c in dropped.columns] == ["ts", "m", "other"]


def test_the_column_holding_the_row_group_key_cannot_be_dropped_or_renamed() -> None:
    spec = TableSpec.create(name="ev", schema=SCHEMA, row_group_by="context.app")
    for change in (DropColumn("context"), RenameColumn("context", "ctx")):
        with pytest.raises(SpecError, match="it is the row-group key"):
            evolve(spec, [change])
