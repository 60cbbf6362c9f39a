"""Queries whose text takes an unusual shape, answered as their plain form is: a comment
inside IS [NOT] DISTINCT FROM (or a form that parses as one: IS [NOT] TRUE, IS [NOT] FALSE) kept
the NULL rows DuckDB's Parquet scan loses; a BIT or BIGNUM constant no longer crashes the scan
planner; a tenant that is not Unicode text is refused by name; a TIMETZ, BIT, BIGNUM or
UHUGEINT result of a query ending in a line comment or a ``;`` is answered; and DuckDB's depth
limit error no longer advises a SET the sandbox refuses."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icefloe import connect
from icefloe.aws.events import error_answer, parse_query
from icefloe.cli import main
from icefloe.lake import Lake
from icefloe.query.executor import QueryFailedError
from icefloe.query.sandbox import QueryRefusedError, check_query
from icefloe.query.service import answer_query
from icefloe.query.sql_refs import analyze
from icefloe.settings.limits import QueryLimits
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["in_process", "child_process"])
def shapes(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_dsn: str, schema_name: str
) -> Iterator[Lake]:
    """``nx``: one file whose x and b are NULL in every row, one with x 5 and 7; ``ev``: a
    table scoped by tenant."""
    with connect(
        home=tmp_path / "home",
        database_url=postgres_dsn,
        database_schema=schema_name,
        query_isolation=request.param,
    ) as lake:
        lake.create_table("nx", schema="ts TIMESTAMP NOT NULL, x INTEGER, b BOOLEAN")
        lake.insert(
            "nx",
            [
                {"ts": "2026-01-01T00:00:00", "x": None, "b": None},
                {"ts": "2026-01-01T00:00:01", "x": None, "b": None},
            ],
        )
        lake.insert(
            "nx",
            [
                {"ts": "2026-01-01T00:00:02", "x": 5, "b": True},
                {"ts": "2026-01-01T00:00:03", "x": 7, "b": False},
            ],
        )
        lake.create_table(
            "ev",
            schema="tenant VARCHAR NOT NULL, n INTEGER",
            partition_by="tenant",
            tenant_column="tenant",
        )
        lake.insert("ev", [{"tenant": "acme", "n": 1}, {"tenant": "beta", "n": 2}])
        yield lake


# --- an OR holding IS [NOT] DISTINCT FROM, however written ---------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("x IS DISTINCT /* */ FROM 5 OR x = 7", 3),
        ("x IS DISTINCT -- c\n FROM 5 OR x = 7", 3),
        ("NOT (x IS NOT DISTINCT/**/FROM 5) OR x = 7", 3),
        # IS [NOT] TRUE and IS [NOT] FALSE parse as IS [NOT] DISTINCT FROM true/false.
        ("b IS NOT TRUE OR b IS NOT FALSE", 4),
        ("b IS TRUE OR b IS NOT TRUE", 4),
        ("b IS NOT FALSE OR b = false", 4),
    ],
)
def test_an_or_with_distinct_from_in_any_spelling_keeps_the_rows_of_the_all_null_file(
    shapes: Lake, where: str, expected: int
) -> None:
    sql = f"SELECT count(*) AS c FROM nx WHERE {where}"
    assert shapes.query(sql).to_pylist() == [{"c": expected}]


def test_a_pivot_of_the_data_over_such_an_or_keeps_the_null_rows(shapes: Lake) -> None:
    sql = (
        "PIVOT (SELECT x, b FROM nx WHERE x IS DISTINCT /* */ FROM 5 OR x = 7) ON b"
        " USING count(*) GROUP BY x ORDER BY x"
    )
    assert shapes.query(sql).to_pylist() == [{"x": 7, "false": 1}, {"x": None, "false": 0}]


def test_the_pushdown_rule_reads_the_parse_tree_and_a_pivot_through_its_stand_in() -> None:
    assert analyze("SELECT 1 FROM t WHERE x IS DISTINCT/**/FROM 5 OR y").may_lose_null_rows
    assert analyze("SELECT 1 FROM t WHERE b IS NOT TRUE OR y").may_lose_null_rows
    # Words in a string or a comment are no expression.
    assert not analyze(
        "SELECT 'is distinct from' OR x /* IS DISTINCT FROM 5 */ FROM t"
    ).may_lose_null_rows
    assert not analyze("SELECT 1 FROM t WHERE x IS DISTINCT FROM 5").may_lose_null_rows
    # A PIVOT of the data is several statements: read by what its stand-in holds.
    plain = check_query("PIVOT t ON k USING count(*)", limits=QueryLimits())
    assert plain.pivots_from_data == 1
    assert not analyze(plain.analyzed).may_lose_null_rows
    risky = check_query(
        "PIVOT (SELECT * FROM t WHERE x IS NOT DISTINCT FROM 5 OR y) ON k USING count(*)",
        limits=QueryLimits(),
    )
    assert risky.pivots_from_data == 1
    assert analyze(risky.analyzed).may_lose_null_rows


# --- BIT and BIGNUM constants --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT '101'::BIT AS v FROM nx LIMIT 1", [{"v": "101"}]),
        (
            "SELECT '12345678901234567890123456789012345678901'::BIGNUM AS v FROM nx LIMIT 1",
            [{"v": "12345678901234567890123456789012345678901"}],
        ),
        ("SELECT count(*) AS v FROM nx WHERE x::BIT = '101'::BIT", [{"v": 0}]),
    ],
)
def test_a_bit_or_bignum_constant_over_a_lake_table_is_answered(
    shapes: Lake, sql: str, expected: list[dict[str, Any]]
) -> None:
    assert shapes.query(sql).to_pylist() == expected


def test_a_plan_duckdb_serializes_as_nothing_reads_every_file(shapes: Lake) -> None:
    # Without the BIT constant, x = 7 reads the one file holding a 7.
    engine = shapes.query_engine()
    assert engine.query("SELECT 1 AS v FROM nx WHERE x = 7").plan("nx").files_scanned == 1
    result = engine.query("SELECT '101'::BIT AS v FROM nx WHERE x = 7")
    assert result.rows.to_pylist() == [{"v": "101"}]
    assert (result.plan("nx").files_considered, result.plan("nx").files_scanned) == (2, 2)


# --- a tenant that is not Unicode text -----------------------------------------------------


@pytest.fixture
def tenants(connected_lake: Lake) -> Lake:
    connected_lake.create_table(
        "ev",
        schema="tenant VARCHAR NOT NULL, n INTEGER",
        partition_by="tenant",
        tenant_column="tenant",
    )
    connected_lake.insert("ev", [{"tenant": "acme", "n": 1}])
    return connected_lake


SURROGATE_TENANT = (
    "query refused: the tenant '\\ud800' is not valid Unicode text (surrogates not allowed:"
    " character 1 is '\\ud800')"
)


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ("\ud800", SURROGATE_TENANT),
        (
            "ac\udcffme",
            "query refused: the tenant 'ac\\udcffme' is not valid Unicode text (surrogates not"
            " allowed: character 3 is '\\udcff')",
        ),
    ],
)
def test_a_tenant_holding_a_lone_surrogate_is_refused_by_name(
    shapes: Lake, tenant: str, message: str
) -> None:
    with pytest.raises(QueryRefusedError) as refused:
        shapes.query_engine().query("SELECT count(*) FROM ev", tenant=tenant)
    assert str(refused.value) == message
    # And the engine answers the next query
    answer = shapes.query_engine().query("SELECT sum(n) AS s FROM ev", tenant="beta")
    assert answer.rows.to_pylist() == [{"s": 2}]


def test_the_query_function_answers_a_surrogate_tenant_with_an_error(
    tenants: Lake, tmp_path: Path
) -> None:
    # A JSON event may hold "\ud800": json.loads gives the lone surrogate.
    event = json.loads('{"sql": "SELECT count(*) FROM ev", "tenant": "\\ud800"}')
    request = parse_query(event)
    with pytest.raises(QueryRefusedError) as refused:
        answer_query(
            tenants.query_engine(), request, results=LocalObjectStore(tmp_path / "results")
        )
    answer = error_answer(refused.value)
    assert answer == {
        "error": {"type": "QueryRefusedError", "message": SURROGATE_TENANT, "problems": []}
    }
    json.dumps(answer).encode("utf-8")  # the answer itself is text


def test_the_cli_refuses_a_tenant_of_a_byte_that_is_not_utf8(
    tenants: Lake,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    postgres_dsn: str,
    schema_name: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ICEFLOE_WAREHOUSE", raising=False)
    # Python reads the byte 0xff of a command line as "\udcff" (surrogateescape).
    argv = [
        "query",
        "SELECT count(*) AS n FROM ev",
        "--tenant",
        b"\xff".decode(errors="surrogateescape"),
    ]
    out = io.StringIO()
    assert main(argv, out=out) == 1
    assert out.getvalue() == ""
    assert capsys.readouterr().err == (
        "icefloe: error: query refused: the tenant '\\udcff' is not valid Unicode text"
        " (surrogates not allowed: character 1 is '\\udcff')\n"
    )


# --- results DuckDB's Arrow export alters, from a query ending in a comment or ";" ---------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT TIMETZ '10:00:00+02' AS t -- the offset", [{"t": "10:00:00+02"}]),
        ("SELECT TIMETZ '10:00:00+02' AS t;", [{"t": "10:00:00+02"}]),
        ("SELECT TIMETZ '10:00:00+02' AS t ; ; -- done;", [{"t": "10:00:00+02"}]),
        ("SELECT TIMETZ '10:00:00+02' AS t /* ; */ ;", [{"t": "10:00:00+02"}]),
        # A ";" in a string, a quoted name or a comment is the query's own.
        (
            "SELECT TIMETZ '10:00:00+02' AS \"t;\", 'a;' AS s -- ;",
            [{"t;": "10:00:00+02", "s": "a;"}],
        ),
        ("SELECT '101'::BIT AS v FROM nx LIMIT 1 -- bits", [{"v": "101"}]),
        (
            "SELECT '-12345678901234567890123456789'::BIGNUM AS v;",
            [{"v": "-12345678901234567890123456789"}],
        ),
        (
            "SELECT 340282366920938463463374607431768211455::UHUGEINT AS u -- big",
            [{"u": "340282366920938463463374607431768211455"}],
        ),
        (
            "SELECT [TIMETZ '10:00:00+02'] AS l FROM nx WHERE x = 7\n-- a list of them;",
            [{"l": ["10:00:00+02"]}],
        ),
        (
            "PIVOT (SELECT x, b FROM nx WHERE x IS NOT NULL) ON b USING"
            " first(TIMETZ '10:00:00+02') GROUP BY x ORDER BY x; -- pivot",
            [
                {"x": 5, "false": None, "true": "10:00:00+02"},
                {"x": 7, "false": "10:00:00+02", "true": None},
            ],
        ),
    ],
)
def test_an_altered_type_result_of_a_query_ending_in_a_comment_or_semicolon_is_answered(
    shapes: Lake, sql: str, expected: list[dict[str, Any]]
) -> None:
    assert shapes.query(sql).to_pylist() == expected


# --- DuckDB's depth limit -------------------------------------------------------------------


def test_the_depth_limit_error_names_no_setting_the_sandbox_refuses(shapes: Lake) -> None:
    # fdiv is a macro: 400 calls pass the parser's depth limit and the sandbox's check, and
    # bind past DuckDB's limit of 1,000.
    sql = "SELECT " + "fdiv(" * 400 + "x" + ", 2)" * 400 + " AS y FROM nx"
    with pytest.raises(QueryFailedError) as failed:
        shapes.query(sql)
    assert str(failed.value) == (
        "query failed: Binder Error: Max expression depth limit of 1000 exceeded; nest fewer levels"
    )
