"""The warm databases. The query engine's: set up once, rebuilt when old, views shared by
definition and evicted. The work database merges and deletes run in: opened once, a cursor
per job, rebuilt when old or after a failure without breaking the jobs still running on the
old one, locked down."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from icefloe.merge.worker import merge_database
from icefloe.query.database import QueryDatabase, WorkDatabase, shared_view_name
from icefloe.settings.limits import MergeLimits, QueryLimits
from icefloe.storage import LocalObjectStore


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


def test_a_database_replaced_while_a_query_runs_closes_after_it(tmp_path: Path) -> None:
    # Rebuilding the database (older than its age) or starting afresh after a read failure
    # closed it under the queries of other threads: a running query failed with "No open
    # result set".
    clock = Clock()
    database = QueryDatabase(
        root_uri=str(tmp_path), limits=QueryLimits(), max_age_s=60, clock=clock
    )
    views = [("t", "SELECT range AS x FROM range(3)")]
    with _session(database, views) as running:
        clock.now = 61
        with _session(database, views) as newer:
            assert newer is not running
            assert newer.execute("SELECT sum(x) FROM t").fetchall() == [(3,)]
        database.forget_views()
        with _session(database, views) as newest:
            assert newest.execute("SELECT count(*) FROM t").fetchall() == [(3,)]
        # The first database is still open under the running query.
        assert running.execute("SELECT max(x) FROM t").fetchall() == [(2,)]
    # Its last session ended: it is closed.
    with pytest.raises(duckdb.ConnectionException):
        running.execute("SELECT 1")
    database.close()


def test_a_view_evicted_while_a_query_uses_it_is_dropped_after_the_query(
    tmp_path: Path,
) -> None:
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits(), max_views=1)
    one, two = "SELECT 1 AS x", "SELECT 2 AS x"

    def shared_views() -> set[str]:
        with _session(database, []) as cursor:
            rows = cursor.execute(
                "SELECT view_name FROM duckdb_views() WHERE schema_name = 'icefloe_views'"
            ).fetchall()
        return {name for (name,) in rows}

    with _session(database, [("t", one)]) as first:
        with _session(database, [("t", two)]) as second:
            # The cache holds one view: the first was evicted, yet its query still reads it.
            assert first.execute("SELECT x FROM t").fetchall() == [(1,)]
            assert second.execute("SELECT x FROM t").fetchall() == [(2,)]
            assert shared_views() == {shared_view_name(one), shared_view_name(two)}
        # Bound again while still in use, the evicted view is taken back, not created anew;
        # the one it evicts in turn is used by no query and goes at once.
        with _session(database, [("t", one)]) as again:
            assert again.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert shared_views() == {shared_view_name(one)}
        with _session(database, [("t", two)]):
            pass
        assert first.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert shared_views() == {shared_view_name(one), shared_view_name(two)}
    # Nothing uses the evicted view (t = 1) any more: it is gone.
    assert shared_views() == {shared_view_name(two)}
    database.close()


def test_a_view_reused_through_an_idle_cursor_counts_as_recently_used(tmp_path: Path) -> None:
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits(), max_views=2)
    a, b, c = "SELECT 1 AS x", "SELECT 2 AS x", "SELECT 3 AS x"
    for body in (a, b, a, c):  # the second A reuses the idle cursor bound to A
        with _session(database, [("t", body)]) as cursor:
            cursor.execute("SELECT x FROM t").fetchall()
    with _session(database, []) as cursor:
        rows = cursor.execute(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'icefloe_views'"
        ).fetchall()
    # C evicted B, the least recently used, not A
    assert {name for (name,) in rows} == {shared_view_name(a), shared_view_name(c)}
    database.close()


def test_concurrent_queries_survive_rebuilds_and_evictions(tmp_path: Path) -> None:
    clock = Clock()
    database = QueryDatabase(
        root_uri=str(tmp_path), limits=QueryLimits(), max_views=2, max_age_s=60, clock=clock
    )
    failures: list[BaseException] = []

    def run(worker: int) -> None:
        for i in range(60):
            n = (worker * 7 + i) % 5
            try:
                with _session(database, [("t", f"SELECT range AS x FROM range({n + 1})")]) as c:
                    assert c.execute("SELECT count(*) FROM t").fetchall() == [(n + 1,)]
                    if i % 13 == worker:
                        database.forget_views()
                    clock.now += 7
                    assert c.execute("SELECT sum(x) FROM t").fetchall() == [(n * (n + 1) // 2,)]
            except BaseException as e:  # collected, shown by the assertion below
                failures.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    database.close()


def test_a_time_limit_that_passed_while_the_views_were_bound_stops_the_query(
    tmp_path: Path,
) -> None:
    # Given a limit that passed while the session bound its views (it waits for the lock a
    # concurrent query's bind holds): the timer set the event, and its interrupt, sent when
    # no statement ran, was forgotten by DuckDB
    database = QueryDatabase(root_uri=str(tmp_path), limits=QueryLimits())
    fired = threading.Event()
    fired.set()
    ran = False

    # When the session would hand its cursor to the query, Then it is interrupted instead
    with (
        pytest.raises(duckdb.InterruptException),
        database.session([("t", "SELECT 1 AS x")], time_limit_s=30, fired=fired) as cursor,
    ):
        ran = True
        cursor.execute("SELECT x FROM t").fetchall()
    assert not ran
    database.close()


def test_jobs_share_one_database_until_it_is_older_than_its_age(tmp_path: Path) -> None:
    setups: list[duckdb.DuckDBPyConnection] = []
    clock = Clock()
    database = WorkDatabase(
        root_uri=str(tmp_path),
        limits=QueryLimits(),
        configure=setups.append,
        max_age_s=60,
        clock=clock,
    )
    for _ in range(3):
        with database.session() as con:
            assert con.execute("SELECT 42").fetchall() == [(42,)]
    assert (database.opened, len(setups)) == (1, 1)
    clock.now = 61
    with database.session():
        pass
    assert (database.opened, len(setups)) == (2, 2)
    database.close()


def test_each_job_sees_only_its_own_temp_views_and_tables(tmp_path: Path) -> None:
    database = WorkDatabase(root_uri=str(tmp_path), limits=QueryLimits())
    with database.session() as first, database.session() as second:
        first.execute("CREATE TEMP VIEW t AS SELECT 1 AS x")
        second.execute("CREATE TEMP VIEW t AS SELECT 2 AS x")
        first.execute("CREATE TEMP TABLE decided AS SELECT 10 AS y")
        assert first.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert second.execute("SELECT x FROM t").fetchall() == [(2,)]
        with pytest.raises(duckdb.CatalogException):
            second.execute("SELECT y FROM decided").fetchall()
    # A job's TEMP objects end with it.
    with database.session() as later, pytest.raises(duckdb.CatalogException):
        later.execute("SELECT x FROM t").fetchall()
    assert database.opened == 1
    database.close()


def test_a_failed_job_retires_the_database_and_a_running_job_keeps_its_own(
    tmp_path: Path,
) -> None:
    opened: list[duckdb.DuckDBPyConnection] = []
    database = WorkDatabase(root_uri=str(tmp_path), limits=QueryLimits(), configure=opened.append)
    with database.session() as running:
        running.execute("CREATE TEMP VIEW t AS SELECT 1 AS x")
        with pytest.raises(duckdb.BinderException), database.session() as failing:
            failing.execute("SELECT no_such_column FROM range(1)").fetchall()
        # The next job gets a new database; the running one still reads from the old.
        with database.session() as after:
            assert after.execute("SELECT 2").fetchall() == [(2,)]
        assert database.opened == 2
        assert running.execute("SELECT x FROM t").fetchall() == [(1,)]
        assert opened[0].execute("SELECT 1").fetchall() == [(1,)]
    # The old database's last session ended: it is closed.
    with pytest.raises(duckdb.ConnectionException):
        opened[0].execute("SELECT 1")
    # Closing the database waits for nothing: no session runs; a later one opens anew.
    database.close()
    with database.session() as reopened:
        assert reopened.execute("SELECT 3").fetchall() == [(3,)]
    assert database.opened == 3
    database.close()


def test_a_job_reads_under_the_warehouse_only_and_changes_no_setting(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    (warehouse / "inside.csv").write_text("a\n1\n")
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n2\n")
    spill = tmp_path / "spill"
    database = WorkDatabase(
        root_uri=str(warehouse),
        limits=QueryLimits(memory_limit="256MB", threads=1),
        settings=lambda: [f"SET GLOBAL temp_directory = '{spill}'"],
    )
    with database.session() as con:
        assert con.execute(f"SELECT a FROM read_csv('{warehouse}/inside.csv')").fetchall() == [(1,)]
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"SELECT a FROM read_csv('{outside}')").fetchall()
        settings = dict(
            con.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN ('threads',"
                " 'temp_directory', 'lock_configuration', 'enable_external_access')"
            ).fetchall()
        )
        assert settings == {
            "threads": "1",
            "temp_directory": str(spill),
            "lock_configuration": "true",
            "enable_external_access": "false",
        }
        with pytest.raises(duckdb.Error, match="lock"):
            con.execute("SET threads = 2")
    database.close()


def test_each_merge_database_spills_into_a_directory_of_its_own(tmp_path: Path) -> None:
    # A database rebuilt while the old one still runs a job must not share its spill files
    database = merge_database(
        LocalObjectStore(tmp_path / "warehouse"), MergeLimits(temp_directory=tmp_path / "spill")
    )
    spills = []
    for _ in range(2):
        with pytest.raises(duckdb.BinderException), database.session() as con:
            spills.append(current_setting(con, "temp_directory"))
            con.execute("SELECT no_such_column FROM range(1)")
    assert database.opened == 2
    assert spills[0] != spills[1] and all(s.startswith(str(tmp_path / "spill")) for s in spills)
    database.close()


def current_setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    row = con.execute("SELECT value FROM duckdb_settings() WHERE name = ?", [name]).fetchone()
    assert row is not None
    return str(row[0])
