"""Compaction events function: settle a heavy compaction job when EMR Serverless says it ended.

The target of the ``CompactionJobStateChange`` EventBridge rule: source ``aws.emr-serverless``,
detail-type ``EMR Serverless Job Run State Change``, this stack's application, the terminal
states. For a job the orchestrator started, it releases the job's claims (the files of a
partition whose commit conflicted become free at once) and, for a failed or cancelled job,
deletes the outputs its tasks listed that no file row names
(:func:`icefloe.compaction.tracking.handle_job_state_change`).

Returns ``{"job_id", "job_run_id", "state", "claims_released", "outputs_deleted"}`` for a job it
settled, or ``{"ignored": true}``: another source or detail-type, another application, a state
that is not terminal, a run that is not an icefloe job, or a job settled already (a repeated
event). Failures of the system (meta store or S3 down) raise: Lambda retries the asynchronous
invocation twice, and the janitor settles any job whose event never got through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import container_settings, runtime_from_environment
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.compaction.tracking import handle_job_state_change

logger = Logger(service="icefloe-compaction-events")
route_core_logs(logger)
metrics = Metrics(namespace="icefloe", service="icefloe-compaction-events")
tracer = Tracer()
route_core_spans(tracer)

SOURCE = "aws.emr-serverless"
DETAIL_TYPE = "EMR Serverless Job Run State Change"
IGNORED: dict[str, Any] = {"ignored": True}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    detail = _job_state_change(event)
    if detail is None:
        logger.info("event ignored", extra=_describe(event))
        _count(settled=0, outputs_deleted=0, claims_released=0)
        return dict(IGNORED)
    runtime = runtime_from_environment()
    settled = handle_job_state_change(dict(event), meta=runtime.meta, objects=runtime.objects)
    if settled is None:
        logger.info(
            "job state change ignored",
            extra={"job_run_id": detail.get("jobRunId"), "state": detail.get("state")},
        )
        _count(settled=0, outputs_deleted=0, claims_released=0)
        return dict(IGNORED)
    logger.info(
        "compaction job settled",
        extra={
            "job_id": settled.job_id,
            "job_run_id": detail.get("jobRunId"),
            "state": settled.state,
            "claims_released": settled.claims_released,
            "outputs_deleted": settled.outputs_deleted,
        },
    )
    _count(
        settled=1,
        outputs_deleted=settled.outputs_deleted,
        claims_released=settled.claims_released,
    )
    return {
        "job_id": settled.job_id,
        "job_run_id": detail.get("jobRunId"),
        "state": settled.state,
        "claims_released": settled.claims_released,
        "outputs_deleted": settled.outputs_deleted,
    }


def _job_state_change(event: object) -> Mapping[str, Any] | None:
    """The event's detail if it is a job-state change of this stack's application."""
    if not isinstance(event, Mapping):
        return None
    if event.get("source") != SOURCE or event.get("detail-type") != DETAIL_TYPE:
        return None
    detail = event.get("detail")
    if not isinstance(detail, Mapping):
        return None
    # The rule matches this application only; this guards direct invokes and rule edits.
    application = container_settings().emr.application_id
    if application is not None and detail.get("applicationId") != application:
        return None
    return detail


def _describe(event: object) -> dict[str, Any]:
    if not isinstance(event, Mapping):
        return {"event_type": type(event).__name__}
    detail = event.get("detail")
    return {
        "source": event.get("source"),
        "detail_type": event.get("detail-type"),
        "application_id": detail.get("applicationId") if isinstance(detail, Mapping) else None,
    }


def _count(*, settled: int, outputs_deleted: int, claims_released: int) -> None:
    metrics.add_metric(name="CompactionJobsSettled", unit=MetricUnit.Count, value=settled)
    metrics.add_metric(
        name="CompactionOutputsDeleted", unit=MetricUnit.Count, value=outputs_deleted
    )
    metrics.add_metric(
        name="CompactionClaimsReleased", unit=MetricUnit.Count, value=claims_released
    )
