"""The compaction events function: settle a heavy compaction job when EMR Serverless says it
ended.

The target of the stack's job-state-change rule. For a job the orchestrator started, it
releases the job's claims and, for a failed or cancelled job, deletes the outputs its tasks
listed that no file row names (:func:`icefloe.compaction.tracking.handle_job_state_change`).
Anything else (another source, another application, a state that is not terminal, a run that
is not an icefloe job, a job settled already) is answered ``{"ignored": true}``.
"""

from __future__ import annotations

from typing import Any

from icefloe.aws.events import JobStateChange
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.compaction.tracking import handle_job_state_change


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    change = JobStateChange.parse(event, application_id=container.settings.emr.application_id)
    settled = None
    if change is not None:
        runtime = container.runtime
        settled = handle_job_state_change(change.event, meta=runtime.meta, objects=runtime.objects)
    if settled is None:
        telemetry.logger.info("event ignored", extra=JobStateChange.describe(event))
        _count(telemetry, settled=0, outputs_deleted=0, claims_released=0)
        return {"ignored": True}
    answer = {
        "job_id": settled.job_id,
        "job_run_id": change.job_run_id if change else None,
        "state": settled.state,
        "claims_released": settled.claims_released,
        "outputs_deleted": settled.outputs_deleted,
    }
    telemetry.logger.info("compaction job settled", extra=answer)
    _count(
        telemetry,
        settled=1,
        outputs_deleted=settled.outputs_deleted,
        claims_released=settled.claims_released,
    )
    return answer


def _count(
    telemetry: FunctionTelemetry, *, settled: int, outputs_deleted: int, claims_released: int
) -> None:
    telemetry.count("CompactionJobsSettled", settled)
    telemetry.count("CompactionOutputsDeleted", outputs_deleted)
    telemetry.count("CompactionClaimsReleased", claims_released)
