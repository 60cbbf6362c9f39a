"""Janitor function: expire snapshots, delete unneeded files and orphans, free expired claims,
settle compaction jobs whose end event was lost.

Invoked by the schedule (every table) or directly with ``{"table"?, "retention"?,
"orphan_grace"?, "dry_run"?, "max_files"?}`` (``icefloe/aws/schemas/janitor.schema.json``).
Answers the run's report, or ``{"error": {...}}`` for a refused event (which changes nothing);
failures of the system raise. What it does: :mod:`icefloe.aws.functions.janitor`.
"""

from __future__ import annotations

from icefloe.aws.functions import janitor as function
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-janitor")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    return telemetry.handler(function.handle, container=container)


lambda_handler = make_handler(Container())  # its collaborators built on the first invocation
