"""The insert function end to end: real Postgres, real DuckDB, moto S3 and SQS built from the
template, SQS events shaped from messages received from the queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from icefloe.aws.observability import LambdaHandler
from icefloe.errors import StorageError
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.aws import (
    REGION,
    CreatedQueue,
    create_bucket,
    create_queues,
    delete_succeeded,
    make_visible,
    receive,
    send_messages,
    sqs_event,
)
from support.lambda_stack import (
    PREFIX,
    TEMPLATE,
    Deployment,
    FunctionUnderTest,
    emitted_metrics,
    failures,
    fresh_container,
    handler_module_fixture,
    invoke,
    object_keys,
    set_environment,
    use_fake_aws,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

pytestmark = pytest.mark.e2e

INSERT = TEMPLATE.functions()["InsertFunction"]
BUCKET = "icefloe-e2e-warehouse"
TABLE = str(TEMPLATE.parameter_default("DefaultTable"))


@dataclass
class Stack:
    s3: S3Client
    sqs: SQSClient
    queue: CreatedQueue
    dlq: CreatedQueue
    max_receive_count: int
    function: FunctionUnderTest


app_module = handler_module_fixture(INSERT, name="app_module")


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    deployment: Deployment,
    meta: MetaStore,
    events_spec: TableSpec,
    app_module: ModuleType,
) -> Iterator[Stack]:
    """The insert function's world as the template declares it, with the `events` table."""
    use_fake_aws(monkeypatch, session_token=True)
    environment = deployment.environment(INSERT, resources={"DataBucket": BUCKET})
    assert environment["ICEFLOE_WAREHOUSE"] == f"s3://{BUCKET}/{PREFIX}"
    set_environment(monkeypatch, environment)
    assert events_spec.name == TABLE
    meta.create_table(events_spec)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        create_bucket(s3, TEMPLATE, BUCKET)
        queues = create_queues(sqs, TEMPLATE)
        (source,) = INSERT.sqs_events
        declared = TEMPLATE.queues()[source.queue]
        assert declared.dead_letter_target is not None and declared.max_receive_count
        with fresh_container(app_module) as function:
            yield Stack(
                s3=s3,
                sqs=sqs,
                queue=queues[source.queue],
                dlq=queues[declared.dead_letter_target],
                max_receive_count=declared.max_receive_count,
                function=function,
            )


@pytest.fixture
def app(stack: Stack) -> LambdaHandler:
    """The insert function's handler, over the stack's container."""
    return stack.function.handler


def event_row(i: int) -> dict[str, object]:
    return {"ts": f"2026-05-0{1 + i % 3}T00:{i % 60:02d}:00Z", "event": "view", "user_id": f"u{i}"}


def bucket_keys(s3: S3Client) -> list[str]:
    return sorted(object_keys(s3, BUCKET))


MALFORMED = {
    10: "{not json",
    50: json.dumps([1, 2]),
    90: json.dumps({"ts": "2026-05-01T00:00:00Z", "event": 7}),
}


def send_batch_with_three_malformed(stack: Stack, *, n: int = 100) -> tuple[list[str], list[str]]:
    """n events, half routed by the `table` attribute and half by the default table; returns
    (all message ids, the malformed ones')."""
    bodies = [MALFORMED.get(i) or json.dumps(event_row(i)) for i in range(n)]
    half = n // 2
    ids = send_messages(stack.sqs, stack.queue.url, bodies[:half], table=TABLE)
    ids += send_messages(stack.sqs, stack.queue.url, bodies[half:])
    return ids, sorted(ids[i] for i in MALFORMED)


# -- direct invoke ---------------------------------------------------------------------------


def test_a_direct_invoke_writes_objects_under_the_warehouse_and_commits_once_per_key(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given rows over three days
    rows = [event_row(i) for i in range(30)]

    # When they are invoked directly with an idempotency key
    first = invoke(app, {"table": TABLE, "rows": rows, "idempotency_key": "batch-1"})

    # Then one snapshot of three files (one per day) holds them, stored under the warehouse prefix
    assert first == {"snapshot_id": 1, "files": 3, "rows": 30, "committed": True}
    keys = bucket_keys(stack.s3)
    assert keys == sorted(f"{PREFIX}/{f.path}" for f in meta.files(TABLE))
    assert [k.rsplit("/", 1)[0] for k in keys] == [
        f"{PREFIX}/{TABLE}/data/day=2026-05-0{d}" for d in (1, 2, 3)
    ]

    # When the same batch is invoked again with the same key
    again = invoke(app, {"table": TABLE, "rows": rows, "idempotency_key": "batch-1"})

    # Then the earlier snapshot is returned, and nothing new is written or committed
    assert again == {"snapshot_id": 1, "files": 0, "rows": 0, "committed": False}
    assert bucket_keys(stack.s3) == keys
    assert len(meta.snapshots(TABLE)) == 1 and meta.status(TABLE).rows == 30


def test_a_bad_row_is_answered_with_its_row_and_field_and_nothing_is_committed(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    rows = [event_row(0), {"ts": "2026-05-01T00:00:00Z", "event": 5}]

    response = invoke(app, {"table": TABLE, "rows": rows})

    error = response["error"]
    assert error["type"] == "BatchRejectedError"
    assert "row 1, field 'event'" in error["message"]
    assert [(p["row"], p["field"]) for p in error["problems"]] == [(1, "event")]
    assert meta.snapshots(TABLE) == [] and bucket_keys(stack.s3) == []


@pytest.mark.parametrize(
    ("event", "error_type", "words"),
    [
        ({"table": "nope", "rows": [event_row(0)]}, "TableNotFoundError", "nope"),
        ({"table": "../x", "rows": [event_row(0)]}, "InvalidNameError", "../x"),
        ({"table": TABLE, "rows": {"ts": "2026-05-01"}}, "InvalidInputError", "'rows'"),
        ({"table": TABLE, "rows": []}, "BatchRejectedError", "no rows"),
        (
            {"table": TABLE, "rows": [event_row(0)], "idempotencyKey": "k"},
            "InvalidInputError",
            "idempotencyKey",
        ),
        (
            {"table": TABLE, "rows": [event_row(0)], "idempotency_key": 7},
            "InvalidInputError",
            "idempotency_key",
        ),
        ([event_row(0)], "InvalidInputError", "must be an object"),
    ],
    ids=[
        "unknown table",
        "bad table name",
        "rows not a list",
        "no rows",
        "misspelt key",
        "key not a string",
        "not an object",
    ],
)
def test_malformed_direct_invokes_are_answered_with_an_error_not_raised(
    app: LambdaHandler, stack: Stack, meta: MetaStore, event: object, error_type: str, words: str
) -> None:
    response = invoke(app, event)
    assert response["error"]["type"] == error_type
    assert words in response["error"]["message"]
    assert response["error"]["problems"] == [] or error_type == "BatchRejectedError"
    assert meta.snapshots(TABLE) == [] and bucket_keys(stack.s3) == []


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_failure_of_the_system_raises_instead_of_answering(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given a warehouse bucket that is gone (the object store fails, not the caller's input)
    stack.s3.delete_bucket(Bucket=BUCKET)

    # Then the invoke fails (Lambda reports an error, callers and event sources retry)
    with pytest.raises(StorageError):
        invoke(app, {"table": TABLE, "rows": [event_row(0)]})
    assert meta.snapshots(TABLE) == []


# -- SQS ---------------------------------------------------------------------------------------


def test_an_sqs_batch_with_three_malformed_messages_is_one_commit_of_the_97_good_ones(
    app: LambdaHandler,
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given 100 messages on the queue, 3 of them malformed (not JSON, an array, a bad field)
    ids, malformed = send_batch_with_three_malformed(stack)
    messages = receive(stack.sqs, stack.queue.url, limit=100)
    assert sorted(m["MessageId"] for m in messages) == sorted(ids)

    # When the function gets them as one SQS event
    capsys.readouterr()
    caplog.clear()
    response = invoke(app, sqs_event(messages, stack.queue))

    # Then exactly the three malformed ones are reported failed, and the rest is ONE commit
    assert failures(response) == malformed
    snapshots = meta.snapshots(TABLE)
    assert len(snapshots) == 1 and meta.status(TABLE).rows == 97
    # And the metrics and logs say so, naming each failed message
    output = capsys.readouterr().out
    (emf,) = emitted_metrics(output)
    assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "icefloe"
    counts = {name: emf[name] for name in ("RowsInserted", "FilesWritten", "MessagesFailed")}
    assert counts == {"RowsInserted": [97], "FilesWritten": [3], "MessagesFailed": [3]}
    assert emf["MessagesAlreadyCommitted"] == [0]
    logged = {r.getMessage(): r for r in caplog.records}
    failed_logs = [r for r in caplog.records if r.getMessage() == "message failed"]
    assert sorted(r.message_id for r in failed_logs) == malformed
    commit = logged["rows committed"]
    assert (commit.table, commit.snapshot_id) == (TABLE, snapshots[0].snapshot_id)


def test_a_redelivered_batch_commits_nothing_new_however_the_queue_regroups_it(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given a batch that was committed but never acknowledged (the function timed out after
    # the commit), so SQS delivers it again once the visibility timeout ends
    ids, malformed = send_batch_with_three_malformed(stack)
    first = receive(stack.sqs, stack.queue.url, limit=100)
    invoke(app, sqs_event(first, stack.queue))
    make_visible(stack.sqs, stack.queue.url, first)

    # When the same messages are delivered again
    again = receive(stack.sqs, stack.queue.url, limit=100)
    assert sorted(m["MessageId"] for m in again) == sorted(ids)
    assert {m["ReceiptHandle"] for m in again}.isdisjoint(m["ReceiptHandle"] for m in first)
    response = invoke(app, sqs_event(again, stack.queue))

    # Then nothing new is committed; only the malformed ones fail again
    assert failures(response) == malformed
    assert len(meta.snapshots(TABLE)) == 1 and meta.status(TABLE).rows == 97

    # When half of the old messages come back regrouped with 10 new ones
    old_half, acked = again[::2], again[1::2]
    old_ids = {m["MessageId"] for m in old_half}
    delete_succeeded(stack.sqs, stack.queue.url, acked, {"batchItemFailures": []})
    make_visible(stack.sqs, stack.queue.url, old_half)
    new = send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(i)) for i in range(10)])
    regrouped = receive(stack.sqs, stack.queue.url, limit=100)
    assert sorted(m["MessageId"] for m in regrouped) == sorted([*old_ids, *new])
    response = invoke(app, sqs_event(regrouped, stack.queue))

    # Then only the 10 new rows are committed, in one more snapshot
    assert failures(response) == sorted(old_ids & set(malformed))
    assert len(meta.snapshots(TABLE)) == 2 and meta.status(TABLE).rows == 107


def test_a_poison_message_ends_in_the_dead_letter_queue_after_max_receive_count_deliveries(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given two good events and one that never fits the table, on the queue built from the
    # template (redrive to the DLQ after maxReceiveCount receives)
    good = send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(i)) for i in (1, 2)])
    (poison,) = send_messages(
        stack.sqs, stack.queue.url, [json.dumps({"ts": "2026-05-01", "event": 5})]
    )

    # When the queue is polled as Lambda does: deliver, delete what succeeded, and let the
    # failed message come back. Each receive passes VisibilityTimeout=0 so a failed message is
    # visible again at once, instead of after the template's 720 s; the queue keeps the
    # template's attributes.
    deliveries: dict[str, int] = {}
    for _ in range(3 * stack.max_receive_count):
        messages = stack.sqs.receive_message(
            QueueUrl=stack.queue.url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            break
        for m in messages:
            deliveries[m["MessageId"]] = deliveries.get(m["MessageId"], 0) + 1
        response = invoke(app, sqs_event(messages, stack.queue))
        assert failures(response) == [poison]
        delete_succeeded(stack.sqs, stack.queue.url, messages, response)

    # Then the poison message was tried maxReceiveCount times and now waits in the DLQ, while
    # the good ones were committed once, on their first delivery
    assert deliveries == {good[0]: 1, good[1]: 1, poison: stack.max_receive_count}
    in_dlq = receive(stack.sqs, stack.dlq.url, limit=10)
    assert [m["MessageId"] for m in in_dlq] == [poison]
    assert len(meta.snapshots(TABLE)) == 1 and meta.status(TABLE).rows == 2


BAD_VALUES = {
    3: json.dumps({"ts": "10000-01-01T00:00:00Z", "event": "view"}),
    7: json.dumps({"ts": "infinity", "event": "view"}),
    11: '{"ts": "2026-05-01T00:00:00Z", "event": "view", "properties": {"x": NaN}}',
    15: '{"ts": "2026-05-01T00:00:00Z", "event": "view", "properties": NaN}',
    17: '{"ts": "2026-05-01T00:00:00Z", "event": "view", "properties": {"x": [1,]}}',
}


def test_bad_values_fail_only_their_own_messages_and_a_nul_is_stored(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given 20 messages: five with values icefloe refuses, one with a NUL in a string
    bodies = [BAD_VALUES.get(i) or json.dumps(event_row(i)) for i in range(20)]
    bodies[19] = json.dumps({**event_row(19), "user_id": "u\x0019"})
    ids = send_messages(stack.sqs, stack.queue.url, bodies, table=TABLE)
    messages = receive(stack.sqs, stack.queue.url, limit=20)
    # When they arrive as one SQS event
    response = invoke(app, sqs_event(messages, stack.queue))
    # Then only the five fail, and the fifteen others are one commit, the NUL kept
    assert failures(response) == sorted(ids[i] for i in BAD_VALUES)
    assert len(meta.snapshots(TABLE)) == 1 and meta.status(TABLE).rows == 15


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"ts": "10000-01-01T00:00:00Z", "event": "view"}, "field 'ts': expected a timestamp"),
        ({"ts": "2026-05-01T00:00:00Z", "properties": {"x": float("nan")}}, "field 'properties'"),
    ],
    ids=["year 10000", "NaN in a JSON value"],
)
def test_a_direct_invoke_with_a_bad_value_is_answered_and_writes_nothing(
    app: LambdaHandler, stack: Stack, meta: MetaStore, row: dict[str, object], words: str
) -> None:
    response = invoke(app, {"table": TABLE, "rows": [event_row(0), row]})
    assert response["error"]["type"] == "BatchRejectedError"
    assert f"row 1, {words}" in response["error"]["message"]
    assert meta.snapshots(TABLE) == [] and bucket_keys(stack.s3) == []


def deeply_nested(depth: int) -> str:
    """An event whose JSON value is ``depth`` arrays deep: within what a JSON parser takes
    (orjson allows 1,024 levels), far past what Python's recursion took (it crashed the
    whole batch with a RecursionError before)."""
    return (
        '{"ts": "2026-05-01T00:00:00Z", "event": "view", "properties": '
        + "[" * depth
        + "]" * depth
        + "}"
    )


def test_messages_that_crashed_the_insert_fail_alone_and_the_good_ones_commit_once(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given 30 messages, two of them nested 900 levels deep
    bodies = [json.dumps(event_row(i)) for i in range(30)]
    bodies[4] = bodies[21] = deeply_nested(900)
    ids = send_messages(stack.sqs, stack.queue.url, bodies, table=TABLE)
    messages = receive(stack.sqs, stack.queue.url, limit=30)

    # When they arrive as one SQS event, and again (redelivered, as failed messages are)
    response = invoke(app, sqs_event(messages, stack.queue))
    again = invoke(app, sqs_event(messages, stack.queue))

    # Then only the two fail, each time; the 28 others are one commit, made once
    assert failures(response) == failures(again) == sorted([ids[4], ids[21]])
    assert len(meta.snapshots(TABLE)) == 1 and meta.status(TABLE).rows == 28


def test_a_direct_invoke_nested_too_deep_is_answered_naming_row_and_field(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    rows = [event_row(0), json.loads(deeply_nested(900))]
    response = invoke(app, {"table": TABLE, "rows": rows})
    assert response["error"]["type"] == "BatchRejectedError"
    assert (
        "row 1, field 'properties': JSON is nested more than 64 levels deep"
        in response["error"]["message"]
    )
    assert meta.snapshots(TABLE) == [] and bucket_keys(stack.s3) == []


def test_malformed_records_fail_by_their_message_id_and_the_others_commit(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given an SQS event in which one record has no body and one an odd table attribute
    ids = send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(i)) for i in range(3)])
    event = sqs_event(receive(stack.sqs, stack.queue.url, limit=3), stack.queue)
    records = sorted(event["Records"], key=lambda r: ids.index(r["messageId"]))
    del records[0]["body"]
    records[1]["messageAttributes"] = {"table": "not an attribute"}

    # When it is handled
    response = invoke(app, {"Records": records})

    # Then the record without a body and the one with the odd attribute fail by their ids
    # (the odd attribute is not taken for no attribute: the default table is not used); the
    # third commits
    assert failures(response) == sorted(ids[:2])
    assert meta.status(TABLE).rows == 1


def test_a_record_without_a_message_id_refuses_the_whole_event_naming_its_index(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(0))])
    event = sqs_event(receive(stack.sqs, stack.queue.url, limit=1), stack.queue)
    del event["Records"][0]["messageId"]
    assert invoke(app, event) == {
        "error": {
            "type": "InvalidInputError",
            "message": "record 0 of 'Records' has no 'messageId' (its 'eventSource' is 'aws:sqs')",
            "problems": [],
        }
    }
    assert meta.snapshots(TABLE) == []


def test_a_table_attribute_sent_as_binary_fails_its_message_and_does_not_go_to_the_default(
    app: LambdaHandler, stack: Stack, meta: MetaStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a message whose 'table' attribute was sent as Binary, between two good ones
    send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(0))])
    binary = stack.sqs.send_message(
        QueueUrl=stack.queue.url,
        MessageBody=json.dumps(event_row(1)),
        MessageAttributes={"table": {"DataType": "Binary", "BinaryValue": TABLE.encode()}},
    )["MessageId"]
    send_messages(stack.sqs, stack.queue.url, [json.dumps(event_row(2))], table=TABLE)
    messages = receive(stack.sqs, stack.queue.url, limit=3)

    # When they arrive as one SQS event
    response = invoke(app, sqs_event(messages, stack.queue))

    # Then the binary one fails by its id, saying why; the others commit once
    assert failures(response) == [binary]
    (reason,) = [r.reason for r in caplog.records if r.getMessage() == "message failed"]
    assert "'table' message attribute has no 'stringValue' (it is binary" in reason
    assert meta.status(TABLE).rows == 2 and len(meta.snapshots(TABLE)) == 1


@pytest.mark.parametrize(
    ("envelope", "words"),
    [
        (
            {"table": TABLE, "rows": [event_row(0)], "idempotency_key": "batch-1"},
            "envelope key 'idempotency_key' is not taken from the queue",
        ),
        ({"Table": TABLE, "rows": [event_row(0)]}, "envelope keys in another case: ['Table']"),
    ],
    ids=["idempotency key", "Table"],
)
def test_an_envelope_with_a_key_it_does_not_take_fails_by_its_id_naming_the_key(
    app: LambdaHandler,
    stack: Stack,
    meta: MetaStore,
    caplog: pytest.LogCaptureFixture,
    envelope: dict[str, object],
    words: str,
) -> None:
    # Given an envelope as the direct invoke takes it (or with 'Table'), beside a good event
    bad, _ = send_messages(
        stack.sqs, stack.queue.url, [json.dumps(envelope), json.dumps(event_row(1))]
    )
    messages = receive(stack.sqs, stack.queue.url, limit=2)

    # When they arrive as one SQS event
    response = invoke(app, sqs_event(messages, stack.queue))

    # Then the envelope fails by its id, naming the key; the event commits
    assert failures(response) == [bad]
    (reason,) = [r.reason for r in caplog.records if r.getMessage() == "message failed"]
    assert words in reason
    assert meta.status(TABLE).rows == 1


def test_a_message_delivered_twice_in_one_event_commits_once_beside_its_neighbours(
    app: LambdaHandler, stack: Stack, meta: MetaStore
) -> None:
    # Given an SQS event [A, D, D, B]: SQS delivered D twice in one batch
    a, d, b = send_messages(
        stack.sqs, stack.queue.url, [json.dumps(event_row(i)) for i in range(3)]
    )
    event = sqs_event(receive(stack.sqs, stack.queue.url, limit=3), stack.queue)
    by_id = {r["messageId"]: r for r in event["Records"]}
    records = [by_id[a], by_id[d], {**by_id[d], "receiptHandle": "again"}, by_id[b]]

    # When it is handled
    response = invoke(app, {"Records": records})

    # Then no message fails, and D is committed once, in the one commit
    assert failures(response) == []
    assert meta.status(TABLE).rows == 3 and len(meta.snapshots(TABLE)) == 1

    # And when one copy of a message is unusable, that message fails, no copy of it is
    # committed, and its neighbours commit
    e, f, g = send_messages(
        stack.sqs, stack.queue.url, [json.dumps(event_row(i)) for i in range(3)]
    )
    event = sqs_event(receive(stack.sqs, stack.queue.url, limit=3), stack.queue)
    by_id = {r["messageId"]: r for r in event["Records"]}
    bodyless = {k: v for k, v in by_id[f].items() if k != "body"}
    response = invoke(app, {"Records": [by_id[e], by_id[f], bodyless, by_id[g]]})
    assert failures(response) == [f]
    assert meta.status(TABLE).rows == 5
