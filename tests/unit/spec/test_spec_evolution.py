"""Schema changes as pure functions: the CLI's text forms, widening rules, and how files of
each version are grouped for scanning."""

from __future__ import annotations

import pytest

from icefloe.errors import InvalidNameError, SpecError
from icefloe.lifecycle.alter import add_column, drop_column, rename_column, widen_column
from icefloe.spec import TableSpec
from icefloe.spec.evolution import (
    AddColumn,
    DropColumn,
    RenameColumn,
    WidenColumn,
    describe,
    evolve,
    is_widening,
)
from icefloe.spec.reading import scan_groups, stat_names
from icefloe.spec.schema import Column


def spec() -> TableSpec:
    return TableSpec.create(name="t", schema="ts TIMESTAMP, a INTEGER, b VARCHAR")


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (add_column, "x INTEGER, y INTEGER", "takes one 'name TYPE'"),
        (rename_column, "a", "takes 'old=new'"),
        (rename_column, "a=", "takes 'old=new'"),
        (widen_column, "a", "takes 'name TYPE'"),
        (drop_column, "  ", "takes a column name"),
    ],
)
def test_the_text_forms_name_what_they_expect(parse: object, text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse(text)  # type: ignore[operator]


def test_a_rename_to_a_reserved_name_is_refused() -> None:
    with pytest.raises(InvalidNameError):
        rename_column("a=_row_id")


def test_no_change_is_refused() -> None:
    with pytest.raises(SpecError, match="no change given"):
        evolve(spec(), [])


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        ("INTEGER", "BIGINT", True),
        ("UTINYINT", "UINTEGER", True),
        ("INTEGER", "UBIGINT", False),  # signedness changes
        ("BIGINT", "INTEGER", False),
        ("FLOAT", "DOUBLE", True),
        ("DOUBLE", "FLOAT", False),
        ("DECIMAL(9,2)", "DECIMAL(20,2)", True),
        ("DECIMAL(9,2)", "DECIMAL(20,3)", False),  # the scale must stay
        ("INTEGER", "INTEGER", False),
        ("VARCHAR", "BIGINT", False),
    ],
)
def test_widening_keeps_every_old_value(old: str, new: str, widens: bool) -> None:
    assert is_widening(old, new) is widens


def test_ids_are_kept_by_renames_and_never_given_twice() -> None:
    first = spec()
    second = evolve(
        first,
        [DropColumn("b"), AddColumn(Column("b", "BIGINT")), RenameColumn("a", "c")],
    )
    assert (second.version, second.column_ids, second.last_column_id) == (2, (1, 2, 4), 4)
    assert second.past_layouts == (first.layout,)
    assert TableSpec.from_dict(second.to_dict()) == second


def test_scan_groups_share_a_scan_only_between_files_that_map_the_same_way() -> None:
    v1 = spec()
    v2 = evolve(v1, [AddColumn(Column("n", "DOUBLE"))])
    v3 = evolve(v2, [WidenColumn("a", "BIGINT")])
    # A table never altered: one plain group
    assert [(g.columns, g.uris) for g in scan_groups(v1, [("f1", 1), ("f2", 1)])] == [
        (None, ("f1", "f2"))
    ]
    groups = {g.uris: g.columns for g in scan_groups(v3, [("f1", 1), ("f2", 2), ("f3", 3)])}
    # Version 1 lacks n; version 2 holds a at its old width; version 3 is read as it is
    assert groups == {
        ("f1",): {"ts": "ts", "a": "a", "b": "b", "n": None},
        ("f2",): {"ts": "ts", "a": "a", "b": "b", "n": "n"},
        ("f3",): None,
    }


def test_statistics_names_vary_only_for_renamed_added_and_reused_columns() -> None:
    assert stat_names(spec()) == {}
    renamed = evolve(spec(), [RenameColumn("a", "c"), WidenColumn("c", "BIGINT")])
    assert stat_names(renamed) == {"c": {1: "a", 2: "c"}}
    reused = evolve(renamed, [DropColumn("b"), AddColumn(Column("b", "VARCHAR"))])
    assert stat_names(reused)["b"] == {1: None, 2: None, 3: "b"}


def test_a_change_is_described_as_a_columns_or_a_fields_by_its_name() -> None:
    assert [
        describe(change)
        for change in (
            DropColumn("a"),
            DropColumn("ctx.page"),
            RenameColumn("b", "c"),
            RenameColumn("ctx.ip", "ctx.client_ip"),
            WidenColumn("n", "bigint"),
            WidenColumn("ctx.screen.width", "BIGINT"),
            AddColumn(Column("d", "DATE")),
        )
    ] == [
        "drop column a",
        "drop field ctx.page",
        "rename column b to c",
        "rename field ctx.ip to ctx.client_ip",
        "widen column n to BIGINT",
        "widen field ctx.screen.width to BIGINT",
        "add column d DATE",
    ]
