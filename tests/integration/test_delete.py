"""Delete: rows a predicate matches are gone in one snapshot; files statistics prove free of
matches are not touched; a dry run changes nothing; a merge racing it loses or makes it plan
again; bad predicates are refused by name; after gc no object holds a deleted row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import duckdb
import psycopg
import pytest
from psycopg import sql

from icefloe.errors import CommitConflictError, InvalidInputError, RowCountMismatchError
from icefloe.janitor import Janitor
from icefloe.lifecycle import delete as delete_module
from icefloe.lifecycle import delete_rows
from icefloe.lifecycle.predicate import PredicateEvaluationError
from icefloe.metastore.store import MetaStore
from icefloe.query.executor import QueryReadError
from icefloe.storage import ObjectStore
from support.hooked_meta import HookedMetaStore, PendingCommit
from support.merge_lake import ALL_ROWS, Lake
from support.stores import FailingAfterPuts, InjectedFault

pytestmark = pytest.mark.integration


def delete(  # type: ignore[no-untyped-def]
    lake: Lake,
    where: str,
    *,
    objects: ObjectStore | None = None,
    meta: MetaStore | None = None,
    **kwargs: object,
):
    return delete_rows(
        meta=meta or lake.meta,
        objects=objects or lake.objects,
        table="events",
        where=where,
        **kwargs,  # type: ignore[arg-type]
    )


def merged_lake(lake: Lake) -> None:
    """Three days of events, merged, then a few more small files."""
    lake.create(row_group_by="user_id")
    lake.insert_batches("events", batches=6, rows=80, days=3)
    lake.merge("events")
    lake.insert_batches("events", batches=2, rows=20, days=3, seed=40)


def test_a_delete_removes_exactly_the_matching_rows_in_one_snapshot(lake: Lake) -> None:
    merged_lake(lake)
    where = "user_id = 'u3' OR (event = 'purchase' AND ts < '2026-03-02')"
    before = lake.head()
    all_rows = lake.rows(ALL_ROWS)
    expected = lake.rows(
        ALL_ROWS.replace("ORDER BY", f"WHERE NOT coalesce(({where}), false) ORDER BY")
    )
    assert 0 < len(all_rows) - len(expected) < len(all_rows)

    result = delete(lake, where)

    assert result.snapshot_id == before + 1 == lake.head()
    assert result.rows_deleted == len(all_rows) - len(expected)
    assert lake.rows(ALL_ROWS) == expected
    assert lake.rows(ALL_ROWS, snapshot_id=before) == all_rows  # time travel still sees them
    last = lake.meta.snapshots("events")[-1]
    assert last.operation == "delete" and last.rows_removed - last.rows_added == result.rows_deleted
    # Only the changed files were replaced; every other live file is the same file as before
    changed = {c.path for c in result.changes}
    unchanged_before = {f.path for f in lake.meta.files("events", snapshot_id=before)} - changed
    assert unchanged_before <= {f.path for f in lake.meta.files("events")}
    # Rewritten files keep the table's order: row-group key (nulls first), then event, ts
    rewritten = [f for f in lake.meta.files("events") if f.begin_snapshot == lake.head()]
    assert rewritten
    con = duckdb.connect()
    for f in rewritten:
        rows = con.execute(
            f"SELECT user_id, event, ts FROM read_parquet('{lake.objects.uri(f.path)}')"
        ).fetchall()
        assert len(rows) == f.row_count
        assert rows == sorted(rows, key=lambda r: (r[0] is not None, r[0] or "", r[1], r[2]))


def test_files_whose_statistics_prove_no_match_are_not_read_or_touched(lake: Lake) -> None:
    merged_lake(lake)
    live = lake.meta.files("events")
    one_day = [f for f in live if f.partition_path == "day=2026-03-01"]
    assert len(one_day) < len(live)

    result = delete(lake, "ts >= '2026-03-01' AND ts < '2026-03-01 06:00'", dry_run=True)

    # Only that day's files were considered (the time partition), and read only if their
    # statistics allow a match
    assert result.files_considered == len(one_day)
    assert 0 < result.files_scanned <= len(one_day)
    assert {c.partition_path for c in result.changes} == {"day=2026-03-01"}


def test_a_dry_run_reports_the_files_and_rows_and_changes_nothing(lake: Lake) -> None:
    merged_lake(lake)
    before, objects_before = lake.head(), lake.data_objects()
    expected = lake.rows("SELECT count(*) AS n FROM events WHERE event = 'signup'")[0]["n"]

    result = delete(lake, "event = 'signup'", dry_run=True)

    assert result.dry_run and result.snapshot_id is None
    assert result.rows_deleted == expected > 0
    assert sum(c.rows_deleted for c in result.changes) == expected
    assert lake.head() == before and lake.data_objects() == objects_before


def test_a_predicate_that_matches_nothing_commits_nothing(lake: Lake) -> None:
    merged_lake(lake)
    before = lake.head()
    result = delete(lake, "user_id = 'nobody'")
    assert result.snapshot_id is None and result.rows_deleted == 0 and not result.changes
    assert lake.head() == before


def test_deleting_every_row_of_a_file_removes_it_without_a_rewrite(lake: Lake) -> None:
    merged_lake(lake)
    result = delete(lake, "ts < '2026-03-02'")
    assert result.files_removed > 0 and result.files_rewritten == 0
    assert lake.rows("SELECT count(*) AS n FROM events WHERE ts < '2026-03-02'") == [{"n": 0}]
    assert "day=2026-03-01" not in lake.live_files_per_partition("events")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("nope = 1", 'column "nope" not found'),
        ("user_id IN (SELECT user_id FROM events)", "may not hold a subquery"),
        ("random() < 0.5", "random() is VOLATILE in DuckDB"),
        ("ts < now()", "now() is CONSISTENT_WITHIN_QUERY in DuckDB"),
        ("ts < current_date", "current_date is CONSISTENT_WITHIN_QUERY in DuckDB"),
        ("ts < current_timestamp", "current_timestamp is not a function DuckDB lists"),
        ("ts > ago(INTERVAL 1 DAY)", "ago() is not a function DuckDB lists as consistent"),
        ("user_id = 'u5' AND current_connection_id() >= 0", "current_connection_id() is VOLATILE"),
        ("event = 'x' OR current_query() LIKE '%W'", "current_query() is VOLATILE"),
        ("pg_sleep(0) IS NULL", "pg_sleep() is VOLATILE"),
        ("true) QUALIFY (row_number() OVER () = 1", "one boolean expression (it adds qualify)"),
        ("true) USING SAMPLE (1", "one boolean expression (it adds sample)"),
        ("true) WINDOW w AS (", "is not one expression"),
        ("_row_id IS NULL", "_row_id is icefloe's row id"),
        ("count(*) > 1", "cannot contain aggregates"),
        ("true) UNION (SELECT 1", "one boolean expression"),
        ("event = 'x' -- trailing", "is not one expression"),
        # each frame's own parentheses would close these: read alone, they are two expressions
        ("user_id = 'u1') OR (1=1", "is not one expression"),
        ("(user_id = 'u1')) OR ((true", "is not one expression"),
        ("  ", "predicate is empty"),
    ],
)
def test_bad_predicates_are_refused_naming_the_fault(lake: Lake, where: str, message: str) -> None:
    merged_lake(lake)
    before = lake.head()
    with pytest.raises(InvalidInputError, match=message.replace("(", "\\(").replace(")", "\\)")):
        delete(lake, where)
    assert lake.head() == before


def test_a_merge_that_commits_first_makes_the_delete_plan_again(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=6, rows=30, days=1)
    where = "event = 'click'"
    expected = lake.rows(ALL_ROWS.replace("ORDER BY", f"WHERE NOT ({where}) ORDER BY"))
    attempts: list[int] = []

    def merge_first(_: PendingCommit) -> None:
        attempts.append(lake.head())
        if len(attempts) == 1:
            assert lake.merge("events").count("committed") == 1

    with HookedMetaStore.like(lake.meta, before_commit=merge_first) as racing_meta:
        result = delete(lake, where, meta=racing_meta)

    assert result.plans == 2 and lake.rows(ALL_ROWS) == expected
    assert lake.data_objects() >= {f.path for f in lake.meta.files("events")}
    # The first attempt's rewrites were deleted: every object is named by a file row
    rows = lake.every_file_row()
    assert lake.data_objects() == {f.path for f in rows}


def test_a_merge_holding_files_loses_to_the_delete(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=4, rows=30, days=1)
    live = [f.file_id for f in lake.meta.files("events")]
    token = lake.meta.claim_files("events", live, lease=timedelta(minutes=5))
    assert token is not None
    result = delete(lake, "event = 'click'")
    assert result.snapshot_id == lake.head()
    with pytest.raises(CommitConflictError, match="removed by snapshot"):
        lake.meta.commit_replace("events", remove=live, add=[], claim_token=token)
    assert lake.rows("SELECT count(*) AS n FROM events WHERE event = 'click'") == [{"n": 0}]


def test_a_failed_upload_commits_nothing_and_leaves_no_object(lake: Lake) -> None:
    merged_lake(lake)
    before, objects_before = lake.head(), lake.data_objects()
    failing = FailingAfterPuts(lake.objects, allowed=1)
    with pytest.raises(InjectedFault):
        delete(lake, "user_id = 'u3' OR user_id = 'u5'", objects=failing)
    assert lake.head() == before and lake.data_objects() == objects_before


def test_a_file_that_would_lose_other_rows_than_decided_commits_nothing(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given a live file whose row count in the meta store is one more than the rows it holds
    # (as if the rewrite lost a row the predicate did not match)
    merged_lake(lake)
    where = "user_id = 'u3'"
    plan = delete(lake, where, dry_run=True)
    target = next(c for c in plan.changes if c.action == "rewrite")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.data_files SET row_count = row_count + 1 WHERE path = %s").format(
                sql.Identifier(lake.meta.schema)
            ),
            (target.path,),
        )
    before, objects_before, rows_before = lake.head(), lake.data_objects(), lake.rows(ALL_ROWS)

    # When the delete runs, then it refuses to commit, and its rewrites are gone
    with pytest.raises(RowCountMismatchError, match=target.path):
        delete(lake, where)
    assert lake.head() == before and lake.data_objects() == objects_before
    assert lake.rows(ALL_ROWS) == rows_before


def test_after_gc_no_object_in_the_warehouse_holds_a_deleted_row(lake: Lake) -> None:
    # Given a user's events spread over many files, merged and not
    merged_lake(lake)
    where = "user_id = 'u3'"
    assert lake.rows(f"SELECT count(*) AS n FROM events WHERE {where}")[0]["n"] > 0
    # When they are deleted and gc runs past the retention
    delete(lake, where)
    Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))
    # Then no object under the warehouse holds one (read file by file, whatever the meta store says)
    con = duckdb.connect()
    keys = [o.key for o in lake.objects.list_prefix("")]
    assert keys
    for key in keys:
        found = con.execute(
            f"SELECT count(*) FROM read_parquet('{lake.objects.uri(key)}') WHERE {where}"
        ).fetchone()
        assert found == (0,), key


def test_rows_inserted_after_the_delete_planned_are_kept(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=3, rows=20, days=1)

    def insert_late(_: PendingCommit) -> None:
        lake.inserter.insert_rows(
            "events", [{"ts": "2026-03-01T12:00:00", "event": "click", "user_id": "late"}]
        )

    with HookedMetaStore.like(lake.meta, before_commit=insert_late) as racing_meta:
        delete(lake, "event = 'click'", meta=racing_meta)
    assert lake.rows("SELECT user_id FROM events WHERE event = 'click'") == [{"user_id": "late"}]


@pytest.mark.parametrize(
    "where",
    [
        "user_id NOT IN ('a', 'b') AND CAST(user_id AS INTEGER) = 1",
        "CAST(user_id AS INTEGER) = 1 AND user_id NOT IN ('a', 'b')",
        "user_id IN ('a', 'b') OR CAST(user_id AS INTEGER) = 1",
    ],
)
def test_a_predicate_guarding_a_cast_deletes_exactly_the_rows_a_query_selects(
    lake: Lake, where: str
) -> None:
    # Given user ids some of which are numbers, over two files
    lake.create()
    for users in (["a", "1", "2"], ["b", "1", "3"]):
        lake.inserter.insert_rows(
            "events",
            [
                {"ts": f"2026-03-01T00:00:0{n}", "event": "click", "user_id": user}
                for n, user in enumerate(users)
            ],
        )
    # (the rows it selects, and the others: NOT of the predicate as a value would meet the cast)
    selected = lake.rows(ALL_ROWS.replace("ORDER BY", f"WHERE {where} ORDER BY"))
    expected = lake.rows(ALL_ROWS)
    for row in selected:
        expected.remove(row)
    assert 0 < len(selected) < 6

    # When a delete with the same WHERE runs, then it deletes exactly the rows the query selects
    result = delete(lake, where)

    assert result.rows_deleted == len(selected) and result.snapshot_id == lake.head()
    assert lake.rows(ALL_ROWS) == expected


def test_a_predicate_failing_on_a_row_is_still_refused_naming_the_value(lake: Lake) -> None:
    lake.create()
    lake.inserter.insert_rows(
        "events", [{"ts": "2026-03-01T00:00:00", "event": "click", "user_id": "a"}]
    )
    before = lake.head()
    with pytest.raises(PredicateEvaluationError, match="'a'"):
        delete(lake, "CAST(user_id AS INTEGER) = 1")
    assert lake.head() == before


def test_a_delete_whose_planned_files_are_merged_and_collected_before_it_reads_plans_again(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a delete that has planned, and a merge replacing its files that commits, and gc
    # (no retention) collecting them, before the delete reads them
    lake.create()
    lake.insert_batches("events", batches=6, rows=30, days=1)
    where = "event = 'click'"
    expected = lake.rows(ALL_ROWS.replace("ORDER BY", f"WHERE NOT ({where}) ORDER BY"))
    rewrite_files = delete_module.rewrite_files
    collected: list[str] = []

    def merged_and_collected_first(*args: Any, **kwargs: Any) -> Any:
        if not collected:
            planned = {f.path for f in args[3]}
            assert lake.merge("events").count("committed") == 1
            Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))
            collected.extend(sorted(p for p in planned if lake.objects.head(p) is None))
            assert collected
        return rewrite_files(*args, **kwargs)

    monkeypatch.setattr(delete_module, "rewrite_files", merged_and_collected_first)

    # When the delete reads them, then it plans again over the merged file and deletes the rows
    result = delete(lake, where)
    assert result.plans == 2 and result.snapshot_id == lake.head()
    assert lake.rows(ALL_ROWS) == expected
    # And every object is named by a file row (the first attempt wrote nothing it kept)
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_a_live_file_missing_from_the_store_is_a_read_error_naming_it(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a delete that has planned, and one of its live files whose object is lost before
    # the delete reads it (the store lost it; no merge replaced it)
    lake.create()
    lake.insert_batches("events", batches=3, rows=30, days=1)
    before = lake.head()
    rewrite_files = delete_module.rewrite_files
    lost: list[str] = []
    reads: list[int] = []

    def object_lost_first(*args: Any, **kwargs: Any) -> Any:
        reads.append(len(args[3]))
        if not lost:
            lost.append(args[3][0].path)
            lake.objects.delete_many(lost)
        return rewrite_files(*args, **kwargs)

    monkeypatch.setattr(delete_module, "rewrite_files", object_lost_first)

    # When the delete reads it, then it fails with a read error naming the file, without
    # planning again, and commits nothing
    with pytest.raises(QueryReadError) as failed:
        delete(lake, "event = 'click'")
    assert f"live file(s) {lost[0]} are missing" in str(failed.value)
    assert len(reads) == 1 and lake.head() == before
