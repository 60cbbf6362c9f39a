"""The janitor function end to end: small inserts merged, then garbage-collected from a moto
bucket built from template.yaml, with the function's environment as deployed. Real Postgres
and DuckDB (the merges and the queries read the objects over HTTP from moto's server, which
``mock_aws`` would not intercept)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import boto3
import psycopg
import pytest
from psycopg import sql

from icefloe.aws.lambda_runtime import Container
from icefloe.compaction.emr import EmrCompactionLauncher
from icefloe.merge import InProcessQueue, MergeOrchestrator
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.settings.parts import EmrJobConfig
from icefloe.spec import Retention, TableSpec
from support.aws import (
    ACCOUNT_ID,
    EMR_SERVERLESS_ENDPOINT_VARIABLE,
    REGION,
    create_emr_application,
    function_environment,
    scheduled_rule_event,
)
from support.lambda_stack import (
    BATCHES,
    DAYS,
    PREFIX,
    TEMPLATE,
    Deployment,
    FunctionUnderTest,
    MotoWorld,
    emitted_metrics,
    fresh_container,
    handler_module_fixture,
    insert_small_batches,
    invoke,
    lambda_context,
    merge_until_quiet,
    object_keys,
    schedule_event,
    set_environment,
    use_fake_aws,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.e2e

JANITOR = TEMPLATE.functions()["JanitorFunction"]
TABLE = "events"
COUNT_SQL = (
    "SELECT event, count(*) AS n, count(DISTINCT user_id) AS users, min(ts) AS first"
    " FROM events GROUP BY event ORDER BY event"
)


@dataclass
class Stack:
    s3: S3Client
    bucket: str
    function: FunctionUnderTest

    def invoke(self, event: object) -> dict[str, Any]:
        return invoke(self.function.handler, event, lambda_context(JANITOR))

    def object_keys(self) -> set[str]:
        return object_keys(self.s3, self.bucket)


app = handler_module_fixture(JANITOR, name="app")


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    events_spec: TableSpec,
    app: ModuleType,
) -> Iterator[Stack]:
    """The janitor's world as the template declares it, on a fresh bucket of the shared moto
    server, with the `events` table."""
    use_fake_aws(monkeypatch, session_token=False)
    world = MotoWorld.create(moto_endpoint, "janitor", queues=False)
    environment = deployment.environment(
        JANITOR, resources={"DataBucket": world.bucket}, s3_endpoint=moto_endpoint, memory_size=True
    )
    assert environment["ICEFLOE_WAREHOUSE"] == f"s3://{world.bucket}/{PREFIX}"
    set_environment(monkeypatch, environment)
    meta.create_table(events_spec)
    with fresh_container(app) as function:
        yield Stack(s3=world.s3, bucket=world.bucket, function=function)


def answer(sql: str = COUNT_SQL) -> list[dict[str, object]]:
    with Container() as container:
        runtime = container.runtime
        settings = runtime.settings
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, settings),
        )
        try:
            rows: list[dict[str, object]] = engine.query(sql).rows.to_pylist()
        finally:
            engine.close()
    return rows


def every_file(meta: MetaStore, table: str = TABLE) -> list[DataFile]:
    """Every file row, live or dead."""
    return meta.files_by_id(table, range(1, 100_000))


def dead_files(meta: MetaStore, table: str = TABLE) -> list[DataFile]:
    return [f for f in every_file(meta, table) if f.end_snapshot is not None]


def key_of(path: str) -> str:
    return f"{PREFIX}/{path}"


def merged_lake(meta: MetaStore) -> tuple[set[str], set[str]]:
    """Five small inserts into three day partitions, merged: the dead and the live keys."""
    insert_small_batches()
    merge_until_quiet()
    dead = {key_of(f.path) for f in dead_files(meta)}
    live = {key_of(f.path) for f in meta.files(TABLE)}
    assert len(dead) == DAYS * BATCHES and len(live) == DAYS
    return dead, live


def test_gc_with_retention_zero_deletes_exactly_the_dead_files_objects(
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given small inserts merged: the bucket holds the dead inputs beside the live outputs
    dead, live = merged_lake(meta)
    assert stack.object_keys() == dead | live
    dead_bytes = sum(f.size_bytes for f in dead_files(meta))
    before = answer()
    head = meta.get_table(TABLE).head_snapshot_id

    # When the janitor is invoked with a retention of zero
    capsys.readouterr()
    caplog.clear()
    report = stack.invoke({"retention": "0s"})

    # Then exactly the dead files' objects are gone and every live file's object is present
    assert stack.object_keys() == live
    assert {f.path for f in every_file(meta)} == {f.path for f in meta.files(TABLE)}
    # And the report counts them
    assert report["dry_run"] is False and report["failed_tables"] == {}
    assert report["files_deleted"] == len(dead) and report["bytes_deleted"] == dead_bytes
    assert report["snapshots_expired"] == head - 1 and report["orphans_found"] == 0
    (table,) = report["tables"]
    assert table["table"] == TABLE and table["retention"] == "0s"
    assert {key_of(p) for p in table["dead_paths"]} == dead
    # And a query answers as before
    assert answer() == before
    # And the logs and metrics say so
    (logged,) = [r for r in caplog.records if r.getMessage() == "table collected"]
    assert (logged.table, logged.files_deleted, logged.bytes_deleted) == (
        TABLE,
        len(dead),
        dead_bytes,
    )
    assert (logged.snapshots_expired, logged.orphans_found, logged.orphans_deleted) == (
        head - 1,
        0,
        0,
    )
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "icefloe"
    # The dimensions the template's alarm on failed tables watches
    (alarm,) = [
        a
        for a in TEMPLATE.of_type("AWS::CloudWatch::Alarm").values()
        if a.get("Namespace") == "icefloe"
        and a.get("MetricName") == "TablesFailed"
        and {"Name": "service", "Value": "icefloe-janitor"} in a.get("Dimensions", [])
    ]
    assert emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        [d["Name"] for d in alarm["Dimensions"]]
    ]
    assert all(emf[d["Name"]] == d["Value"] for d in alarm["Dimensions"])
    assert {
        name: emf[name]
        for name in (
            "SnapshotsExpired",
            "FilesDeleted",
            "BytesDeleted",
            "OrphansFound",
            "OrphansDeleted",
            "OrphanBytesDeleted",
            "ClaimsFreed",
            "ReceiptsPruned",
            "TablesFailed",
            "JobsSettled",
        )
    } == {
        "SnapshotsExpired": [head - 1],
        "FilesDeleted": [len(dead)],
        "BytesDeleted": [dead_bytes],
        "OrphansFound": [0],
        "OrphansDeleted": [0],
        "OrphanBytesDeleted": [0],
        "ClaimsFreed": [0],
        "ReceiptsPruned": [0],
        "TablesFailed": [0],
        "JobsSettled": [0],
    }
    units = {m["Name"]: m["Unit"] for m in emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units["BytesDeleted"] == units["OrphanBytesDeleted"] == "Bytes"
    assert units["FilesDeleted"] == "Count"

    # When it runs again
    again = stack.invoke({"retention": "0s"})

    # Then there is nothing left to do
    assert again["files_deleted"] == again["snapshots_expired"] == 0
    assert stack.object_keys() == live


def test_a_dry_run_deletes_nothing_and_reports_what_a_real_run_then_deletes(
    stack: Stack, meta: MetaStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given small inserts merged
    dead, live = merged_lake(meta)
    rows_before = every_file(meta)

    # When the janitor is invoked as a dry run with a retention of zero
    capsys.readouterr()
    dry = stack.invoke({"dry_run": True, "retention": "0s"})

    # Then nothing changed: objects, file rows, snapshots
    assert stack.object_keys() == dead | live
    assert every_file(meta) == rows_before
    assert not any(s.expired for s in meta.snapshots(TABLE))
    # And it reports the dead files, and emits no deletion
    assert dry["dry_run"] is True and dry["files_deleted"] == len(dead)
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["FilesDeleted"] == [0] and emf["BytesDeleted"] == [0]
    assert emf["SnapshotsExpired"] == [0]

    # When it really runs
    real = stack.invoke({"retention": "0s"})

    # Then it deletes exactly the paths the dry run reported
    (would,) = dry["tables"]
    (did,) = real["tables"]
    assert sorted(would["dead_paths"]) == sorted(did["dead_paths"])
    assert {key_of(p) for p in did["dead_paths"]} == dead
    assert real["files_deleted"] == dry["files_deleted"]
    assert real["snapshots_expired"] == dry["snapshots_expired"] > 0
    assert stack.object_keys() == live


def test_a_young_orphan_survives_a_default_run(stack: Stack, meta: MetaStore) -> None:
    # Given a merged table, and an object under its data prefix that no file row names (a
    # writer uploaded it and has not committed yet, or died): moments old
    dead, live = merged_lake(meta)
    orphan = key_of(f"{TABLE}/data/day=2026-05-01/{uuid.uuid4().hex}.parquet")
    stack.s3.put_object(Bucket=stack.bucket, Key=orphan, Body=b"uploaded, not yet committed")

    # When the schedule runs the janitor (each table's own retention and 1-day orphan grace),
    # and when an operator runs it with the shortest orphan grace allowed
    scheduled = stack.invoke(schedule_event(JANITOR))
    shortest = stack.invoke({"orphan_grace": "1h", "retention": "0s"})

    # Then the orphan is still there, and neither run found it
    assert orphan in stack.object_keys()
    for report in (scheduled, shortest):
        (table,) = report["tables"]
        assert report["orphans_found"] == report["orphans_deleted"] == 0
        assert table["orphan_paths"] == [] and table["orphan_bytes"] == 0
    (table,) = scheduled["tables"]
    assert (table["retention"], table["orphan_grace"]) == ("3d", "1d")
    # The default retention kept every snapshot and file; the explicit one collected the dead
    assert scheduled["files_deleted"] == 0 and shortest["files_deleted"] == len(dead)
    assert stack.object_keys() == live | {orphan}


@pytest.mark.parametrize(
    ("event", "error_type", "words"),
    [
        ({"retention": "soon"}, "InvalidInputError", "'retention'"),
        ({"retention": "0s", "orphan_grace": "5m"}, "InvalidInputError", "shorter than 1h"),
        ({"retention": "0s", "table": "nope"}, "TableNotFoundError", "nope"),
        ({"retention": "0s", "bogus": 1}, "InvalidInputError", "bogus"),
        ({"retention": "0s", "table": "../x"}, "InvalidNameError", "../x"),
        ({"retention": 0}, "InvalidInputError", "'retention'"),
        ({"retention": "0s", "dry_run": "no"}, "InvalidInputError", "'dry_run'"),
        ({"retention": "0s", "max_files": "10"}, "InvalidInputError", "'max_files'"),
        ({"retention": "0s", "max_files": True}, "InvalidInputError", "'max_files'"),
        ({"retention": "0s", "max_files": 0}, "InvalidInputError", "max_files"),
        (["events"], "InvalidInputError", "must be an object"),
    ],
    ids=[
        "bad duration",
        "orphan grace below the floor",
        "unknown table",
        "unknown key",
        "bad table name",
        "retention not a string",
        "dry_run not a bool",
        "max_files not a number",
        "max_files a bool",
        "max_files zero",
        "not an object",
    ],
)
def test_malformed_invokes_are_answered_with_an_error_and_change_nothing(
    stack: Stack, meta: MetaStore, event: object, error_type: str, words: str
) -> None:
    # Given a merged table with dead files that a run with retention 0s would delete
    dead, live = merged_lake(meta)
    rows_before = every_file(meta)

    response = stack.invoke(event)

    assert set(response) == {"error"}
    assert response["error"]["type"] == error_type and words in response["error"]["message"]
    assert stack.object_keys() == dead | live
    assert every_file(meta) == rows_before
    assert not any(s.expired for s in meta.snapshots(TABLE))


def test_the_scheduled_event_collects_every_table_by_its_own_retention(
    stack: Stack, meta: MetaStore
) -> None:
    # Given two more tables, merged, whose own retention is zero, beside `events` (3 days)
    for name in ("clicks", "views"):
        meta.create_table(
            TableSpec.create(
                name=name,
                schema="ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR",
                partition_by="day(ts)",
                retention=Retention(snapshot_retention_seconds=0),
            )
        )
    for name in (TABLE, "clicks", "views"):
        insert_small_batches(name)
        merge_until_quiet(name)
    dead = {name: {key_of(f.path) for f in dead_files(meta, name)} for name in ("clicks", "views")}
    kept = {key_of(f.path) for f in every_file(meta, TABLE)}
    assert all(len(keys) == DAYS * BATCHES for keys in dead.values())

    # When the schedule invokes the janitor, as Scheduler (its Input) and as an EventBridge rule
    report = stack.invoke(schedule_event(JANITOR))
    rule_event = scheduled_rule_event()
    again = stack.invoke(rule_event)

    # Then every table was collected, each by its own retention
    by_table = {t["table"]: t for t in report["tables"]}
    assert set(by_table) == {TABLE, "clicks", "views"}
    assert by_table[TABLE]["retention"] == "3d" and by_table[TABLE]["files_deleted"] == 0
    for name in ("clicks", "views"):
        assert by_table[name]["retention"] == "0s"
        assert {key_of(p) for p in by_table[name]["dead_paths"]} == dead[name]
    assert report["files_deleted"] == 2 * DAYS * BATCHES
    remaining = stack.object_keys()
    assert kept <= remaining and not (dead["clicks"] | dead["views"]) & remaining
    # And the second form ran every table too, with nothing left to delete
    assert {t["table"] for t in again["tables"]} == {TABLE, "clicks", "views"}
    assert again["files_deleted"] == 0


def test_a_compaction_job_whose_end_event_was_lost_is_settled_by_asking_emr(
    stack: Stack,
    meta: MetaStore,
    moto_endpoint: str,
    postgres_dsn: str,
    schema_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the template's EMR Serverless application, named to the janitor as deployed
    monkeypatch.setenv(EMR_SERVERLESS_ENDPOINT_VARIABLE, moto_endpoint)
    emr = boto3.client("emr-serverless", endpoint_url=moto_endpoint, region_name=REGION)
    application_id = create_emr_application(emr, TEMPLATE, name=f"{stack.bucket}-compaction")
    environment = function_environment(
        TEMPLATE,
        JANITOR,
        resources={
            "DataBucket": stack.bucket,
            "CompactionApplication.ApplicationId": application_id,
        },
    )
    monkeypatch.setenv("ICEFLOE_EMR_APPLICATION_ID", environment["ICEFLOE_EMR_APPLICATION_ID"])
    # And a compaction job started on it 20 minutes ago, whose end event never came: its
    # files are still claimed (moto's job runs succeed at once)
    insert_small_batches()
    runtime = stack.function.container.runtime
    launcher = EmrCompactionLauncher(
        meta=runtime.meta,
        objects=runtime.objects,
        client=emr,
        config=EmrJobConfig(
            application_id=application_id,
            execution_role_arn=f"arn:aws:iam::{ACCOUNT_ID}:role/test-CompactionJobRole",
            entry_point=f"s3://{stack.bucket}/artifacts/compact_job.py",
            environment_archive=f"s3://{stack.bucket}/artifacts/icefloe-env.tar.gz",
        ),
    )
    job = launcher.launch(TABLE, MergeOrchestrator(meta=meta, sender=InProcessQueue()).plan(TABLE))
    assert job is not None and all(f.claimed for f in meta.files(TABLE))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {}.compaction_jobs SET created_at = now() - interval '20 minutes'"
            ).format(sql.Identifier(schema_name))
        )

    # When the schedule runs the janitor
    capsys.readouterr()
    report = stack.invoke(schedule_event(JANITOR))

    # Then it asked EMR Serverless, settled the job as it ended, and freed the files
    assert report["jobs_settled"] == 1
    assert JobStore(meta).get(job.job_id).state == "SUCCESS"
    assert not any(f.claimed for f in meta.files(TABLE))
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["JobsSettled"] == [1]

    # And a second run has nothing left to settle
    assert stack.invoke(schedule_event(JANITOR))["jobs_settled"] == 0
