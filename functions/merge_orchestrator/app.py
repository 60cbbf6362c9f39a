"""Merge orchestrator function: plan merge groups, claim them, send one task per group.

Invoked by the schedule (every table) or directly with ``{"table"?}`` or ``{"delete": {"table",
"where"}}`` (``icefloe/aws/schemas/merge_orchestrator.schema.json``). Answers the run's summary,
the started delete, or ``{"error": {...}}`` for a refused event; failures of the system (meta
store, SQS, EMR Serverless) raise. What it does: :mod:`icefloe.aws.functions.merge_orchestrator`.
"""

from __future__ import annotations

from icefloe.aws.functions import merge_orchestrator as function
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-merge-orchestrator")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    return telemetry.handler(function.handle, container=container)


lambda_handler = make_handler(Container())  # its collaborators built on the first invocation
