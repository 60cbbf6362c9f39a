"""Merge orchestrator function: plan merge groups, claim them, send one task per group.

Invoked by the schedule (``{}``, or an EventBridge scheduled event: every table) or directly
with ``{"table"?: str}`` (one table). Each run first finishes delete jobs whose parts are all
done and fails those whose lease ended. ``{"delete": {"table": str, "where": str}}`` starts a
delete job instead (see :mod:`icefloe.lifecycle.delete_jobs`) and answers its id and parts. Returns the run's summary (``groups_planned``,
``groups_sent`` and one entry per table), or ``{"error": {"type", "message"}}`` when the event
is refused (unknown keys, a table that does not exist). Failures of the system (meta store or
SQS down, the queue URL not configured, EMR Serverless refusing a job) raise.

With ``ICEFLOE_EMR_APPLICATION_ID`` (and the other ``ICEFLOE_EMR_*`` variables) set, groups
above a table's Lambda cap start one EMR Serverless compaction job per table
(:class:`icefloe.compaction.emr.EmrCompactionLauncher`); without it they are only counted as
deferred.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import container_settings, runtime_from_environment
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.compaction.emr import EmrCompactionLauncher
from icefloe.errors import ConfigError, InvalidInputError, NotFoundError
from icefloe.lifecycle import DeleteRequest, DeleteStarted, reconcile_deletes, start_delete
from icefloe.merge import MergeOrchestrator, OrchestratorSummary, SqsTaskSender
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.spec import validate_table_name

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_sqs import SQSClient

logger = Logger(service="icefloe-merge-orchestrator")
route_core_logs(logger)
metrics = Metrics(namespace="icefloe")
tracer = Tracer()
route_core_spans(tracer)

QUEUE_URL_VARIABLE = "ICEFLOE_MERGE_QUEUE_URL"
DIRECT_KEYS = frozenset({"table", "delete"})


@cache
def _sqs(region: str) -> SQSClient:
    # Once per container, on first use; the endpoint follows boto3's own configuration
    # (AWS_ENDPOINT_URL_SQS points it at a local stack).
    client: SQSClient = boto3.client("sqs", region_name=region)
    return client


@cache
def _emr_serverless(region: str) -> BaseClient:
    # As for SQS: once per container, the endpoint from boto3's own configuration
    # (AWS_ENDPOINT_URL_EMR_SERVERLESS).
    client: BaseClient = boto3.client("emr-serverless", region_name=region)
    return client


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    try:
        request = _parse(event)
        if isinstance(request, DeleteRequest):
            started = _start_delete(request)
            logger.info("delete started", extra=started.to_json())
            return started.to_json()
        _reconcile_deletes()
        summary = _orchestrator().run(table=request)
    except (InvalidInputError, NotFoundError) as e:
        logger.warning("orchestration refused", extra={"error": type(e).__name__})
        metrics.add_metric(name="OrchestrationsRefused", unit=MetricUnit.Count, value=1)
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    _report(summary)
    return summary.to_json()


def _parse(event: object) -> str | DeleteRequest | None:
    """The table to orchestrate (None for every table), or a delete to start."""
    if event is None:
        return None
    if not isinstance(event, Mapping):
        raise InvalidInputError('event must be an object {"table"?: str} or {"delete": {...}}')
    if "detail-type" in event and "source" in event:
        return None  # an EventBridge scheduled event: the schedule means every table
    unknown = sorted(set(event) - DIRECT_KEYS)
    if unknown:
        raise InvalidInputError(f"unknown event keys {unknown}; expected {sorted(DIRECT_KEYS)}")
    if "delete" in event:
        return DeleteRequest.from_event(event["delete"])
    table = event.get("table")
    if table is None:
        return None
    if not isinstance(table, str):
        raise InvalidInputError("event 'table' must be a string")
    return validate_table_name(table)


def _queue_url() -> str:
    queue_url = container_settings().merge_queue_url
    if not queue_url:
        raise ConfigError(f"{QUEUE_URL_VARIABLE} is not set: the merge queue is unknown")
    return queue_url


def _start_delete(request: DeleteRequest) -> DeleteStarted:
    runtime = runtime_from_environment()
    settings = runtime.settings
    return start_delete(
        meta=runtime.meta,
        objects=runtime.objects,
        table=request.table,
        where=request.where,
        sender=SqsTaskSender(client=_sqs(settings.aws_region), queue_url=_queue_url()),
        configure=lambda con: configure_s3_from_settings(con, settings),
        limits=container_settings().query,
    )


def _reconcile_deletes() -> None:
    runtime = runtime_from_environment()
    for job in reconcile_deletes(meta=runtime.meta, objects=runtime.objects):
        logger.info("delete job reconciled", extra=job.to_json())


def _orchestrator() -> MergeOrchestrator:
    runtime = runtime_from_environment()
    queue_url = _queue_url()
    emr = container_settings().emr.job_config()  # None: heavy groups are only counted
    heavy = (
        None
        if emr is None
        else EmrCompactionLauncher(
            meta=runtime.meta,
            objects=runtime.objects,
            client=_emr_serverless(runtime.settings.aws_region),
            config=emr,
        )
    )
    return MergeOrchestrator(
        meta=runtime.meta,
        sender=SqsTaskSender(client=_sqs(runtime.settings.aws_region), queue_url=queue_url),
        lease=container_settings().merge.lease,
        heavy=heavy,
    )


def _report(summary: OrchestratorSummary) -> None:
    for plan in summary.tables:
        logger.info(
            "table orchestrated",
            extra={
                "table": plan.table,
                "live_files": plan.live_files,
                "groups_planned": plan.groups_planned,
                "groups_sent": plan.groups_sent,
                "groups_contended": plan.groups_contended,
                "groups_deferred": plan.groups_deferred,
                "groups_unsent": plan.groups_unsent,
                "groups_to_heavy": plan.groups_to_heavy,
                "heavy_jobs": list(plan.heavy_jobs),
                "files_claimed": plan.files_claimed,
                "bytes_claimed": plan.bytes_claimed,
            },
        )
        if plan.heavy_jobs:
            logger.info(
                "heavy compaction started",
                extra={
                    "table": plan.table,
                    "jobs": list(plan.heavy_jobs),
                    "groups": plan.groups_to_heavy,
                },
            )
        if plan.groups_unsent:
            # The queue refused them (the core does not say why): their claims were released
            # and the next run plans them again.
            logger.warning(
                "merge tasks not sent", extra={"table": plan.table, "groups": plan.groups_unsent}
            )
    logger.info(
        "merge orchestration done",
        extra={
            "tables": len(summary.tables),
            "groups_planned": summary.groups_planned,
            "groups_sent": summary.groups_sent,
        },
    )
    totals = {
        "GroupsPlanned": summary.groups_planned,
        "GroupsSent": summary.groups_sent,
        "GroupsContended": sum(t.groups_contended for t in summary.tables),
        "GroupsDeferred": sum(t.groups_deferred for t in summary.tables),
        "GroupsUnsent": sum(t.groups_unsent for t in summary.tables),
        "GroupsToHeavy": sum(t.groups_to_heavy for t in summary.tables),
        "HeavyJobsStarted": sum(len(t.heavy_jobs) for t in summary.tables),
        "FilesClaimed": sum(t.files_claimed for t in summary.tables),
    }
    for name, value in totals.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(
        name="BytesClaimed",
        unit=MetricUnit.Bytes,
        value=sum(t.bytes_claimed for t in summary.tables),
    )


def reset_for_tests() -> None:
    _sqs.cache_clear()
    _emr_serverless.cache_clear()
