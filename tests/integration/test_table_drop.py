"""Dropping a table: gone from listings, queries, inserts and merges at once; its name free for
a new table that starts clean; its objects and rows purged by the janitor after retention."""

from __future__ import annotations

from datetime import timedelta

import pytest

from icefloe.errors import TableNotFoundError
from icefloe.janitor import Janitor
from icefloe.metastore.janitor import JanitorStore
from icefloe.metastore.models import NewFile
from support.merge_lake import Lake

pytestmark = pytest.mark.integration


def objects_under(lake: Lake, table: str) -> set[str]:
    return {o.key for o in lake.objects.list_prefix(f"{table}/data/")}


def test_a_dropped_table_is_gone_at_once_its_name_is_free_and_gc_purges_it(lake: Lake) -> None:
    # Given a table with live and dead files
    lake.create()
    lake.insert_batches("events", batches=6, rows=50, days=2)
    lake.merge("events")
    old_objects = objects_under(lake, "events")
    assert old_objects and lake.meta.snapshots("events")
    # When it is dropped
    dropped = lake.meta.drop_table("events")
    # Then nothing sees it any more
    assert lake.meta.list_tables() == []
    with pytest.raises(TableNotFoundError, match="events"):
        lake.rows("SELECT count(*) FROM events")
    with pytest.raises(TableNotFoundError):
        lake.inserter.insert_rows("events", [{"ts": "2026-03-01", "event": "x"}])
    with pytest.raises(TableNotFoundError):
        lake.meta.drop_table("events")
    assert lake.merge().count("committed") == 0
    # And a table of the same name starts clean, with its own schema
    lake.create(schema="ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, n BIGINT")
    fresh = lake.meta.get_table("events")
    assert fresh.table_id != dropped.table_id and fresh.head_snapshot_id == 0
    assert lake.meta.snapshots("events") == []
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01", "event": "x", "n": 1}])
    assert lake.rows("SELECT count(*) AS c, sum(n) AS n FROM events") == [{"c": 1, "n": 1}]
    new_objects = objects_under(lake, "events") - old_objects
    assert len(new_objects) == 1
    # The dropped table's objects stay until its retention has passed
    janitor = Janitor(meta=lake.meta, objects=lake.objects)
    report = janitor.run()
    assert report.tables_purged == () and objects_under(lake, "events") >= old_objects
    dry = janitor.run(retention=timedelta(0), dry_run=True)
    assert dry.tables_purged == ("events",) and objects_under(lake, "events") >= old_objects
    # Then a run past it deletes them, and the rows, and nothing of the new table
    purged = janitor.run(retention=timedelta(0), table="events")
    assert purged.tables_purged == ("events",)
    assert purged.purged_objects == len(old_objects)
    assert objects_under(lake, "events") == new_objects
    assert JanitorStore(lake.meta).dropped_tables() == []
    assert lake.rows("SELECT count(*) AS c FROM events") == [{"c": 1}]


def test_a_commit_prepared_for_a_table_dropped_meanwhile_commits_nothing(lake: Lake) -> None:
    lake.create()
    old = lake.meta.get_table("events")
    lake.meta.drop_table("events")
    lake.create()
    written = NewFile(
        path="events/data/day=2026-03-01/prepared.parquet",
        partition_path="day=2026-03-01",
        size_bytes=10,
        row_count=1,
    )
    with pytest.raises(TableNotFoundError, match="dropped \\(and created again\\)"):
        lake.meta.commit_append("events", files=[written], table_id=old.table_id)
    assert lake.meta.snapshots("events") == []
    # Without the table it was written for, a commit goes to the live table of that name
    assert lake.meta.commit_append("events", files=[written]).committed


def test_a_purge_of_many_files_goes_on_in_the_next_run(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=5, rows=20, days=2)
    files = len(objects_under(lake, "events"))
    lake.meta.drop_table("events")
    janitor = Janitor(meta=lake.meta, objects=lake.objects, page_size=2)
    first = janitor.run(retention=timedelta(0), max_files=3)
    assert first.tables_purged == () and first.purged_objects == 3
    rest = janitor.run(retention=timedelta(0))
    assert rest.tables_purged == ("events",) and rest.purged_objects == files - 3
    assert objects_under(lake, "events") == set()


def test_a_warm_engine_answers_for_the_new_table_not_the_dropped_one(lake: Lake) -> None:
    # Given a warm engine that answered a query on a table at its snapshot 1
    lake.create()
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01", "event": "old"}] * 3)
    sql = "SELECT event, count(*) AS n FROM events GROUP BY event"
    assert lake.rows(sql) == [{"event": "old", "n": 3}]
    # When the table is dropped and created again, and the new one reaches snapshot 1 too
    lake.meta.drop_table("events")
    lake.create()
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01", "event": "new"}])
    # Then the same query over "snapshot 1" is the new table's answer
    assert lake.rows(sql) == [{"event": "new", "n": 1}]
