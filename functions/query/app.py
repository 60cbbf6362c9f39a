"""Query function: ``{"sql", "snapshot_id"?, "as_of"?, "format"?, "max_rows"?, "tenant"?}``
(``icefloe/aws/schemas/query.schema.json``) in; inline rows when small, else a presigned link to
the result. Refused or failing SQL is answered ``{"error": {...}}``; failures of the system
raise. What it does: :mod:`icefloe.aws.functions.query`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import query as function
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-query")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return function.handle(event, telemetry=telemetry)


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
