"""Query function: ``{"sql", "snapshot_id"?, "as_of"?, "format"?, "max_rows"?, "tenant"?}`` in;
inline rows when small, else a presigned link to the result under the results prefix.

Refused or failing SQL returns ``{"error": {"type", "message"}}`` carrying DuckDB's message, not
a stack trace; failures of the system (meta store or S3 down) raise.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import container_settings, runtime_from_environment
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.query import QueryEngine
from icefloe.query.s3_access import S3Endpoint
from icefloe.query.service import QueryRequest, answer_query
from icefloe.storage import ObjectStore, open_object_store

logger = Logger(service="icefloe-query")
route_core_logs(logger)
metrics = Metrics(namespace="icefloe")
tracer = Tracer()
route_core_spans(tracer)


@cache
def _services() -> tuple[QueryEngine, ObjectStore]:
    runtime = runtime_from_environment()
    settings = runtime.settings
    engine = QueryEngine(
        meta=runtime.meta,
        objects=runtime.objects,
        limits=container_settings().query,
        isolation="child_process",
        s3=S3Endpoint.from_settings(settings),
        tenant_read_role=settings.tenant_read_role_arn,
    )
    results = open_object_store(
        settings.results_location, endpoint_url=settings.s3_endpoint_url, region=settings.aws_region
    )
    return engine, results


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    try:
        request = QueryRequest.parse(event)
        engine, results = _services()
        answer = answer_query(engine, request, results=results)
    except (InvalidInputError, NotFoundError) as e:
        logger.warning("query refused", extra={"error": type(e).__name__})
        metrics.add_metric(name="QueriesRefused", unit=MetricUnit.Count, value=1)
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    logger.info(
        "query answered",
        extra={"snapshots": answer.snapshots, "files_scanned": answer.files_scanned},
    )
    metrics.add_metric(name="QueryFilesScanned", unit=MetricUnit.Count, value=answer.files_scanned)
    metrics.add_metric(name="QueryBytesScanned", unit=MetricUnit.Bytes, value=answer.bytes_scanned)
    return answer.to_json()


def reset_for_tests() -> None:
    _services.cache_clear()
