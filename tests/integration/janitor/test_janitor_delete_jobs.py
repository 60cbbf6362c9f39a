"""The orphan sweep and delete jobs: a running job's recorded rewrites are named by its parts
until it commits, so the sweep leaves them however old they are; a job that ended failed names
nothing, and what it left is swept as before."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

from icefloe.janitor import ORPHAN_GRACE_FLOOR, Janitor
from icefloe.lifecycle import DeletePartRunner, start_delete
from icefloe.lifecycle.delete_jobs import DeletePartTask
from icefloe.merge import InProcessQueue
from icefloe.metastore.deletes import DeleteJob, DeleteJobStore
from support.merge_lake import ALL_ROWS, Lake

pytestmark = pytest.mark.integration

WHERE = "user_id = 'u3' OR event = 'signup'"


def age(lake: Lake, key: str, by: timedelta) -> None:
    """Make an object look written ``by`` ago (its mtime is what the sweep compares)."""
    then = time.time() - by.total_seconds()
    os.utime(lake.objects.uri(key), (then, then))


def job_with_one_part_recorded(lake: Lake) -> tuple[DeleteJob, list[str]]:
    """Three days of events, a delete job over them, and its first part run: the job and that
    part's recorded rewrites, made to look written 2 hours ago (the job's other parts wait
    behind merges on the queue; each part that starts renews the 1-hour lease)."""
    lake.create()
    lake.insert_batches("events", batches=4, rows=60, days=3)
    started = start_delete(
        meta=lake.meta, objects=lake.objects, table="events", where=WHERE, sender=InProcessQueue()
    )
    assert started.job is not None and started.parts == 3
    runner = DeletePartRunner(meta=lake.meta, objects=lake.objects)
    assert runner.run(DeletePartTask(started.job.job_id, 0, "events")).status == "part_done"
    (part, *_) = DeleteJobStore(lake.meta).parts(started.job.job_id)
    rewrites = [f.path for f in part.added]
    assert rewrites and not {f.path for f in lake.every_file_row()} & set(rewrites)
    for key in rewrites:
        age(lake, key, timedelta(hours=2))
    return started.job, rewrites


def test_the_sweep_spares_the_recorded_rewrites_of_a_running_delete_job(lake: Lake) -> None:
    # Given a running job whose recorded rewrites no file row names yet, older than the grace
    job, rewrites = job_with_one_part_recorded(lake)
    expected = lake.rows(
        ALL_ROWS.replace("ORDER BY", f"WHERE NOT coalesce(({WHERE}), false) ORDER BY")
    )

    # When the janitor sweeps orphans
    report = Janitor(meta=lake.meta, objects=lake.objects).run(orphan_grace=ORPHAN_GRACE_FLOOR)

    # Then the rewrites stay, and the job commits files that all exist
    assert report.total("orphans_found") == 0
    assert set(rewrites) <= lake.data_objects()
    runner = DeletePartRunner(meta=lake.meta, objects=lake.objects)
    assert runner.run(DeletePartTask(job.job_id, 1, "events")).status == "part_done"
    assert runner.run(DeletePartTask(job.job_id, 2, "events")).status == "committed"
    assert lake.rows(ALL_ROWS) == expected
    assert {f.path for f in lake.meta.files("events")} <= lake.data_objects()


def test_the_sweep_takes_what_a_failed_delete_job_left(lake: Lake) -> None:
    # Given a job ended as failed whose recorded rewrites are still there (its process was
    # killed between freeing its claims and deleting them)
    job, rewrites = job_with_one_part_recorded(lake)
    assert DeleteJobStore(lake.meta).end(job, state="failed", error="killed")

    # When the janitor sweeps orphans, then they are swept as any writer's leftovers
    report = Janitor(meta=lake.meta, objects=lake.objects).run(orphan_grace=ORPHAN_GRACE_FLOOR)

    assert sorted(report.tables[0].orphan_paths) == sorted(rewrites)
    assert not set(rewrites) & lake.data_objects()
    assert lake.data_objects() == {f.path for f in lake.every_file_row()}
