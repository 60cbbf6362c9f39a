"""The janitor function: expire old snapshots, delete the files no snapshot needs, sweep
orphans, free expired claims, settle heavy compaction jobs whose end event was lost.

An event (:class:`icefloe.aws.events.JanitorInvoke`) asks for every table (the schedule, each
table with its own retention and orphan grace) or one, possibly as a dry run. A refused event
(a bad duration, an orphan grace below the floor, a table that does not exist) changes nothing.
With an EMR application configured, the janitor asks EMR Serverless about compaction jobs still
unsettled 15 minutes after they started; without it, such jobs are settled once they outlive
their claims' lease.
"""

from __future__ import annotations

from typing import Any

from icefloe.aws.events import JanitorInvoke, error_answer
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.errors import InvalidInputError, NotFoundError
from icefloe.janitor import Janitor, JanitorReport

# What each table's log line carries (its report also lists paths, too many for a log line).
_LOGGED = (
    "table",
    "snapshots_expired",
    "files_deleted",
    "bytes_deleted",
    "orphans_found",
    "orphans_deleted",
)


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    try:
        request = JanitorInvoke.parse(event)
        runtime = container.runtime
        application = container.settings.emr.application_id
        janitor = Janitor(
            meta=runtime.meta,
            objects=runtime.objects,
            emr_client=None if application is None else container.emr_serverless_client(),
            emr_application_id=application,
        )
        # An unknown table raises before anything changes.
        report = janitor.run(
            table=request.table,
            retention=request.retention,
            orphan_grace=request.orphan_grace,
            dry_run=request.dry_run,
            max_files=request.max_files,
        )
    except (InvalidInputError, NotFoundError) as e:
        telemetry.logger.warning("janitor run refused", extra={"error": type(e).__name__})
        telemetry.count("JanitorRunsRefused", 1)
        return error_answer(e)
    _report(report, telemetry=telemetry)
    return report.to_json()


def _report(report: JanitorReport, *, telemetry: FunctionTelemetry) -> None:
    for table in report.tables:
        fields = {name: getattr(table, name) for name in _LOGGED}
        telemetry.logger.info("table collected", extra={**fields, "dry_run": report.dry_run})
    for name, error in report.failed_tables.items():
        # The other tables were collected; the next run tries this one again.
        telemetry.logger.warning("table not collected", extra={"table": name, "reason": error})
    telemetry.logger.info(
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
    # A dry run deletes nothing: its metrics say so, so that dashboards of deletions never
    # count a rehearsal. Its report carries what a real run would delete.
    done = not report.dry_run
    telemetry.count("SnapshotsExpired", report.total("snapshots_expired") if done else 0)
    telemetry.count("FilesDeleted", report.total("files_deleted") if done else 0)
    telemetry.count("OrphansFound", report.total("orphans_found"))
    telemetry.count("OrphansDeleted", report.total("orphans_deleted"))
    telemetry.count("ClaimsFreed", report.claims_freed if done else 0)
    telemetry.count("ReceiptsPruned", report.receipts_pruned if done else 0)
    telemetry.count("TablesFailed", len(report.failed_tables))
    telemetry.count("JobsSettled", report.jobs_settled)  # a dry run settles none
    telemetry.count_bytes("BytesDeleted", report.total("bytes_deleted") if done else 0)
    telemetry.count_bytes(
        "OrphanBytesDeleted", sum(t.orphan_bytes for t in report.tables if t.orphans_deleted)
    )
