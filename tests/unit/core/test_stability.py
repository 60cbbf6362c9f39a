"""Which calls may answer differently between evaluations: read from DuckDB's own metadata."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pytest

from icefloe.stability import stabilities, unstable_calls
from support.delete_fuzz import unstable_functions


def where_clause(expression: str) -> Any:
    con = duckdb.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", [f"SELECT 1 FROM t WHERE {expression}"])
        tree = json.loads(raw.fetchone()[0])  # type: ignore[index]
    finally:
        con.close()
    return tree["statements"][0]["node"]["where_clause"]


def names(expression: str, *columns: str) -> list[str]:
    return [c.name.lower() for c in unstable_calls(where_clause(expression), columns=columns)]


@pytest.mark.parametrize("function", unstable_functions())
def test_every_function_duckdb_does_not_mark_consistent_is_found(function: str) -> None:
    assert names(f"{function}() IS NULL") == [function.lower()]


@pytest.mark.parametrize(
    ("expression", "found"),
    [
        # Macros are followed to what they call, bare value names included
        ("pg_sleep(1) IS NULL", "pg_sleep"),
        ("ago(INTERVAL 1 DAY) < ts", "ago"),
        ("pg_postmaster_start_time() < ts", "pg_postmaster_start_time"),
        # Bare names the binder turns into values
        ("ts < current_date", "current_date"),
        ("ts < CURRENT_TIMESTAMP", "current_timestamp"),
        ("ts < localtimestamp", "localtimestamp"),
        ("ts < get_current_time()", "get_current_time"),
        # Inside a lambda the parameter is not the value function
        ("list_any_value(list_transform(l, x -> x + current_date)) IS NULL", "current_date"),
        # A function DuckDB does not list is not shown stable
        ("no_such_function(1) = 1", "no_such_function"),
    ],
)
def test_unstable_calls_are_found_wherever_they_hide(expression: str, found: str) -> None:
    assert found in names(expression, "ts", "l")


@pytest.mark.parametrize(
    "expression",
    [
        "md5(s) = 'a' AND ts > TIMESTAMP '2026-01-01'",
        "list_any_value(list_transform(l, x -> x + 1)) > 1",
        "list_filter(l, lambda current_date: current_date > 1) = []",  # a parameter's name
        "struct_pack(a := i).a = 1 AND coalesce(i, 0) > 1",
        "s LIKE 'a%' AND s ~~* 'b' AND regexp_matches(s, 'x')",
        "(p ->> '$.a') = 'b' AND json_extract(p, '$.n') IS NULL",
        "s = current_user AND s = user",  # macros of a constant
        "today = 1",  # a column named like a value function is that column
    ],
)
def test_consistent_expressions_are_not_flagged(expression: str) -> None:
    assert names(expression, "ts", "l", "s", "i", "p", "today") == []


def test_stability_of_a_macro_is_its_least_stable_call() -> None:
    table = stabilities()
    assert table.stability("current_query") == "VOLATILE"  # a macro over the function
    assert table.stability("ago") == "UNKNOWN"  # reaches current_timestamp, not listed
    assert table.stability("list_reverse") == "CONSISTENT"
    assert table.stability("random") == "VOLATILE"


def test_a_sample_is_found() -> None:
    con = duckdb.connect()
    try:
        raw = con.execute("SELECT json_serialize_sql(?)", ["SELECT * FROM t USING SAMPLE 10%"])
        tree = json.loads(raw.fetchone()[0])  # type: ignore[index]
    finally:
        con.close()
    assert [c.name for c in unstable_calls(tree["statements"], columns=())] == ["USING SAMPLE"]
