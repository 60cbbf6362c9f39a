"""Compaction events function: settle a heavy compaction job when EMR Serverless says it ended
(the stack's job-state-change rule). Answers the settled job, or ``{"ignored": true}``; failures
of the system raise (Lambda retries the event twice, and the janitor settles any job whose event
never got through). What it does: :mod:`icefloe.aws.functions.compaction_events`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import compaction_events as function
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-compaction-events")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return function.handle(event, telemetry=telemetry)


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
