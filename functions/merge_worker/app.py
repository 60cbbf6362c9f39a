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
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-merge-worker")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return queue_batches.handle(
        event, function.handle, telemetry=telemetry, failure_line="merge message failed"
    )


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
