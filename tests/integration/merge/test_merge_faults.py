"""Merges under failure: redelivery, a worker killed before its commit, expired leases,
conflicts, and a connection dropped during the commit."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest

from icefloe.errors import CommitOutcomeUnknownError
from icefloe.merge import InProcessQueue, MergeOrchestrator, MergeTask, MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.storage import LocalObjectStore
from icefloe.storage.base import DeleteResult
from support.hooked_meta import HookedMetaStore, PendingCommit
from support.merge_lake import Lake
from support.pg_fault_proxy import PgFaultProxy

pytestmark = pytest.mark.integration

COMMIT_MESSAGE = b"COMMIT\x00"


class Killed(BaseException):
    """The worker process dying: nothing after this point runs."""


class NoCleanupStore(LocalObjectStore):
    """A store on which a dying worker's clean-up never happens."""

    def delete_many(self, keys: object) -> DeleteResult:  # type: ignore[override]
        return DeleteResult(deleted=0)


def claim_one_task(lake: Lake, *, lease: timedelta = timedelta(minutes=30)) -> MergeTask:
    sent: list[MergeTask] = []

    class Capture:
        def send(self, tasks: list[MergeTask]) -> list[MergeTask]:
            sent.extend(tasks)
            return []

    MergeOrchestrator(meta=lake.meta, sender=Capture(), lease=lease).run(table="events")
    (task,) = sent
    return task


def row_ids(lake: Lake) -> Counter[bytes]:
    return Counter(r["_row_id"] for r in lake.rows("SELECT _row_id FROM events"))


def data_objects(lake: Lake) -> set[str]:
    return {o.key for o in lake.objects.list_prefix("events/")}


@pytest.fixture
def small_lake(lake: Lake) -> Lake:
    lake.create()
    lake.insert_batches("events", batches=6, rows=200, days=1)
    return lake


def test_a_redelivered_message_is_committed_once(small_lake: Lake) -> None:
    lake = small_lake
    ids = row_ids(lake)
    task = claim_one_task(lake)
    first = lake.worker.run(task)
    second = lake.worker.run(task)
    assert first.status == "committed"
    assert second.status == "already_committed" and second.snapshot_id == first.snapshot_id
    assert row_ids(lake) == ids and len(lake.meta.files("events")) == 1
    assert len(data_objects(lake)) == 7  # six inputs (kept for time travel) and one output


def test_a_worker_killed_after_upload_before_commit_changes_nothing_and_the_retry_commits(
    small_lake: Lake, meta: MetaStore
) -> None:
    lake = small_lake
    ids = row_ids(lake)
    inputs = {f.path for f in lake.meta.files("events")}
    task = claim_one_task(lake)

    def die(_: PendingCommit) -> None:
        raise Killed

    with HookedMetaStore.like(meta, before_commit=die) as dying_meta:
        dying = MergeWorker(meta=dying_meta, objects=NoCleanupStore(lake.objects.root))
        with pytest.raises(Killed):
            dying.run(task)

    # The table did not change; the uploaded output is an orphan no file row names
    assert {f.path for f in lake.meta.files("events")} == inputs
    orphans = data_objects(lake) - inputs
    assert len(orphans) == 1
    # The message comes back after its visibility timeout; the claim is still held
    retried = lake.worker.run(task)
    assert retried.status == "committed"
    assert row_ids(lake) == ids
    (merged,) = lake.meta.files("events")
    assert merged.path not in orphans


def test_a_worker_whose_lease_expired_and_was_taken_over_fails_its_commit_and_cleans_up(
    small_lake: Lake, meta: MetaStore
) -> None:
    lake = small_lake
    ids = row_ids(lake)
    inputs = {f.path for f in lake.meta.files("events")}
    task = claim_one_task(lake, lease=timedelta(0))
    taken_over: list[MergeTask] = []

    def lease_runs_out_and_another_orchestrator_claims(_: PendingCommit) -> None:
        taken_over.append(claim_one_task(lake))

    with HookedMetaStore.like(
        meta, before_commit=lease_runs_out_and_another_orchestrator_claims
    ) as slow_meta:
        slow = MergeWorker(meta=slow_meta, objects=lake.objects, lease=timedelta(0))
        outcome = slow.run(task)

    assert outcome.status == "conflict" and "no longer claimed" in outcome.reason
    assert data_objects(lake) == inputs  # the slow worker deleted its own output
    assert lake.worker.run(taken_over[0]).status == "committed"
    assert row_ids(lake) == ids and len(lake.meta.files("events")) == 1


def test_a_late_task_whose_files_were_claimed_again_is_skipped_without_work(
    small_lake: Lake,
) -> None:
    lake = small_lake
    stale = claim_one_task(lake, lease=timedelta(0))
    fresh = claim_one_task(lake)
    outcome = lake.worker.run(stale)
    assert outcome.status == "claim_lost" and outcome.files_out == 0
    assert lake.worker.run(fresh).status == "committed"
    # The stale task comes again: its files are gone now
    assert lake.worker.run(stale).status == "claim_lost"


def test_an_expired_lease_nobody_took_over_still_commits(small_lake: Lake, meta: MetaStore) -> None:
    lake = small_lake
    task = claim_one_task(lake, lease=timedelta(0))
    outcome = MergeWorker(meta=meta, objects=lake.objects, lease=timedelta(0)).run(task)
    assert outcome.status == "committed"


def test_inputs_merged_elsewhere_meanwhile_make_a_conflict_that_deletes_the_outputs(
    small_lake: Lake, meta: MetaStore
) -> None:
    lake = small_lake
    inputs = lake.meta.files("events")
    task = claim_one_task(lake)

    def someone_removes_an_input(_: PendingCommit) -> None:
        # e.g. a delete or a heavy compaction that ignored the claim after it expired
        meta.release_claim(task.claim_token)
        meta.commit("events", operation="delete", remove=[inputs[0].file_id])

    with HookedMetaStore.like(meta, before_commit=someone_removes_an_input) as racing_meta:
        outcome = MergeWorker(meta=racing_meta, objects=lake.objects).run(task)
    assert outcome.status == "conflict"
    assert data_objects(lake) == {f.path for f in inputs}
    assert len(lake.meta.files("events")) == 5
    # and the inputs it still held are free for the next plan
    assert not any(f.claimed for f in lake.meta.files("events"))


@pytest.fixture
def proxy(postgres_dsn: str) -> Iterator[PgFaultProxy]:
    p = PgFaultProxy(postgres_dsn)
    yield p
    p.close()


@pytest.mark.parametrize("mode", ["drop_before", "drop_after"])
def test_a_connection_dropped_during_the_merge_commit_is_retried_to_exactly_one_merge(
    small_lake: Lake, proxy: PgFaultProxy, meta: MetaStore, mode: str
) -> None:
    lake = small_lake
    ids = row_ids(lake)
    task = claim_one_task(lake)
    faults = []

    def arm(_: PendingCommit) -> None:  # the replace commit's COMMIT, not an earlier one
        if not faults:
            faults.append(proxy.arm(COMMIT_MESSAGE, mode))  # type: ignore[arg-type]

    proxied = HookedMetaStore(proxy.dsn, schema=meta.schema, max_connections=2, before_commit=arm)
    try:
        worker = MergeWorker(meta=proxied, objects=lake.objects)
        with pytest.raises(CommitOutcomeUnknownError):
            worker.run(task)
        assert faults[0].fired.is_set()
        # The message is redelivered: the retry either finds the commit or makes it
        retry = worker.run(task)
    finally:
        proxied.close()
    expected = "already_committed" if mode == "drop_after" else "committed"
    assert retry.status == expected
    assert row_ids(lake) == ids and len(lake.meta.files("events")) == 1
    replaces = [s for s in lake.meta.snapshots("events") if s.operation == "replace"]
    assert len(replaces) == 1


def test_a_poison_message_goes_to_the_dead_letters_and_good_ones_still_merge(
    small_lake: Lake,
) -> None:
    from icefloe.merge import process_merge_records

    lake = small_lake
    queue = InProcessQueue(max_receives=3)
    MergeOrchestrator(meta=lake.meta, sender=queue).run(table="events")
    queue.send_body('{"version": 99}')
    report = queue.drain(lambda event: process_merge_records(event, worker=lake.worker).response())
    assert report.dead_letters == ('{"version": 99}',)
    assert report.acknowledged == 1 and len(lake.meta.files("events")) == 1


def test_a_task_whose_claim_was_lost_before_it_runs_frees_its_other_files(
    small_lake: Lake,
) -> None:
    # Given a claimed merge task, one of whose files a local delete took before it ran (a
    # delete overrides a merge's claim)
    lake = small_lake
    task = claim_one_task(lake)
    taken, *others = task.file_ids
    lake.meta.commit("events", operation="delete", remove=[taken])

    # When the worker runs it, then the claim is lost, and the other files are claimed no more
    outcome = lake.worker.run(task)
    assert outcome.status == "claim_lost" and str(taken) in outcome.reason
    claimed = {f.file_id for f in lake.meta.files("events") if f.claimed}
    assert not claimed
    # And the next merge plans them at once, not after the lease
    again = claim_one_task(lake)
    assert sorted(again.file_ids) == sorted(others)
    assert lake.worker.run(again).status == "committed"


class TakeoverMeta(HookedMetaStore):
    """A real meta store on which another claimer takes ``stolen`` files just before a
    worker renews its claim (its lease had run out)."""

    stolen: tuple[int, ...] = ()
    thief: uuid.UUID | None = None

    def renew_claim(self, token: uuid.UUID, *, lease: timedelta) -> int:
        if self.thief is None:
            self.thief = self.claim_files("events", self.stolen, lease=timedelta(minutes=30))
            assert self.thief is not None
        return super().renew_claim(token, lease=lease)


def test_a_task_whose_claim_is_partly_taken_over_while_renewing_frees_the_rest(
    small_lake: Lake, meta: MetaStore
) -> None:
    # Given a task whose lease ran out, two of whose files another claimer takes between the
    # worker's check of its inputs and its renewal (which then extends the other four)
    lake = small_lake
    task = claim_one_task(lake, lease=timedelta(0))
    stolen, kept = task.file_ids[:2], task.file_ids[2:]
    with TakeoverMeta(meta.dsn_source.current(), schema=meta.schema) as racing_meta:
        racing_meta.stolen = stolen
        worker = MergeWorker(meta=racing_meta, objects=lake.objects)

        # When the worker runs it
        outcome = worker.run(task)

    # Then the claim is lost, the renewed files are freed, and the taken ones stay the thief's
    assert outcome.status == "claim_lost" and "taken over while renewing" in outcome.reason
    files = {f.file_id: f for f in lake.meta.files("events")}
    assert not [i for i in kept if files[i].claim_token is not None]
    assert {files[i].claim_token for i in stolen} == {racing_meta.thief}
    assert all(files[i].claimed for i in stolen)
