"""The statement check: plain SELECTs pass, everything else is refused by name."""

from __future__ import annotations

import pytest

from icefloe.query.sandbox import QueryRefusedError, check_query, check_sql
from icefloe.settings.limits import QueryLimits

LIMITS = QueryLimits(max_sql_chars=500)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "  -- a comment\n/* another */ select 1",
        "(SELECT 1) UNION ALL (SELECT 2)",
        "WITH a AS (SELECT 1) SELECT * FROM a",
        "FROM events SELECT count(*)",
        "VALUES (1), (2)",
        "PIVOT events ON event IN ('a', 'b') USING count(*)",
        "SELECT * FROM events PIVOT (count(*) FOR event IN ('a', 'b'))",
        "UNPIVOT events ON a, b INTO NAME k VALUE v",
        "SELECT * FROM (UNPIVOT events ON COLUMNS(* EXCLUDE (uid)) INTO NAME k VALUE v)",
    ],
)
def test_plain_selects_pass(sql: str) -> None:
    assert check_sql(sql, limits=LIMITS)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("PRAGMA version", "PRAGMA"),
        ("SHOW TABLES", "SHOW"),
        ("DESCRIBE events", "DESCRIBE"),
        ("SELECT 1" + " " * 600, "longer than 500"),
        ("   ", "empty"),
        ("SELECT 1;;SELECT 2", "one statement"),
        # The statements the caller wrote are counted, not those DuckDB expands them into
        ("CREATE TYPE e AS ENUM ('a'); SELECT 1", "one statement per query, found 2"),
        ("PIVOT events ON event; SELECT 1", "one statement per query, found 2"),
        ("SELECT 1; PIVOT events ON event", "one statement per query, found 2"),
        ("PIVOT events ON event IN (SELECT 'a')", "IN list may not be a subquery"),
        ("PIVOT events ON CAST(event AS __icefloe_pivot_0)", "could not be told apart"),
    ],
)
def test_other_statements_are_refused_by_name(sql: str, message: str) -> None:
    with pytest.raises(QueryRefusedError, match=message):
        check_sql(sql, limits=LIMITS)


def test_a_result_cap_defaults_to_half_the_memory_limit() -> None:
    assert QueryLimits(memory_limit="512MB").result_bytes == 256_000_000


@pytest.mark.parametrize(
    ("sql", "analyzed"),
    [
        (
            "SELECT * FROM (PIVOT events ON event USING count(*) GROUP BY uid)",
            "SELECT * FROM (PIVOT events ON event \nIN __icefloe_pivot_0 USING count(*) GROUP BY uid)",
        ),
        ("PIVOT events ON event", "PIVOT events ON event\nIN __icefloe_pivot_0 "),
        ("pivot events on event -- why", "pivot events on event -- why\nIN __icefloe_pivot_0 "),
        (
            "PIVOT events ON event IN ('a'), year(ts) USING count(*);",
            "PIVOT events ON event IN ('a'), year(ts) \nIN __icefloe_pivot_0 USING count(*);",
        ),
        # Text that is not ASCII before the columns: DuckDB's tokens are at byte offsets
        (
            "PIVOT (FROM events WHERE city <> 'Zürich 日本') ON event, kind",
            "PIVOT (FROM events WHERE city <> 'Zürich 日本') ON event\nIN __icefloe_pivot_0 , kind"
            "\nIN __icefloe_pivot_1 ",
        ),
        (
            "WITH x AS (FROM events) PIVOT x e JOIN users u ON e.uid = u.uid ON e.event, u.kind",
            "WITH x AS (FROM events) PIVOT x e JOIN users u ON e.uid = u.uid ON e.event\nIN"
            " __icefloe_pivot_0 , u.kind\nIN __icefloe_pivot_1 ",
        ),
    ],
)
def test_a_pivot_over_values_from_the_data_is_checked_as_one_select(
    sql: str, analyzed: str
) -> None:
    # DuckDB's parser makes a CREATE TYPE of each such column's values, then the SELECT
    checked = check_query(sql, limits=LIMITS)
    # The statement runs as written; the checks read it with each column bound to a stand-in
    assert checked.statement == sql
    assert checked.analyzed == analyzed
    assert checked.pivots_from_data == analyzed.count("__icefloe_pivot_")
    # Where one SELECT must be returned (a merge's custom query), it is refused, saying how
    with pytest.raises(QueryRefusedError, match=r"PIVOT \.\.\. ON column IN \('a', 'b', \.\.\.\)"):
        check_sql(sql, limits=LIMITS)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM events WHERE s <= 'Zürich' AND t = '日本'",
        "SELECT 'ÿ' AS a, x FROM events WHERE s <> '日本' QUALIFY row_number() OVER () <= 2",
        "SELECT '😀' AS e; ",
    ],
)
def test_text_that_is_not_ascii_is_one_statement(sql: str) -> None:
    assert check_query(sql, limits=LIMITS).pivots_from_data == 0


def test_a_pivot_that_lists_its_values_runs_as_written() -> None:
    sql = "PIVOT events ON event IN ('a', 'b') USING count(*)"
    assert check_query(sql, limits=LIMITS).analyzed == sql == check_sql(sql, limits=LIMITS)


@pytest.mark.parametrize(
    ("sql", "where"),
    [
        ("SELECT '\ud800' AS x", "character 9 is '\\ud800'"),
        ("SELECT 1 -- \udcff", "character 13 is '\\udcff'"),
    ],
)
def test_text_that_is_not_valid_unicode_is_refused(sql: str, where: str) -> None:
    with pytest.raises(QueryRefusedError) as refused:
        check_query(sql, limits=LIMITS)
    assert str(refused.value) == (
        f"query refused: the SQL is not valid Unicode text (surrogates not allowed: {where})"
    )


def test_a_delete_predicate_that_is_not_valid_unicode_is_refused() -> None:
    from icefloe.errors import InvalidInputError
    from icefloe.lifecycle.predicate import check_predicate
    from icefloe.spec import TableSpec, parse_schema

    spec = TableSpec(name="c", columns=tuple(parse_schema("v VARCHAR")))
    with pytest.raises(InvalidInputError) as refused:
        check_predicate(spec, "v = '\ud800'")
    assert str(refused.value) == (
        "delete refused: the predicate is not valid Unicode text (surrogates not allowed:"
        " character 6 is '\\ud800')"
    )


def test_a_query_past_the_parsers_depth_limit_is_told_to_nest_less() -> None:
    # DuckDB's own advice is a SET no query may run
    sql = "SELECT " + "abs(" * 1100 + "1" + ")" * 1100
    with pytest.raises(QueryRefusedError) as refused:
        check_query(sql, limits=QueryLimits())
    assert str(refused.value) == (
        "query refused: Parser Error: Max expression depth limit of 1000 exceeded;"
        " nest fewer levels"
    )
