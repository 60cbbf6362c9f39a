"""The commit protocol against a real Postgres: ordering, isolation, conflicts, idempotency."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest

from icefloe.errors import (
    CommitConflictError,
    InvalidInputError,
    SnapshotNotFoundError,
    TableExistsError,
    TableNotFoundError,
)
from icefloe.metastore.models import CommitResult
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.files import DAY, new_file

pytestmark = pytest.mark.integration


def live_paths(meta: MetaStore, *, snapshot_id: int | None = None) -> list[str]:
    return sorted(f.path for f in meta.files("events", snapshot_id=snapshot_id))


def test_concurrent_appends_get_gapless_snapshot_ids_in_commit_order(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    # Given a table and 8 threads that each commit 50 appends of one file
    meta.create_table(events_spec)
    threads, per_thread = 8, 50
    start = threading.Barrier(threads)

    def committer(worker: int) -> list[int]:
        start.wait()
        return [
            meta.commit_append("events", files=[new_file(f"w{worker}-{i}")]).snapshot_id
            for i in range(per_thread)
        ]

    # When they all run at once
    with ThreadPoolExecutor(threads) as pool:
        ids = [sid for batch in pool.map(committer, range(threads)) for sid in batch]

    # Then the snapshot ids are exactly 1..400, and each thread saw its own ids increase
    assert sorted(ids) == list(range(1, threads * per_thread + 1))
    snapshots = meta.snapshots("events")
    assert [s.snapshot_id for s in snapshots] == list(range(1, 401))
    assert [s.parent_id for s in snapshots] == [None, *range(1, 400)]
    # And every file is visible exactly once at the head
    paths = [f.path for f in meta.files("events")]
    assert len(paths) == 400
    assert Counter(paths).most_common(1)[0][1] == 1
    assert meta.get_table("events").head_snapshot_id == 400


def test_commits_are_numbered_in_commit_time_order(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    for i in range(5):
        meta.commit_append("events", files=[new_file(f"f{i}")])
    times = [s.committed_at for s in meta.snapshots("events")]
    assert times == sorted(times)


def test_reader_pinned_at_a_snapshot_sees_the_same_files_after_later_commits(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    # Given three appends and a reader pinned at the second
    meta.create_table(events_spec)
    for name in ("a", "b", "c"):
        meta.commit_append("events", files=[new_file(name)])
    pinned = 2
    before = live_paths(meta, snapshot_id=pinned)

    # When later commits add files and replace one the pinned snapshot sees
    meta.commit_append("events", files=[new_file("d")])
    a = next(f for f in meta.files("events") if f.path.endswith("/a.parquet"))
    meta.commit_replace("events", remove=[a.file_id], add=[new_file("a-merged")])

    # Then the pinned reader sees exactly what it saw before
    assert live_paths(meta, snapshot_id=pinned) == before
    assert [p.rsplit("/", 1)[1] for p in before] == ["a.parquet", "b.parquet"]
    # And the head sees the replacement, not the replaced file
    head = [p.rsplit("/", 1)[1] for p in live_paths(meta)]
    assert head == ["a-merged.parquet", "b.parquet", "c.parquet", "d.parquet"]


def test_two_replaces_of_the_same_file_exactly_one_wins(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    # Given a live file and two merges that both want to replace it
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("input")])
    (input_file,) = meta.files("events")
    go = threading.Barrier(2)

    def merge(name: str) -> object:
        go.wait()
        try:
            return meta.commit_replace("events", remove=[input_file.file_id], add=[new_file(name)])
        except CommitConflictError as e:
            return e

    # When both commit at once
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(merge, ["out-1", "out-2"]))

    # Then exactly one commits and the other gets the conflict error
    conflicts = [o for o in outcomes if isinstance(o, CommitConflictError)]
    assert len(conflicts) == 1
    # And the loser added nothing: one replace snapshot, one output file
    assert [s.operation for s in meta.snapshots("events")] == ["append", "replace"]
    assert len(meta.files("events")) == 1
    winner = "out-1" if conflicts[0] is outcomes[1] else "out-2"
    assert live_paths(meta)[0].endswith(f"/{winner}.parquet")


def test_replace_with_a_claim_token_conflicts_once_another_job_holds_the_claim(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("x")])
    (x,) = meta.files("events")
    # A first job claims with a lease that has already run out; a second job takes the claim.
    first = meta.claim_files("events", [x.file_id], lease=timedelta(seconds=-1))
    second = meta.claim_files("events", [x.file_id], lease=timedelta(minutes=5))
    assert first is not None and second is not None and first != second

    with pytest.raises(CommitConflictError, match="no longer claimed"):
        meta.commit_replace("events", remove=[x.file_id], add=[new_file("late")], claim_token=first)
    result = meta.commit_replace(
        "events", remove=[x.file_id], add=[new_file("on-time")], claim_token=second
    )
    assert result.committed and result.files_removed == 1
    assert meta.status("events").claimed_files == 0


def test_an_unclaimed_replace_cannot_take_files_under_an_active_claim(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("x")])
    (x,) = meta.files("events")
    assert meta.claim_files("events", [x.file_id], lease=timedelta(minutes=5)) is not None
    with pytest.raises(CommitConflictError, match="claimed by a merge"):
        meta.commit_replace("events", remove=[x.file_id], add=[new_file("y")])


def test_claims_are_all_or_nothing(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("a"), new_file("b")])
    a, b = meta.files("events")
    assert meta.claim_files("events", [a.file_id], lease=timedelta(minutes=5)) is not None
    assert meta.claim_files("events", [a.file_id, b.file_id], lease=timedelta(minutes=5)) is None
    # b stayed free: a claim of b alone succeeds
    token = meta.claim_files("events", [b.file_id], lease=timedelta(minutes=5))
    assert token is not None
    assert meta.release_claim(token) == 1


def test_groups_claimed_together_are_each_all_or_nothing(
    meta: MetaStore, events_spec: TableSpec, postgres_dsn: str
) -> None:
    # Given five live files: one claimed already, one row locked by another claimer's
    # transaction, one replaced (no longer live)
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file(n) for n in "abcde"])
    a, b, c, d, e = (f.file_id for f in meta.files("events"))
    lease = timedelta(minutes=5)
    held = meta.claim_files("events", [a], lease=lease)
    assert held is not None
    meta.commit_replace("events", remove=[e], add=[new_file("e2")])
    other = psycopg.connect(postgres_dsn, options=f"-c search_path={meta.schema}")
    try:
        other.execute("SELECT 1 FROM data_files WHERE file_id = %s FOR UPDATE", (d,))
        # When four groups are claimed in one call
        tokens = meta.claim_groups("events", [[a, b], [c], [d], [e]], lease=lease)
    finally:
        other.rollback()
        other.close()
    # Then only the group whose files were all free is claimed, under its own token
    assert tokens[0] is None and tokens[2] is None and tokens[3] is None
    assert tokens[1] is not None and tokens[1] != held
    by_id = {f.file_id: f for f in meta.files("events")}
    assert (by_id[a].claim_token, by_id[b].claim_token) == (held, None)
    assert by_id[c].claim_token == tokens[1] and by_id[c].claimed
    assert by_id[d].claim_token is None
    # and b, left out with a's group, can be claimed now that the lock is gone, as can d
    assert None not in meta.claim_groups("events", [[b], [d]], lease=lease)


def test_groups_claimed_together_may_not_share_a_file(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("a"), new_file("b")])
    a, b = (f.file_id for f in meta.files("events"))
    with pytest.raises(InvalidInputError, match="share a file"):
        meta.claim_groups("events", [[a, b], [b]], lease=timedelta(minutes=5))
    with pytest.raises(InvalidInputError, match="no file ids"):
        meta.claim_groups("events", [[a], []], lease=timedelta(minutes=5))
    assert not any(f.claimed for f in meta.files("events"))


def test_append_retried_with_the_same_idempotency_key_returns_the_first_snapshot(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    first = meta.commit_append("events", files=[new_file("batch-1")], idempotency_key="k1")
    again = meta.commit_append("events", files=[new_file("batch-1-retry")], idempotency_key="k1")
    assert first.committed and first.snapshot_id == 1
    assert not again.committed and again.snapshot_id == 1 and again.files_added == 0
    assert len(meta.snapshots("events")) == 1
    assert [p.rsplit("/", 1)[1] for p in live_paths(meta)] == ["batch-1.parquet"]


def test_a_retry_that_waited_for_the_first_attempts_commit_gets_its_snapshot(
    meta: MetaStore, events_spec: TableSpec, postgres_dsn: str
) -> None:
    # Given the first attempt of a batch holding the table's head lock, about to commit
    info = meta.create_table(events_spec)
    first = psycopg.connect(postgres_dsn, options=f"-c search_path={meta.schema}")
    first.execute(
        "SELECT head_snapshot_id FROM lake_tables WHERE table_id = %s FOR UPDATE", (info.table_id,)
    )
    retry: dict[str, object] = {}

    def commit_retry() -> None:
        try:
            retry["result"] = meta.commit_append(
                "events", files=[new_file("batch-retry")], idempotency_key="k1"
            )
        except Exception as e:  # the test reports what the retry was told
            retry["error"] = e

    # When a retry of the same batch starts and waits for that lock
    waiter = threading.Thread(target=commit_retry)
    waiter.start()
    _wait_for_a_lock_waiter(postgres_dsn)
    # and the first attempt commits its snapshot
    first.execute(
        "INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, idempotency_key,"
        " files_added, files_removed, rows_added, rows_removed, bytes_added, bytes_removed)"
        " VALUES (%s, 1, NULL, 'append', 'k1', 0, 0, 0, 0, 0, 0)",
        (info.table_id,),
    )
    first.execute(
        "UPDATE lake_tables SET head_snapshot_id = 1 WHERE table_id = %s", (info.table_id,)
    )
    first.commit()
    first.close()
    waiter.join(timeout=30)

    # Then the retry is told the batch was committed, in the first attempt's snapshot
    assert "error" not in retry, retry.get("error")
    result = retry["result"]
    assert isinstance(result, CommitResult)
    assert not result.committed and result.snapshot_id == 1
    assert [s.snapshot_id for s in meta.snapshots("events")] == [1]


def _wait_for_a_lock_waiter(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(1000):
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the retry never waited for the head lock")


def test_idempotency_keys_are_per_table(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    other = TableSpec.from_dict({**events_spec.to_dict(), "name": "other"})
    meta.create_table(other)
    meta.commit_append("events", files=[new_file("e")], idempotency_key="same")
    result = meta.commit_append(
        "other", files=[replace(new_file("o"), path="other/o.parquet")], idempotency_key="same"
    )
    assert result.committed and result.snapshot_id == 1


def test_a_file_path_is_never_registered_twice(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("same")])
    with pytest.raises(CommitConflictError, match="registered already"):
        meta.commit_append("events", files=[new_file("same")])
    assert len(meta.snapshots("events")) == 1


def test_replace_of_a_missing_file_conflicts_and_adds_nothing(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("a")])
    with pytest.raises(CommitConflictError, match="does not exist"):
        meta.commit_replace("events", remove=[999_999], add=[new_file("b")])
    assert meta.get_table("events").head_snapshot_id == 1
    assert len(meta.files("events")) == 1


@pytest.mark.parametrize(
    ("operation", "add", "remove", "message"),
    [
        ("append", [], [], "adds at least one file"),
        ("append", ["x"], [1], "removes none"),
        ("replace", ["x"], [], "removes at least one"),
        ("delete", ["x"], [], "removes at least one"),
        ("rollback", [], [], "changes no file"),
        ("replace", ["x"], [1, 1], "same input file twice"),
        ("append", ["x", "x"], [], "same path twice"),
    ],
)
def test_malformed_commits_are_refused_before_touching_the_store(
    meta: MetaStore,
    events_spec: TableSpec,
    operation: str,
    add: list[str],
    remove: list[int],
    message: str,
) -> None:
    meta.create_table(events_spec)
    with pytest.raises(InvalidInputError, match=message):
        meta.commit(
            "events",
            operation=operation,  # type: ignore[arg-type]
            add=[new_file(name) for name in add],
            remove=remove,
        )
    assert meta.snapshots("events") == []


def test_time_travel_by_id_and_by_timestamp(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("a")])
    middle = meta.snapshots("events")[0].committed_at
    meta.commit_append("events", files=[new_file("b")])
    assert meta.resolve_snapshot("events") == 2
    assert meta.resolve_snapshot("events", snapshot_id=1) == 1
    assert meta.resolve_snapshot("events", as_of=middle) == 1
    with pytest.raises(SnapshotNotFoundError):
        meta.resolve_snapshot("events", snapshot_id=7)
    with pytest.raises(SnapshotNotFoundError):
        meta.resolve_snapshot("events", as_of=middle - timedelta(days=1))


def test_listing_a_time_range_returns_only_files_of_periods_in_it(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    days = [DAY + timedelta(days=i) for i in range(5)]
    meta.commit_append("events", files=[new_file(f"d{i}", day=d) for i, d in enumerate(days)])
    got = meta.files("events", start_from=days[1], start_before=days[3])
    assert sorted(f.partition_path for f in got) == ["day=2026-11-23", "day=2026-11-24"]
    assert [f.partition_path for f in meta.files("events", partitions=["day=2026-11-26"])] == [
        "day=2026-11-26"
    ]


def test_status_counts_live_files_partitions_rows_and_bytes(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    meta.commit_append(
        "events",
        files=[
            new_file("a", rows=5, size=100),
            new_file("b", rows=7, size=200),
            new_file("c", day=DAY + timedelta(days=1), rows=1, size=50),
        ],
    )
    a = next(f for f in meta.files("events") if f.path.endswith("/a.parquet"))
    meta.commit_replace("events", remove=[a.file_id], add=[new_file("a2", rows=5, size=90)])
    status = meta.status("events")
    assert (status.live_files, status.partitions, status.rows, status.bytes) == (3, 2, 13, 340)
    assert status.head_snapshot_id == 2


def test_tables_are_unique_and_unknown_tables_are_named(
    meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    with pytest.raises(TableExistsError, match="events"):
        meta.create_table(events_spec)
    with pytest.raises(TableNotFoundError, match="nope"):
        meta.commit_append("nope", files=[new_file("x")])
    assert [t.name for t in meta.list_tables()] == ["events"]
    assert meta.get_table("events").spec == events_spec


def test_claim_tokens_are_uuids(meta: MetaStore, events_spec: TableSpec) -> None:
    meta.create_table(events_spec)
    meta.commit_append("events", files=[new_file("a")])
    (a,) = meta.files("events")
    token = uuid.uuid4()
    assert meta.claim_files("events", [a.file_id], lease=timedelta(minutes=1), token=token) == token
