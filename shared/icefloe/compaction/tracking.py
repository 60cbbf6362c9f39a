"""Settling EMR Serverless jobs: release a finished compaction job's claims, delete a failed
one's outputs; record a query job's end.

Triggered by EMR Serverless job-state events (best effort) and, for events that never came,
by the janitor's reconciliation, which asks EMR with ``get_job_run``. A successful compaction
job has committed what it could; releasing its tokens frees the files of any partition whose
commit conflicted. A failed or cancelled job's outputs are found through the listings its tasks
wrote under ``<table>/jobs/<job id>/outputs/`` and deleted unless a file row names them. A
query job (``query_jobs``) holds no claim and writes no file of the lake: settling it records
its end state.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from icefloe.compaction.runner import runner_is_gone
from icefloe.metastore.janitor import JanitorStore
from icefloe.metastore.jobs import CompactionJob, JobBooks, JobStore
from icefloe.metastore.query_jobs import QueryJob, QueryJobStore
from icefloe.metastore.store import MetaStore
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE
from icefloe.storage import ObjectStore

logger = logging.getLogger(__name__)

SUCCEEDED = "SUCCESS"
FAILED_STATES = frozenset({"FAILED", "CANCELLED"})
TERMINAL_STATES = FAILED_STATES | {SUCCEEDED}


def outputs_prefix(table: str, job_id: str) -> str:
    return f"{table}/jobs/{job_id}/outputs/"


@dataclass(frozen=True, slots=True)
class SettledJob:
    job_id: str
    state: str
    claims_released: int
    outputs_deleted: int


def settle_job(
    *, meta: MetaStore, objects: ObjectStore, job: CompactionJob | QueryJob, state: str
) -> SettledJob:
    """Finish the books of a job that reached ``state`` (idempotent)."""
    if isinstance(job, QueryJob):
        QueryJobStore(meta).set_state(job.job_id, state, settled=True)
        logger.info("query job %s settled as %s", job.job_id, state)
        return SettledJob(job.job_id, state, claims_released=0, outputs_deleted=0)
    released = sum(meta.release_claim(token) for token in job.claim_tokens)
    deleted = 0
    if state in FAILED_STATES:
        deleted = _delete_uncommitted_outputs(meta, objects, job)
    JobStore(meta).set_state(job.job_id, state, settled=True)
    logger.info(
        "compaction job %s settled as %s: %d claims released, %d outputs deleted",
        job.job_id,
        state,
        released,
        deleted,
    )
    return SettledJob(job.job_id, state, released, deleted)


def handle_job_state_change(
    event: dict[str, Any], *, meta: MetaStore, objects: ObjectStore
) -> SettledJob | None:
    """An EventBridge "EMR Serverless Job Run State Change" event; None if not ours or not
    terminal."""
    detail = event.get("detail") or {}
    run_id, state = detail.get("jobRunId"), detail.get("state")
    if not isinstance(run_id, str) or state not in TERMINAL_STATES:
        return None
    job = JobStore(meta).by_run_id(run_id) or QueryJobStore(meta).by_run_id(run_id)
    if job is None or job.settled_at is not None:
        return None
    return settle_job(meta=meta, objects=objects, job=job, state=str(state))


def reconcile_jobs(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    client: Any | None,
    application_id: str | None = None,
    older_than: timedelta = timedelta(minutes=15),
    abandon_after: timedelta = DEFAULT_COMPACTION_LEASE,
    keep_settled: timedelta = timedelta(days=7),
) -> list[SettledJob]:
    """Settle unsettled jobs (compaction and query jobs) whose end event was lost: ask EMR
    about jobs that started; a job that never got a run id (its starter died), that EMR no
    longer knows, or that runs past its claims' lease, is settled as failed. A local job whose
    process is gone (on this host) is settled as failed at once. Records of jobs settled more
    than ``keep_settled`` ago are forgotten, with their manifests (requests) and output
    listings."""
    settled = []
    compaction = JobStore(meta)
    for local in compaction.unsettled(older_than=timedelta(0)):
        if local.runner is not None and runner_is_gone(local.runner):
            logger.warning("compaction job %s: its process %s is gone", local.job_id, local.runner)
            settled.append(settle_job(meta=meta, objects=objects, job=local, state="FAILED"))
    done = {s.job_id for s in settled}
    books: tuple[JobBooks[CompactionJob] | JobBooks[QueryJob], ...] = (
        compaction,
        QueryJobStore(meta),
    )
    for jobs in books:
        abandoned = {j.job_id for j in jobs.unsettled(older_than=abandon_after)}
        for job in jobs.unsettled(older_than=older_than):
            if job.job_id in done:
                continue
            try:
                state = _end_state(jobs, job, client=client, application_id=application_id)
            except _RunLookupFailed:
                continue
            if state is None and job.job_id in abandoned:
                state = "CANCELLED"
            if state is not None:
                settled.append(settle_job(meta=meta, objects=objects, job=job, state=state))
        for job in jobs.settled_before(age=keep_settled):
            forget_job(meta=meta, objects=objects, job=job)
    return settled


class _RunLookupFailed(Exception):
    """``get_job_run`` failed for one job, for a reason other than the run being gone."""


def _end_state(
    jobs: JobBooks[CompactionJob] | JobBooks[QueryJob],
    job: CompactionJob | QueryJob,
    *,
    client: Any | None,
    application_id: str | None,
) -> str | None:
    """The terminal state EMR reports for ``job``'s run (CANCELLED when EMR no longer knows
    it); None while it runs (its state is recorded), or when EMR cannot be asked. Raises
    :class:`_RunLookupFailed` when asking failed (the job is left for the next run)."""
    app = job.application_id or application_id
    if job.job_run_id is None or client is None or app is None:
        return None
    try:
        run = client.get_job_run(applicationId=app, jobRunId=job.job_run_id)
    except Exception as e:  # one job's trouble must not stop the others
        code = getattr(e, "response", {}).get("Error", {}).get("Code")
        if code == "ResourceNotFoundException":
            return "CANCELLED"  # the run or its application is gone
        logger.warning("cannot look up job run of %s: %s", job.job_id, e)
        raise _RunLookupFailed from e
    state = str(run["jobRun"]["state"])
    if state in TERMINAL_STATES:
        return state
    jobs.set_state(job.job_id, state)
    return None


def forget_job(*, meta: MetaStore, objects: ObjectStore, job: CompactionJob | QueryJob) -> None:
    """Delete a settled job's manifest (or request), output listings and record."""
    keys = [o.key for o in objects.list_prefix(f"{job.table}/jobs/{job.job_id}/")]
    objects.delete_many([job.document_key, *keys])
    books = QueryJobStore(meta) if isinstance(job, QueryJob) else JobStore(meta)
    books.forget(job.job_id)


def _delete_uncommitted_outputs(meta: MetaStore, objects: ObjectStore, job: CompactionJob) -> int:
    keys: list[str] = []
    for listing in objects.list_prefix(outputs_prefix(job.table, job.job_id)):
        keys.extend(json.loads(objects.get(listing.key)))
    registered = JanitorStore(meta).registered_paths(keys)
    stale = [k for k in keys if k not in registered]
    if stale:
        objects.delete_many(stale)
    return len(stale)
