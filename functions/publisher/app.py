"""Publisher function: keep the tables opted in to Iceberg publication current in the stack's
Glue database (one pass per invocation).

Invoked by the schedule (every opted-in table) or directly with ``{"tables"?: [...]}``
(``icefloe/aws/schemas/publisher.schema.json``). Answers the pass (``published``, ``current``,
``dropped``, ``failed``), or ``{"error": {...}}`` for a refused event (which publishes
nothing); failures of the system raise. What it does: :mod:`icefloe.aws.functions.publisher`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import publisher as function
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-publisher")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return function.handle(event, telemetry=telemetry)


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
