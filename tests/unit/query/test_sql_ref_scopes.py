"""Which names of a SELECT are tables: a CTE binds its name only where DuckDB's scoping says
so. A name bound by a CTE in one scope and used in another was left out of the tables, so the
sandbox never saw it and DuckDB read it as a file path."""

from __future__ import annotations

import duckdb
import pytest

from icefloe.query.sql_refs import analyze


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        # A CTE in a subquery does not bind the name outside it
        (
            'SELECT * FROM (WITH "f.parquet" AS (SELECT 1) SELECT * FROM "f.parquet") a, "f.parquet"',
            {"f.parquet"},
        ),
        ("SELECT * FROM (WITH t AS (SELECT 1) SELECT * FROM t) a, t", {"t"}),
        ("SELECT (WITH t AS (SELECT 1 x) SELECT x FROM t) FROM t", {"t"}),
        # A definition does not see itself, nor a later one
        ("WITH t AS (SELECT * FROM t) SELECT * FROM t", {"t"}),
        ("WITH a AS (SELECT * FROM b), b AS (SELECT 1 x) SELECT * FROM a", {"b"}),
        # ...but sees the earlier ones, and the outer query's
        ("WITH a AS (SELECT 1 x), b AS (SELECT * FROM a) SELECT * FROM b", set()),
        (
            "WITH a AS (SELECT 1 x) SELECT * FROM (WITH b AS (SELECT * FROM a) SELECT * FROM b)",
            set(),
        ),
        (
            "WITH a AS (SELECT 1 x) SELECT * FROM (WITH a AS (SELECT * FROM a) SELECT * FROM a)",
            set(),
        ),
        # A recursive CTE sees itself in its recursive part only
        (
            "WITH RECURSIVE r AS (SELECT 1 x UNION ALL SELECT x + 1 FROM r WHERE x < 3)"
            " SELECT * FROM r",
            set(),
        ),
        ("WITH RECURSIVE r AS (SELECT * FROM r UNION ALL SELECT 1) SELECT * FROM r", {"r"}),
        # A CTE of one branch of a UNION does not bind the other's name
        ("(WITH t AS (SELECT 1 x) SELECT * FROM t) UNION ALL (SELECT * FROM t)", {"t"}),
        ("WITH t AS (SELECT 1 x) SELECT * FROM t UNION ALL SELECT * FROM t", set()),
        # Names in any case
        ("WITH T AS (SELECT 1 x) SELECT * FROM t, U", {"u"}),
    ],
)
def test_a_name_is_a_table_wherever_no_cte_in_scope_binds_it(sql: str, tables: set[str]) -> None:
    assert analyze(sql).tables == tables


def test_a_name_left_as_a_cte_is_one_duckdb_binds_as_a_cte() -> None:
    # With no table of that name, DuckDB answers each query the analysis says reaches no table
    con = duckdb.connect()
    for sql in (
        "WITH a AS (SELECT 1 x), b AS (SELECT * FROM a) SELECT * FROM b",
        "WITH a AS (SELECT 1 x) SELECT * FROM (WITH a AS (SELECT * FROM a) SELECT * FROM a)",
        "WITH RECURSIVE r AS (SELECT 1 x UNION ALL SELECT x + 1 FROM r WHERE x < 3)"
        " SELECT count(*) FROM r",
    ):
        assert analyze(sql).tables == set()
        assert con.execute(sql).fetchall()
