"""Big scans on EMR Serverless (issue: interop): a query job is started under moto with the
snapshots it pins, recorded in query_jobs and settled as a compaction job is (by the job-state
event or the janitor's reconciliation), and its entry point, run on local Spark, writes as
Parquet exactly what the query engine answers at those snapshots."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from icefloe.compaction.tracking import handle_job_state_change, reconcile_jobs, settle_job
from icefloe.emr_query import (
    EmrQueryLauncher,
    LaunchedQuery,
    QueryJobStartError,
    SparkQueryRequest,
    pin_snapshots,
    select_statement,
)
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.janitor import Janitor
from icefloe.metastore.janitor import JanitorStore
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.query_jobs import QueryJobStore
from icefloe.settings.parts import EmrJobConfig
from support.aws import FAKE_AWS_ENVIRONMENT, MOTO_EMR_RELEASE_LABEL, UNSET_AWS_VARIABLES
from support.infra_scripts import load_script
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

SQL = "SELECT event, count(*) AS n, min(ts) AS first FROM events GROUP BY event"
REGION = "us-east-1"


@pytest.fixture
def emr(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return boto3.client("emr-serverless", endpoint_url=moto_endpoint, region_name=REGION)


def launcher(lake: Lake, emr: Any, results: Path, application: str) -> EmrQueryLauncher:
    return EmrQueryLauncher(
        meta=lake.meta,
        objects=lake.objects,
        client=emr,
        config=EmrJobConfig(
            application_id=application,
            execution_role_arn="arn:aws:iam::123456789012:role/icefloe-job",
            entry_point="s3://artifacts/icefloe/compact_job.py",
            environment_archive="s3://artifacts/icefloe/icefloe-env.tar.gz",
        ),
        results_uri=str(results),
    )


def test_a_query_job_is_started_tracked_and_writes_the_pinned_answer(
    lake: Lake,
    emr: Any,
    spark: Any,
    postgres_dsn: str,
    schema_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a table with merged and unmerged files
    lake.create()
    lake.insert_batches("events", batches=4, rows=40, days=3)
    lake.merge("events")
    lake.insert_batches("events", batches=2, rows=20, days=3, seed=30)
    pinned = lake.head()

    # When a query job is started, and the table moves on before it runs
    application = emr.create_application(
        name="icefloe-test", releaseLabel=MOTO_EMR_RELEASE_LABEL, type="SPARK"
    )["applicationId"]
    launched = launcher(lake, emr, tmp_path / "results", application).launch(SQL)
    lake.insert_batches("events", batches=2, rows=25, days=3, seed=60)
    assert lake.head() != pinned

    # Then EMR runs the query entry point beside the compaction job's, with the request's key
    run = emr.get_job_run(applicationId=application, jobRunId=launched.job_run_id)
    driver = run["jobRun"]["jobDriver"]["sparkSubmit"]
    request_key = f"events/jobs/{launched.job_id}.json"
    assert driver["entryPoint"] == "s3://artifacts/icefloe/query_job.py"
    assert driver["entryPointArguments"] == ["--request", request_key]
    assert launched.snapshots == {"events": pinned}
    request = SparkQueryRequest.from_json(lake.objects.get(request_key))
    assert request.snapshots == {"events": pinned} and request.sql == SQL
    # And the job is in the query jobs' books, not among the compaction jobs, which hold claims
    # (a query changes nothing)
    job = QueryJobStore(lake.meta).get(launched.job_id)
    assert job.job_run_id == launched.job_run_id and job.state == "SUBMITTED"
    assert job.request_key == request_key and job.result_uri == launched.result_uri
    with pytest.raises(NotFoundError):
        JobStore(lake.meta).get(launched.job_id)

    # When its entry point runs (on local Spark, with the settings EMR's driver would have)
    query_job = load_script("query_job", "emr")
    status = query_job.main(
        ["--request", request_key],
        {
            "ICEFLOE_HOME": str(tmp_path / "home"),
            "ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse"),
            "ICEFLOE_DATABASE_URL": postgres_dsn,
            "ICEFLOE_DATABASE_SCHEMA": schema_name,
        },
    )

    # Then the result is the engine's answer at the pinned snapshot, not at the head
    assert status == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["result_uri"] == launched.result_uri
    written = pq.read_table(launched.result_uri).to_pylist()
    expected = lake.rows(SQL, snapshot_id=pinned)
    assert summary["rows"] == len(expected)
    assert canonical(written) == canonical(expected)
    assert canonical(written) != canonical(lake.rows(SQL))

    # And the job settles as compaction jobs do (nothing to release, nothing to delete)
    settled = settle_job(meta=lake.meta, objects=lake.objects, job=job, state="SUCCESS")
    assert (settled.claims_released, settled.outputs_deleted) == (0, 0)
    assert QueryJobStore(lake.meta).get(launched.job_id).settled_at is not None

    # And a job run again does not mix its result with the first one's
    assert (
        query_job.main(
            ["--request", request_key],
            {
                "ICEFLOE_HOME": str(tmp_path / "home"),
                "ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse"),
                "ICEFLOE_DATABASE_URL": postgres_dsn,
                "ICEFLOE_DATABASE_SCHEMA": schema_name,
            },
        )
        == 1
    )
    assert canonical(pq.read_table(launched.result_uri).to_pylist()) == canonical(expected)


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted((k, str(v)) for k, v in row.items())) for row in rows)


def test_what_a_query_job_refuses_before_starting(lake: Lake) -> None:
    lake.create()
    with pytest.raises(InvalidInputError, match="no committed rows"):
        pin_snapshots(lake.meta, "SELECT * FROM events")
    lake.insert_batches("events", batches=1, rows=5, days=1)
    with pytest.raises(InvalidInputError, match="one SELECT"):
        pin_snapshots(lake.meta, "DELETE FROM events")
    with pytest.raises(InvalidInputError, match="names no table"):
        pin_snapshots(lake.meta, "SELECT 1")


@pytest.mark.parametrize(
    ("sql", "statement"),
    [
        ("-- daily report\nSELECT * FROM events", "-- daily report\nSELECT * FROM events"),
        ("/* x */ SELECT * FROM events;", "/* x */ SELECT * FROM events"),
        ("(SELECT * FROM events)", "(SELECT * FROM events)"),
        ("SELECT * FROM events; -- done", "SELECT * FROM events"),
        ("SELECT ';' AS s FROM events -- a;b\n;", "SELECT ';' AS s FROM events -- a;b"),
    ],
)
def test_a_query_job_reads_its_select_from_the_parse_not_the_first_word(
    lake: Lake, sql: str, statement: str
) -> None:
    lake.create()
    lake.insert_batches("events", batches=1, rows=5, days=1)

    assert select_statement(sql) == statement
    assert pin_snapshots(lake.meta, sql) == {"events": lake.head()}


@pytest.mark.parametrize(
    "sql", ["SHOW TABLES", "SELECT * FROM events; SELECT 1", "/* x */ DELETE FROM events"]
)
def test_a_query_job_refuses_what_is_not_one_select(sql: str) -> None:
    with pytest.raises(InvalidInputError, match="query refused"):
        select_statement(sql)


def test_a_request_must_be_one(lake: Lake) -> None:
    with pytest.raises(InvalidInputError, match="not a query job request"):
        SparkQueryRequest.from_json(b'{"job_id": "q"}')
    with pytest.raises(InvalidInputError, match="names no table"):
        SparkQueryRequest.from_json(
            json.dumps({"job_id": "q", "sql": "SELECT 1", "snapshots": {}, "result_uri": "x"})
        )


def test_a_job_emr_refuses_to_start_is_a_clear_error_and_leaves_no_request(
    lake: Lake, emr: Any, tmp_path: Path
) -> None:
    # Given a table, and an application id EMR does not know
    lake.create()
    lake.insert_batches("events", batches=1, rows=5, days=1)

    # When a query job is started on it
    with pytest.raises(QueryJobStartError, match="could not start the query job"):
        launcher(lake, emr, tmp_path / "results", "00unknownapp00").launch(SQL)

    # Then no request is left beside the manifests, and no job run was recorded as started
    assert not list(lake.objects.list_prefix("events/jobs/"))
    (job,) = [j for j in QueryJobStore(lake.meta).unsettled(older_than=timedelta(0))]
    assert job.job_run_id is None
    assert JobStore(lake.meta).unsettled(older_than=timedelta(0)) == []


def a_small_table(lake: Lake) -> None:
    lake.create()
    lake.insert_batches("events", batches=1, rows=5, days=1)


def an_application(emr: Any) -> str:
    return str(
        emr.create_application(
            name="icefloe-test", releaseLabel=MOTO_EMR_RELEASE_LABEL, type="SPARK"
        )["applicationId"]
    )


def a_started_query(lake: Lake, emr: Any, tmp_path: Path) -> LaunchedQuery:
    a_small_table(lake)
    return launcher(lake, emr, tmp_path / "results", an_application(emr)).launch(SQL)


def test_a_query_jobs_end_event_settles_it_and_the_janitor_forgets_it(
    lake: Lake, emr: Any, tmp_path: Path
) -> None:
    # Given a started query job
    launched = a_started_query(lake, emr, tmp_path)
    request_key = f"events/jobs/{launched.job_id}.json"

    # When its run's end event comes
    event = {"detail": {"jobRunId": launched.job_run_id, "state": "SUCCESS"}}
    settled = handle_job_state_change(event, meta=lake.meta, objects=lake.objects)

    # Then the query job is settled from its own books, with nothing to release or delete
    assert settled is not None and settled.job_id == launched.job_id
    assert (settled.state, settled.claims_released, settled.outputs_deleted) == ("SUCCESS", 0, 0)
    assert QueryJobStore(lake.meta).get(launched.job_id).settled_at is not None
    # And a second delivery changes nothing
    assert handle_job_state_change(event, meta=lake.meta, objects=lake.objects) is None

    # When the janitor's reconciliation runs after the settled records' keep
    reconcile_jobs(meta=lake.meta, objects=lake.objects, client=emr, keep_settled=timedelta(0))

    # Then the record and its request are forgotten
    with pytest.raises(NotFoundError):
        QueryJobStore(lake.meta).get(launched.job_id)
    assert request_key not in [o.key for o in lake.objects.list_prefix("events/jobs/")]


def test_the_janitor_settles_a_query_job_whose_end_event_was_lost(
    lake: Lake, emr: Any, tmp_path: Path
) -> None:
    # Given a query job EMR could not start (recorded, never given a run id), and one started
    a_small_table(lake)
    with pytest.raises(QueryJobStartError):
        launcher(lake, emr, tmp_path / "results", "00unknownapp00").launch(SQL)
    (unstarted,) = QueryJobStore(lake.meta).unsettled(older_than=timedelta(0))
    application = an_application(emr)
    started = launcher(lake, emr, tmp_path / "results", application).launch(SQL)

    # When reconciliation runs (every job old enough, and the unstarted one past its lease)
    settled = reconcile_jobs(
        meta=lake.meta,
        objects=lake.objects,
        client=emr,
        older_than=timedelta(0),
        abandon_after=timedelta(0),
    )

    # Then both are settled: the started one as EMR reports its run (moto's runs succeed), the
    # other as abandoned
    run = emr.get_job_run(applicationId=application, jobRunId=started.job_run_id)["jobRun"]
    assert {s.job_id: s.state for s in settled} == {
        unstarted.job_id: "CANCELLED",
        started.job_id: run["state"],
    }
    assert run["state"] == "SUCCESS"
    assert QueryJobStore(lake.meta).unsettled(older_than=timedelta(0)) == []
    assert QueryJobStore(lake.meta).get(started.job_id).state == "SUCCESS"


def test_purging_a_dropped_table_forgets_its_query_and_compaction_jobs(
    lake: Lake, emr: Any, tmp_path: Path
) -> None:
    # Given a table with a settled query job and a compaction job recorded under it
    query = a_started_query(lake, emr, tmp_path)
    QueryJobStore(lake.meta).set_state(query.job_id, "SUCCESS", settled=True)
    manifest = "events/jobs/compact-dropped.json"
    lake.objects.put(manifest, b"{}")
    JobStore(lake.meta).record(
        job_id="compact-dropped", table="events", claim_tokens=[], manifest_key=manifest
    )
    table_id = lake.meta.get_table("events").table_id

    # When the table is dropped and purged
    lake.meta.drop_table("events")
    report = Janitor(meta=lake.meta, objects=lake.objects).run(retention=timedelta(0))

    # Then both jobs' records and documents are gone
    assert report.tables_purged == ("events",)
    assert JanitorStore(lake.meta).table_jobs(table_id) == []
    for books, job_id in ((QueryJobStore, query.job_id), (JobStore, "compact-dropped")):
        with pytest.raises(NotFoundError):
            books(lake.meta).get(job_id)
    assert list(lake.objects.list_prefix("events/jobs/")) == []
