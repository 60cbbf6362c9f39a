"""A PIVOT whose values come from the data runs as DuckDB expands it, and leaves nothing on
the kept connection for the next query."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefloe.query.executor import InProcessExecutor
from icefloe.query.sandbox import check_query
from icefloe.settings.limits import QueryLimits

VIEWS = [("events", "SELECT * FROM (VALUES ('a', 'u1'), ('b', 'u1'), ('a', 'u2')) v(event, uid)")]
LEFT_TYPES = (
    "SELECT count(*) AS n FROM duckdb_types() WHERE starts_with(type_name, '__pivot_enum_')"
)


@pytest.mark.parametrize(
    "sql",
    [
        "PIVOT events ON event USING count(*) GROUP BY uid ORDER BY uid",
        "SELECT * FROM (PIVOT events ON event USING count(*) GROUP BY uid) ORDER BY uid",
    ],
)
def test_the_expansion_runs_and_its_enum_types_are_dropped(tmp_path: Path, sql: str) -> None:
    executor = InProcessExecutor(root_uri=str(tmp_path), limits=QueryLimits())
    try:
        checked = check_query(sql, limits=QueryLimits())
        assert checked.pivots_from_data == 1
        for _ in range(2):
            rows = executor.execute(
                checked.statement, VIEWS, without_filter_pushdown=False
            ).to_pylist()
            assert rows == [{"uid": "u1", "a": 1, "b": 1}, {"uid": "u2", "a": 1, "b": 0}]
        # The next query on the same views gets the kept connection: no enum type is left on it
        assert executor.execute(LEFT_TYPES, VIEWS, without_filter_pushdown=False).to_pylist() == [
            {"n": 0}
        ]
    finally:
        executor.close()
