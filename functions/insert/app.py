"""Insert function: rows from a direct invoke, or events from the insert queue, become Parquet.

Direct invoke: ``{"table", "rows", "idempotency_key"?}`` (``icefloe/aws/schemas/insert.schema.json``)
answers ``{"snapshot_id", "files", "rows", "committed"}``, or ``{"error": {"type", "message",
"problems"}}`` when the rows are refused. SQS: one commit per table per delivered batch,
answered ``{"batchItemFailures": [...]}`` naming the messages to retry, records that are no
usable SQS record (another event source, no string body) among them; an event whose
``Records`` is not an array, or holds a record without a ``messageId``, is answered
``{"error": {...}}`` and nothing of it is inserted
(:mod:`icefloe.aws.functions.queue_batches`). What it does: :mod:`icefloe.aws.functions.insert`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import insert as function
from icefloe.aws.functions import queue_batches
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-insert")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    """The handler over ``container``'s collaborators (a test passes one of its own)."""

    @telemetry.entry_point
    def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
        if queue_batches.is_sqs_event(event):
            return queue_batches.handle(
                event,
                function.handle,
                container=container,
                telemetry=telemetry,
                failure_line="message failed",
            )
        return function.handle(event, container=container, telemetry=telemetry)  # a direct invoke

    return lambda_handler


# What Lambda calls: over this container's collaborators, built on the first invocation.
lambda_handler = make_handler(Container())
