"""A query reaches the lake's tables only, however it scopes its CTEs, and no built-in macro
hands it the catalog: a CTE named like a file in one subquery let the same name elsewhere be
read by DuckDB as that file (every tenant's rows, files no snapshot holds), and
``pg_get_viewdef`` returned every view's SQL, other tenants' file paths included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from icefloe import connect
from icefloe.errors import InvalidInputError, TableNotFoundError
from icefloe.lake import Lake


@pytest.fixture(params=["in_process", "child_process"])
def tenants(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_dsn: str, schema_name: str
) -> Iterator[Lake]:
    with connect(
        home=tmp_path / "home",
        database_url=postgres_dsn,
        database_schema=schema_name,
        query_isolation=request.param,
    ) as lake:
        lake.create_table(
            "ev",
            schema="tenant VARCHAR NOT NULL, n INTEGER",
            partition_by="tenant",
            tenant_column="tenant",
        )
        lake.insert("ev", [{"tenant": "acme", "n": 1}, {"tenant": "beta", "n": 2}])
        lake.create_table("plain", schema="n INTEGER")
        lake.insert("plain", [{"n": 7}])
        yield lake


def test_a_file_named_outside_its_ctes_scope_is_refused_as_no_table(tenants: Lake) -> None:
    files = str(Path(tenants.file_urls("ev")[0]).parent.parent / "**" / "*.parquet")
    sql = (
        f'SELECT b.tenant, count(*) AS n FROM (WITH "{files}" AS (SELECT 1 AS x)'
        f' SELECT * FROM "{files}") a, "{files}" b GROUP BY ALL'
    )
    with pytest.raises(TableNotFoundError, match=r"no table named '.*parquet'"):
        tenants.query_engine().query(sql, tenant="acme")
    with pytest.raises(TableNotFoundError, match="no table named 'pg_views'"):
        tenants.query(
            "SELECT * FROM (WITH pg_views AS (SELECT 1) SELECT * FROM pg_views), pg_views"
        )


def test_a_lake_table_named_outside_a_ctes_scope_is_the_table(tenants: Lake) -> None:
    sql = "SELECT a.z, b.n FROM (WITH plain AS (SELECT 1 AS z) SELECT * FROM plain) a, plain b"
    assert tenants.query(sql).to_pylist() == [{"z": 1, "n": 7}]
    scoped = (
        "SELECT e.tenant, e.n FROM (WITH ev AS (SELECT 'x' AS tenant, 0 AS n) SELECT * FROM ev) s,"
        " ev e"
    )
    assert tenants.query_engine().query(scoped, tenant="acme").rows.column(
        "tenant"
    ).to_pylist() == ["acme"]


@pytest.mark.parametrize(
    "call",
    [
        "pg_get_viewdef(i)",
        "pg_get_constraintdef(i)",
        "format_type(i, 0)",
        "get_block_size('memory')",
    ],
)
def test_macros_over_the_catalog_are_refused(tenants: Lake, call: str) -> None:
    name = call.split("(")[0]
    with pytest.raises(InvalidInputError, match=f"function {name}\\(\\) is not allowed"):
        tenants.query(f"SELECT {call} FROM range(0, 10) t(i)")
