"""The statement check: plain SELECTs pass, everything else is refused by name."""

from __future__ import annotations

import pytest

from icefloe.errors import ConfigError
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


def test_limits_come_from_the_environment_and_the_lambda_memory_size() -> None:
    assert QueryLimits.from_env({}) == QueryLimits()
    in_lambda = QueryLimits.from_env({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3538"})
    assert (in_lambda.memory_limit, in_lambda.threads) == ("2299MB", 2)
    configured = QueryLimits.from_env(
        {
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3538",
            "ICEFLOE_QUERY_MEMORY_LIMIT": "512MB",
            "ICEFLOE_QUERY_THREADS": "1",
            "ICEFLOE_QUERY_TIMEOUT_S": "2.5",
            "ICEFLOE_QUERY_MAX_RESULT_ROWS": "1000",
            "ICEFLOE_QUERY_MAX_RESULT_BYTES": "65536",
        }
    )
    assert configured == QueryLimits(
        memory_limit="512MB",
        threads=1,
        timeout_s=2.5,
        max_result_rows=1000,
        max_result_bytes=65536,
    )
    assert QueryLimits(memory_limit="512MB").result_bytes == 256_000_000


@pytest.mark.parametrize(
    "environ",
    [
        {"ICEFLOE_QUERY_MEMORY_LIMIT": "lots"},
        {"ICEFLOE_QUERY_THREADS": "zero"},
        {"ICEFLOE_QUERY_THREADS": "0"},
        {"ICEFLOE_QUERY_TIMEOUT_S": "-1"},
        {"ICEFLOE_QUERY_MAX_RESULT_ROWS": "0"},
        {"ICEFLOE_QUERY_MAX_RESULT_BYTES": "many"},
    ],
)
def test_bad_limits_are_a_configuration_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        QueryLimits.from_env(environ)
