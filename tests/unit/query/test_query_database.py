"""The warm database: set up once, rebuilt when old, views shared by definition and evicted."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from icefloe.query.database import QueryDatabase
from icefloe.query.sandbox import QueryLimits


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_set_up_once_and_again_when_older_than_its_age(tmp_path: Path) -> None:
    setups: list[duckdb.DuckDBPyConnection] = []
    clock = Clock()
    database = QueryDatabase(
        root_uri=str(tmp_path),
        limits=QueryLimits(),
        configure=setups.append,
        max_age_s=60,
        clock=clock,
    )
    for _ in range(3):
        database.cursor().close()
    assert len(setups) == 1
    clock.now = 61
    database.cursor().close()
    assert len(setups) == 2
    database.close()


def test_views_are_per_cursor_and_evicted_past_the_cache_size(tmp_path: Path) -> None:
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits(), max_views=2)
    first, second = database.cursor(), database.cursor()
    database.bind_view(first, "t", "SELECT 1 AS x")
    database.bind_view(second, "t", "SELECT 2 AS x")
    # Each cursor sees its own table t.
    assert first.execute("SELECT x FROM t").fetchall() == [(1,)]
    assert second.execute("SELECT x FROM t").fetchall() == [(2,)]
    # A third definition evicts the least recently used one (the first).
    third = database.cursor()
    database.bind_view(third, "t", "SELECT 3 AS x")
    assert third.execute("SELECT x FROM t").fetchall() == [(3,)]
    with pytest.raises(duckdb.Error):
        first.execute("SELECT x FROM t").fetchall()
    # Bound again, the definition is created anew.
    again = database.cursor()
    database.bind_view(again, "t", "SELECT 1 AS x")
    assert again.execute("SELECT x FROM t").fetchall() == [(1,)]
    database.close()


def test_files_outside_the_warehouse_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    database = QueryDatabase(root_uri=str(tmp_path / "warehouse"), limits=QueryLimits())
    cursor = database.cursor()
    with pytest.raises(duckdb.PermissionException):
        cursor.execute(f"SELECT * FROM read_csv('{outside}')").fetchall()
    database.close()
