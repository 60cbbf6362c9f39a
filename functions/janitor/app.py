"""Janitor function: expire snapshots, delete unneeded files and orphans, free expired claims,
settle compaction jobs whose end event was lost.

Invoked by the schedule (every table) or directly with ``{"table"?, "retention"?,
"orphan_grace"?, "dry_run"?, "max_files"?}`` (``icefloe/aws/schemas/janitor.schema.json``).
Answers the run's report, or ``{"error": {...}}`` for a refused event (which changes nothing);
failures of the system raise. What it does: :mod:`icefloe.aws.functions.janitor`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.functions import janitor as function
from icefloe.aws.observability import FunctionTelemetry

telemetry = FunctionTelemetry("icefloe-janitor")
logger = telemetry.logger


@telemetry.entry_point
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    return function.handle(event, telemetry=telemetry)


def reset_for_tests() -> None:
    """Forget what the container built (tests change the environment between cases)."""
    function.reset_for_tests()
