"""Deletes fanned out as in the deployed stack: a job planned once, one part per partition on
the merge queue (the in-process one, with SQS's redelivery), committed once by the last part;
redelivered, killed, expired and out-raced parts end the job right."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from icefloe.cli import main
from icefloe.lifecycle import (
    DeleteJobRunningError,
    DeletePartRunner,
    alter_table,
    delete_rows,
    reconcile_deletes,
    rollback_table,
    start_delete,
)
from icefloe.lifecycle.alter import rename_column
from icefloe.lifecycle.delete_jobs import MESSAGE_KIND, DeletePartTask
from icefloe.lifecycle.predicate import check_predicate
from icefloe.merge import InProcessQueue, process_merge_records
from icefloe.metastore import deletes as deletes_module
from icefloe.metastore.deletes import DeleteJob, DeleteJobStore
from icefloe.spec import SizeTargets
from icefloe.storage import LocalObjectStore
from support.hooked_meta import HookedMetaStore, PendingCommit
from support.merge_lake import ALL_ROWS, Lake

pytestmark = pytest.mark.integration

WHERE = "user_id = 'u3' OR event = 'signup'"


class WorkerKilled(Exception):
    """A worker dying between recording its part and committing (the message is redelivered)."""


def setup(lake: Lake) -> list[dict[str, object]]:
    lake.create(row_group_by="user_id")
    lake.insert_batches("events", batches=6, rows=60, days=3)
    lake.merge("events")
    lake.insert_batches("events", batches=2, rows=20, days=3, seed=40)
    return lake.rows(ALL_ROWS.replace("ORDER BY", f"WHERE NOT coalesce(({WHERE}), false) ORDER BY"))


def drain(lake: Lake, queue: InProcessQueue, runner: DeletePartRunner) -> list[str]:
    statuses: list[str] = []

    def handle(event: Mapping[str, Any]) -> Mapping[str, Any]:
        return process_merge_records(
            event,
            worker=lake.worker,
            on_outcome=lambda o: statuses.append(o.status),
            other_kinds={MESSAGE_KIND: runner.run_message},
        ).response()

    queue.drain(handle)
    return statuses


def start(lake: Lake, queue: InProcessQueue, **kwargs: Any):  # type: ignore[no-untyped-def]
    return start_delete(
        meta=lake.meta, objects=lake.objects, table="events", where=WHERE, sender=queue, **kwargs
    )


def job_of(lake: Lake, started: Any) -> DeleteJob:
    return DeleteJobStore(lake.meta).get(started.job.job_id)


def test_a_job_runs_one_part_per_partition_and_commits_once(lake: Lake) -> None:
    expected = setup(lake)
    before = lake.head()
    queue = InProcessQueue()

    started = start(lake, queue)

    assert started.job is not None and started.parts == len(queue) == 3  # three days
    # Every planned file is claimed by the job: a merge round meanwhile plans none of them
    claimed = [f for f in lake.meta.files("events") if f.claim_token == started.job.claim_token]
    assert claimed and lake.merge("events", until_quiet=False).count("committed") == 0
    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert sorted(statuses) == ["committed", "part_done", "part_done"]
    job = job_of(lake, started)
    assert (job.state, job.snapshot_id, job.parts_done) == ("committed", before + 1, 3)
    assert lake.head() == before + 1 and lake.rows(ALL_ROWS) == expected
    assert (
        job.rows_deleted
        == lake.meta.snapshots("events")[-1].rows_removed
        - lake.meta.snapshots("events")[-1].rows_added
    )
    # Its claims are freed, and every object is named by a file row
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_every_part_delivered_twice_still_commits_once_and_leaves_no_object(lake: Lake) -> None:
    expected = setup(lake)
    before = lake.head()
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None
    for part in range(started.parts):  # SQS delivers at least once
        queue.send_body(DeletePartTask(started.job.job_id, part, "events").to_json())

    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    assert statuses.count("committed") == 1 and lake.head() == before + 1
    assert lake.rows(ALL_ROWS) == expected
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_a_worker_killed_before_the_commit_is_finished_by_the_redelivery(lake: Lake) -> None:
    expected = setup(lake)
    before = lake.head()
    queue = InProcessQueue()
    kills: list[PendingCommit] = []

    def kill_once(commit: PendingCommit) -> None:
        if not kills:
            kills.append(commit)
            raise WorkerKilled("killed before committing")

    started = start(lake, queue)
    with HookedMetaStore.like(lake.meta, before_commit=kill_once) as dying_meta:
        drain(lake, queue, DeletePartRunner(meta=dying_meta, objects=lake.objects))

    assert kills and job_of(lake, started).state == "committed"
    assert lake.head() == before + 1 and lake.rows(ALL_ROWS) == expected


def test_when_every_delivery_dies_the_orchestrator_run_commits_the_recorded_parts(
    lake: Lake,
) -> None:
    expected = setup(lake)
    before = lake.head()
    queue = InProcessQueue(max_receives=2)

    def always(_: PendingCommit) -> None:
        raise WorkerKilled("killed before committing")

    started = start(lake, queue)
    with HookedMetaStore.like(lake.meta, before_commit=always) as dying_meta:
        drain(lake, queue, DeletePartRunner(meta=dying_meta, objects=lake.objects))
    assert queue.dead_letters and job_of(lake, started).parts_done == started.parts
    assert lake.head() == before

    (reconciled,) = reconcile_deletes(meta=lake.meta, objects=lake.objects)

    assert (reconciled.state, reconciled.snapshot_id) == ("committed", before + 1)
    assert lake.rows(ALL_ROWS) == expected


def test_a_job_whose_lease_ends_with_parts_undone_fails_and_cleans_up(lake: Lake) -> None:
    setup(lake)
    before, rows_before = lake.head(), lake.rows(ALL_ROWS)
    objects_before = lake.data_objects()
    queue = InProcessQueue()
    started = start(lake, queue, lease=timedelta(0))
    assert started.job is not None
    # One part runs (its rewrites are recorded), the others' messages are lost
    runner = DeletePartRunner(meta=lake.meta, objects=lake.objects, lease=timedelta(0))
    assert runner.run(DeletePartTask(started.job.job_id, 0, "events")).status == "part_done"
    assert lake.data_objects() > objects_before

    (failed,) = reconcile_deletes(meta=lake.meta, objects=lake.objects)

    assert failed.state == "failed" and "2 of 3 parts undone" in (failed.error or "")
    assert lake.head() == before and lake.rows(ALL_ROWS) == rows_before
    assert lake.data_objects() == objects_before  # the recorded rewrites were deleted
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]
    # A late delivery of a part of the failed job changes nothing
    late = runner.run(DeletePartTask(started.job.job_id, 1, "events"))
    assert late.status == "already_committed" and lake.head() == before


def test_a_job_whose_files_would_lose_other_rows_than_its_parts_decided_fails_uncommitted(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given a job whose parts are all recorded, and a changed file whose row count in the meta
    # store no longer matches what the parts decided (as if a rewrite lost an unmatched row)
    setup(lake)
    before, rows_before = lake.head(), lake.rows(ALL_ROWS)
    objects_before = lake.data_objects()
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None

    tampered: list[int] = []

    def tamper(_: Sequence[int]) -> None:
        # Once every part is recorded: the reads after that are the last part's check of the
        # job's changed files, before its commit
        assert started.job is not None
        parts = DeleteJobStore(lake.meta).parts(started.job.job_id)
        if tampered or not all(p.done for p in parts):
            return
        changed = [i for p in parts for i in p.changed_ids]
        tampered.append(changed[0])
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {}.data_files SET row_count = row_count + 1 WHERE file_id = %s"
                ).format(sql.Identifier(lake.meta.schema)),
                (changed[0],),
            )

    # When the last part finishes the job, then the job fails and nothing is committed
    with HookedMetaStore.like(lake.meta, before_files_by_id=tamper) as tampered_meta:
        drain(lake, queue, DeletePartRunner(meta=tampered_meta, objects=lake.objects))
    assert tampered
    job = job_of(lake, started)
    assert job.state == "failed" and "would lose" in (job.error or "")
    assert lake.head() == before and lake.rows(ALL_ROWS) == rows_before
    assert lake.data_objects() == objects_before  # the recorded rewrites were deleted
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]


def test_a_rollback_taking_the_files_makes_the_job_fail_without_committing(lake: Lake) -> None:
    setup(lake)
    queue = InProcessQueue()
    good = lake.head() - 1
    started = start(lake, queue)
    rolled = rollback_table(meta=lake.meta, objects=lake.objects, table="events", to_snapshot=good)
    assert rolled.snapshot_id is not None
    rows_after_rollback = lake.rows(ALL_ROWS)

    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    assert "failed" in statuses and job_of(lake, started).state == "failed"
    assert lake.head() == rolled.snapshot_id and lake.rows(ALL_ROWS) == rows_after_rollback
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_a_predicate_that_matches_nothing_starts_no_job(lake: Lake) -> None:
    setup(lake)
    queue = InProcessQueue()
    started = start_delete(
        meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'x'", sender=queue
    )
    assert started.job is None and len(queue) == 0
    assert started.to_json()["state"] == "nothing_to_delete"


class RacingStore(LocalObjectStore):
    """A real store that runs ``race`` once, on its first upload: another delivery of the same
    part, running to completion while this one is between rewriting and recording."""

    def __init__(self, root: Path, race: Callable[[], object]) -> None:
        super().__init__(root)
        self._race: Callable[[], object] | None = race

    def put_file(self, key: str, path: Path) -> None:
        race, self._race = self._race, None
        if race is not None:
            race()
        super().put_file(key, path)


def test_two_deliveries_of_a_part_racing_record_one_and_the_loser_deletes_its_rewrites(
    lake: Lake,
) -> None:
    expected = setup(lake)
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None
    task = DeletePartTask(started.job.job_id, 0, "events")
    other = DeletePartRunner(meta=lake.meta, objects=lake.objects)
    racing = RacingStore(lake.objects.root, race=lambda: other.run(task))

    loser = DeletePartRunner(meta=lake.meta, objects=racing).run(task)

    assert loser.status == "part_done"
    assert DeleteJobStore(lake.meta).get(started.job.job_id).parts_done == 1
    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert lake.rows(ALL_ROWS) == expected
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}


def test_the_cli_lists_delete_jobs_with_their_state(
    lake: Lake, monkeypatch: pytest.MonkeyPatch, postgres_dsn: str
) -> None:
    setup(lake)
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", lake.meta.schema)
    monkeypatch.setenv("ICEFLOE_WAREHOUSE", str(lake.objects.root))

    def deletes() -> list[dict[str, Any]]:
        out = io.StringIO()
        assert main(["deletes", "events", "--format", "json"], out=out) == 0
        return list(json.loads(out.getvalue()))

    (running,) = deletes()
    assert (running["job_id"], running["state"], running["parts_done"]) == (
        str(started.job.job_id),
        "running",
        0,
    )
    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    (done,) = deletes()
    assert (done["state"], done["parts_done"], done["snapshot_id"]) == ("committed", 3, lake.head())
    # The job keeps the predicate as DuckDB renders it: the one expression that was checked.
    rendered = check_predicate(lake.meta.get_table("events").spec, WHERE)
    assert rendered == "(((user_id = 'u3') OR (\"event\" = 'signup')))"
    assert done["rows_deleted"] > 0 and done["where"] == rendered


class RefusingQueue:
    """A queue that refuses every task (SQS down or throttling)."""

    def send(self, tasks: Any) -> list[Any]:
        return list(tasks)


def test_a_job_whose_tasks_cannot_be_sent_fails_at_once_and_frees_its_claims(lake: Lake) -> None:
    setup(lake)
    before = lake.head()

    started = start(lake, RefusingQueue())  # type: ignore[arg-type]

    assert started.job is not None and started.job.state == "failed"
    assert started.job.error == f"{started.parts} part task(s) not sent"
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]
    assert lake.head() == before


def test_a_partition_above_the_lambda_cap_is_split_into_parts_that_commit_once(
    lake: Lake,
) -> None:
    # Given a table whose Lambda cap holds about two of its files
    lake.create(sizes=SizeTargets(min_files_to_merge=4, lambda_merge_cap_bytes=5_000))
    lake.insert_batches("events", batches=6, rows=30, days=1)
    files = lake.meta.files("events")
    assert len({f.partition_path for f in files}) == 1 and sum(f.size_bytes for f in files) > 10_000
    expected = lake.rows(
        ALL_ROWS.replace("ORDER BY", f"WHERE NOT coalesce(({WHERE}), false) ORDER BY")
    )
    before = lake.head()
    queue = InProcessQueue()

    # When the delete is started and its parts run
    started = start(lake, queue)
    parts = DeleteJobStore(lake.meta).parts(started.job.job_id)
    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    # Then the one partition became several parts, none above the cap unless one file is
    assert started.parts == len(parts) == len(queue.dead_letters) + len(statuses) > 2
    by_id = {f.file_id: f for f in files}
    for part in parts:
        sizes = [by_id[i].size_bytes for i in part.file_ids]
        assert len(sizes) == 1 or sum(sizes) <= 5_000
    # And the job committed once, with exactly the other rows left
    assert statuses.count("committed") == 1 and lake.head() == before + 1
    assert lake.rows(ALL_ROWS) == expected


def test_parts_run_with_the_schema_the_job_was_planned_with(lake: Lake) -> None:
    # Given a job planned, then a column its predicate names renamed before the parts run
    expected = setup(lake)
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None and started.job.spec_version == 1
    alter_table(meta=lake.meta, table="events", changes=[rename_column("event=name")])

    # When the parts run
    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    # Then they evaluated the predicate as planned (on the column now called name) and the job
    # committed the same rows away
    assert statuses.count("committed") == 1
    assert job_of(lake, started).state == "committed"
    renamed = ALL_ROWS.replace("ts, event,", "ts, name,")
    assert [r["p"] for r in lake.rows(renamed)] == [r["p"] for r in expected]
    assert lake.rows("SELECT count(*) AS n FROM events WHERE name = 'signup'") == [{"n": 0}]


def test_a_second_job_over_files_a_running_job_holds_is_refused_naming_it(lake: Lake) -> None:
    # Given a running job (erase user u3, or signups)
    setup(lake)
    first_queue, second_queue = InProcessQueue(), InProcessQueue()
    first = start(lake, first_queue)
    assert first.job is not None
    held = {f.file_id for f in lake.meta.files("events") if f.claim_token == first.job.claim_token}
    second_where = "user_id = 'u5'"

    # When a second delete is started over some of the same files, then it is refused naming
    # the running job, and the first job keeps every claim it had
    with pytest.raises(DeleteJobRunningError, match=str(first.job.job_id)) as refused:
        start_delete(
            meta=lake.meta,
            objects=lake.objects,
            table="events",
            where=second_where,
            sender=second_queue,
        )
    assert refused.value.job_id == first.job.job_id and len(second_queue) == 0
    assert held == {
        f.file_id for f in lake.meta.files("events") if f.claim_token == first.job.claim_token
    }

    # And the first job commits its delete; once it has ended, the second one starts and
    # commits too: both deletes happened
    drain(lake, first_queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert job_of(lake, first).state == "committed"
    second = start_delete(
        meta=lake.meta,
        objects=lake.objects,
        table="events",
        where=second_where,
        sender=second_queue,
    )
    drain(lake, second_queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert job_of(lake, second).state == "committed"
    remaining = f"SELECT count(*) AS n FROM events WHERE ({WHERE}) OR ({second_where})"
    assert lake.rows(remaining) == [{"n": 0}]


def test_a_job_over_other_files_than_a_running_job_starts(lake: Lake) -> None:
    # Given a running job over the first day's files only
    setup(lake)
    queue = InProcessQueue()
    first = start_delete(
        meta=lake.meta,
        objects=lake.objects,
        table="events",
        where="user_id = 'u3' AND ts < '2026-03-02'",
        sender=queue,
    )
    # When a job over the other days starts, then it runs beside it and both commit
    second = start_delete(
        meta=lake.meta,
        objects=lake.objects,
        table="events",
        where="user_id = 'u3' AND ts >= '2026-03-02'",
        sender=queue,
    )
    assert first.job is not None and second.job is not None

    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    assert (job_of(lake, first).state, job_of(lake, second).state) == ("committed", "committed")
    assert lake.rows("SELECT count(*) AS n FROM events WHERE user_id = 'u3'") == [{"n": 0}]


def test_a_local_delete_over_files_a_running_job_holds_is_refused_naming_it(lake: Lake) -> None:
    # Given a running job
    expected = setup(lake)
    queue = InProcessQueue()
    started = start(lake, queue)
    assert started.job is not None
    before, objects_before = lake.head(), lake.data_objects()

    # When a local delete over some of its files runs, then it is refused naming the job and
    # changes nothing
    with pytest.raises(DeleteJobRunningError, match=str(started.job.job_id)):
        delete_rows(meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'u5'")
    assert lake.head() == before and lake.data_objects() == objects_before

    # And the job still commits its delete
    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert job_of(lake, started).state == "committed" and lake.rows(ALL_ROWS) == expected


def test_a_local_delete_whose_files_a_job_claims_before_its_commit_is_refused(
    lake: Lake,
) -> None:
    # Given a local delete that has planned and rewritten, and a job started over the same
    # files just before the local delete commits
    expected = setup(lake)
    queue = InProcessQueue()
    jobs: list[Any] = []

    def job_starts_first(_: PendingCommit) -> None:
        if not jobs:
            jobs.append(start(lake, queue))

    objects_before = lake.data_objects()
    with (
        HookedMetaStore.like(lake.meta, before_commit=job_starts_first) as racing_meta,
        pytest.raises(DeleteJobRunningError) as refused,
    ):
        delete_rows(meta=racing_meta, objects=lake.objects, table="events", where="user_id = 'u5'")

    # Then the local delete's commit is refused naming the job, and its rewrites are gone
    (started,) = jobs
    assert str(started.job.job_id) in str(refused.value)
    assert lake.data_objects() == objects_before
    # And the job commits its delete
    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert job_of(lake, started).state == "committed" and lake.rows(ALL_ROWS) == expected


def test_a_job_whose_predicate_guards_a_cast_deletes_what_a_query_selects(lake: Lake) -> None:
    # Given user ids some of which are numbers, and a predicate that casts only those
    lake.create()
    lake.inserter.insert_rows(
        "events",
        [
            {"ts": f"2026-03-01T00:00:0{n}", "event": "click", "user_id": user}
            for n, user in enumerate(["a", "1", "2", "b", "1"])
        ],
    )
    where = "user_id NOT IN ('a', 'b') AND CAST(user_id AS INTEGER) = 1"
    assert lake.rows(f"SELECT count(*) AS n FROM events WHERE {where}") == [{"n": 2}]
    queue = InProcessQueue(max_receives=2)

    # When it runs as a job
    started = start_delete(
        meta=lake.meta, objects=lake.objects, table="events", where=where, sender=queue
    )
    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    # Then it commits, deleting exactly those rows
    assert statuses == ["committed"] and not queue.dead_letters
    job = job_of(lake, started)
    assert (job.state, job.rows_deleted) == ("committed", 2)
    users = lake.rows("SELECT user_id FROM events ORDER BY user_id")
    assert [r["user_id"] for r in users] == ["2", "a", "b"]


def test_a_part_whose_predicate_cannot_be_evaluated_fails_the_job_at_once(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given a running job whose predicate fails on rows of its files (a cast of text that
    # does not convert; set after planning, which would have refused it)
    setup(lake)
    before, rows_before, objects_before = lake.head(), lake.rows(ALL_ROWS), lake.data_objects()
    queue = InProcessQueue(max_receives=3)
    started = start(lake, queue)
    assert started.job is not None
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.delete_jobs SET predicate = %s WHERE job_id = %s").format(
                sql.Identifier(lake.meta.schema)
            ),
            ("(CAST(user_id AS INTEGER) = 3)", started.job.job_id),
        )

    # When its parts are delivered
    statuses = drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))

    # Then the first part fails the job, naming the failure; no delivery is retried into the
    # dead-letter queue, the claims are freed and nothing is left behind
    assert "failed" in statuses and not queue.dead_letters
    job = job_of(lake, started)
    assert job.state == "failed" and "Could not convert" in (job.error or "")
    assert lake.head() == before and lake.rows(ALL_ROWS) == rows_before
    assert lake.data_objects() == objects_before
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]


def test_a_job_recorded_while_a_commit_takes_its_files_does_not_deadlock(
    lake: Lake, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job held while it records itself, once it holds its locks, until a local delete's
    # commit of the same files waits for it (and past Postgres's deadlock check of that wait)
    expected = setup(lake)
    queue = InProcessQueue()
    holding = threading.Event()
    held_by_delete_jobs = deletes_module.held_by_delete_jobs

    def hold_while_a_commit_waits(conn: Any, table: str, held: Any) -> Any:
        if not holding.is_set():
            holding.set()
            _wait_for_a_waiter_on(postgres_dsn, conn.info.backend_pid)
            time.sleep(_deadlock_check_seconds(postgres_dsn) + 0.5)
        return held_by_delete_jobs(conn, table, held)

    monkeypatch.setattr(deletes_module, "held_by_delete_jobs", hold_while_a_commit_waits)
    commit: dict[str, BaseException] = {}

    def local_delete_commit() -> None:
        holding.wait(timeout=60)
        live = [f.file_id for f in lake.meta.live_files("events")]
        try:
            lake.meta.commit("events", operation="delete", remove=live)
        except BaseException as e:  # the test reports what the commit was told
            commit["error"] = e

    committer = threading.Thread(target=local_delete_commit)
    committer.start()

    # When the job starts meanwhile
    try:
        started = start(lake, queue)
    finally:
        holding.set()
        committer.join(timeout=60)

    # Then it is recorded (no deadlock), and the commit, which waited for it, is refused
    # naming it: the job holds the files now
    assert started.job is not None and job_of(lake, started).state == "running"
    assert isinstance(commit.get("error"), DeleteJobRunningError)
    assert str(started.job.job_id) in str(commit["error"])
    # And the job commits its delete
    drain(lake, queue, DeletePartRunner(meta=lake.meta, objects=lake.objects))
    assert job_of(lake, started).state == "committed" and lake.rows(ALL_ROWS) == expected


def _wait_for_a_waiter_on(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3000):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (pid,),
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError(f"no session ever waited for backend {pid}")


def _deadlock_check_seconds(dsn: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'")
        milliseconds = row.fetchone()
    assert milliseconds is not None
    return int(milliseconds[0]) / 1000


def test_ending_a_job_while_a_commit_takes_its_files_does_not_deadlock(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given a running job whose claimed files an earlier update left out of file order on
    # disk (the smallest met last by a scan)
    setup(lake)
    started = start(lake, InProcessQueue())
    assert started.job is not None
    job = job_of(lake, started)
    schema = sql.Identifier(lake.meta.schema)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        claimed = [
            int(r[0])
            for r in conn.execute(
                sql.SQL("SELECT file_id FROM {}.data_files WHERE claim_token = %s").format(schema),
                (job.claim_token,),
            )
        ]
        assert len(claimed) > 1
        first = min(claimed)
        conn.execute(
            sql.SQL(
                "UPDATE {}.data_files SET claim_expires_at = claim_expires_at WHERE file_id = %s"
            ).format(schema),
            (first,),
        )
        in_scan = [
            int(r[0])
            for r in conn.execute(
                sql.SQL("SELECT file_id FROM {}.data_files WHERE claim_token = %s").format(schema),
                (job.claim_token,),
            )
        ]
        assert in_scan[-1] == first  # (the precondition: scan order is not file order)
    # and a session holding the smallest of them
    holder = psycopg.connect(postgres_dsn)
    holder.execute(
        sql.SQL("SELECT 1 FROM {}.data_files WHERE file_id = %s FOR UPDATE").format(schema),
        (first,),
    )
    errors: dict[str, BaseException] = {}
    ended: list[bool] = []

    def commit_of_the_files() -> None:
        live = [f.file_id for f in lake.meta.live_files("events")]
        try:
            lake.meta.commit("events", operation="delete", remove=live)
        except BaseException as e:  # the test reports what the commit was told
            errors["commit"] = e

    def end_the_job() -> None:
        try:
            ended.append(DeleteJobStore(lake.meta).end(job, state="failed", error="given up"))
        except BaseException as e:  # the test reports what ending was told
            errors["end"] = e

    # When a commit of the same files waits for that session, the job is ended meanwhile
    # (waiting too), and the session lets go
    committer = threading.Thread(target=commit_of_the_files)
    committer.start()
    _wait_for_waiters(postgres_dsn, 1)
    ender = threading.Thread(target=end_the_job)
    ender.start()
    _wait_for_waiters(postgres_dsn, 2)
    time.sleep(_deadlock_check_seconds(postgres_dsn) + 0.5)
    holder.rollback()
    holder.close()
    committer.join(timeout=60)
    ender.join(timeout=60)

    # Then neither met a deadlock: the commit was refused for the running job (it came
    # first), then the job ended, freeing every claim
    assert "end" not in errors and ended == [True]
    assert isinstance(errors.get("commit"), DeleteJobRunningError), errors
    assert job_of(lake, started).state == "failed"
    assert not [f for f in lake.meta.files("events") if f.claim_token is not None]


def _wait_for_waiters(dsn: str, count: int) -> None:
    """Until ``count`` sessions wait for a lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3000):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE cardinality(pg_blocking_pids(pid)) > 0"
            ).fetchone()
            if row and row[0] >= count:
                return
            time.sleep(0.01)
    raise AssertionError(f"fewer than {count} sessions ever waited for a lock")
