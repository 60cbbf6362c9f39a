"""Two orchestrators and four workers at once, with inserts still arriving."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Sequence

import pytest

from icefloe.merge import MergeOrchestrator, MergeOutcome, MergeTask, MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.sample_events import sample_events
from support.merge_lake import START, Lake

pytestmark = pytest.mark.integration

ORCHESTRATORS = 2
WORKERS = 4
ROUNDS = 6


class SharedQueue:
    """One queue that both orchestrators send to and four workers take from."""

    def __init__(self) -> None:
        self.tasks: queue.Queue[MergeTask | None] = queue.Queue()

    def send(self, tasks: Sequence[MergeTask]) -> list[MergeTask]:
        for task in tasks:
            self.tasks.put(task)
        return []


def test_concurrent_orchestrators_and_workers_never_merge_a_file_twice_or_lose_a_row(
    lake: Lake, meta: MetaStore
) -> None:
    # Given three partitions with many small files
    lake.create()
    lake.insert_batches("events", batches=16, rows=150, days=3)
    shared = SharedQueue()
    outcomes: list[tuple[MergeTask, MergeOutcome]] = []
    errors: list[BaseException] = []
    inserted_during = threading.Event()

    def orchestrate() -> None:
        orchestrator = MergeOrchestrator(meta=meta, sender=shared)
        try:
            for _ in range(ROUNDS):
                orchestrator.run(table="events")
        except BaseException as e:
            errors.append(e)

    def work() -> None:
        worker = MergeWorker(meta=meta, objects=lake.objects)
        while (task := shared.tasks.get()) is not None:
            try:
                outcomes.append((task, worker.run(task)))
            except BaseException as e:
                errors.append(e)

    def keep_inserting() -> None:
        for n in range(6):
            rows = sample_events(150, days=3, start=START, users=40, seed=100 + n)
            lake.inserter.insert_rows("events", rows)
        inserted_during.set()

    # When two orchestrators plan and claim the same partitions while four workers merge
    workers = [threading.Thread(target=work) for _ in range(WORKERS)]
    planners = [threading.Thread(target=orchestrate) for _ in range(ORCHESTRATORS)]
    inserter = threading.Thread(target=keep_inserting)
    for t in [*workers, *planners, inserter]:
        t.start()
    for t in [*planners, inserter]:
        t.join()
    for _ in workers:
        shared.tasks.put(None)
    for t in workers:
        t.join()
    assert not errors, errors
    assert inserted_during.is_set()

    # Then every file was merged at most once: inputs of committed merges are disjoint,
    # and they are exactly the files that are no longer live
    committed = [task for task, outcome in outcomes if outcome.status == "committed"]
    assert committed
    merged_inputs = [file_id for task in committed for file_id in task.file_ids]
    assert len(merged_inputs) == len(set(merged_inputs))
    every_file = lake.meta.files_by_id("events", range(1, 10_000))
    assert {f.file_id for f in every_file if f.end_snapshot is not None} == set(merged_inputs)
    replaces = [s for s in lake.meta.snapshots("events") if s.operation == "replace"]
    assert len(replaces) == len(committed)
    # And no row was lost or doubled: every inserted row id is there exactly once
    appends = [s for s in lake.meta.snapshots("events") if s.operation == "append"]
    ids = Counter(r["_row_id"] for r in lake.rows("SELECT _row_id FROM events"))
    assert len(ids) == sum(s.rows_added for s in appends) == 22 * 150
    assert set(ids.values()) == {1}

    # And merging on until quiet leaves the planner's floor
    lake.merge("events")
    assert MergeOrchestrator(meta=meta, sender=SharedQueue()).plan("events") == []
    assert len(Counter(r["_row_id"] for r in lake.rows("SELECT _row_id FROM events"))) == 3300
