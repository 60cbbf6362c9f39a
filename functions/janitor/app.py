"""Janitor function: expire old snapshots, delete the files no snapshot needs, sweep orphans,
free expired claims, settle heavy compaction jobs whose end event was lost.

Invoked by the schedule (``{}``, or an EventBridge scheduled event: every table, each with its
own retention and orphan grace) or directly with ``{"table"?: str, "retention"?: "3d",
"orphan_grace"?: "1d", "dry_run"?: bool, "max_files"?: int}``. Returns the run's report
(:meth:`JanitorReport.to_json`), or ``{"error": {"type", "message"}}`` when the event is refused
(unknown keys, wrong types, a bad duration, an orphan grace below the floor, a table that does
not exist): a refused event changes nothing. Failures of the system (meta store or S3 down)
raise.

With ``ICEFLOE_EMR_APPLICATION_ID`` set, the janitor asks EMR Serverless (``get_job_run``) about
compaction jobs still unsettled 15 minutes after they started; without it, such jobs are only
settled once they outlive their claims' lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, TypedDict

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import container_settings, runtime_from_environment
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.janitor import DEFAULT_MAX_FILES, Janitor, JanitorReport, parse_duration
from icefloe.spec import validate_table_name

if TYPE_CHECKING:
    from botocore.client import BaseClient

logger = Logger(service="icefloe-janitor")
route_core_logs(logger)
# The service is named here, not only by POWERTOOLS_SERVICE_NAME: it is the dimension that
# the template's JanitorTablesFailedAlarm watches.
metrics = Metrics(namespace="icefloe", service="icefloe-janitor")
tracer = Tracer()
route_core_spans(tracer)

DIRECT_KEYS = frozenset({"table", "retention", "orphan_grace", "dry_run", "max_files"})


class JanitorRequest(TypedDict):
    """What one invocation asks of :meth:`Janitor.run`; ``None`` leaves the choice to each
    table's own policy. (Not a dataclass: the handler file is loaded by path, outside any
    package, where dataclasses cannot resolve their postponed annotations.)"""

    table: str | None
    retention: timedelta | None
    orphan_grace: timedelta | None
    dry_run: bool
    max_files: int


SCHEDULED = JanitorRequest(
    table=None, retention=None, orphan_grace=None, dry_run=False, max_files=DEFAULT_MAX_FILES
)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    try:
        request = _parse(event)
        runtime = runtime_from_environment()
        application = container_settings().emr.application_id
        janitor = Janitor(
            meta=runtime.meta,
            objects=runtime.objects,
            emr_client=None
            if application is None
            else _emr_serverless(runtime.settings.aws_region),
            emr_application_id=application,
        )
        # An unknown table raises before anything changes: a run for one table re-raises.
        report = janitor.run(**request)
    except (InvalidInputError, NotFoundError) as e:
        logger.warning("janitor run refused", extra={"error": type(e).__name__})
        metrics.add_metric(name="JanitorRunsRefused", unit=MetricUnit.Count, value=1)
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    _report(report)
    return report.to_json()


@cache
def _emr_serverless(region: str) -> BaseClient:
    # Once per container, on first use; the endpoint follows boto3's own configuration
    # (AWS_ENDPOINT_URL_EMR_SERVERLESS points it at a local stack).
    client: BaseClient = boto3.client("emr-serverless", region_name=region)
    return client


def _parse(event: object) -> JanitorRequest:
    if event is None:
        return SCHEDULED
    if not isinstance(event, Mapping):
        raise InvalidInputError(
            'event must be an object {"table"?, "retention"?, "orphan_grace"?, "dry_run"?,'
            ' "max_files"?}'
        )
    if "detail-type" in event and "source" in event:
        return SCHEDULED  # an EventBridge scheduled event: the schedule means every table
    unknown = sorted(set(event) - DIRECT_KEYS)
    if unknown:
        raise InvalidInputError(f"unknown event keys {unknown}; expected {sorted(DIRECT_KEYS)}")
    table = event.get("table")
    if table is not None and not isinstance(table, str):
        raise InvalidInputError("event 'table' must be a string")
    dry_run = event.get("dry_run", False)
    if dry_run is None:
        dry_run = False
    if not isinstance(dry_run, bool):
        raise InvalidInputError("event 'dry_run' must be true or false")
    max_files = event.get("max_files")
    if max_files is None:
        max_files = DEFAULT_MAX_FILES
    if isinstance(max_files, bool) or not isinstance(max_files, int):
        raise InvalidInputError("event 'max_files' must be a whole number")
    return JanitorRequest(
        table=None if table is None else validate_table_name(table),
        retention=_duration(event, "retention"),
        orphan_grace=_duration(event, "orphan_grace"),
        dry_run=dry_run,
        max_files=max_files,
    )


def _duration(event: Mapping[str, object], key: str) -> timedelta | None:
    value = event.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"event {key!r} must be a duration string like 90m or 3d")
    try:
        return parse_duration(value)
    except InvalidInputError as e:
        raise InvalidInputError(f"event {key!r}: {e}") from e


def _report(report: JanitorReport) -> None:
    for table in report.tables:
        logger.info(
            "table collected",
            extra={
                "table": table.table,
                "dry_run": report.dry_run,
                "snapshots_expired": table.snapshots_expired,
                "files_deleted": table.files_deleted,
                "bytes_deleted": table.bytes_deleted,
                "orphans_found": table.orphans_found,
                "orphans_deleted": table.orphans_deleted,
            },
        )
    for name, error in report.failed_tables.items():
        # The other tables were collected; the next run tries this one again.
        logger.warning("table not collected", extra={"table": name, "reason": error})
    logger.info(
        "janitor run done",
        extra={
            "dry_run": report.dry_run,
            "tables": len(report.tables),
            "tables_failed": len(report.failed_tables),
            "claims_freed": report.claims_freed,
            "receipts_pruned": report.receipts_pruned,
            "jobs_settled": report.jobs_settled,
        },
    )
    # A dry run deletes nothing: its metrics say what it did (nothing), so that dashboards of
    # deletions never count a rehearsal. Its report carries what a real run would delete.
    done = not report.dry_run
    counts = {
        "SnapshotsExpired": report.total("snapshots_expired") if done else 0,
        "FilesDeleted": report.total("files_deleted") if done else 0,
        "OrphansFound": report.total("orphans_found"),
        "OrphansDeleted": report.total("orphans_deleted"),
        "ClaimsFreed": report.claims_freed if done else 0,
        "ReceiptsPruned": report.receipts_pruned if done else 0,
        "TablesFailed": len(report.failed_tables),
        "JobsSettled": report.jobs_settled,  # a dry run settles none
    }
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(
        name="BytesDeleted",
        unit=MetricUnit.Bytes,
        value=report.total("bytes_deleted") if done else 0,
    )
    metrics.add_metric(
        name="OrphanBytesDeleted",
        unit=MetricUnit.Bytes,
        value=sum(t.orphan_bytes for t in report.tables if t.orphans_deleted),
    )


def reset_for_tests() -> None:
    _emr_serverless.cache_clear()
