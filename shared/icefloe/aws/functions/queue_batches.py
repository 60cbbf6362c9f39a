"""What the queue-fed functions (insert, merge worker) do with an SQS event before their own
``handle`` sees it.

:class:`icefloe.aws.events.SqsBatch` splits the event: a record that is no usable SQS record
(another event source, no body, a body that is not a string) fails by its message id, logged
and counted in ``MessagesFailed``, while its well-formed neighbours go to the function's
``handle`` and are processed and committed. An event none of whose bad records can be named
is answered with the error answer and nothing of it runs.
"""

from __future__ import annotations

from typing import Any

from icefloe.aws.events import SqsBatch, error_answer, is_sqs_event
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionHandle, FunctionTelemetry
from icefloe.errors import InvalidInputError

__all__ = ["handle", "is_sqs_event"]


def handle(
    event: object,
    process: FunctionHandle,
    *,
    container: Container,
    telemetry: FunctionTelemetry,
    failure_line: str,
) -> dict[str, Any]:
    """Answer an SQS event: ``process`` takes its usable records (over ``container``); the
    others are added to its batch item failures, each logged as ``failure_line`` with its
    ``message_id`` and ``reason`` (the line the function's own failures are logged with)."""
    try:
        batch = SqsBatch.parse(event)
    except InvalidInputError as e:
        # Not an SQS event, 'Records' not an array, or a record with no usable messageId. SQS
        # gives every record an id, so this was no SQS delivery, and a batch item failure could
        # not name the record: the whole event is refused, naming the record, and nothing of
        # it is processed (its invoker then knows that none of its records went through).
        telemetry.logger.warning("event refused", extra={"reason": str(e)})
        telemetry.count("EventsRefused", 1)
        return error_answer(e)
    for message_id, reason in batch.refused.items():
        telemetry.logger.warning(failure_line, extra={"message_id": message_id, "reason": reason})
    if batch.refused:
        telemetry.count("MessagesFailed", len(batch.refused))
    return batch.answer(process(batch.event(), container=container, telemetry=telemetry))
