"""moto resources built from what ``template.yaml`` declares, and Lambda-shaped events.

No fixtures here: tests call these inside their own ``mock_aws()``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from support.template import BucketDecl, FunctionDecl, QueueDecl, Template

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"  # moto's default account

FAKE_AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}
# Variables of a developer's machine that would send boto3 elsewhere.
UNSET_AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_EMR_SERVERLESS",
)
# boto3's own setting that sends EMR Serverless clients to a moto server.
EMR_SERVERLESS_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_EMR_SERVERLESS"
# moto knows release labels of the form emr-X.Y.0 only (not emr-spark-8.0.0).
MOTO_EMR_RELEASE_LABEL = "emr-7.0.0"
EMR_JOB_STATE_CHANGE = "EMR Serverless Job Run State Change"

# CloudFormation's queue properties that are also SQS queue attributes of the same name.
_QUEUE_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "SqsManagedSseEnabled",
)


@dataclass(frozen=True)
class CreatedQueue:
    logical_id: str
    name: str
    url: str
    arn: str


def create_queues(
    sqs: SQSClient, template: Template, *, name_prefix: str = "test-"
) -> dict[str, CreatedQueue]:
    """Create every queue the template declares, dead-letter targets first, each with the
    declared attributes and a real RedrivePolicy pointing at its target's ARN."""
    declared = template.queues()
    created: dict[str, CreatedQueue] = {}

    def create(decl: QueueDecl) -> CreatedQueue:
        if decl.logical_id in created:
            return created[decl.logical_id]
        attributes = {
            name: _attribute_value(template.resolve(decl.properties[name]))
            for name in _QUEUE_ATTRIBUTES
            if name in decl.properties
        }
        if decl.dead_letter_target is not None:
            target = create(declared[decl.dead_letter_target])
            redrive: dict[str, Any] = {"deadLetterTargetArn": target.arn}
            if decl.max_receive_count is not None:
                redrive["maxReceiveCount"] = decl.max_receive_count
            attributes["RedrivePolicy"] = json.dumps(redrive)
        name = f"{name_prefix}{decl.logical_id}"
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        queue = CreatedQueue(decl.logical_id, name, url, arn)
        created[decl.logical_id] = queue
        return queue

    for decl in declared.values():
        create(decl)
    return created


def _attribute_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def create_bucket(
    s3: S3Client, template: Template, name: str, logical_id: str = "DataBucket"
) -> str:
    """Create the bucket with the encryption, public access block and ownership it declares."""
    decl: BucketDecl = template.bucket(logical_id)
    props = decl.properties
    s3.create_bucket(Bucket=name)
    if "BucketEncryption" in props:
        # CloudFormation's ServerSideEncryptionByDefault is the API's ApplyServerSideEncryptionByDefault.
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                **(
                    {"BucketKeyEnabled": rule["BucketKeyEnabled"]}
                    if "BucketKeyEnabled" in rule
                    else {}
                ),
            }
            for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    if "PublicAccessBlockConfiguration" in props:
        s3.put_public_access_block(
            Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
        )
    if "OwnershipControls" in props:
        s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
    return name


def create_emr_application(
    client: Any,
    template: Template,
    logical_id: str = "CompactionApplication",
    *,
    name: str = "test-compaction",
    release_label: str = MOTO_EMR_RELEASE_LABEL,
) -> str:
    """Create the EMR Serverless application the template declares (type, architecture,
    capacity, auto start and stop); returns its id. ``release_label`` stands in for the
    declared one, which moto does not know."""
    props = template.resources[logical_id]["Properties"]
    request: dict[str, Any] = {
        "name": name,
        "releaseLabel": release_label,
        "type": props["Type"],
    }
    if "Architecture" in props:
        request["architecture"] = props["Architecture"]
    if "MaximumCapacity" in props:
        capacity = props["MaximumCapacity"]
        request["maximumCapacity"] = {
            "cpu": capacity["Cpu"],
            "memory": capacity["Memory"],
            **({"disk": capacity["Disk"]} if "Disk" in capacity else {}),
        }
    if "AutoStartConfiguration" in props:
        request["autoStartConfiguration"] = {
            "enabled": bool(props["AutoStartConfiguration"]["Enabled"])
        }
    if "AutoStopConfiguration" in props:
        stop = props["AutoStopConfiguration"]
        request["autoStopConfiguration"] = {
            "enabled": bool(stop["Enabled"]),
            **(
                {"idleTimeoutMinutes": int(stop["IdleTimeoutMinutes"])}
                if "IdleTimeoutMinutes" in stop
                else {}
            ),
        }
    return str(client.create_application(**request)["applicationId"])


def job_state_change_event(
    *, application_id: str, job_run_id: str, state: str, previous_state: str = "RUNNING"
) -> dict[str, Any]:
    """The EventBridge event EMR Serverless emits when a job run changes state."""
    return {
        "version": "0",
        "id": "2d5b7c35-0000-4000-8000-000000000000",
        "detail-type": EMR_JOB_STATE_CHANGE,
        "source": "aws.emr-serverless",
        "account": ACCOUNT_ID,
        "time": "2026-05-04T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": {
            "jobRunId": job_run_id,
            "jobRunName": "icefloe",
            "applicationId": application_id,
            "arn": (
                f"arn:aws:emr-serverless:{REGION}:{ACCOUNT_ID}:/applications/{application_id}"
                f"/jobruns/{job_run_id}"
            ),
            "releaseLabel": MOTO_EMR_RELEASE_LABEL,
            "state": state,
            "previousState": previous_state,
            "createdBy": f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/icefloe/merge-orchestrator",
            "updatedAt": "2026-05-04T00:00:00Z",
            "createdAt": "2026-05-04T00:00:00Z",
        },
    }


def scheduled_rule_event() -> dict[str, Any]:
    """The event a classic EventBridge rule (a SAM ``Schedule`` event without Input) sends."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": "2026-05-04T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": {},
    }


def send_messages(
    sqs: SQSClient, queue_url: str, bodies: Sequence[str], *, table: str | None = None
) -> list[str]:
    """Send bodies in batches of ten (SQS's limit); returns the message ids in order."""
    attributes = {"table": {"DataType": "String", "StringValue": table}} if table else {}
    ids: list[str] = []
    for start in range(0, len(bodies), 10):
        chunk = bodies[start : start + 10]
        response = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "MessageBody": body, "MessageAttributes": attributes}
                for i, body in enumerate(chunk)
            ],
        )
        assert not response.get("Failed"), response.get("Failed")
        by_entry = {entry["Id"]: entry["MessageId"] for entry in response["Successful"]}
        ids.extend(by_entry[str(i)] for i in range(len(chunk)))
    return ids


def receive(
    sqs: SQSClient, queue_url: str, *, limit: int, visibility_timeout: int | None = None
) -> list[MessageTypeDef]:
    """Receive up to ``limit`` visible messages (ten per call, as SQS allows)."""
    received: list[MessageTypeDef] = []
    while len(received) < limit:
        extra: dict[str, Any] = {}
        if visibility_timeout is not None:
            extra["VisibilityTimeout"] = visibility_timeout
        response = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, limit - len(received)),
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            **extra,
        )
        messages = response.get("Messages", [])
        if not messages:
            break
        received.extend(messages)
    return received


def sqs_event(messages: Iterable[MessageTypeDef], queue: CreatedQueue) -> dict[str, Any]:
    """The event Lambda's SQS event source mapping sends for these received messages."""
    return {"Records": [_record(message, queue) for message in messages]}


def _record(message: MessageTypeDef, queue: CreatedQueue) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": list(value.get("StringListValues", [])),
                "binaryListValues": list(value.get("BinaryListValues", [])),
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue.arn,
        "awsRegion": REGION,
    }


def delete_succeeded(
    sqs: SQSClient,
    queue_url: str,
    messages: Iterable[MessageTypeDef],
    response: Mapping[str, Any],
) -> int:
    """Delete what the handler did not report failed, as the event source mapping does."""
    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    done = [m for m in messages if m["MessageId"] not in failed]
    for start in range(0, len(done), 10):
        chunk = done[start : start + 10]
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)
            ],
        )
    return len(done)


def make_visible(sqs: SQSClient, queue_url: str, messages: Iterable[MessageTypeDef]) -> None:
    """End the messages' visibility timeout now: what a function timeout leads to, later."""
    for message in messages:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )


@dataclass(frozen=True)
class FakeLambdaContext:
    """The attributes of a Lambda context that Powertools' Logger reads."""

    function_name: str = "icefloe-insert"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 2048
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    log_stream_name: str = "test"
    remaining_millis: int = 120_000

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


def function_environment(
    template: Template, function: FunctionDecl, *, resources: Mapping[str, str]
) -> dict[str, str]:
    """The function's environment as deployed with default parameters: ``!Ref`` of a parameter
    gives its default, ``!Ref X`` and ``!GetAtt X.Attr`` give ``resources["X"]`` and
    ``resources["X.Attr"]``, ``!Sub`` substitutes both. Variables that cannot be resolved (a
    parameter without a default, a resource not given) are left out."""
    environment: dict[str, str] = {}
    for name, value in function.environment.items():
        resolved = _resolve(template, value, resources)
        if resolved is not None:
            environment[name] = resolved
    return environment


def _resolve(template: Template, value: object, resources: Mapping[str, str]) -> str | None:
    parameters = template.raw.get("Parameters", {})
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, Mapping) and set(value) == {"Ref"}:
        ref = value["Ref"]
        if ref in resources:
            return resources[ref]
        default = parameters.get(ref, {}).get("Default")
        return None if default is None else str(default)
    if isinstance(value, Mapping) and set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        return resources.get(f"{logical_id}.{attribute}")
    if (
        isinstance(value, Mapping)
        and set(value) == {"Fn::Sub"}
        and isinstance(value["Fn::Sub"], str)
    ):
        text = value["Fn::Sub"]
        for name in re.findall(r"\$\{([A-Za-z0-9:.]+)\}", text):
            part = _resolve(template, {"Ref": name}, resources)
            if part is None:
                return None
            text = text.replace("${" + name + "}", part)
        return text
    return None
