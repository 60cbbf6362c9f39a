"""Query function: ``{"sql", "snapshot_id"?, "as_of"?, "format"?, "max_rows"?, "tenant"?}``
(``icefloe/aws/schemas/query.schema.json``) in; inline rows when small, else a presigned link to
the result. Refused or failing SQL is answered ``{"error": {...}}``; failures of the system
raise. What it does: :mod:`icefloe.aws.functions.query`.
"""

from __future__ import annotations

from icefloe.aws.functions import query as function
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry, LambdaHandler

telemetry = FunctionTelemetry("icefloe-query")
logger = telemetry.logger


def make_handler(container: Container) -> LambdaHandler:
    return telemetry.handler(function.handle, container=container)


lambda_handler = make_handler(Container())  # its collaborators built on the first invocation
