"""The janitor against a real Postgres and a local warehouse: expiry, dead-file deletion, the
orphan sweep, dry runs, a run that dies midway, and a pinned query racing GC."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from icefloe.errors import InvalidInputError, SnapshotNotFoundError
from icefloe.janitor import ORPHAN_GRACE_FLOOR, Janitor
from icefloe.metastore.models import DataFile
from icefloe.storage import LocalObjectStore
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

COUNT_SQL = (
    "SELECT event, count(*) AS n, sum(length(user_id)) AS l FROM events GROUP BY 1 ORDER BY 1"
)


def objects_of(lake: Lake) -> set[str]:
    return {o.key for o in lake.objects.list_prefix("events/")}


def every_file(lake: Lake) -> list[DataFile]:
    return lake.meta.files_by_id("events", range(1, 100_000))


def age(lake: Lake, key: str, by: timedelta) -> None:
    """Make an object look written ``by`` ago (its mtime is what the sweep compares)."""
    path = lake.objects.uri(key)
    then = time.time() - by.total_seconds()
    os.utime(path, (then, then))


def backdate(dsn: str, schema: str, statement: str, *params: object) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute(statement, params)  # type: ignore[arg-type]


@pytest.fixture
def merged_lake(lake: Lake) -> Lake:
    """Two days of events, inserted in six batches and merged: 12 dead files, 2 live ones."""
    lake.create()
    lake.insert_batches("events", batches=6, rows=200, days=2)
    lake.merge("events")
    return lake


def test_gc_with_retention_zero_deletes_exactly_the_dead_files(merged_lake: Lake) -> None:
    lake = merged_lake
    answer = lake.rows(COUNT_SQL)
    dead = {f.path for f in every_file(lake) if f.end_snapshot is not None}
    live = {f.path for f in lake.meta.files("events")}
    assert len(dead) == 12 and len(live) == 2 and objects_of(lake) == dead | live

    report = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))

    assert objects_of(lake) == live
    assert report.total("files_deleted") == 12 and report.total("orphans_found") == 0
    assert report.total("bytes_deleted") > 0
    assert {f.path for f in every_file(lake)} == live  # the rows are gone too
    assert lake.rows(COUNT_SQL) == answer
    # Every snapshot but the head expired; time travel to one says so
    head = lake.meta.get_table("events").head_snapshot_id
    assert report.total("snapshots_expired") == head - 1
    with pytest.raises(SnapshotNotFoundError, match="has expired"):
        lake.meta.resolve_snapshot("events", snapshot_id=1)
    # A second run has nothing left to do
    again = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))
    assert again.total("files_deleted") == again.total("snapshots_expired") == 0


def test_the_default_retention_keeps_recent_snapshots_readable(merged_lake: Lake) -> None:
    lake = merged_lake
    before = objects_of(lake)
    report = Janitor(meta=lake.meta, objects=lake.objects).run()
    assert report.total("snapshots_expired") == 0 and report.total("files_deleted") == 0
    assert objects_of(lake) == before
    assert lake.rows(COUNT_SQL, snapshot_id=1)  # time travel still works


def test_snapshots_expire_only_past_the_retention_keeping_the_one_at_the_boundary(
    merged_lake: Lake, postgres_dsn: str
) -> None:
    # Given snapshots 1-6 committed two days ago and the merges (7, 8) just now
    lake = merged_lake
    backdate(
        postgres_dsn,
        lake.meta.schema,
        "UPDATE snapshots SET committed_at = now() - interval '2 days' WHERE snapshot_id <= 6",
    )
    report = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(days=1))
    # Then 1-5 expire; 6 stays, because as_of one day ago reads it
    assert report.total("snapshots_expired") == 5
    assert [s.snapshot_id for s in lake.meta.snapshots("events") if not s.expired] == [6, 7, 8]
    assert lake.meta.resolve_snapshot("events", as_of=datetime.now(UTC) - timedelta(days=1)) == 6
    # And no file 6 sees is deleted: it sees every inserted file
    assert report.total("files_deleted") == 0
    assert lake.rows(COUNT_SQL, snapshot_id=6) == lake.rows(COUNT_SQL)


def test_dead_files_wait_out_the_query_grace_after_their_snapshots_expire(
    merged_lake: Lake, postgres_dsn: str
) -> None:
    lake = merged_lake
    janitor = Janitor(meta=lake.meta, objects=lake.objects)
    backdate(
        postgres_dsn,
        lake.meta.schema,
        "UPDATE snapshots SET committed_at = now() - interval '2 days'",
    )
    first = janitor.run(retention=timedelta(days=1))
    assert first.total("snapshots_expired") == 7 and first.total("files_deleted") == 0
    backdate(
        postgres_dsn,
        lake.meta.schema,
        "UPDATE snapshots SET expired_at = expired_at - interval '16 minutes'",
    )
    second = janitor.run(retention=timedelta(days=1))
    assert second.total("files_deleted") == 12


def test_a_dry_run_deletes_nothing_and_reports_what_a_real_run_deletes(merged_lake: Lake) -> None:
    lake = merged_lake
    orphan = "events/data/day=2026-03-01/orphan.parquet"
    lake.objects.put(orphan, b"left by a writer that died")
    age(lake, orphan, timedelta(days=2))
    before, rows_before = objects_of(lake), every_file(lake)
    janitor = Janitor(meta=lake.meta, objects=lake.objects)

    dry = janitor.run(retention=timedelta(0), dry_run=True)

    assert objects_of(lake) == before and every_file(lake) == rows_before
    assert all(not s.expired for s in lake.meta.snapshots("events"))
    (table,) = dry.tables
    assert table.orphan_paths == (orphan,) and table.orphans_deleted == 0
    real = janitor.run(retention=timedelta(0))
    (done,) = real.tables
    assert set(table.dead_paths) == set(done.dead_paths) and len(done.dead_paths) == 12
    assert dry.total("snapshots_expired") == real.total("snapshots_expired") > 0
    assert done.orphan_paths == (orphan,) and orphan not in objects_of(lake)


def test_an_orphan_younger_than_the_grace_survives_and_an_older_one_is_deleted(
    merged_lake: Lake,
) -> None:
    lake = merged_lake
    young, old = (f"events/data/day=2026-03-01/{name}.parquet" for name in ("young", "old"))
    lake.objects.put(young, b"x")
    lake.objects.put(old, b"y")
    age(lake, young, timedelta(hours=23))
    age(lake, old, timedelta(hours=25))
    report = Janitor(meta=lake.meta, objects=lake.objects).run()  # the default grace: 1 day
    assert report.tables[0].orphan_paths == (old,)
    assert young in objects_of(lake) and old not in objects_of(lake)
    # Registered files are never orphans, however old
    for f in lake.meta.files("events"):
        age(lake, f.path, timedelta(days=30))
    assert Janitor(meta=lake.meta, objects=lake.objects).run().total("orphans_found") == 0


def test_an_orphan_grace_below_the_floor_is_refused(merged_lake: Lake) -> None:
    janitor = Janitor(meta=merged_lake.meta, objects=merged_lake.objects)
    with pytest.raises(InvalidInputError, match="shorter than 1h"):
        janitor.run(orphan_grace=ORPHAN_GRACE_FLOOR - timedelta(seconds=1))


def test_a_retention_or_grace_past_100_years_is_refused_and_100_years_keeps_all(
    merged_lake: Lake,
) -> None:
    janitor = Janitor(meta=merged_lake.meta, objects=merged_lake.objects)
    before = merged_lake.meta.snapshots("events")
    # A cut-off before the dates Postgres holds: refused, not psycopg's DatetimeFieldOverflow
    with pytest.raises(InvalidInputError, match="retention 3000000d is longer than 36500d"):
        janitor.run(retention=timedelta(days=3_000_000))
    with pytest.raises(InvalidInputError, match="orphan grace 800000d is longer than 36500d"):
        janitor.run(orphan_grace=timedelta(days=800_000))
    # The longest taken keeps every snapshot
    report = janitor.run(retention=timedelta(days=36_500), orphan_grace=timedelta(days=36_500))
    assert report.total("snapshots_expired") == 0
    assert merged_lake.meta.snapshots("events") == before


class PausingStore(LocalObjectStore):
    """Holds the writer just after its upload, before its commit, until released."""

    def __init__(self, root: object) -> None:
        super().__init__(root)  # type: ignore[arg-type]
        self.uploaded = threading.Event()
        self.release = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        self.uploaded.set()
        assert self.release.wait(30)


def test_an_uncommitted_insert_is_never_swept_within_the_grace(lake: Lake) -> None:
    from icefloe.ingest import Inserter
    from icefloe.sample_events import sample_events
    from support.merge_lake import START

    lake.create()
    pausing = PausingStore(lake.objects.root)
    inserter = Inserter(meta=lake.meta, objects=pausing)
    outcome: list[object] = []
    writer = threading.Thread(
        target=lambda: outcome.append(
            inserter.insert_rows("events", sample_events(100, days=1, start=START))
        )
    )
    writer.start()
    try:
        assert pausing.uploaded.wait(30)
        (uploaded,) = objects_of(lake)
        age(lake, uploaded, ORPHAN_GRACE_FLOOR - timedelta(minutes=5))  # a slow writer
        report = Janitor(meta=lake.meta, objects=lake.objects).run(orphan_grace=ORPHAN_GRACE_FLOOR)
        assert report.total("orphans_found") == 0 and uploaded in objects_of(lake)
    finally:
        pausing.release.set()
        writer.join()
        inserter.close()
    assert outcome and [f.path for f in lake.meta.files("events")] == [uploaded]
    assert lake.rows("SELECT count(*) AS n FROM events") == [{"n": 100}]


class Killed(BaseException):
    pass


def test_a_gc_run_killed_between_objects_and_rows_is_finished_by_the_next(
    merged_lake: Lake,
) -> None:
    lake = merged_lake
    live = {f.path for f in lake.meta.files("events")}
    answer = lake.rows(COUNT_SQL)

    def die(_: Sequence[DataFile]) -> None:
        raise Killed

    with pytest.raises(Killed):
        Janitor(meta=lake.meta, objects=lake.objects, before_forget=die).run(retention=timedelta(0))
    # The dead files' objects are gone, their rows are not; nothing live was touched
    assert objects_of(lake) == live
    assert len(every_file(lake)) == 14

    report = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))
    assert report.total("files_deleted") == 12
    assert {f.path for f in every_file(lake)} == live == objects_of(lake)
    assert lake.rows(COUNT_SQL) == answer


def test_a_query_pinned_inside_the_retention_never_meets_a_missing_file_while_gc_runs(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given old history (two days ago: inserts and a merge) and recent history
    lake.create()
    lake.insert_batches("events", batches=4, rows=200, days=1, seed=1)
    lake.merge("events")
    old_head = lake.meta.get_table("events").head_snapshot_id
    backdate(
        postgres_dsn,
        lake.meta.schema,
        "UPDATE snapshots SET committed_at = now() - interval '2 days' WHERE snapshot_id <= %s",
        old_head,
    )
    lake.insert_batches("events", batches=4, rows=200, days=1, seed=50)
    pinned = lake.meta.get_table("events").head_snapshot_id
    expected = lake.rows(COUNT_SQL, snapshot_id=pinned)
    lake.merge("events")  # ends the files the pinned snapshot reads

    # When GC runs again and again while queries pinned at that snapshot run
    errors: list[BaseException] = []
    answers: list[object] = []
    stop = threading.Event()

    def query() -> None:
        while not stop.is_set():
            try:
                answers.append(lake.rows(COUNT_SQL, snapshot_id=pinned))
            except BaseException as e:
                errors.append(e)
                return

    readers = [threading.Thread(target=query) for _ in range(2)]
    for t in readers:
        t.start()
    janitor = Janitor(meta=lake.meta, objects=lake.objects, query_grace=timedelta(0))
    deleted = 0
    try:
        for _ in range(5):
            deleted += janitor.run(retention=timedelta(days=1)).total("files_deleted")
    finally:
        stop.set()
        for t in readers:
            t.join()

    # Then GC deleted the old merge's inputs, and every pinned answer was complete and equal
    assert not errors, errors[0]
    assert deleted == 4
    assert answers and all(a == expected for a in answers)


def test_the_orphan_limit_counts_orphans_not_listed_objects(merged_lake: Lake) -> None:
    # Given many old registered objects listed before an orphan, and small pages
    lake = merged_lake
    for f in every_file(lake):
        age(lake, f.path, timedelta(days=3))
    orphan = "events/data/day=2026-03-02/zzz-orphan.parquet"  # sorts after every file
    lake.objects.put(orphan, b"z")
    age(lake, orphan, timedelta(days=3))
    janitor = Janitor(meta=lake.meta, objects=lake.objects, page_size=2)

    # When the run may delete at most 4 files
    report = janitor.run(max_files=4)

    # Then the 14 registered objects listed first do not use up the limit
    assert report.tables[0].orphan_paths == (orphan,)
    assert orphan not in objects_of(lake)


def test_the_sweep_spares_objects_written_while_a_compaction_job_runs(
    merged_lake: Lake, postgres_dsn: str
) -> None:
    from icefloe.metastore.jobs import JobStore

    # Given a compaction job that started three hours ago and has not finished (within its
    # claims' lease: reconciliation leaves it running)
    lake = merged_lake
    JobStore(lake.meta).record(
        job_id="compact-running", table="events", claim_tokens=[], manifest_key="m.json"
    )
    backdate(
        postgres_dsn,
        lake.meta.schema,
        "UPDATE compaction_jobs SET created_at = now() - interval '3 hours'",
    )
    upload, leftover = (f"events/data/day=2026-03-01/{n}.parquet" for n in ("upload", "leftover"))
    for key, written_ago in ((upload, timedelta(hours=2)), (leftover, timedelta(hours=4))):
        lake.objects.put(key, b"x")
        age(lake, key, written_ago)

    report = Janitor(meta=lake.meta, objects=lake.objects).run(orphan_grace=ORPHAN_GRACE_FLOOR)

    # Then its upload (written after it started, older than the 1 h grace) stays; older junk goes
    assert report.tables[0].orphan_paths == (leftover,)
    assert upload in objects_of(lake) and leftover not in objects_of(lake)


def _writer_killed_mid_write(lake: Lake, key: str, tmp_path: Path) -> None:
    """A real process writing ``key`` (from a pipe it is still reading), killed outright."""
    fifo = tmp_path / "source.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from icefloe.storage import LocalObjectStore\n"
            "LocalObjectStore(Path(sys.argv[1])).put_file(sys.argv[2], Path(sys.argv[3]))\n",
            lake.objects.root_uri,
            key,
            str(fifo),
        ]
    )
    with open(fifo, "wb") as pipe:
        pipe.write(b"PAR1" + b"x" * 100_000)
        pipe.flush()
        directory = Path(lake.objects.uri(key)).parent
        for _ in range(1000):
            if any(
                p.name.startswith(".icefloe-tmp-") and p.stat().st_size for p in directory.iterdir()
            ):
                break
            time.sleep(0.01)
        writer.kill()
        writer.wait()


def test_a_temporary_file_of_a_killed_writer_is_swept_once_older_than_the_grace(
    merged_lake: Lake, tmp_path: Path
) -> None:
    # Given a writer killed while it wrote an object: its temporary file stays behind
    lake = merged_lake
    key = "events/data/day=2026-03-01/killed.parquet"
    _writer_killed_mid_write(lake, key, tmp_path)
    directory = Path(lake.objects.uri(key)).parent
    (leftover,) = [p for p in directory.iterdir() if p.name.startswith(".icefloe-tmp-")]
    assert key not in objects_of(lake)  # never published, so no listing shows it
    # When the janitor runs within the grace, it stays (a write may still be in flight)
    janitor = Janitor(meta=lake.meta, objects=lake.objects)
    assert janitor.run().tables[0].abandoned_writes_found == 0
    assert leftover.exists()
    # Once older than the grace, a dry run reports it and a real run discards it
    then = time.time() - timedelta(days=2).total_seconds()
    os.utime(leftover, (then, then))
    dry = janitor.run(dry_run=True).tables[0]
    assert (dry.abandoned_writes_found, dry.abandoned_writes_discarded) == (1, 0)
    assert leftover.exists()
    real = janitor.run().tables[0]
    assert (real.abandoned_writes_found, real.abandoned_writes_discarded) == (1, 1)
    assert not leftover.exists()
    # And the table still answers as before
    assert lake.rows(COUNT_SQL)
