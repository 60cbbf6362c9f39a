"""Merge worker function: SQS batches of merge tasks and delete parts from the merge queue,
answered ``{"batchItemFailures": [...]}`` naming the messages to retry, records that are no
usable SQS record (another event source, no string body) among them. Any other event (not an
SQS event, ``Records`` not an array, a record without a ``messageId``) is answered
``{"error": {...}}`` and nothing of it is run (:mod:`icefloe.aws.functions.queue_batches`).
What it does: :mod:`icefloe.aws.functions.merge_worker`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import merge_worker as function
from icefloe.aws.functions import queue_batches
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-merge-worker")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    """The handler over ``container``'s collaborators (a test passes one of its own)."""

    @telemetry.entry_point
    def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
        return queue_batches.handle(
            event,
            function.handle,
            container=container,
            telemetry=telemetry,
            failure_line="merge message failed",
        )

    return lambda_handler


# What Lambda calls: over this container's collaborators, built on the first invocation.
lambda_handler = make_handler(Container())
