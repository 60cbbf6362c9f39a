"""Merge orchestrator function: plan merge groups, claim them, send one task per group.

Invoked by the schedule (every table) or directly with ``{"table"?}`` or ``{"delete": {"table",
"where"}}`` (``icefloe/aws/schemas/merge_orchestrator.schema.json``). Answers the run's summary,
the started delete, or ``{"error": {...}}`` for a refused event; failures of the system (meta
store, SQS, EMR Serverless) raise. What it does: :mod:`icefloe.aws.functions.merge_orchestrator`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import merge_orchestrator as function
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-merge-orchestrator")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return function.handle(event, telemetry=telemetry)


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
