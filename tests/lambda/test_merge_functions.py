"""The merge functions end to end: the orchestrator claims groups and sends tasks to the merge
queue, the worker merges them. Real Postgres and DuckDB; S3 and SQS are one moto server over
HTTP (DuckDB reads the inputs with its own HTTP client, which ``mock_aws`` does not intercept),
with the queues, bucket and environments built from template.yaml."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from icefloe.aws.lambda_runtime import Container
from icefloe.errors import ConfigError
from icefloe.ingest import Inserter
from icefloe.lifecycle import DeletePartRunner, DeletePartTask
from icefloe.merge import InProcessQueue, MergeOrchestrator, MergeTask
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.spec import TableSpec
from support.aws import (
    CreatedQueue,
    delete_succeeded,
    receive,
    scheduled_rule_event,
    send_messages,
    sqs_event,
)
from support.hooked_meta import HookedMetaStore
from support.lambda_stack import (
    BATCHES,
    DAYS,
    PREFIX,
    TEMPLATE,
    DeployedFunctions,
    Deployment,
    MotoWorld,
    emitted_metrics,
    failures,
    handler_module_fixture,
    insert_small_batches,
    lambda_context,
    object_keys,
    schedule_event,
    set_environment,
    use_fake_aws,
)
from support.template import import_handler_module

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

pytestmark = pytest.mark.e2e

FUNCTIONS = TEMPLATE.functions()
ORCHESTRATOR = FUNCTIONS["MergeOrchestratorFunction"]
WORKER = FUNCTIONS["MergeWorkerFunction"]
(WORKER_SOURCE,) = WORKER.sqs_events
MERGE_QUEUE = TEMPLATE.queues()[WORKER_SOURCE.queue]
TABLE = "events"


@dataclass
class Stack(DeployedFunctions):
    s3: S3Client
    sqs: SQSClient
    bucket: str
    queue: CreatedQueue
    dlq: CreatedQueue
    max_receive_count: int

    def queue_depth(self, queue: CreatedQueue) -> int:
        """Messages still on ``queue``, visible or in flight."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=queue.url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        return sum(int(value) for value in attributes.values())


orchestrator_app = handler_module_fixture(ORCHESTRATOR, name="orchestrator_app")
worker_app = handler_module_fixture(WORKER, name="worker_app")


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    events_spec: TableSpec,
    orchestrator_app: ModuleType,
) -> Iterator[Stack]:
    """Both merge functions' world as the template declares it, on a fresh bucket and fresh
    queues of the shared moto server, with the `events` table."""
    use_fake_aws(monkeypatch, session_token=False)
    # boto3's own endpoint setting sends the orchestrator's SQS client to the moto server.
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_endpoint)

    world = MotoWorld.create(moto_endpoint, "merge")
    assert MERGE_QUEUE.dead_letter_target is not None and MERGE_QUEUE.max_receive_count
    resources = {"DataBucket": world.bucket, "MergeQueue": world.queues[MERGE_QUEUE.logical_id].url}
    environments = {}
    for function in (ORCHESTRATOR, WORKER):
        environment = deployment.environment(
            function, resources=resources, s3_endpoint=moto_endpoint, memory_size=True
        )
        assert environment["ICEFLOE_WAREHOUSE"] == f"s3://{world.bucket}/{PREFIX}"
        environments[function.logical_id] = environment
    assert (
        environments[ORCHESTRATOR.logical_id]["ICEFLOE_MERGE_QUEUE_URL"] == resources["MergeQueue"]
    )
    set_environment(monkeypatch, environments[WORKER.logical_id])
    meta.create_table(events_spec)
    with Stack(
        s3=world.s3,
        sqs=world.sqs,
        bucket=world.bucket,
        queue=world.queues[MERGE_QUEUE.logical_id],
        dlq=world.queues[MERGE_QUEUE.dead_letter_target],
        max_receive_count=MERGE_QUEUE.max_receive_count,
        environments=environments,
        monkeypatch=monkeypatch,
    ) as stack:
        yield stack


def planned_groups(meta: MetaStore) -> set[tuple[str, tuple[int, ...]]]:
    """What an orchestrator would claim now (planning only; nothing is claimed)."""
    groups = MergeOrchestrator(meta=meta, sender=InProcessQueue()).plan(TABLE)
    return {(g.partition_path, tuple(sorted(g.file_ids))) for g in groups}


def files_per_partition(meta: MetaStore) -> dict[str, int]:
    return dict(Counter(f.partition_path for f in meta.files(TABLE)))


def bucket_keys(stack: Stack) -> set[str]:
    return object_keys(stack.s3, stack.bucket)


def orchestrate(stack: Stack, app: ModuleType) -> tuple[dict[str, Any], list[MessageTypeDef]]:
    """Run the scheduled orchestrator and receive every task it sent."""
    summary = stack.invoke(app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    messages = receive(stack.sqs, stack.queue.url, limit=100)
    return summary, messages


# -- the orchestrator --------------------------------------------------------------------------


def test_the_scheduled_orchestrator_sends_one_task_per_planned_group_with_its_files_claimed(
    orchestrator_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given five small inserts into three day partitions: five files in each
    insert_small_batches()
    assert files_per_partition(meta) == {f"day=2026-05-0{d}": BATCHES for d in (1, 2, 3)}
    planned = planned_groups(meta)
    assert len(planned) == DAYS and {p for p, _ in planned} == set(files_per_partition(meta))

    # When the schedule invokes the orchestrator
    capsys.readouterr()
    caplog.clear()
    summary, messages = orchestrate(stack, orchestrator_app)

    # Then it reports one group planned and sent per partition
    assert summary["groups_planned"] == DAYS and summary["groups_sent"] == DAYS
    (table_plan,) = summary["tables"]
    assert table_plan["table"] == TABLE and table_plan["files_claimed"] == DAYS * BATCHES
    assert (table_plan["live_files"], table_plan["live_partitions"]) == (DAYS * BATCHES, DAYS)
    # And the merge queue holds one task per planned group, naming exactly its files
    tasks = [MergeTask.from_json(m["Body"]) for m in messages]
    assert len(tasks) == len(planned)
    assert {(t.partition_path, tuple(sorted(t.file_ids))) for t in tasks} == planned
    assert all(t.table == TABLE for t in tasks)
    assert all(m["MessageAttributes"]["table"]["StringValue"] == TABLE for m in messages)
    # And every file is claimed in the meta store under its task's token
    token_of = {file_id: t.claim_token for t in tasks for file_id in t.file_ids}
    files = meta.files(TABLE)
    assert all(f.claimed for f in files)
    assert {f.file_id: f.claim_token for f in files} == token_of
    assert meta.status(TABLE).claimed_files == DAYS * BATCHES
    # And the metrics and logs say so
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "icefloe"
    assert {
        name: emf[name]
        for name in (
            "GroupsPlanned",
            "GroupsSent",
            "GroupsContended",
            "GroupsDeferred",
            "GroupsToHeavy",
            "HeavyJobsStarted",
            "FilesClaimed",
            "LiveFiles",
            "LivePartitions",
        )
    } == {
        "GroupsPlanned": [DAYS],
        "GroupsSent": [DAYS],
        "GroupsContended": [0],
        "GroupsDeferred": [0],
        "GroupsToHeavy": [0],
        "HeavyJobsStarted": [0],
        "FilesClaimed": [DAYS * BATCHES],
        "LiveFiles": [DAYS * BATCHES],
        "LivePartitions": [DAYS],
    }
    assert emf["BytesClaimed"] == [sum(f.size_bytes for f in files)]
    (logged,) = [r for r in caplog.records if r.getMessage() == "table orchestrated"]
    assert (logged.table, logged.groups_sent) == (TABLE, DAYS)

    # When it runs again before any worker has merged
    again, more = orchestrate(stack, orchestrator_app)

    # Then nothing is planned: every small file is claimed already
    assert again["groups_planned"] == 0 and more == []


def test_a_direct_invoke_orchestrates_the_named_table_only(
    orchestrator_app: ModuleType, stack: Stack, meta: MetaStore, events_spec: TableSpec
) -> None:
    # Given two tables, both with small files to merge
    meta.create_table(TableSpec.create(name="other", schema="ts TIMESTAMP NOT NULL, n BIGINT"))
    insert_small_batches()
    runtime = stack.runtime
    inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
    for n in range(5):
        inserter.insert_rows("other", [{"ts": "2026-05-01T00:00:00Z", "n": n}])
    inserter.close()
    assert planned_groups(meta) and MergeOrchestrator(meta=meta, sender=InProcessQueue()).plan(
        "other"
    )

    # When the orchestrator is invoked for `other`
    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, {"table": "other"})

    # Then only `other`'s files are claimed and sent
    assert [t["table"] for t in summary["tables"]] == ["other"]
    assert summary["groups_sent"] == 1
    (message,) = receive(stack.sqs, stack.queue.url, limit=10)
    assert MergeTask.from_json(message["Body"]).table == "other"
    assert not any(f.claimed for f in meta.files(TABLE))


@pytest.mark.parametrize(
    ("event", "error_type", "words"),
    [
        ({"table": "nope"}, "TableNotFoundError", "nope"),
        ({"table": "../x"}, "InvalidNameError", "../x"),
        ({"bogus": 1}, "InvalidInputError", "bogus"),
        ({"table": 5}, "InvalidInputError", "'table'"),
        ([TABLE], "InvalidInputError", "must be an object"),
    ],
    ids=["unknown table", "bad table name", "unknown key", "table not a string", "not an object"],
)
def test_malformed_direct_invokes_of_the_orchestrator_are_answered_with_an_error(
    orchestrator_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    event: object,
    error_type: str,
    words: str,
) -> None:
    insert_small_batches()

    response = stack.invoke(orchestrator_app, ORCHESTRATOR, event)

    assert set(response) == {"error"}
    assert response["error"]["type"] == error_type and words in response["error"]["message"]
    assert stack.queue_depth(stack.queue) == 0
    assert not any(f.claimed for f in meta.files(TABLE))


def test_an_eventbridge_scheduled_event_orchestrates_every_table(
    orchestrator_app: ModuleType, stack: Stack
) -> None:
    # The event a classic EventBridge rule (a SAM `Schedule` event without Input) sends.
    insert_small_batches()
    event = scheduled_rule_event()

    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, event)

    assert summary["groups_sent"] == DAYS


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_the_orchestrator_without_a_queue_url_fails_instead_of_claiming(
    orchestrator_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    insert_small_batches()
    del stack.environments[ORCHESTRATOR.logical_id]["ICEFLOE_MERGE_QUEUE_URL"]
    stack.monkeypatch.delenv("ICEFLOE_MERGE_QUEUE_URL", raising=False)

    with pytest.raises(ConfigError, match="ICEFLOE_MERGE_QUEUE_URL"):
        stack.invoke(orchestrator_app, ORCHESTRATOR, {})
    assert not any(f.claimed for f in meta.files(TABLE))


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_an_emr_application_without_its_job_role_fails_the_orchestrator_before_claiming(
    orchestrator_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    # Heavy compaction half configured: jobs could never start, so nothing is claimed at all.
    insert_small_batches()
    environment = stack.environments[ORCHESTRATOR.logical_id]
    environment["ICEFLOE_EMR_APPLICATION_ID"] = "00fakeapplication"
    environment.pop("ICEFLOE_EMR_JOB_ROLE_ARN", None)
    stack.monkeypatch.delenv("ICEFLOE_EMR_JOB_ROLE_ARN", raising=False)

    with pytest.raises(ConfigError, match="ICEFLOE_EMR_JOB_ROLE_ARN"):
        stack.invoke(orchestrator_app, ORCHESTRATOR, {})
    assert not any(f.claimed for f in meta.files(TABLE))
    assert stack.queue_depth(stack.queue) == 0


def test_tasks_the_queue_refuses_have_their_claims_released_and_are_counted(
    orchestrator_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a merge queue that is gone
    insert_small_batches()
    stack.sqs.delete_queue(QueueUrl=stack.queue.url)

    # When the orchestrator runs
    capsys.readouterr()
    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, {})

    # Then nothing was sent, no file stays claimed, and the metrics say so
    (table_plan,) = summary["tables"]
    assert summary["groups_sent"] == 0 and table_plan["groups_unsent"] == DAYS
    assert not any(f.claimed for f in meta.files(TABLE))
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert emf["GroupsUnsent"] == [DAYS] and emf["FilesClaimed"] == [0]


# -- the worker --------------------------------------------------------------------------------


def test_the_worker_merges_each_task_and_its_messages_are_deleted(
    orchestrator_app: ModuleType,
    worker_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the orchestrator's tasks on the merge queue
    insert_small_batches()
    rows_before = meta.status(TABLE).rows
    inputs = {f"{PREFIX}/{f.path}" for f in meta.files(TABLE)}
    _, messages = orchestrate(stack, orchestrator_app)
    assert len(messages) == DAYS

    # When the worker gets them one per invocation (the template's BatchSize)
    assert WORKER_SOURCE.batch_size == 1
    capsys.readouterr()
    caplog.clear()
    for message in messages:
        response = worker_app_invoke(stack, worker_app, [message])
        # Then each succeeds and the event source mapping deletes it
        assert failures(response) == []
        assert delete_succeeded(stack.sqs, stack.queue.url, [message], response) == 1

    # Then each partition holds one file, no row was lost or doubled, and the queue is empty
    assert files_per_partition(meta) == {f"day=2026-05-0{d}": 1 for d in (1, 2, 3)}
    assert meta.status(TABLE).rows == rows_before
    assert meta.status(TABLE).claimed_files == 0
    assert stack.queue_depth(stack.queue) == 0 and stack.queue_depth(stack.dlq) == 0
    assert planned_groups(meta) == set()
    # And the merged files are in the warehouse beside the inputs (the janitor removes those)
    merged = {f"{PREFIX}/{f.path}" for f in meta.files(TABLE)}
    assert merged | inputs == bucket_keys(stack)
    # And each invocation logged its merge and emitted its metrics
    documents = emitted_metrics(capsys.readouterr().out)
    assert [d["MergesCommitted"] for d in documents] == [[1]] * DAYS
    assert sum(d["MergeRowsIn"][0] for d in documents) == rows_before
    assert sum(d["MergeRowsOut"][0] for d in documents) == rows_before
    assert all(d["MergeBytesIn"][0] > 0 and d["MergeBytesOut"][0] > 0 for d in documents)
    assert all(d["MergesSkipped"] == [0] and d["MessagesFailed"] == [0] for d in documents)
    merges = [r for r in caplog.records if r.getMessage() == "partition merged"]
    assert sorted(r.partition for r in merges) == sorted(files_per_partition(meta))
    assert all(r.table == TABLE and r.status == "committed" for r in merges)
    # (each group small and append: its files fetched from S3, sorted in Arrow)
    assert [r.sorted_in for r in merges] == ["arrow"] * DAYS
    snapshot_ids = {s.snapshot_id for s in meta.snapshots(TABLE)}
    assert all(r.snapshot_id in snapshot_ids for r in merges)

    # When a task is delivered again after its commit (a lost acknowledgement)
    response = worker_app_invoke(stack, worker_app, messages[:1])

    # Then it is acknowledged without merging again
    assert failures(response) == []
    assert files_per_partition(meta) == {f"day=2026-05-0{d}": 1 for d in (1, 2, 3)}


def test_failing_messages_are_reported_while_the_good_ones_of_the_batch_succeed(
    orchestrator_app: ModuleType,
    worker_app: ModuleType,
    stack: Stack,
    meta: MetaStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the orchestrator's tasks, and beside them two bodies that are not merge tasks, a
    # task naming a table that does not exist (dropped after planning), and a task whose claim
    # is not held (nothing to do)
    insert_small_batches()
    rows_before = meta.status(TABLE).rows
    orchestrate_response = stack.invoke(orchestrator_app, ORCHESTRATOR, {})
    assert orchestrate_response["groups_sent"] == DAYS
    some_file = meta.files(TABLE)[0]
    bad = send_messages(stack.sqs, stack.queue.url, [json.dumps({"hello": "world"}), "{not json"])
    gone, unclaimed = send_messages(
        stack.sqs,
        stack.queue.url,
        [
            MergeTask("nope", "day=2026-05-01", (1, 2), uuid.uuid4()).to_json(),
            MergeTask(
                TABLE, some_file.partition_path, (some_file.file_id,), uuid.uuid4()
            ).to_json(),
        ],
    )
    messages = receive(stack.sqs, stack.queue.url, limit=100)
    assert len(messages) == DAYS + 4

    # When they arrive in one batch
    caplog.clear()
    response = worker_app_invoke(stack, worker_app, messages)

    # Then exactly the two bad ones are reported failed; the merges committed
    assert failures(response) == sorted(bad)
    assert files_per_partition(meta) == {f"day=2026-05-0{d}": 1 for d in (1, 2, 3)}
    assert meta.status(TABLE).rows == rows_before
    # And the tasks for a table that is gone and without their claim were acknowledged as
    # skipped, each with its reason
    skipped = {r.table: r for r in caplog.records if r.getMessage() == "merge skipped"}
    assert {t: (r.status, r.snapshot_id) for t, r in skipped.items()} == {
        "nope": ("claim_lost", None),
        TABLE: ("claim_lost", None),
    }
    assert skipped["nope"].reason == "table 'nope' does not exist (dropped?)"
    assert "no longer claimed" in skipped[TABLE].reason or "removed by" in skipped[TABLE].reason
    failed_logs = [r for r in caplog.records if r.getMessage() == "merge message failed"]
    assert sorted(r.message_id for r in failed_logs) == sorted(bad)
    assert gone not in failures(response) and unclaimed not in failures(response)
    # And only the failed ones stay on the queue
    delete_succeeded(stack.sqs, stack.queue.url, messages, response)
    assert stack.queue_depth(stack.queue) == 2


def test_a_poison_message_ends_in_the_dead_letter_queue_after_max_receive_count_deliveries(
    orchestrator_app: ModuleType, worker_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    # Given one orchestrated task and one body that is not a merge task
    insert_small_batches(batches=4)
    summary = stack.invoke(orchestrator_app, ORCHESTRATOR, {"table": TABLE})
    assert summary["groups_sent"] == DAYS
    (poison,) = send_messages(stack.sqs, stack.queue.url, ["{not json"])

    # When the queue is polled as Lambda does: deliver, delete what succeeded, and let the
    # failed message come back (VisibilityTimeout=0 on each receive instead of waiting out the
    # template's timeout; the queue keeps the template's attributes and redrive policy)
    deliveries: Counter[str] = Counter()
    for _ in range(3 * stack.max_receive_count + DAYS):
        messages = stack.sqs.receive_message(
            QueueUrl=stack.queue.url,
            MaxNumberOfMessages=1,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        deliveries.update(m["MessageId"] for m in messages)
        response = worker_app_invoke(stack, worker_app, messages)
        delete_succeeded(stack.sqs, stack.queue.url, messages, response)

    # Then the poison message was tried maxReceiveCount times and waits in the DLQ, while each
    # task was merged on its first delivery
    assert deliveries[poison] == stack.max_receive_count
    assert sorted(n for m, n in deliveries.items() if m != poison) == [1] * DAYS
    in_dlq = receive(stack.sqs, stack.dlq.url, limit=10)
    assert [m["MessageId"] for m in in_dlq] == [poison]
    assert files_per_partition(meta) == {f"day=2026-05-0{d}": 1 for d in (1, 2, 3)}


def test_the_worker_answers_an_event_that_is_not_from_sqs_with_an_error(
    worker_app: ModuleType, stack: Stack
) -> None:
    # (every malformed shape: tests/lambda/test_malformed_events.py)
    assert stack.invoke(worker_app, WORKER, {"table": TABLE}) == {
        "error": {
            "type": "InvalidInputError",
            "message": "event must have 'Records': only an SQS event is accepted",
            "problems": [],
        }
    }
    kinesis = {"Records": [{"eventSource": "aws:kinesis", "kinesis": {}}]}
    assert stack.invoke(worker_app, WORKER, kinesis) == {
        "error": {
            "type": "InvalidInputError",
            "message": "record 0 of 'Records' has no 'messageId' (its 'eventSource' is"
            " 'aws:kinesis')",
            "problems": [],
        }
    }
    assert stack.queue_depth(stack.queue) == 0


def worker_app_invoke(
    stack: Stack, app: ModuleType, messages: list[MessageTypeDef]
) -> dict[str, Any]:
    return stack.invoke(app, WORKER, sqs_event(messages, stack.queue))


# -- the container's merge worker -------------------------------------------------------------


def test_the_merge_worker_is_built_once_per_container(stack: Stack) -> None:
    container = stack.container
    assert container._lake is None  # nothing is built before the first call
    worker = container.merge_worker()
    assert container.merge_worker() is worker
    assert (
        worker.limits.memory_limit == f"{int(int(str(WORKER.memory_size)) * 0.6)}MB"
    )  # MERGE_MEMORY_SHARE
    assert worker.limits.temp_directory is not None and worker.limits.temp_directory.is_dir()
    # Another container (a new one, or this one after it ended) builds its own
    with Container() as another:
        assert another._lake is None
        assert another.merge_worker() is not worker


# -- deletes fanned out ------------------------------------------------------------------------


def test_a_delete_given_to_the_orchestrator_is_fanned_out_and_committed_once(
    orchestrator_app: ModuleType, worker_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    # Given a table in S3 with one user's rows in every partition
    insert_small_batches()
    rows_before = meta.status(TABLE).rows
    doomed = count_rows(meta, "user_id = 'u3'")
    assert 0 < doomed < rows_before
    head = meta.get_table(TABLE).head_snapshot_id

    # When the orchestrator is asked to delete them
    started = stack.invoke(
        orchestrator_app,
        ORCHESTRATOR,
        {"delete": {"table": TABLE, "where": "user_id = 'u3'"}},
    )

    # Then it answers the job and sends one part per partition on the merge queue
    assert started["state"] == "running" and started["parts"] == DAYS
    messages = receive(stack.sqs, stack.queue.url, limit=100)
    assert sorted(json.loads(m["Body"])["part"] for m in messages) == list(range(DAYS))
    # And a worker running the last part is killed after recording it, before committing
    job_id = uuid.UUID(started["job_id"])
    with HookedMetaStore.like(meta, before_commit=kill) as dying_meta:
        killed = DeletePartRunner(
            meta=dying_meta,
            objects=stack.runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, stack.runtime.settings),
        )
        for part in range(DAYS):
            with pytest.raises(WorkerKilled) if part == DAYS - 1 else nullcontext():
                killed.run(DeletePartTask(job_id, part, TABLE))
    assert meta.get_table(TABLE).head_snapshot_id == head
    # Then the worker Lambda, given the messages (redelivered: the killed worker never
    # acknowledged them), commits the job once
    for message in messages:
        response = worker_app_invoke(stack, worker_app, [message])
        assert failures(response) == []
    assert meta.get_table(TABLE).head_snapshot_id == head + 1
    assert meta.snapshots(TABLE)[-1].operation == "delete"
    assert count_rows(meta, "user_id = 'u3'") == 0
    assert meta.status(TABLE).rows == rows_before - doomed
    assert meta.status(TABLE).claimed_files == 0
    # And a redelivered part changes nothing
    assert failures(worker_app_invoke(stack, worker_app, messages[:1])) == []
    assert meta.get_table(TABLE).head_snapshot_id == head + 1
    jobs = stack.invoke(orchestrator_app, ORCHESTRATOR, {"table": TABLE})
    assert "error" not in jobs


def test_a_second_delete_over_a_running_jobs_files_is_answered_naming_the_job(
    orchestrator_app: ModuleType, stack: Stack, meta: MetaStore
) -> None:
    # Given a delete job running over every partition
    insert_small_batches()
    head = meta.get_table(TABLE).head_snapshot_id
    first = stack.invoke(
        orchestrator_app, ORCHESTRATOR, {"delete": {"table": TABLE, "where": "user_id = 'u3'"}}
    )
    assert first["state"] == "running"
    sent = stack.queue_depth(stack.queue)
    # When a second delete over the same files is asked for
    second = stack.invoke(
        orchestrator_app, ORCHESTRATOR, {"delete": {"table": TABLE, "where": "user_id = 'u4'"}}
    )
    # Then the answer is a refusal naming the running job, and nothing more is sent
    assert second["error"]["type"] == "DeleteJobRunningError"
    assert first["job_id"] in second["error"]["message"]
    assert stack.queue_depth(stack.queue) == sent
    assert meta.get_table(TABLE).head_snapshot_id == head


class WorkerKilled(Exception):
    pass


def kill(_: object) -> None:
    raise WorkerKilled("killed between recording its part and committing")


@pytest.mark.parametrize(
    ("delete", "message"),
    [
        ({"table": TABLE}, "event 'delete' must have 'where'"),
        ({"table": TABLE, "where": 3}, "event 'delete.where' must be a string"),
        ({"table": TABLE, "where": "true", "and": 1}, "unknown keys in event 'delete' ['and']"),
        ({"table": TABLE, "where": "nope = 1"}, 'column "nope" not found'),
        ({"table": "missing", "where": "true"}, "no table named 'missing'"),
    ],
)
def test_a_malformed_delete_request_is_answered_with_an_error(
    orchestrator_app: ModuleType, stack: Stack, delete: dict[str, object], message: str
) -> None:
    answer = stack.invoke(orchestrator_app, ORCHESTRATOR, {"delete": delete})
    assert message in answer["error"]["message"]
    assert stack.queue_depth(stack.queue) == 0


def count_rows(meta: MetaStore, where: str) -> int:
    with Container() as container:
        runtime = container.runtime
        engine = QueryEngine(
            meta=meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, runtime.settings),
        )
        try:
            rows = engine.query(f"SELECT count(*) AS n FROM {TABLE} WHERE {where}").rows
        finally:
            engine.close()
    return int(rows.to_pylist()[0]["n"])


def test_the_core_logs_come_out_as_structured_json_with_the_request_id(stack: Stack) -> None:
    # Given a freshly loaded orchestrator (its import routes the core's loggers through its
    # Powertools Logger's handler), whose output this test reads
    app = import_handler_module(ORCHESTRATOR)
    (handler,) = logging.getLogger("icefloe").handlers
    assert handler in app.logger.handlers and isinstance(handler, logging.StreamHandler)
    output = io.StringIO()
    previous = handler.setStream(output)
    insert_small_batches()

    # When it runs
    try:
        stack.invoke(app, ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    finally:
        handler.setStream(previous)

    # Then the core's line (icefloe.merge.orchestrator, standard logging) is one JSON object
    # with the invocation's request id, beside the handler's own lines
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    (core,) = [line for line in lines if line.get("name") == "icefloe.merge.orchestrator"]
    assert core["message"] == f"merge orchestration: {DAYS} groups planned, {DAYS} sent"
    assert core["level"] == "INFO"
    assert core["function_request_id"] == lambda_context(ORCHESTRATOR).aws_request_id
    assert core["service"] == "icefloe-merge-orchestrator"
    assert any(line.get("message") == "merge orchestration done" for line in lines)
