"""Rollback: a new snapshot whose live files are exactly those of an earlier one; merged-away
files restored by copy, a commit landing meanwhile re-plans, merges lose, a failed copy leaves
nothing, and an expired snapshot is refused by name."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from icefloe.errors import CommitConflictError, SnapshotNotFoundError
from icefloe.janitor import Janitor
from icefloe.lifecycle import rollback_table
from icefloe.metastore.models import RollbackPlan
from icefloe.storage import ObjectStore
from support.merge_lake import ALL_ROWS, START, Lake
from support.stores import FailingAfterPuts, InjectedFault

pytestmark = pytest.mark.integration


def rollback(lake: Lake, to: int, *, objects: ObjectStore | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
    return rollback_table(
        meta=lake.meta,
        objects=objects or lake.objects,
        table="events",
        to_snapshot=to,
        **kwargs,  # type: ignore[arg-type]
    )


def backfilled_lake(lake: Lake) -> int:
    """Four good batches (the snapshot returned), a merge, then a bad backfill of two."""
    lake.create()
    lake.insert_batches("events", batches=4, rows=60, days=2)
    good = lake.head()
    lake.merge("events")
    lake.insert_batches("events", batches=2, rows=30, days=3, seed=99)
    return good


def test_rollback_gives_exactly_the_files_and_answers_of_the_earlier_snapshot(lake: Lake) -> None:
    # Given a good snapshot, then a merge of its files and a bad backfill
    good = backfilled_lake(lake)
    expected = lake.rows(ALL_ROWS, snapshot_id=good)
    target_files = lake.meta.files("events", snapshot_id=good)
    before = lake.head()
    backfilled = lake.rows(ALL_ROWS)
    assert len(backfilled) == len(expected) + 60

    # When the table is rolled back to the good snapshot
    result = rollback(lake, good)

    # Then one new snapshot holds exactly its rows, in files of the same content
    assert result.snapshot_id == before + 1 == lake.head()
    assert result.files_restored > 0 and result.files_removed > 0
    assert result.rows == len(expected)
    assert lake.rows(ALL_ROWS) == expected
    live = lake.meta.files("events")
    assert len(live) == len(target_files) == result.files_kept + result.files_restored
    assert sorted((f.partition_path, f.row_count, f.size_bytes) for f in live) == sorted(
        (f.partition_path, f.row_count, f.size_bytes) for f in target_files
    )
    # The merged-away files came back as copies under new names, one file row per object
    restored = {f.path for f in live} - {f.path for f in target_files}
    assert len(restored) == result.files_restored
    assert len({f.path for f in lake.every_file_row()}) == len(lake.every_file_row())
    # And the history says what happened; the backfilled snapshot still answers as it did
    last = lake.meta.snapshots("events")[-1]
    assert (last.operation, last.rolled_back_to) == ("rollback", good)
    assert lake.rows(ALL_ROWS, snapshot_id=before) == backfilled

    # When it is asked again, nothing changes
    again = rollback(lake, good)
    assert again.snapshot_id is None and lake.head() == before + 1


def test_gc_keeps_the_restored_files_and_then_the_old_snapshot_is_refused(lake: Lake) -> None:
    good = backfilled_lake(lake)
    expected = lake.rows(ALL_ROWS, snapshot_id=good)
    rollback(lake, good)
    before_gc = lake.data_objects()

    # When every snapshot but the head expires and dead files are collected
    report = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))

    # Then the head's files (restored copies included) stay and still answer the same
    assert report.total("files_deleted") > 0
    assert lake.data_objects() == {f.path for f in lake.meta.files("events")} < before_gc
    assert lake.rows(ALL_ROWS) == expected
    # And a rollback to an expired snapshot is refused by name; nothing is committed
    now = lake.head()
    with pytest.raises(SnapshotNotFoundError, match=f"snapshot {good}: it has expired"):
        rollback(lake, good)
    assert lake.head() == now


@pytest.mark.parametrize("to", [0, -1, 99])
def test_a_snapshot_the_table_never_had_is_refused(lake: Lake, to: int) -> None:
    lake.create()
    lake.insert_batches("events", batches=2, rows=10, days=1)
    with pytest.raises(SnapshotNotFoundError, match=f"no snapshot {to} \\(its head is snapshot 2"):
        rollback(lake, to)
    assert lake.head() == 2


def test_a_commit_landing_while_the_rollback_is_planned_makes_it_plan_again(lake: Lake) -> None:
    good = backfilled_lake(lake)
    expected = lake.rows(ALL_ROWS, snapshot_id=good)
    plans: list[RollbackPlan] = []

    def insert_during_the_first_plan(plan: RollbackPlan) -> None:
        plans.append(plan)
        if len(plans) == 1:
            lake.insert_batches("events", batches=1, rows=5, days=1, seed=7)

    result = rollback(lake, good, on_plan=insert_during_the_first_plan)

    # Then the second plan saw the late insert and removed it too: exactly the good files
    assert result.plans == 2 and plans[1].head_snapshot_id == plans[0].head_snapshot_id + 1
    assert lake.rows(ALL_ROWS) == expected
    # And the first attempt's copies were deleted: every object is named by a file row
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_a_merge_holding_files_loses_to_the_rollback(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=2, rows=20, days=1)
    good = lake.head()
    lake.insert_batches("events", batches=2, rows=20, days=1, seed=50)
    late = [f.file_id for f in lake.meta.files("events") if f.begin_snapshot > good]
    token = lake.meta.claim_files("events", late, lease=timedelta(minutes=5))
    assert token is not None

    result = rollback(lake, good)

    assert result.files_removed == len(late)
    with pytest.raises(CommitConflictError, match="removed by snapshot"):
        lake.meta.commit_replace("events", remove=late, add=[], claim_token=token)
    assert lake.rows("SELECT count(*) AS n FROM events") == [{"n": 40}]


def test_a_failed_copy_commits_nothing_and_leaves_no_object(lake: Lake) -> None:
    good = backfilled_lake(lake)
    expected = lake.rows(ALL_ROWS, snapshot_id=good)
    before, objects_before = lake.head(), lake.data_objects()
    assert len(lake.meta.plan_rollback("events", to_snapshot=good).restore) >= 2

    # When the second copy fails (a crash of the object store mid-way)
    failing = FailingAfterPuts(lake.objects, allowed=1)
    with pytest.raises(InjectedFault):
        rollback(lake, good, objects=failing)

    # Then nothing was committed and the first copy was deleted again
    assert len(failing.puts) == 1
    assert lake.head() == before and lake.data_objects() == objects_before
    # And the next attempt succeeds
    assert rollback(lake, good).snapshot_id == before + 1
    assert lake.rows(ALL_ROWS) == expected


def test_rollback_of_a_table_without_a_restorable_file_only_removes(lake: Lake) -> None:
    # Given appends only: every file of the earlier snapshot is still live
    lake.create()
    lake.insert_batches("events", batches=3, rows=10, days=1)
    lake.inserter.insert_rows(
        "events", [{"ts": START.isoformat(), "event": "bad", "user_id": str(uuid.uuid4())}]
    )
    result = rollback(lake, 3)
    assert (result.files_restored, result.bytes_copied, result.files_removed) == (0, 0, 1)
    assert lake.rows(
        "SELECT count(*) AS n, count(*) FILTER (event = 'bad') AS bad FROM events"
    ) == [{"n": 30, "bad": 0}]
