"""The merge orchestrator function: plan merge groups, claim them, send one task per group.

An event (:class:`icefloe.aws.events.OrchestratorInvoke`) asks for every table (the schedule),
one table, or a delete to start. Each orchestration first settles delete jobs whose parts are
all done or whose lease ended. With EMR configured, groups above a table's Lambda cap start one
compaction job per table; without it they are only counted as deferred.
"""

from __future__ import annotations

from typing import Any

from icefloe.aws.events import OrchestratorInvoke, error_answer
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.compaction.emr import EmrCompactionLauncher
from icefloe.errors import ConfigError, DeleteJobRunningError, InvalidInputError, NotFoundError
from icefloe.lifecycle import DeleteRequest, DeleteStarted, reconcile_deletes, start_delete
from icefloe.merge import MergeOrchestrator, OrchestratorSummary, SqsTaskSender
from icefloe.query.s3_access import configure_s3_from_settings


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    try:
        request = OrchestratorInvoke.parse(event)
        runtime = container.runtime
        if request.delete is not None:
            started = _start_delete(container, request.delete)
            telemetry.logger.info("delete started", extra=started.to_json())
            return started.to_json()
        for job in reconcile_deletes(meta=runtime.meta, objects=runtime.objects):
            telemetry.logger.info("delete job reconciled", extra=job.to_json())
        summary = _orchestrator(container).run(table=request.table)
    except (InvalidInputError, NotFoundError, DeleteJobRunningError) as e:
        telemetry.logger.warning("orchestration refused", extra={"error": type(e).__name__})
        telemetry.count("OrchestrationsRefused", 1)
        return error_answer(e)
    _report(summary, telemetry=telemetry)
    return summary.to_json()


def _sender(container: Container) -> SqsTaskSender:
    queue_url = container.settings.merge_queue_url
    if queue_url is None:
        raise ConfigError("ICEFLOE_MERGE_QUEUE_URL is not set: the merge queue is unknown")
    return SqsTaskSender(client=container.sqs_client(), queue_url=queue_url)


def _start_delete(container: Container, request: DeleteRequest) -> DeleteStarted:
    runtime = container.runtime
    settings = runtime.settings
    return start_delete(
        meta=runtime.meta,
        objects=runtime.objects,
        table=request.table,
        where=request.where,
        sender=_sender(container),
        configure=lambda con: configure_s3_from_settings(con, settings),
        limits=container.settings.query,
    )


def _orchestrator(container: Container) -> MergeOrchestrator:
    runtime = container.runtime
    sender = _sender(container)
    emr = container.settings.emr.job_config()  # None: heavy groups are only counted
    heavy = (
        None
        if emr is None
        else EmrCompactionLauncher(
            meta=runtime.meta,
            objects=runtime.objects,
            client=container.emr_serverless_client(),
            config=emr,
        )
    )
    return MergeOrchestrator(
        meta=runtime.meta, sender=sender, lease=container.settings.merge.lease, heavy=heavy
    )


def _report(summary: OrchestratorSummary, *, telemetry: FunctionTelemetry) -> None:
    for plan in summary.tables:
        telemetry.logger.info("table orchestrated", extra=plan.to_json())
        if plan.heavy_jobs:
            telemetry.logger.info(
                "heavy compaction started",
                extra={
                    "table": plan.table,
                    "jobs": list(plan.heavy_jobs),
                    "groups": plan.groups_to_heavy,
                },
            )
        if plan.heavy_refused:
            # Every run defers them again until the table is compacted another way.
            telemetry.logger.warning(
                "heavy compaction refused",
                extra={
                    "table": plan.table,
                    "groups": plan.groups_deferred,
                    "reason": plan.heavy_refused,
                },
            )
        if plan.groups_unsent:
            # The queue refused them (the core does not say why): their claims were released
            # and the next run plans them again.
            telemetry.logger.warning(
                "merge tasks not sent", extra={"table": plan.table, "groups": plan.groups_unsent}
            )
    telemetry.logger.info(
        "merge orchestration done",
        extra={
            "tables": len(summary.tables),
            "groups_planned": summary.groups_planned,
            "groups_sent": summary.groups_sent,
        },
    )
    for name, field in (
        ("GroupsPlanned", "groups_planned"),
        ("GroupsSent", "groups_sent"),
        ("GroupsContended", "groups_contended"),
        ("GroupsDeferred", "groups_deferred"),
        ("GroupsUnsent", "groups_unsent"),
        ("GroupsToHeavy", "groups_to_heavy"),
        ("FilesClaimed", "files_claimed"),
    ):
        telemetry.count(name, sum(getattr(plan, field) for plan in summary.tables))
    telemetry.count("HeavyJobsStarted", sum(len(plan.heavy_jobs) for plan in summary.tables))
    # The dashboard's files per partition: what the merges bring down
    telemetry.count("LiveFiles", sum(plan.live_files for plan in summary.tables))
    telemetry.count("LivePartitions", sum(plan.live_partitions for plan in summary.tables))
    telemetry.count_bytes("BytesClaimed", sum(plan.bytes_claimed for plan in summary.tables))
