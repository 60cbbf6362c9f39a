"""Heavy compaction in AWS, end to end: the merge orchestrator starts an EMR Serverless job for
the groups above a table's Lambda cap (and queues the others), and the compaction events
function settles the job when EMR Serverless reports its end. Real Postgres; S3, SQS and EMR
Serverless are one moto server, with the bucket, queues and application built from
template.yaml and the functions' environments as deployed.

moto's job runs succeed at once and emit no events: the tests send the events EventBridge would
deliver, and stand in for a job's tasks by writing the outputs and listings they would."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from icefloe.aws.lambda_runtime import Container
from icefloe.compaction import CompactionManifest
from icefloe.compaction.tracking import outputs_prefix
from icefloe.merge import MergeTask
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.store import MetaStore
from icefloe.spec import SizeTargets, TableSpec
from support.aws import (
    ACCOUNT_ID,
    EMR_SERVERLESS_ENDPOINT_VARIABLE,
    REGION,
    CreatedQueue,
    create_emr_application,
    job_state_change_event,
    receive,
    scheduled_rule_event,
)
from support.lambda_stack import (
    BATCHES,
    DAYS,
    PREFIX,
    TEMPLATE,
    DeployedFunctions,
    Deployment,
    MotoWorld,
    emitted_metrics,
    handler_module_fixture,
    insert_small_batches,
    object_keys,
    schedule_event,
    set_environment,
    use_fake_aws,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

pytestmark = pytest.mark.e2e

FUNCTIONS = TEMPLATE.functions()
ORCHESTRATOR = FUNCTIONS["MergeOrchestratorFunction"]
EVENTS = FUNCTIONS["CompactionEventsFunction"]
(MERGE_SOURCE,) = FUNCTIONS["MergeWorkerFunction"].sqs_events
ARTIFACTS = str(TEMPLATE.parameter_default("ArtifactsPrefix"))
JOB_TIMEOUT = int(TEMPLATE.parameter_default("EmrJobTimeoutMinutes"))
ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/test-CompactionJobRole"
SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR"
HEAVY = "events"  # every merge group passes its 4 KiB Lambda cap
LIGHT = "clicks"  # the default cap: its groups go to the merge queue


@dataclass
class Stack(DeployedFunctions):
    s3: S3Client
    sqs: SQSClient
    emr: Any
    bucket: str
    queue: CreatedQueue
    application_id: str

    def object_keys(self) -> set[str]:
        return object_keys(self.s3, self.bucket)

    def job_runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.emr.list_job_runs(applicationId=self.application_id)[
            "jobRuns"
        ]
        return runs

    def event(self, job_run_id: str, state: str) -> dict[str, Any]:
        return job_state_change_event(
            application_id=self.application_id, job_run_id=job_run_id, state=state
        )


orchestrator_app = handler_module_fixture(ORCHESTRATOR, name="orchestrator_app")
events_app = handler_module_fixture(EVENTS, name="events_app")


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    orchestrator_app: ModuleType,
) -> Iterator[Stack]:
    """The orchestrator's and the events function's world as the template declares it, on a
    fresh bucket, queues and EMR Serverless application of the shared moto server, with a
    table whose groups all go to EMR and one whose groups go to the merge queue."""
    use_fake_aws(monkeypatch, session_token=False)
    # boto3's own endpoint settings send the functions' SQS and EMR clients to the moto server.
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_endpoint)
    monkeypatch.setenv(EMR_SERVERLESS_ENDPOINT_VARIABLE, moto_endpoint)

    world = MotoWorld.create(moto_endpoint, "compaction")
    emr = boto3.client("emr-serverless", endpoint_url=moto_endpoint, region_name=REGION)
    application_id = create_emr_application(emr, TEMPLATE, name=f"t{world.unique}-compaction")
    resources = {
        "DataBucket": world.bucket,
        "MergeQueue": world.queues[MERGE_SOURCE.queue].url,
        "CompactionApplication.ApplicationId": application_id,
        "CompactionJobRole.Arn": ROLE,
    }
    environments = {}
    for function in (ORCHESTRATOR, EVENTS):
        environment = deployment.environment(
            function, resources=resources, s3_endpoint=moto_endpoint, memory_size=True
        )
        assert environment["ICEFLOE_EMR_APPLICATION_ID"] == application_id
        environments[function.logical_id] = environment
    set_environment(monkeypatch, environments[ORCHESTRATOR.logical_id])
    for name, sizes in ((HEAVY, SizeTargets(lambda_merge_cap_bytes=4096)), (LIGHT, None)):
        meta.create_table(
            TableSpec.create(
                name=name,
                schema=SCHEMA,
                partition_by="day(ts)",
                sort_by="event, ts",
                **({"sizes": sizes} if sizes else {}),
            )
        )
    with Stack(
        s3=world.s3,
        sqs=world.sqs,
        emr=emr,
        bucket=world.bucket,
        queue=world.queues[MERGE_SOURCE.queue],
        application_id=application_id,
        environments=environments,
        monkeypatch=monkeypatch,
    ) as stack:
        yield stack


def plans(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["table"]: t for t in summary["tables"]}


def start_heavy_job(stack: Stack, app: ModuleType) -> tuple[str, str]:
    """Run the scheduled orchestrator over the heavy table; returns the job and run ids."""
    insert_small_batches(HEAVY)
    summary = stack.invoke(app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    (job_id,) = plans(summary)[HEAVY]["heavy_jobs"]
    (run,) = stack.job_runs()
    return job_id, str(run["id"])


def write_job_outputs(job_id: str, *, count: int = 2) -> list[str]:
    """What a job's Spark tasks leave before it fails: uploaded outputs (never committed) and
    the listing that names them. Returns their keys relative to the warehouse."""
    with Container() as container:
        objects = container.runtime.objects
        outputs = [f"{HEAVY}/data/day=2026-05-01/{uuid.uuid4().hex}.parquet" for _ in range(count)]
        for key in outputs:
            objects.put(key, b"PAR1 partial output")
        objects.put(
            f"{outputs_prefix(HEAVY, job_id)}{uuid.uuid4().hex}.json", json.dumps(outputs).encode()
        )
    return outputs


# -- the orchestrator ---------------------------------------------------------------------------


def test_groups_above_the_lambda_cap_start_one_emr_job_and_only_the_others_are_queued(
    orchestrator_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given two tables with five small files in each of three days: the heavy table's groups
    # are all above its 4 KiB Lambda cap, the light table's are far below its own
    insert_small_batches(HEAVY)
    insert_small_batches(LIGHT)
    heavy_files = meta.files(HEAVY)
    assert len(heavy_files) == DAYS * BATCHES

    # When the schedule invokes the orchestrator
    capsys.readouterr()
    caplog.clear()
    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))

    # Then the heavy table's groups went to one EMR job, the light table's to the queue
    heavy, light = plans(summary)[HEAVY], plans(summary)[LIGHT]
    assert (heavy["groups_to_heavy"], heavy["groups_sent"], heavy["groups_deferred"]) == (
        DAYS,
        0,
        0,
    )
    (job_id,) = heavy["heavy_jobs"]
    assert (light["groups_sent"], light["groups_to_heavy"], light["heavy_jobs"]) == (DAYS, 0, [])
    tasks = [MergeTask.from_json(m["Body"]) for m in receive(stack.sqs, stack.queue.url, limit=50)]
    assert len(tasks) == DAYS and {t.table for t in tasks} == {LIGHT}
    # And the job run exists on the declared application, as the template configures it
    (run,) = stack.job_runs()
    assert run["executionRole"] == ROLE
    job_run = stack.emr.get_job_run(applicationId=stack.application_id, jobRunId=run["id"])[
        "jobRun"
    ]
    driver = job_run["jobDriver"]["sparkSubmit"]
    artifacts = f"s3://{stack.bucket}/{ARTIFACTS}"
    assert driver["entryPoint"] == f"{artifacts}/compact_job.py"
    assert driver["entryPointArguments"] == ["--manifest", f"{HEAVY}/jobs/{job_id}.json"]
    assert (
        f"spark.archives={artifacts}/icefloe-env.tar.gz#environment"
        in (driver["sparkSubmitParameters"])
    )
    assert job_run["executionTimeoutMinutes"] == JOB_TIMEOUT
    # And its manifest, in the warehouse, names every heavy file, each claimed by the job
    manifest_key = f"{PREFIX}/{HEAVY}/jobs/{job_id}.json"
    assert manifest_key in stack.object_keys()
    body = stack.s3.get_object(Bucket=stack.bucket, Key=manifest_key)["Body"].read()
    manifest = CompactionManifest.from_json(body)
    assert {i for g in manifest.groups for i in g.file_ids} == {f.file_id for f in heavy_files}
    job = JobStore(meta).get(job_id)
    assert job.job_run_id == run["id"] and job.settled_at is None
    assert {f.claim_token for f in meta.files(HEAVY)} == set(job.claim_tokens)
    # And the logs and metrics say so
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert (emf["GroupsToHeavy"], emf["HeavyJobsStarted"], emf["GroupsSent"]) == (
        [DAYS],
        [1],
        [DAYS],
    )
    assert emf["GroupsDeferred"] == [0]
    (started,) = [r for r in caplog.records if r.getMessage() == "heavy compaction started"]
    assert (started.table, started.jobs, started.groups) == (HEAVY, [job_id], DAYS)

    # When the schedule runs again while the job holds the files
    again = stack.invoke(orchestrator_app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))

    # Then no second job is started
    assert plans(again)[HEAVY]["groups_planned"] == 0 and len(stack.job_runs()) == 1


# -- the events function ------------------------------------------------------------------------


def test_a_failed_job_event_releases_its_claims_and_deletes_its_listed_outputs(
    orchestrator_app: ModuleType,
    events_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a job the orchestrator started, whose tasks uploaded two outputs before it failed
    job_id, run_id = start_heavy_job(stack, orchestrator_app)
    outputs = write_job_outputs(job_id)
    live = {f"{PREFIX}/{f.path}" for f in meta.files(HEAVY)}
    assert all(f.claimed for f in meta.files(HEAVY))
    assert {f"{PREFIX}/{key}" for key in outputs} <= stack.object_keys()

    # When EMR Serverless reports that it failed
    capsys.readouterr()
    caplog.clear()
    response = stack.invoke(events_app, EVENTS, stack.event(run_id, "FAILED"))

    # Then its claims are released and its outputs deleted; the live files are untouched
    assert response == {
        "job_id": job_id,
        "job_run_id": run_id,
        "state": "FAILED",
        "claims_released": DAYS * BATCHES,
        "outputs_deleted": len(outputs),
    }
    assert not any(f.claimed for f in meta.files(HEAVY))
    keys = stack.object_keys()
    assert not {f"{PREFIX}/{key}" for key in outputs} & keys
    assert live <= keys
    job = JobStore(meta).get(job_id)
    assert job.state == "FAILED" and job.settled_at is not None
    # And the logs and metrics say so
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "icefloe"
    assert (
        emf["CompactionJobsSettled"],
        emf["CompactionOutputsDeleted"],
        emf["CompactionClaimsReleased"],
    ) == ([1], [len(outputs)], [DAYS * BATCHES])
    (logged,) = [r for r in caplog.records if r.getMessage() == "compaction job settled"]
    assert (logged.job_id, logged.state, logged.outputs_deleted) == (job_id, "FAILED", 2)

    # When the same event is delivered again
    again = stack.invoke(events_app, EVENTS, stack.event(run_id, "FAILED"))

    # Then it is ignored: the job is settled already
    assert again == {"ignored": True}

    # And the next orchestrator run starts a new job for the freed partitions
    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    assert plans(summary)[HEAVY]["groups_to_heavy"] == DAYS and len(stack.job_runs()) == 2


def test_a_successful_job_event_releases_its_claims_and_keeps_its_outputs(
    orchestrator_app: ModuleType, events_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    # A successful job committed what it could; claims left are those of partitions whose
    # commit conflicted, and its outputs are not this function's to judge.
    job_id, run_id = start_heavy_job(stack, orchestrator_app)
    outputs = write_job_outputs(job_id)

    response = stack.invoke(events_app, EVENTS, stack.event(run_id, "SUCCESS"))

    assert (response["state"], response["claims_released"], response["outputs_deleted"]) == (
        "SUCCESS",
        DAYS * BATCHES,
        0,
    )
    assert not any(f.claimed for f in meta.files(HEAVY))
    assert {f"{PREFIX}/{key}" for key in outputs} <= stack.object_keys()


def test_events_that_are_not_the_end_of_one_of_its_jobs_are_ignored(
    orchestrator_app: ModuleType,
    events_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a running job that holds its files
    job_id, run_id = start_heavy_job(stack, orchestrator_app)
    outputs = write_job_outputs(job_id)
    scheduled = scheduled_rule_event()
    another_application = job_state_change_event(
        application_id="00another0app00", job_run_id=run_id, state="FAILED"
    )
    application_change = {
        **stack.event(run_id, "FAILED"),
        "detail-type": "EMR Serverless Application State Change",
    }
    unrelated = {
        "scheduled event": scheduled,
        "another application": another_application,
        "application state change": application_change,
        "still running": stack.event(run_id, "RUNNING"),
        "not an icefloe job": stack.event("00unknownrun000", "FAILED"),
        "not an object": ["FAILED"],
    }

    # When each is delivered
    capsys.readouterr()
    responses = {name: stack.invoke(events_app, EVENTS, event) for name, event in unrelated.items()}

    # Then each is ignored and nothing changed
    assert responses == {name: {"ignored": True} for name in unrelated}
    assert all(f.claimed for f in meta.files(HEAVY))
    assert {f"{PREFIX}/{key}" for key in outputs} <= stack.object_keys()
    assert JobStore(meta).get(job_id).settled_at is None
    documents = emitted_metrics(capsys.readouterr().out)
    assert [d["CompactionJobsSettled"] for d in documents] == [[0]] * len(unrelated)
