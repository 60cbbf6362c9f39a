"""Routing heavy groups to EMR Serverless (moto stands in for its API), job tracking by state
events, and the janitor's reconciliation of jobs whose events were lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql

from icefloe.compaction.emr import EmrCompactionLauncher, LaunchedJob
from icefloe.compaction.manifest import CompactionManifest
from icefloe.compaction.tracking import handle_job_state_change, outputs_prefix
from icefloe.errors import NotFoundError
from icefloe.janitor import Janitor
from icefloe.merge import InProcessQueue, MergeOrchestrator
from icefloe.metastore.jobs import JobStore
from icefloe.settings.parts import EmrJobConfig
from icefloe.spec import SizeTargets
from icefloe.spec.evolution import DropColumn, evolve
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES
from support.merge_lake import SCHEMA, Lake

pytestmark = pytest.mark.integration

KIB = 1024
ROLE = "arn:aws:iam::123456789012:role/icefloe-compaction-job"


class RecordingClient:
    """The real (moto) EMR Serverless client, remembering each request it was given."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.requests: list[dict[str, Any]] = []

    def start_job_run(self, **request: Any) -> Any:
        self.requests.append(request)
        return self._client.start_job_run(**request)

    def get_job_run(self, **request: Any) -> Any:
        return self._client.get_job_run(**request)


@pytest.fixture
def emr(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RecordingClient, str]]:
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("emr-serverless", region_name=REGION)
        app = client.create_application(name="icefloe", releaseLabel="emr-7.0.0", type="SPARK")
        yield RecordingClient(client), app["applicationId"]


def heavy_lake(lake: Lake) -> Lake:
    """A table whose merge groups all pass a tiny Lambda cap: they go to EMR."""
    lake.create(sizes=SizeTargets(lambda_merge_cap_bytes=4 * KIB, min_files_to_merge=4))
    lake.insert_batches("events", batches=5, rows=200, days=2)
    return lake


def launcher(lake: Lake, client: RecordingClient, application_id: str) -> EmrCompactionLauncher:
    config = EmrJobConfig(
        application_id=application_id,
        execution_role_arn=ROLE,
        entry_point="s3://artifacts/icefloe/compact_job.py",
        environment_archive="s3://artifacts/icefloe/icefloe-env.tar.gz",
        log_uri="s3://artifacts/icefloe/logs/",
    )
    return EmrCompactionLauncher(meta=lake.meta, objects=lake.objects, client=client, config=config)


def start_job(lake: Lake, client: RecordingClient, application_id: str) -> LaunchedJob:
    """One EMR job over every heavy group of ``events``, as the orchestrator would start it."""
    groups = MergeOrchestrator(meta=lake.meta, sender=InProcessQueue()).plan("events")
    job = launcher(lake, client, application_id).launch("events", groups)
    assert job is not None
    return job


def update_jobs(lake: Lake, dsn: str, assignments: str) -> None:
    """Rewrite every compaction job record (``SET`` clause): time passing, an app replaced."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.compaction_jobs SET " + assignments).format(  # type: ignore[arg-type]
                sql.Identifier(lake.meta.schema)
            )
        )


def test_groups_above_the_lambda_cap_start_one_emr_job_with_the_expected_request(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    client, application_id = emr
    heavy_lake(lake)
    queue = InProcessQueue()
    orchestrator = MergeOrchestrator(
        meta=lake.meta, sender=queue, heavy=launcher(lake, client, application_id)
    )

    summary = orchestrator.run(table="events")

    # One job for both partitions; nothing went to the merge queue
    (plan,) = summary.tables
    assert (plan.groups_to_heavy, plan.groups_sent, plan.groups_deferred) == (2, 0, 0)
    assert len(queue) == 0
    (request,) = client.requests
    (job_id,) = plan.heavy_jobs
    assert request["applicationId"] == application_id
    assert request["executionRoleArn"] == ROLE
    assert request["clientToken"] == job_id  # idempotent: a retried start is the same run
    driver = request["jobDriver"]["sparkSubmit"]
    assert driver["entryPoint"] == "s3://artifacts/icefloe/compact_job.py"
    assert driver["entryPointArguments"] == ["--manifest", f"events/jobs/{job_id}.json"]
    assert (
        "spark.archives=s3://artifacts/icefloe/icefloe-env.tar.gz#environment"
        in (driver["sparkSubmitParameters"])
    )
    assert (
        request["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"][
            "logUri"
        ]
        == "s3://artifacts/icefloe/logs/"
    )
    # The manifest names every claimed file; the job is recorded with its claims and run id
    manifest = CompactionManifest.from_json(lake.objects.get(f"events/jobs/{job_id}.json"))
    claimed = {f.file_id for f in lake.meta.files("events") if f.claimed}
    assert {i for g in manifest.groups for i in g.file_ids} == claimed and len(claimed) == 10
    job = JobStore(lake.meta).get(job_id)
    assert job.job_run_id is not None and set(job.claim_tokens) == {
        g.claim_token for g in manifest.groups
    }
    # And the next run does not send those partitions again while the job holds them
    again = orchestrator.run(table="events")
    assert again.tables[0].groups_planned == 0 and len(client.requests) == 1


def test_without_emr_configured_heavy_groups_are_reported_and_left_alone(lake: Lake) -> None:
    heavy_lake(lake)
    summary = MergeOrchestrator(meta=lake.meta, sender=InProcessQueue()).run(table="events")
    assert summary.tables[0].groups_deferred == 2 and summary.groups_sent == 0
    assert not any(f.claimed for f in lake.meta.files("events"))


def test_a_failed_start_releases_the_claims_and_deletes_the_manifest(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    client, _ = emr
    heavy_lake(lake)
    orchestrator = MergeOrchestrator(
        meta=lake.meta, sender=InProcessQueue(), heavy=launcher(lake, client, "00nosuchapp")
    )
    with pytest.raises(Exception, match="does not exist"):
        orchestrator.run(table="events")
    assert not any(f.claimed for f in lake.meta.files("events"))
    assert list(lake.objects.list_prefix("events/jobs/")) == []


def test_a_failed_job_state_event_releases_its_claims_and_deletes_its_outputs(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    client, application_id = emr
    heavy_lake(lake)
    job = start_job(lake, client, application_id)
    # The job's tasks uploaded an output each and listed them, then the job failed
    outputs = [f"events/data/day=2026-03-01/spark-output-{n}.parquet" for n in range(2)]
    for key in outputs:
        lake.objects.put(key, b"partial")
    lake.objects.put(
        outputs_prefix("events", job.job_id) + "task-0.json", json.dumps(outputs).encode()
    )

    event = {
        "source": "aws.emr-serverless",
        "detail-type": "EMR Serverless Job Run State Change",
        "detail": {"jobRunId": job.job_run_id, "applicationId": application_id, "state": "FAILED"},
    }
    settled = handle_job_state_change(event, meta=lake.meta, objects=lake.objects)

    assert settled is not None and settled.outputs_deleted == 2 and settled.claims_released == 10
    assert not any(f.claimed for f in lake.meta.files("events"))
    assert not any(lake.objects.head(key) for key in outputs)
    assert JobStore(lake.meta).get(job.job_id).settled_at is not None
    # A repeated event changes nothing
    assert handle_job_state_change(event, meta=lake.meta, objects=lake.objects) is None


def test_the_janitor_settles_a_job_whose_end_event_was_lost(
    lake: Lake, emr: tuple[RecordingClient, str], postgres_dsn: str
) -> None:
    client, application_id = emr
    heavy_lake(lake)
    job = start_job(lake, client, application_id)
    update_jobs(lake, postgres_dsn, "created_at = now() - interval '20 minutes'")

    report = Janitor(
        meta=lake.meta, objects=lake.objects, emr_client=client, emr_application_id=application_id
    ).run()

    # moto's job runs succeed at once: the janitor asked, settled it and released the claims
    assert report.jobs_settled == 1
    assert JobStore(lake.meta).get(job.job_id).state == "SUCCESS"
    assert not any(f.claimed for f in lake.meta.files("events"))


def test_a_refused_start_is_one_tables_failure_and_the_other_tables_still_merge(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    client, _ = emr
    heavy_lake(lake)
    lake.create(name="small", sizes=SizeTargets(min_files_to_merge=4))
    lake.insert_batches("small", batches=4, rows=50, days=1)
    queue = InProcessQueue()
    orchestrator = MergeOrchestrator(
        meta=lake.meta, sender=queue, heavy=launcher(lake, client, "00nosuchapp")
    )

    summary = orchestrator.run()

    assert "CompactionStartError" in summary.failed_tables["events"]
    assert "ResourceNotFoundException" in summary.failed_tables["events"]
    assert [t.table for t in summary.tables] == ["small"] and summary.groups_sent == 1
    assert not any(f.claimed for f in lake.meta.files("events"))


def test_reconciliation_settles_a_job_emr_no_longer_knows_and_forgets_old_settled_jobs(
    lake: Lake, emr: tuple[RecordingClient, str], postgres_dsn: str
) -> None:
    client, application_id = emr
    heavy_lake(lake)
    job = start_job(lake, client, application_id)

    # Given a job recorded on an application that was replaced since
    update_jobs(
        lake,
        postgres_dsn,
        "created_at = now() - interval '20 minutes', application_id = 'replaced-app'",
    )
    janitor = Janitor(
        meta=lake.meta, objects=lake.objects, emr_client=client, emr_application_id=application_id
    )
    assert janitor.run().jobs_settled == 1
    assert JobStore(lake.meta).get(job.job_id).state == "CANCELLED"
    assert not any(f.claimed for f in lake.meta.files("events"))

    # And a week after settling, its record and manifest are gone
    update_jobs(lake, postgres_dsn, "settled_at = now() - interval '8 days'")
    janitor.run()
    assert JobStore(lake.meta).unsettled(older_than=timedelta(0)) == []
    with pytest.raises(NotFoundError):
        JobStore(lake.meta).get(job.job_id)
    assert list(lake.objects.list_prefix("events/jobs/")) == []


def test_a_table_spark_cannot_merge_gets_no_job_and_its_heavy_groups_wait_with_the_reason(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    # Given a table merged by a custom DuckDB query, which the Spark job cannot run
    client, application_id = emr
    lake.create(
        merge="sql:SELECT * FROM events",
        sizes=SizeTargets(lambda_merge_cap_bytes=4 * KIB, min_files_to_merge=4),
    )
    lake.insert_batches("events", batches=5, rows=200, days=2)
    orchestrator = MergeOrchestrator(
        meta=lake.meta, sender=InProcessQueue(), heavy=launcher(lake, client, application_id)
    )

    # When the orchestrator runs twice
    runs = [orchestrator.run(table="events") for _ in range(2)]

    # Then no job was started, nothing claimed, and each run says why the groups wait
    assert client.requests == []
    assert not any(f.claimed for f in lake.meta.files("events"))
    for summary in runs:
        (plan,) = summary.tables
        assert (plan.groups_deferred, plan.groups_to_heavy, plan.heavy_jobs) == (2, 0, ())
        assert plan.heavy_refused is not None
        assert "custom DuckDB query" in plan.heavy_refused
        assert "--engine duckdb" in plan.heavy_refused
        assert plan.to_json()["heavy_refused"] == plan.heavy_refused
    assert list(lake.objects.list_prefix("events/jobs/")) == []


def test_a_type_spark_cannot_read_in_the_groups_older_files_is_refused_too(
    lake: Lake, emr: tuple[RecordingClient, str]
) -> None:
    # Given heavy groups written while the table had a TIME column, dropped since
    client, application_id = emr
    lake.create(
        schema=SCHEMA + ", at_time TIME",
        sizes=SizeTargets(lambda_merge_cap_bytes=4 * KIB, min_files_to_merge=4),
    )
    lake.insert_batches("events", batches=5, rows=200, days=2)
    lake.meta.alter_table("events", lambda spec: evolve(spec, [DropColumn("at_time")]))
    orchestrator = MergeOrchestrator(
        meta=lake.meta, sender=InProcessQueue(), heavy=launcher(lake, client, application_id)
    )

    (plan,) = orchestrator.run(table="events").tables

    # Then the job is refused naming the column its files still hold
    assert client.requests == [] and plan.groups_deferred == 2
    assert plan.heavy_refused is not None and "'at_time' (TIME)" in plan.heavy_refused
    assert not any(f.claimed for f in lake.meta.files("events"))
