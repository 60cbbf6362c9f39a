"""A local compaction whose process is killed is settled by the next janitor run: the job
fails, its claims are freed, and the sweep no longer waits for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from icefloe.janitor import Janitor
from icefloe.metastore.jobs import JobStore
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[2]

PAUSED_COMPACTION = """
import sys, time
from pathlib import Path
from icefloe.compaction.local import compact_locally
from icefloe.config import CoreSettings
from icefloe.settings import load_settings
from icefloe.merge import MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.storage import LocalObjectStore

dsn, schema, root, tests = sys.argv[1:5]
sys.path.insert(0, tests)
from support.hooked_meta import HookedMetaStore

meta = MetaStore(dsn, schema=schema)
objects = LocalObjectStore(Path(root))

def pause(commit):
    print("outputs uploaded, about to commit", flush=True)
    time.sleep(600)

compact_locally(
    meta=meta, objects=objects, settings=load_settings({"ICEFLOE_HOME": root}).core,
    table="events", engine="duckdb",
    worker=MergeWorker(meta=HookedMetaStore.like(meta, before_commit=pause), objects=objects),
)
"""


def test_a_killed_local_compaction_is_settled_by_the_next_janitor_run(
    lake: Lake, postgres_dsn: str
) -> None:
    # Given a local compaction killed after uploading its outputs, before committing them
    lake.create()
    lake.insert_batches("events", batches=6, rows=50, days=1)
    before = lake.rows("SELECT count(*) AS n FROM events")
    compaction = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PAUSED_COMPACTION,
            postgres_dsn,
            lake.meta.schema,
            lake.objects.root_uri,
            str(TESTS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert compaction.stdout is not None
    assert compaction.stdout.readline().startswith("outputs uploaded")
    compaction.kill()
    compaction.wait()
    (job,) = JobStore(lake.meta).unsettled(older_than=timedelta(0))
    assert job.state == "RUNNING" and job.runner is not None
    assert lake.meta.status("events").claimed_files == 6
    registered = {f.path for f in lake.meta.files("events")}
    uploaded = {o.key for o in lake.objects.list_prefix("events/data/")} - registered
    assert uploaded  # the killed job's outputs: never committed
    # When the janitor runs (minutes later, not hours)
    report = Janitor(meta=lake.meta, objects=lake.objects).run()
    # Then the job is settled as failed and its claims are free
    assert report.jobs_settled == 1
    settled = JobStore(lake.meta).get(job.job_id)
    assert settled.state == "FAILED" and settled.settled_at is not None
    assert lake.meta.status("events").claimed_files == 0
    # And its outputs are orphans the sweep takes once past the grace (no job holds it back)
    then = time.time() - timedelta(days=2).total_seconds()
    for key in uploaded:
        os.utime(lake.objects.uri(key), (then, then))
    swept = Janitor(meta=lake.meta, objects=lake.objects).run()
    assert set(swept.tables[0].orphan_paths) == uploaded
    assert lake.rows("SELECT count(*) AS n FROM events") == before
    # And the partition can be merged again at once
    assert lake.merge("events").count("committed") == 1
