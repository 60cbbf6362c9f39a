"""The statement check: plain SELECTs pass, everything else is refused by name."""

from __future__ import annotations

import pytest

from icefloe.query.sandbox import QueryLimits, QueryRefusedError, check_sql

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
    ],
)
def test_other_statements_are_refused_by_name(sql: str, message: str) -> None:
    with pytest.raises(QueryRefusedError, match=message):
        check_sql(sql, limits=LIMITS)


def test_a_result_cap_defaults_to_half_the_memory_limit() -> None:
    assert QueryLimits(memory_limit="512MB").result_bytes == 256_000_000
