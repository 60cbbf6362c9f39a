"""Publisher function: keep the tables opted in to Iceberg publication current in the stack's
Glue database (one pass per invocation).

Invoked by the schedule (every opted-in table) or directly with ``{"tables"?: [...]}``
(``icefloe/aws/schemas/publisher.schema.json``). Answers the pass (``published``, ``current``,
``dropped``, ``failed``), or ``{"error": {...}}`` for a refused event (which publishes
nothing); failures of the system raise. What it does: :mod:`icefloe.aws.functions.publisher`.
"""

from __future__ import annotations

from icefloe.aws.functions import publisher as function
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-publisher")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    return telemetry.handler(function.handle, container=container)


lambda_handler = make_handler(Container())  # its collaborators built on the first invocation
