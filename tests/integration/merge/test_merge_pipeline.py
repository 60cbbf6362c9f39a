"""Merging until quiet through the orchestrator, the in-process queue and the real handler."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from icefloe.merge import InProcessQueue, MergeOrchestrator, MergeWorker, merge_locally
from icefloe.metastore.models import LiveFile
from icefloe.spec import SizeTargets
from support.merge_lake import Lake

pytestmark = pytest.mark.integration


def row_ids(lake: Lake, table: str, snapshot_id: int | None = None) -> Counter[bytes]:
    rows = lake.rows(f"SELECT _row_id FROM {table}", snapshot_id=snapshot_id)
    return Counter(r["_row_id"] for r in rows)


def test_many_small_inserts_merge_to_the_planners_floor_keeping_every_row(lake: Lake) -> None:
    # Given 12 small inserts, each touching the same 3 day partitions
    lake.create()
    lake.insert_batches("events", batches=12, rows=300, days=3)
    before = lake.meta.get_table("events").head_snapshot_id
    ids_before = row_ids(lake, "events")
    answer_sql = (
        "SELECT event, count(*) AS n, sum(length(user_id)) AS l FROM events GROUP BY 1 ORDER BY 1"
    )
    answer_before = lake.rows(answer_sql)
    assert set(lake.live_files_per_partition("events").values()) == {12}

    # When merging until the orchestrator plans nothing
    report = lake.merge("events")

    # Then each partition holds one file, the planner is quiet, and no row was lost or doubled
    assert report.count("committed") == 3 and not report.dead_letters
    assert lake.live_files_per_partition("events") == {
        p: 1 for p in lake.live_files_per_partition("events")
    }
    assert len(lake.live_files_per_partition("events")) == 3
    assert MergeOrchestrator(meta=lake.meta, sender=InProcessQueue()).plan("events") == []
    assert row_ids(lake, "events") == ids_before
    assert lake.rows(answer_sql) == answer_before
    # And the pre-merge snapshot still answers from the small files
    plan = lake.engine.query("SELECT count(*) AS n FROM events", snapshot_id=before)
    assert plan.plans[0].files_scanned == 36
    assert (
        lake.rows(answer_sql.replace("FROM events", "FROM events"), snapshot_id=None)
        == answer_before
    )
    assert row_ids(lake, "events", snapshot_id=before) == ids_before


def test_merges_run_at_once_commit_every_group_and_keep_every_row(lake: Lake) -> None:
    # Given 24 small inserts into 2 day partitions, with groups of at most 4 files: several
    # groups of the same partition to merge in each round
    lake.create(sizes=SizeTargets(min_files_to_merge=2, max_files_per_merge=4))
    lake.insert_batches("events", batches=24, rows=200, days=2)
    ids_before = row_ids(lake, "events")
    answer_sql = "SELECT event, count(*) AS n, max(ts) AS last FROM events GROUP BY 1 ORDER BY 1"
    answer_before = lake.rows(answer_sql)

    # When three workers merge at once until the orchestrator plans nothing
    report = lake.merge("events", workers=3)

    # Then every planned group committed (groups of one partition side by side), nothing was
    # dead-lettered, the planner is quiet, and no row was lost or doubled
    sent = sum(r.groups_sent for r in report.rounds)
    assert sent >= 12 and report.count("committed") == sent and not report.dead_letters
    assert MergeOrchestrator(meta=lake.meta, sender=InProcessQueue()).plan("events") == []
    assert row_ids(lake, "events") == ids_before
    assert lake.rows(answer_sql) == answer_before
    # And every commit got its own snapshot, in order and without gaps
    replaces = [s.snapshot_id for s in lake.meta.snapshots("events") if s.operation == "replace"]
    assert len(replaces) == sent
    assert sorted(replaces) == list(range(min(replaces), min(replaces) + sent))


def test_merged_files_are_sorted_by_the_file_sort_keys(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=5, rows=200, days=1)
    lake.merge("events")
    (merged,) = lake.meta.files("events")
    table = pq.read_table(lake.objects.uri(merged.path))
    keys = list(zip(table.column("event").to_pylist(), table.column("ts").to_pylist(), strict=True))
    assert keys == sorted(keys)
    assert merged.row_count == 1000 and merged.column_stats["event"].min == "click"


def test_a_single_merge_round_leaves_partitions_below_the_group_floor_alone(lake: Lake) -> None:
    # Given a partition with three files: fewer than min_files_to_merge (4)
    lake.create()
    lake.insert_batches("events", batches=3, rows=100, days=1)
    report = lake.merge("events")
    assert report.outcomes == () and report.rounds[0].groups_planned == 0
    assert lake.live_files_per_partition("events") == {"day=2026-03-01": 3}


def test_a_table_dropped_during_orchestration_is_reported_and_the_others_still_merge(
    lake: Lake, postgres_dsn: str
) -> None:
    import psycopg
    from psycopg import sql

    from icefloe.merge import MergeTask

    # Given two tables with work, the second dropped while the first's tasks are being sent
    lake.create(name="a_events")
    lake.create(name="b_events")
    lake.insert_batches("a_events", batches=4, rows=50, days=1)
    lake.insert_batches("b_events", batches=4, rows=50, days=1)

    class DropsTheOtherTable:
        def __init__(self) -> None:
            self.sent: list[MergeTask] = []

        def send(self, tasks: list[MergeTask]) -> list[MergeTask]:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DELETE FROM {}.lake_tables WHERE name = 'b_events'").format(
                        sql.Identifier(lake.meta.schema)
                    )
                )
            self.sent.extend(tasks)
            return []

    sender = DropsTheOtherTable()
    summary = MergeOrchestrator(meta=lake.meta, sender=sender).run()

    # Then a_events was orchestrated, and b_events is reported, not fatal
    assert [t.table for t in summary.tables] == ["a_events"]
    assert summary.groups_sent == 1 and len(sender.sent) == 1
    assert set(summary.failed_tables) == {"b_events"}
    assert "TableNotFoundError" in summary.failed_tables["b_events"]


def test_claims_are_sent_in_chunks_and_only_a_refused_chunk_is_released(lake: Lake) -> None:
    from icefloe.merge import MergeTask
    from icefloe.merge.orchestrator import SEND_CHUNK

    # Given more partitions with work than one chunk of sends
    lake.create()
    lake.insert_batches("events", batches=4, rows=2 * (SEND_CHUNK + 2), days=SEND_CHUNK + 2)

    class RefusesTheSecondChunk:
        def __init__(self) -> None:
            self.calls: list[list[MergeTask]] = []

        def send(self, tasks: list[MergeTask]) -> list[MergeTask]:
            self.calls.append(list(tasks))
            return list(tasks) if len(self.calls) == 2 else []

    sender = RefusesTheSecondChunk()
    summary = MergeOrchestrator(meta=lake.meta, sender=sender).run(table="events")

    # Then it sent a full chunk, then the rest; the refused chunk's files are free again
    assert [len(c) for c in sender.calls] == [SEND_CHUNK, 2]
    (plan,) = summary.tables
    assert (plan.groups_sent, plan.groups_unsent) == (SEND_CHUNK, 2)
    claimed = {f.file_id for f in lake.meta.files("events") if f.claimed}
    assert claimed == {i for task in sender.calls[0] for i in task.file_ids}


def test_the_merge_planners_listing_is_the_heads_files_without_their_statistics(
    lake: Lake,
) -> None:
    # Given live files over two days, beside files an earlier merge replaced, two of them
    # claimed by a merge in progress
    lake.create()
    lake.insert_batches("events", batches=6, rows=50, days=2)
    merge_locally(meta=lake.meta, worker=MergeWorker(meta=lake.meta, objects=lake.objects))
    lake.insert_batches("events", batches=3, rows=20, days=2)
    rows = lake.meta.files("events")
    lake.meta.claim_files("events", [rows[0].file_id, rows[-1].file_id], lease=timedelta(minutes=5))
    # When the merge planner's listing is read
    listed = lake.meta.live_files("events")
    # Then it is the head's files in id order, each as its full row gives it
    expected = [
        LiveFile(
            file_id=f.file_id,
            partition_path=f.partition_path,
            partition_start=f.partition_start,
            size_bytes=f.size_bytes,
            row_count=f.row_count,
            created_at=f.created_at,
            claimed=f.claimed,
        )
        for f in lake.meta.files("events")
    ]
    assert listed == expected
    assert sum(f.claimed for f in listed) == 2
    assert len({f.partition_path for f in listed}) == 2 and len({f.row_count for f in listed}) > 1


def test_a_merges_inputs_are_their_full_rows_without_the_statistics(lake: Lake) -> None:
    # Given live files beside replaced ones, with column statistics
    lake.create()
    lake.insert_batches("events", batches=4, rows=30, days=2)
    merge_locally(meta=lake.meta, worker=MergeWorker(meta=lake.meta, objects=lake.objects))
    lake.insert_batches("events", batches=2, rows=10, days=2)
    every = lake.meta.files("events", snapshot_id=1) + lake.meta.files("events")
    ids = sorted({f.file_id for f in every})
    full = lake.meta.files_by_id("events", ids)
    assert len(full) == len(ids) and all(f.column_stats for f in full)
    # When they are read as a merge reads its inputs
    bare = lake.meta.files_by_id("events", ids, statistics=False)
    # Then each is its full row with no statistics, replaced files as well as live ones
    assert bare == [replace(f, column_stats={}) for f in full]
    assert {f.end_snapshot is None for f in bare} == {True, False}
