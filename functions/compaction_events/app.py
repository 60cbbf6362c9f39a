"""Compaction events function: settle a heavy compaction job when EMR Serverless says it ended
(the stack's job-state-change rule). Answers the settled job, or ``{"ignored": true}``; failures
of the system raise (Lambda retries the event twice, and the janitor settles any job whose event
never got through). What it does: :mod:`icefloe.aws.functions.compaction_events`.
"""

from __future__ import annotations

from icefloe.aws.functions import compaction_events as function
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-compaction-events")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    return telemetry.handler(function.handle, container=container)


lambda_handler = make_handler(Container())  # its collaborators built on the first invocation
