"""The warm database: set up once, rebuilt when old, views shared by definition and evicted."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from icefloe.query.database import QueryDatabase
from icefloe.settings.limits import QueryLimits


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


def test_each_query_cursor_has_the_databases_locked_settings(tmp_path: Path) -> None:
    # A cursor is a new connection: settings made for the session only would not reach it
    # (the Parquet metadata cache and the Python replacement scans once did not).
    limits = QueryLimits(memory_limit="512MB", threads=1)
    database = QueryDatabase(root_uri=str(tmp_path), limits=limits)
    cursor = database.cursor()
    settings = dict(
        cursor.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('parquet_metadata_cache',"
            " 'python_enable_replacements', 'enable_external_access', 'lock_configuration',"
            " 'autoload_known_extensions', 'threads', 'validate_external_file_cache')"
        ).fetchall()
    )
    assert settings == {
        "parquet_metadata_cache": "true",
        "python_enable_replacements": "false",
        "enable_external_access": "false",
        "lock_configuration": "true",
        "autoload_known_extensions": "false",
        "threads": "1",
        "validate_external_file_cache": "NO_VALIDATION",
    }
    with pytest.raises(duckdb.Error, match="lock"):
        cursor.execute("SET python_enable_replacements = true")
    cursor.close()
    database.close()


def _session(database: QueryDatabase, views: list[tuple[str, str]]) -> Any:
    return database.session(views, time_limit_s=30, fired=threading.Event())


def test_a_cursor_bound_to_the_same_views_is_reused_after_a_query_that_ended_normally(
    tmp_path: Path,
) -> None:
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits(), max_views=2)
    one = [("t", "SELECT 1 AS x")]
    with _session(database, one) as first:
        assert first.execute("SELECT x FROM t").fetchall() == [(1,)]
    with _session(database, one) as again:
        assert again is first
    # Other views: another cursor, each seeing its own t.
    with _session(database, [("t", "SELECT 2 AS x")]) as other:
        assert other is not first
        assert other.execute("SELECT x FROM t").fetchall() == [(2,)]
    # A query that failed gives its cursor up.
    with pytest.raises(duckdb.Error), _session(database, one) as failing:
        failing.execute("SELECT no_such_column FROM t")
    with _session(database, one) as fresh:
        assert fresh is not failing
        assert fresh.execute("SELECT x FROM t").fetchall() == [(1,)]
    # A third definition evicts the least recently used view (t = 2), and the idle cursor
    # bound to it goes too: a later query binds a new one rather than meet a dropped view.
    with _session(database, [("t", "SELECT 3 AS x")]):
        pass
    with _session(database, [("t", "SELECT 2 AS x")]) as rebound:
        assert rebound is not other
        assert rebound.execute("SELECT x FROM t").fetchall() == [(2,)]
    database.close()


def test_a_session_past_its_time_limit_is_interrupted_and_not_reused(tmp_path: Path) -> None:
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits())
    fired = threading.Event()
    views = [("t", "SELECT 1 AS x")]
    with (
        pytest.raises(duckdb.InterruptException),
        database.session(views, time_limit_s=0.2, fired=fired) as cursor,
    ):
        cursor.execute("SELECT count(*) FROM range(10000000000) a").fetchall()
    assert fired.is_set()
    with _session(database, views) as next_cursor:
        assert next_cursor is not cursor
        assert next_cursor.execute("SELECT x FROM t").fetchall() == [(1,)]
    database.close()
