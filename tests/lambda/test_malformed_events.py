"""Every function answers every malformed event and never raises for one.

A refused event is answered with the function's one answer for input it refuses: the error
answer (``error.schema.json``) of insert, query, merge orchestrator, janitor and merge worker,
``{"ignored": true}`` of the compaction events function; and it changes nothing in the lake.
In an SQS event, a record that is no usable SQS record fails by its message id while its
well-formed neighbours are processed and committed; a record without a message id (which no
SQS delivery has) refuses the whole event, and none of it is processed.

Real Postgres and DuckDB; S3, SQS are one moto server, the functions' environments as deployed
from template.yaml. The table-driven test shares one lake (inserted, merged, inserted again, so
that the orchestrator would claim and the janitor would delete if they ran) and checks that the
meta store, the bucket and the queues are the same after each refused event.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import jsonschema
import psycopg
import pytest
from psycopg import sql

from icefloe.aws.events import load_schema
from icefloe.merge import InProcessQueue, MergeOrchestrator, MergeTask
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.aws import (
    EMR_JOB_STATE_CHANGE,
    CreatedQueue,
    job_state_change_event,
    receive,
    send_messages,
    sqs_event,
)
from support.lambda_stack import (
    DAYS,
    TEMPLATE,
    DeployedFunctions,
    Deployment,
    MotoWorld,
    emitted_metrics,
    failures,
    insert_small_batches,
    merge_until_quiet,
    object_keys,
    schedule_event,
    set_environment,
    use_fake_aws,
)
from support.template import FunctionDecl, import_handler_module

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

pytestmark = pytest.mark.e2e

FUNCTIONS = TEMPLATE.functions()
INSERT = FUNCTIONS["InsertFunction"]
QUERY = FUNCTIONS["QueryFunction"]
ORCHESTRATOR = FUNCTIONS["MergeOrchestratorFunction"]
WORKER = FUNCTIONS["MergeWorkerFunction"]
JANITOR = FUNCTIONS["JanitorFunction"]
EVENTS = FUNCTIONS["CompactionEventsFunction"]
ALL = (INSERT, QUERY, ORCHESTRATOR, WORKER, JANITOR, EVENTS)
(INSERT_SOURCE,) = INSERT.sqs_events
(WORKER_SOURCE,) = WORKER.sqs_events
TABLE = "events"
APPLICATION = "00malformedtestapp"  # the compaction events function's application id
ERROR_SCHEMA = jsonschema.Draft202012Validator(load_schema("error"))
IGNORED = {"ignored": True}
ROW = {"ts": "2026-05-01T10:00:00Z", "event": "view", "user_id": "u1"}


def events_spec() -> TableSpec:
    return TableSpec.create(
        name=TABLE,
        schema="ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON",
        partition_by="day(ts)",
        sort_by="event, ts",
    )


@dataclass
class World:
    """The six functions' bucket, queues and environments on the shared moto server."""

    moto: MotoWorld
    environments: dict[str, dict[str, str]]

    def queue(self, function: FunctionDecl) -> CreatedQueue:
        (source,) = function.sqs_events
        return self.moto.queues[source.queue]

    def queued(self) -> dict[str, int]:
        """Messages on every queue, visible or in flight."""
        depth = {}
        for logical_id, queue in self.moto.queues.items():
            attributes = self.moto.sqs.get_queue_attributes(
                QueueUrl=queue.url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            depth[logical_id] = sum(int(value) for value in attributes.values())
        return depth


def deploy(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, deployment: Deployment) -> World:
    """Every function's world as the template declares it, on a fresh bucket and queues; the
    process's environment is the merge worker's (what the lake helpers read)."""
    use_fake_aws(monkeypatch, session_token=False)
    # boto3's own endpoint setting sends the orchestrator's SQS client to the moto server.
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_endpoint)
    moto = MotoWorld.create(moto_endpoint, "malformed")
    resources = {
        "DataBucket": moto.bucket,
        "MergeQueue": moto.queues[WORKER_SOURCE.queue].url,
        "InsertQueue": moto.queues[INSERT_SOURCE.queue].url,
    }
    environments = {}
    for function in ALL:
        # Only the compaction events function knows the application (it calls nothing of
        # EMR Serverless): the others run without heavy compaction.
        extra = {"CompactionApplication.ApplicationId": APPLICATION} if function is EVENTS else {}
        environments[function.logical_id] = deployment.environment(
            function, resources={**resources, **extra}, s3_endpoint=moto_endpoint, memory_size=True
        )
    assert environments[EVENTS.logical_id]["ICEFLOE_EMR_APPLICATION_ID"] == APPLICATION
    set_environment(monkeypatch, environments[WORKER.logical_id])
    return World(moto=moto, environments=environments)


@pytest.fixture(scope="module")
def apps() -> dict[str, ModuleType]:
    return {function.logical_id: import_handler_module(function) for function in ALL}


# -- the shared lake of the table-driven test ------------------------------------------------


@dataclass
class Lake:
    meta: MetaStore
    world: World

    def state(self) -> dict[str, object]:
        """What a refused event must leave as it was: the snapshots, every file row with its
        end and claim, the objects, the queues."""
        files = self.meta.files_by_id(TABLE, range(1, 100_000))
        return {
            "snapshots": [s.snapshot_id for s in self.meta.snapshots(TABLE)],
            "files": sorted((f.file_id, f.end_snapshot, f.claim_token) for f in files),
            "objects": object_keys(self.world.moto.s3, self.world.moto.bucket),
            "queued": self.world.queued(),
        }


@pytest.fixture(scope="module")
def lake(
    postgres_dsn: str, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Lake]:
    """Small inserts merged, then more of them: live small files the orchestrator would claim
    and dead files the janitor would delete (with a retention of 0s)."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    meta = MetaStore(postgres_dsn, schema=schema, max_connections=5)
    meta.migrate()
    home = Path(tmp_path_factory.mktemp("malformed")) / "home"
    deployment = Deployment(postgres_dsn=postgres_dsn, schema_name=schema, home=home)
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            world = deploy(monkeypatch, moto_endpoint, deployment)
            meta.create_table(events_spec())
            insert_small_batches()
            merge_until_quiet()
            insert_small_batches()
            planned = MergeOrchestrator(meta=meta, sender=InProcessQueue()).plan(TABLE)
            assert len(planned) == DAYS
            assert any(f.end_snapshot is not None for f in meta.files_by_id(TABLE, range(1, 99)))
            yield Lake(meta=meta, world=world)
    finally:
        meta.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def deployed(
    lake: Lake, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, apps: dict[str, ModuleType]
) -> Iterator[DeployedFunctions]:
    use_fake_aws(monkeypatch, session_token=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_endpoint)
    with DeployedFunctions(
        environments=lake.world.environments, monkeypatch=monkeypatch
    ) as functions:
        yield functions


# -- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    """The error answer: its type, and words of its message (naming the key or record)."""

    type: str
    words: str


def invalid(words: str) -> Refused:
    return Refused("InvalidInputError", words)


SNS_RECORD = {
    "EventSource": "aws:sns",
    "EventVersion": "1.0",
    "EventSubscriptionArn": "arn:aws:sns:us-east-1:123456789012:topic:sub",
    "Sns": {"Type": "Notification", "MessageId": "m-sns", "Message": json.dumps(ROW)},
}
S3_RECORD = {
    "eventVersion": "2.1",
    "eventSource": "aws:s3",
    "eventName": "ObjectCreated:Put",
    "s3": {"bucket": {"name": "b"}, "object": {"key": "k"}},
}
SQS_RECORD = {"messageId": "m-1", "eventSource": "aws:sqs", "body": json.dumps(ROW)}

NOT_OBJECTS: dict[str, object] = {
    "null": None,
    "a list": [SQS_RECORD],
    "an empty list": [],
    "a string": "Records",
    "an empty string": "",
    "a number": 7,
    "a fraction": 2.5,
    "true": True,
}
RECORDS_NOT_A_LIST = "event 'Records' must be an array of SQS records"
NO_MESSAGE_ID = "record 0 of 'Records' has no 'messageId'"
BAD_SQS_EVENTS: dict[str, tuple[object, str]] = {
    "Records a string": ({"Records": "notalist"}, RECORDS_NOT_A_LIST),
    "Records an object": ({"Records": {"0": SQS_RECORD}}, RECORDS_NOT_A_LIST),
    "Records null": ({"Records": None}, RECORDS_NOT_A_LIST),
    "a null record": ({"Records": [None]}, "record 0 of 'Records' is not an object"),
    "a string record": ({"Records": [SQS_RECORD, "m-2"]}, "record 1 of 'Records' is not an"),
    "an SNS record": (
        {"Records": [SNS_RECORD]},
        f"{NO_MESSAGE_ID} (its 'eventSource' is 'aws:sns')",
    ),
    "a bare SNS source": (
        {"Records": [{"eventSource": "aws:sns"}]},
        f"{NO_MESSAGE_ID} (its 'eventSource' is 'aws:sns')",
    ),
    "an S3 record": ({"Records": [S3_RECORD]}, f"{NO_MESSAGE_ID} (its 'eventSource' is 'aws:s3')"),
    "no messageId": (
        {"Records": [{k: v for k, v in SQS_RECORD.items() if k != "messageId"}]},
        f"{NO_MESSAGE_ID} (its 'eventSource' is 'aws:sqs')",
    ),
    "an empty messageId": (
        {"Records": [{**SQS_RECORD, "messageId": " "}]},
        "record 0 of 'Records': 'messageId' must be a non-empty string",
    ),
    "a number messageId": (
        {"Records": [{**SQS_RECORD, "messageId": 7}]},
        "record 0 of 'Records': 'messageId' must be a non-empty string",
    ),
}
# What the direct-invoke functions say of a key they do not know, and of a non-object.
UNKNOWN_KEYS = {
    INSERT.logical_id: "unknown event keys ['Records']",
    QUERY.logical_id: "unknown request keys ['Records']",
    ORCHESTRATOR.logical_id: "unknown event keys ['Records']",
    JANITOR.logical_id: "unknown event keys ['Records']",
}
NOT_AN_OBJECT = {
    INSERT.logical_id: invalid("event must be an object"),
    QUERY.logical_id: invalid("request must be an object"),
    ORCHESTRATOR.logical_id: invalid("event must be an object"),
    JANITOR.logical_id: invalid("event must be an object"),
    WORKER.logical_id: invalid("event must be an object: an SQS event with 'Records'"),
    EVENTS.logical_id: None,  # ignored
}
# The schedule's own inputs: the orchestrator and the janitor run for every table on them.
SCHEDULE_INPUTS = {
    ORCHESTRATOR.logical_id: ("null",),
    JANITOR.logical_id: ("null",),
}


def job_change(**detail: object) -> dict[str, Any]:
    event = job_state_change_event(application_id=APPLICATION, job_run_id="run-1", state="FAILED")
    event["detail"].update(detail)
    return event


FIELD_CASES: dict[str, dict[str, tuple[object, Refused | None]]] = {
    INSERT.logical_id: {
        "no keys": ({}, invalid("event must have 'table'")),
        "no table": ({"rows": [ROW]}, invalid("event must have 'table'")),
        "table a number": ({"table": 5, "rows": [ROW]}, invalid("event 'table' must be a string")),
        "table null": ({"table": None, "rows": [ROW]}, invalid("event 'table' must be a string")),
        "table a path": ({"table": "../x", "rows": [ROW]}, Refused("InvalidNameError", "../x")),
        "unknown table": ({"table": "nope", "rows": [ROW]}, Refused("TableNotFoundError", "nope")),
        "no rows": ({"table": TABLE}, invalid("event must have 'rows'")),
        "rows a string": ({"table": TABLE, "rows": "x"}, invalid("event 'rows' must be an array")),
        "rows null": ({"table": TABLE, "rows": None}, invalid("event 'rows' must be an array")),
        "a row a number": (
            {"table": TABLE, "rows": [ROW, 1]},
            invalid("event 'rows.1' must be an object"),
        ),
        "a field of the wrong type": (
            {"table": TABLE, "rows": [ROW, {**ROW, "event": 5}]},
            Refused("BatchRejectedError", "row 1, field 'event'"),
        ),
        "key a number": (
            {"table": TABLE, "rows": [ROW], "idempotency_key": 7},
            invalid("event 'idempotency_key' must be a string or null"),
        ),
        "key empty": (
            {"table": TABLE, "rows": [ROW], "idempotency_key": ""},
            invalid("event 'idempotency_key' must be a non-empty string"),
        ),
        "an operation": (
            {"table": TABLE, "rows": [ROW], "operation": "upsert"},
            invalid("unknown event keys ['operation']"),
        ),
    },
    QUERY.logical_id: {
        "no keys": ({}, invalid("request must have 'sql'")),
        "sql a number": ({"sql": 5}, invalid("request 'sql' must be a string")),
        "sql null": ({"sql": None}, invalid("request 'sql' must be a string")),
        "sql blank": ({"sql": " "}, invalid("request 'sql' must be a non-empty string")),
        "sql a list": ({"sql": ["SELECT 1"]}, invalid("request 'sql' must be a string")),
        "snapshot a string": (
            {"sql": "SELECT 1", "snapshot_id": "1"},
            invalid("request 'snapshot_id' must be a whole number or null"),
        ),
        "snapshot a fraction": (
            {"sql": "SELECT 1", "snapshot_id": 1.5},
            invalid("request 'snapshot_id' must be a whole number or null"),
        ),
        "snapshot true": (
            {"sql": "SELECT 1", "snapshot_id": True},
            invalid("request 'snapshot_id' must be a whole number or null"),
        ),
        "as_of a number": (
            {"sql": "SELECT 1", "as_of": 5},
            invalid("request 'as_of' must be a string or null"),
        ),
        "as_of not a time": (
            {"sql": "SELECT 1", "as_of": "yesterday"},
            invalid("request 'as_of' must be an ISO-8601 timestamp"),
        ),
        "format a number": (
            {"sql": "SELECT 1", "format": 5},
            invalid("request 'format' must be one of json, csv, parquet"),
        ),
        "max_rows a string": (
            {"sql": "SELECT 1", "max_rows": "10"},
            invalid("request 'max_rows' must be a whole number"),
        ),
        "max_rows negative": (
            {"sql": "SELECT 1", "max_rows": -1},
            invalid("request 'max_rows' must be at least 0"),
        ),
        "tenant a number": (
            {"sql": "SELECT 1", "tenant": 5},
            invalid("request 'tenant' must be a string or null"),
        ),
        "sql a delete": (
            {"sql": "DELETE FROM events"},
            Refused("QueryRefusedError", "DELETE"),
        ),
        "sql not SQL": ({"sql": "(("}, Refused("QueryRefusedError", "syntax error")),
        "an operation": (
            {"sql": "SELECT 1", "operation": "explain"},
            invalid("unknown request keys ['operation']"),
        ),
    },
    ORCHESTRATOR.logical_id: {
        "table a number": ({"table": 5}, invalid("event 'table' must be a string or null")),
        "table a list": ({"table": [TABLE]}, invalid("event 'table' must be a string or null")),
        "table a path": ({"table": "../x"}, Refused("InvalidNameError", "../x")),
        "unknown table": ({"table": "nope"}, Refused("TableNotFoundError", "nope")),
        "delete a string": ({"delete": TABLE}, invalid("event 'delete' must be an object")),
        "delete null": ({"delete": None}, invalid("event 'delete' must be an object")),
        "delete without where": (
            {"delete": {"table": TABLE}},
            invalid("event 'delete' must have 'where'"),
        ),
        "delete without table": (
            {"delete": {"where": "true"}},
            invalid("event 'delete' must have 'table'"),
        ),
        "delete table a number": (
            {"delete": {"table": 5, "where": "true"}},
            invalid("event 'delete.table' must be a string"),
        ),
        "delete where a number": (
            {"delete": {"table": TABLE, "where": 5}},
            invalid("event 'delete.where' must be a string"),
        ),
        "delete where empty": (
            {"delete": {"table": TABLE, "where": ""}},
            invalid("event 'delete.where' must be a non-empty string"),
        ),
        "delete an unknown key": (
            {"delete": {"table": TABLE, "where": "true", "dry_run": True}},
            invalid("unknown keys in event 'delete' ['dry_run']"),
        ),
        "delete of an unknown table": (
            {"delete": {"table": "nope", "where": "true"}},
            Refused("TableNotFoundError", "nope"),
        ),
        "delete where not SQL": (
            {"delete": {"table": TABLE, "where": "(("}},
            invalid("delete refused: the predicate"),
        ),
        "delete where an unknown column": (
            {"delete": {"table": TABLE, "where": "nope = 1"}},
            invalid('"nope" not found'),
        ),
        "delete where two statements": (
            {"delete": {"table": TABLE, "where": "true; DROP TABLE events"}},
            invalid("delete refused: the predicate"),
        ),
        "table and delete": (
            {"table": TABLE, "delete": {"table": TABLE, "where": "true"}},
            invalid("give 'table' or 'delete', not both"),
        ),
        "an operation": ({"operation": "merge"}, invalid("unknown event keys ['operation']")),
    },
    JANITOR.logical_id: {
        "table a number": ({"table": 5}, invalid("event 'table' must be a string or null")),
        "unknown table": ({"table": "nope"}, Refused("TableNotFoundError", "nope")),
        "retention a number": (
            {"retention": 5},
            invalid("event 'retention' must be a string or null"),
        ),
        "retention not a duration": (
            {"retention": "3 days"},
            invalid("event 'retention': duration '3 days'"),
        ),
        "orphan grace a number": (
            {"orphan_grace": 5},
            invalid("event 'orphan_grace' must be a string or null"),
        ),
        "orphan grace below the floor": (
            {"orphan_grace": "1m"},
            invalid("orphan grace 1m is shorter than"),
        ),
        "dry_run a string": (
            {"dry_run": "yes", "retention": "0s"},
            invalid("event 'dry_run' must be true or false or null"),
        ),
        "dry_run a number": (
            {"dry_run": 0, "retention": "0s"},
            invalid("event 'dry_run' must be true or false or null"),
        ),
        "max_files zero": ({"max_files": 0}, invalid("event 'max_files' must be at least 1")),
        "max_files a string": (
            {"max_files": "10"},
            invalid("event 'max_files' must be a whole number or null"),
        ),
        "max_files a fraction": (
            {"max_files": 2.5},
            invalid("event 'max_files' must be a whole number or null"),
        ),
        "an operation": ({"operation": "gc"}, invalid("unknown event keys ['operation']")),
    },
    WORKER.logical_id: {
        "no keys": ({}, invalid("event must have 'Records': only an SQS event is accepted")),
        "a merge task": (
            {"table": TABLE, "partition_path": "day=2026-05-01"},
            invalid("event must have 'Records'"),
        ),
    },
    EVENTS.logical_id: {
        "no keys": ({}, None),
        "another source": ({**job_change(), "source": "aws.s3"}, None),
        "no detail": ({k: v for k, v in job_change().items() if k != "detail"}, None),
        "detail a string": ({**job_change(), "detail": "x"}, None),
        "detail null": ({**job_change(), "detail": None}, None),
        "another application": (job_change(applicationId="other"), None),
        "application a list": (job_change(applicationId=[APPLICATION]), None),
        "run id a number": (job_change(jobRunId=5), None),
        "run id null": (job_change(jobRunId=None), None),
        "state a list": (job_change(state=["FAILED"]), None),
        "state an object": (job_change(state={"FAILED": 1}), None),
        "state not terminal": (job_change(state="RUNNING"), None),
        "a run no job of ours": (job_change(), None),
        "an insert": ({"table": TABLE, "rows": [ROW]}, None),
        "a direct detail-type": (
            {"source": "aws.emr-serverless", "detail-type": EMR_JOB_STATE_CHANGE},
            None,
        ),
    },
}


def short(function: FunctionDecl) -> str:
    return function.logical_id.removesuffix("Function")


def table() -> list[Any]:
    cases = []
    for function in ALL:
        for label, event in NOT_OBJECTS.items():
            if label in SCHEDULE_INPUTS.get(function.logical_id, ()):
                continue
            expected = NOT_AN_OBJECT[function.logical_id]
            cases.append(pytest.param(function, event, expected, id=f"{short(function)}-{label}"))
        for label, (event, words) in BAD_SQS_EVENTS.items():
            if function in (INSERT, WORKER):
                expected = invalid(words)
            elif function is EVENTS:
                expected = None
            else:
                expected = invalid(UNKNOWN_KEYS[function.logical_id])
            cases.append(pytest.param(function, event, expected, id=f"{short(function)}-{label}"))
        for label, (event, expected) in FIELD_CASES[function.logical_id].items():
            cases.append(pytest.param(function, event, expected, id=f"{short(function)}-{label}"))
    return cases


@pytest.mark.parametrize(("function", "event", "expected"), table())
def test_a_malformed_event_is_answered_and_changes_nothing(
    lake: Lake,
    deployed: DeployedFunctions,
    apps: dict[str, ModuleType],
    function: FunctionDecl,
    event: object,
    expected: Refused | None,
) -> None:
    # Given the lake as it is
    before = lake.state()

    # When the function gets the malformed event
    response = deployed.invoke(apps[function.logical_id], function, event)

    # Then it answers with its answer for refused input, naming what is at fault
    if expected is None:
        assert response == IGNORED
    else:
        ERROR_SCHEMA.validate(response)
        error = response["error"]
        assert (error["type"], expected.words in error["message"]) == (expected.type, True), error
        if expected.type != "BatchRejectedError":
            assert error["problems"] == []
    # And nothing changed: no snapshot, no file row ended or claimed, no object, no message
    assert lake.state() == before


def test_the_table_covers_every_function_with_every_shape() -> None:
    """Each function meets the shapes that are not objects and the SQS events that are not
    usable (save the schedule's own inputs), and refused keys or values of its own."""
    ids = [param.id for param in table()]
    for function in ALL:
        own = [i for i in ids if i.startswith(f"{short(function)}-")]
        skipped = len(SCHEDULE_INPUTS.get(function.logical_id, ()))
        assert len(own) == len(NOT_OBJECTS) - skipped + len(BAD_SQS_EVENTS) + len(
            FIELD_CASES[function.logical_id]
        )
        assert len(FIELD_CASES[function.logical_id]) >= 2


# -- SQS batches: bad records fail by id, their neighbours are committed ----------------------


@dataclass
class Stack:
    world: World
    functions: DeployedFunctions
    apps: dict[str, ModuleType]

    def invoke(self, function: FunctionDecl, event: object) -> dict[str, Any]:
        return self.functions.invoke(self.apps[function.logical_id], function, event)

    def received(self, function: FunctionDecl, *, limit: int) -> list[MessageTypeDef]:
        return receive(self.world.moto.sqs, self.world.queue(function).url, limit=limit)


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    apps: dict[str, ModuleType],
) -> Iterator[Stack]:
    """A fresh world for one test, with the `events` table."""
    world = deploy(monkeypatch, moto_endpoint, deployment)
    meta.create_table(events_spec())
    with DeployedFunctions(environments=world.environments, monkeypatch=monkeypatch) as functions:
        yield Stack(world=world, functions=functions, apps=apps)


def bad_records() -> dict[str, dict[str, Any]]:
    """Records that carry a message id but are no usable SQS record, by what is wrong."""
    base = {"eventSource": "aws:sqs", "awsRegion": "us-east-1", "body": json.dumps(ROW)}
    shapes: dict[str, dict[str, Any]] = {
        "'eventSource' is 'aws:sns', expected 'aws:sqs'": {**base, "eventSource": "aws:sns"},
        "'eventSource' is 'aws:s3', expected 'aws:sqs'": {
            **base,
            "eventSource": "aws:s3",
            "s3": {},
        },
        "no 'eventSource' (expected 'aws:sqs')": {
            k: v for k, v in base.items() if k != "eventSource"
        },
        "no 'body'": {k: v for k, v in base.items() if k != "body"},
        "'body' must be a string, not null": {**base, "body": None},
        "'body' must be a string, not a whole number": {**base, "body": 42},
        "'body' must be a string, not an object": {**base, "body": ROW},
        "'body' must be a string, not an array": {**base, "body": [ROW]},
    }
    return {
        reason: {"messageId": f"bad-{uuid.uuid4()}", **record} for reason, record in shapes.items()
    }


def interleave(good: list[dict[str, Any]], bad: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records = []
    for i in range(max(len(good), len(bad))):
        records += good[i : i + 1] + bad[i : i + 1]
    return records


def test_insert_fails_each_bad_record_by_its_id_and_commits_its_neighbours(
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given four messages from the insert queue, one of them not JSON, and eight records that
    # carry a message id but are no usable SQS record
    bodies = [json.dumps({**ROW, "user_id": f"u{i}"}) for i in range(3)] + ["{not json"]
    ids = send_messages(stack.world.moto.sqs, stack.world.queue(INSERT).url, bodies, table=TABLE)
    good = sqs_event(stack.received(INSERT, limit=4), stack.world.queue(INSERT))["Records"]
    bad = bad_records()
    records = interleave(good, list(bad.values()))

    # When they arrive as one SQS event
    capsys.readouterr()
    caplog.clear()
    response = stack.invoke(INSERT, {"Records": records})

    # Then each bad record fails by its id, and so does the message that is not JSON
    bad_ids = {record["messageId"]: reason for reason, record in bad.items()}
    assert set(response) == {"batchItemFailures"}
    assert failures(response) == sorted([*bad_ids, ids[3]])
    # And the three good ones are one commit
    (snapshot,) = meta.snapshots(TABLE)
    assert meta.status(TABLE).rows == 3
    assert meta.committed_receipts(TABLE, ids) == {m: snapshot.snapshot_id for m in ids[:3]}
    # And each failure is logged naming the record and why; the metrics count all nine
    logged = {r.message_id: r.reason for r in caplog.records if r.getMessage() == "message failed"}
    assert set(logged) == {*bad_ids, ids[3]}
    for message_id, reason in bad_ids.items():
        assert logged[message_id] == f"record {message_id!r}: {reason}"
    (emf,) = emitted_metrics(capsys.readouterr().out)
    assert sum(emf["MessagesFailed"]) == len(bad) + 1 and emf["RowsInserted"] == [3]


def test_insert_refuses_a_whole_event_with_a_record_it_cannot_name(
    stack: Stack, meta: MetaStore
) -> None:
    # Given two good messages and, between them, an SNS record (no messageId)
    send_messages(
        stack.world.moto.sqs, stack.world.queue(INSERT).url, [json.dumps(ROW)] * 2, table=TABLE
    )
    good = sqs_event(stack.received(INSERT, limit=2), stack.world.queue(INSERT))["Records"]

    # When they arrive as one event
    response = stack.invoke(INSERT, {"Records": [good[0], SNS_RECORD, good[1]]})

    # Then the whole event is refused, naming the record, and nothing is committed
    assert response == {
        "error": {
            "type": "InvalidInputError",
            "message": "record 1 of 'Records' has no 'messageId' (its 'eventSource' is 'aws:sns')",
            "problems": [],
        }
    }
    assert meta.snapshots(TABLE) == []


def orchestrated_tasks(stack: Stack) -> list[MessageTypeDef]:
    """Small inserts into each day partition, and the tasks the scheduled orchestrator sent."""
    insert_small_batches()
    summary = stack.invoke(ORCHESTRATOR, schedule_event(ORCHESTRATOR))
    assert summary["groups_sent"] == DAYS
    messages = stack.received(WORKER, limit=10)
    assert len(messages) == DAYS
    return messages


def test_the_merge_worker_fails_each_bad_record_by_its_id_and_merges_its_neighbours(
    stack: Stack, meta: MetaStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the orchestrator's three merge tasks and eight records that carry a message id but
    # are no usable SQS record
    messages = orchestrated_tasks(stack)
    tasks = sqs_event(messages, stack.world.queue(WORKER))["Records"]
    bad = bad_records()
    before = len(meta.snapshots(TABLE))

    # When they arrive as one SQS event
    caplog.clear()
    response = stack.invoke(WORKER, {"Records": interleave(tasks, list(bad.values()))})

    # Then exactly the bad records fail, by their ids
    bad_ids = {record["messageId"]: reason for reason, record in bad.items()}
    assert set(response) == {"batchItemFailures"}
    assert failures(response) == sorted(bad_ids)
    # And every task was merged and committed: one file per partition, one snapshot each
    assert len(meta.snapshots(TABLE)) == before + DAYS
    assert sorted(f.partition_path for f in meta.files(TABLE)) == sorted(
        MergeTask.from_json(m["Body"]).partition_path for m in messages
    )
    logged = {
        r.message_id: r.reason for r in caplog.records if r.getMessage() == "merge message failed"
    }
    assert logged == {m: f"record {m!r}: {reason}" for m, reason in bad_ids.items()}


def test_the_merge_worker_refuses_a_whole_event_with_a_record_it_cannot_name(
    stack: Stack, meta: MetaStore
) -> None:
    # Given the orchestrator's three merge tasks, with a null record among them
    messages = orchestrated_tasks(stack)
    tasks = sqs_event(messages, stack.world.queue(WORKER))["Records"]
    files_before = sorted((f.file_id, f.claim_token) for f in meta.files(TABLE))
    assert all(token is not None for _, token in files_before)

    # When they arrive as one event
    response = stack.invoke(WORKER, {"Records": [*tasks[:2], None, *tasks[2:]]})

    # Then the whole event is refused, naming the record, and nothing is merged: the files
    # are live and still claimed by their tasks
    assert response == {
        "error": {
            "type": "InvalidInputError",
            "message": "record 2 of 'Records' is not an object (an SQS record)",
            "problems": [],
        }
    }
    assert sorted((f.file_id, f.claim_token) for f in meta.files(TABLE)) == files_before


def test_a_batch_of_only_bad_records_fails_them_all_and_commits_nothing(
    stack: Stack, meta: MetaStore
) -> None:
    bad = bad_records()
    for function in (INSERT, WORKER):
        response = stack.invoke(function, {"Records": list(bad.values())})
        assert failures(response) == sorted(r["messageId"] for r in bad.values())
    assert meta.snapshots(TABLE) == []
    # And an empty batch is an empty answer
    for function in (INSERT, WORKER):
        assert stack.invoke(function, {"Records": []}) == {"batchItemFailures": []}


def test_the_schedule_inputs_still_run_every_table(stack: Stack, meta: MetaStore) -> None:
    """``{}`` and no event (null) are the schedule's inputs for the orchestrator and the
    janitor (``icefloe.aws.events.is_scheduled``): answered with a run, not refused."""
    insert_small_batches()
    for function in (ORCHESTRATOR, JANITOR):
        for event in (None, {}):  # what Lambda passes for a null payload, the schedule's input
            response = stack.invoke(function, event)
            assert "error" not in response
            assert [t["table"] for t in response["tables"]] == [TABLE]
