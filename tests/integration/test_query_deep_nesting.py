"""Expressions nested within DuckDB's depth limit but past what Python's JSON reader of the
parse tree may go: a clean refusal naming the nesting, never a RecursionError; a delete's
predicate nested a few hundred levels (which DuckDB takes) is checked and runs. And a
generated column's expression holding a lone surrogate: refused, not a binding's RuntimeError."""

from __future__ import annotations

import pytest

from icefloe.errors import InvalidInputError
from icefloe.lake import Lake
from icefloe.query.generated import GeneratedColumnError

DEEP = "abs(" * 500 + "id" + ")" * 500
NESTED = "abs(" * 300 + "id" + ")" * 300
TOO_DEEP = "the expression nests too deeply to check"


@pytest.fixture
def table(connected_lake: Lake) -> Lake:
    connected_lake.create_table("c", schema="id INTEGER")
    connected_lake.insert("c", [{"id": -1}, {"id": 2}])
    return connected_lake


@pytest.mark.parametrize(
    "sql", [f"SELECT {DEEP} AS x FROM c", f"SELECT id FROM c WHERE {DEEP} > 0"]
)
def test_a_query_nested_too_deeply_is_refused(table: Lake, sql: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^query refused: {TOO_DEEP}"):
        table.query(sql)


def test_a_query_nested_less_runs(table: Lake) -> None:
    rows = table.query(f"SELECT {NESTED} AS x FROM c ORDER BY id")
    assert rows.column("x").to_pylist() == [1, 2]


def test_a_delete_nested_too_deeply_is_refused(table: Lake) -> None:
    with pytest.raises(InvalidInputError, match=f"^delete refused: {TOO_DEEP}"):
        table.delete("c", f"{DEEP} > 1", dry_run=True)


def test_a_delete_nested_a_few_hundred_levels_runs(table: Lake) -> None:
    # Before, copying the parse tree took one Python call per level: RecursionError at ~250.
    table.delete("c", f"{NESTED} > 1")
    assert table.query("SELECT id FROM c").column("id").to_pylist() == [-1]


def test_a_generated_column_nested_too_deeply_is_refused(table: Lake) -> None:
    with pytest.raises(GeneratedColumnError, match=f"generated column 'x' of 'g': {TOO_DEEP}"):
        table.create_table("g", schema=f"id INTEGER, x BIGINT AS ({DEEP})")


def test_a_custom_merge_query_nested_too_deeply_is_refused(connected_lake: Lake) -> None:
    query = f"sql:SELECT * FROM c WHERE {DEEP} > -100"
    with pytest.raises(InvalidInputError, match=f"^custom merge query refused: {TOO_DEEP}"):
        connected_lake.create_table("c", schema="id INTEGER", merge=query)
    assert [t.name for t in connected_lake.tables()] == []


def test_a_generated_column_whose_expression_holds_a_lone_surrogate_is_refused(
    connected_lake: Lake,
) -> None:
    with pytest.raises(GeneratedColumnError, match="not valid Unicode text"):
        connected_lake.create_table("c", schema="id INTEGER, g VARCHAR AS ('\ud800')")
    assert [t.name for t in connected_lake.tables()] == []
