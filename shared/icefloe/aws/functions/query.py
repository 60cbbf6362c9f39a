"""The query function: one SELECT over one snapshot, answered inline when small, else with a
presigned link to the result under the results location.

Refused or failing SQL is answered with :func:`icefloe.aws.events.error_answer`, carrying
DuckDB's message, not a stack trace; failures of the system (meta store or S3 down) raise.
"""

from __future__ import annotations

from typing import Any

from icefloe.aws.events import error_answer, parse_query
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.query.service import answer_query


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    try:
        request = parse_query(event)
        answer = answer_query(
            container.lake.query_engine(), request, results=container.results_store()
        )
    except (InvalidInputError, NotFoundError) as e:
        telemetry.logger.warning("query refused", extra={"error": type(e).__name__})
        telemetry.count("QueriesRefused", 1)
        return error_answer(e)
    telemetry.logger.info(
        "query answered",
        extra={"snapshots": answer.snapshots, "files_scanned": answer.files_scanned},
    )
    telemetry.count("QueryFilesScanned", answer.files_scanned)
    telemetry.count_bytes("QueryBytesScanned", answer.bytes_scanned)
    return answer.to_json()
