"""Deletes in the deployed stack: planned once, fanned out per partition, committed once.

:func:`start_delete` (the orchestrator function, on ``{"delete": {...}}``) plans the delete as
:func:`icefloe.lifecycle.delete_rows` does, records a job with one part per partition (a
partition above the Lambda cap of merges is split into parts of at most that many bytes, see
:func:`split_parts`), claims
every planned file under the job's token (merges skip them; a merge holding one loses; another
running delete job holding one refuses the start, :class:`DeleteJobRunningError`), and
sends one :class:`DeletePartTask` per part on the merge queue. A merge worker runs a part
(:class:`DeletePartRunner`): it rewrites that partition's files without the matching rows,
uploads the rewrites and records them on the part. Whoever records the last part commits the
whole job as one snapshot, under the idempotency key ``delete:<job id>``.

Redelivery changes nothing: a recorded part is not run again (a delivery that raced it deletes
its own rewrites), and the commit's key finds an earlier commit. A worker killed before
recording leaves rewrites no row names (the orphan sweep deletes them) and SQS delivers the
part again; one killed after recording but before committing is finished by the next
delivery of any part, or by :func:`reconcile_deletes` (every orchestrator run). A job whose
lease ends with parts still undone (their messages dead-lettered) fails: its claims are freed
and its recorded rewrites deleted. A part whose predicate cannot be evaluated on a row of its
files (:class:`PredicateEvaluationError`: no redelivery can change that) fails the job at
once. The claims fence the commit: a job ended as failed cannot
commit afterwards, because the commit requires the files still claimed under its token.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from icefloe.errors import (
    CommitConflictError,
    InvalidInputError,
    NotFoundError,
    RowCountMismatchError,
)
from icefloe.lifecycle.delete import DeletePlanner, check_rows_lost, rewrite_files
from icefloe.lifecycle.predicate import PredicateEvaluationError
from icefloe.merge.claims import claim_problem
from icefloe.merge.worker import MergeOutcome
from icefloe.metastore.deletes import (
    DeleteJob,
    DeleteJobRunningError,
    DeleteJobStore,
    DeletePart,
)
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.database import Configure, WorkDatabase
from icefloe.settings.limits import QueryLimits
from icefloe.storage import ObjectStore, discard_uncommitted
from icefloe.tracing import span

logger = logging.getLogger(__name__)

MESSAGE_KIND = "delete_part"
MESSAGE_VERSION = 1
# Long: a part may wait behind merges on the queue; each part that starts renews it.
DEFAULT_DELETE_LEASE = timedelta(hours=1)
MAX_PLANS = 5


@dataclass(frozen=True, slots=True)
class DeletePartTask:
    """Run part ``part`` of delete job ``job_id`` (of ``table``)."""

    job_id: uuid.UUID
    part: int
    table: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": MESSAGE_VERSION,
                "kind": MESSAGE_KIND,
                "job_id": str(self.job_id),
                "part": self.part,
                "table": self.table,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, body: str) -> DeletePartTask:
        try:
            data = json.loads(body)
        except ValueError as e:
            raise InvalidInputError(f"delete part message is not JSON: {e}") from e
        if not isinstance(data, dict) or data.get("kind") != MESSAGE_KIND:
            raise InvalidInputError("not a delete part message")
        if data.get("version") != MESSAGE_VERSION:
            raise InvalidInputError(
                f"delete part message 'version' is {data.get('version')!r}; this worker reads"
                f" {MESSAGE_VERSION}"
            )
        part, table = data.get("part"), data.get("table")
        if not isinstance(part, int) or isinstance(part, bool) or part < 0:
            raise InvalidInputError("delete part message 'part' must be an integer >= 0")
        if not isinstance(table, str) or not table:
            raise InvalidInputError("delete part message 'table' must be a non-empty string")
        try:
            job_id = uuid.UUID(str(data.get("job_id")))
        except ValueError as e:
            raise InvalidInputError("delete part message 'job_id' is not a UUID") from e
        return cls(job_id=job_id, part=part, table=table)


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """A delete asked of the orchestrator function: ``{"table": str, "where": str}``."""

    table: str
    where: str


class TaskSender(Protocol):
    def send(self, tasks: Sequence[DeletePartTask]) -> Sequence[DeletePartTask]:
        """Send the tasks; return those that could not be sent."""
        ...


@dataclass(frozen=True, slots=True)
class DeleteStarted:
    """A started delete job (None when no row matched, so nothing was started)."""

    table: str
    where: str
    planned_at: int
    job: DeleteJob | None
    parts: int

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "where": self.where,
            "planned_at": self.planned_at,
            "job_id": None if self.job is None else str(self.job.job_id),
            "state": "nothing_to_delete" if self.job is None else self.job.state,
            "parts": self.parts,
        }


def start_delete(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    table: str,
    where: str,
    sender: TaskSender,
    lease: timedelta = DEFAULT_DELETE_LEASE,
    configure: Configure | None = None,
    limits: QueryLimits | None = None,
) -> DeleteStarted:
    """Plan a delete, record its job and claims, and send one task per part
    (``configure``: S3 reads of the planning query, as for :func:`delete_rows`).

    :class:`DeleteJobRunningError` (naming it) when another running delete job holds planned
    files: jobs over the same files run one after the other, never one taking the other's
    files (which would make that one fail, its rows surviving)."""
    store = DeleteJobStore(meta)
    engine = QueryEngine(meta=meta, objects=objects, configure=configure, limits=limits)
    try:
        planner = DeletePlanner(engine=engine, meta=meta, table=table, where=where)
        for _ in range(MAX_PLANS):
            try:
                plan = planner.plan()
            except CommitConflictError:
                continue  # the schema changed meanwhile: plan again with the new one
            predicate = planner.predicate
            if not plan.candidates:
                return DeleteStarted(table, where, plan.snapshot_id, None, 0)
            parts = split_parts(
                plan.candidates, cap_bytes=planner.spec.sizes.lambda_merge_cap_bytes
            )
            try:
                job = store.create(
                    table=table,
                    predicate=predicate,
                    planned_at=plan.snapshot_id,
                    spec_version=planner.spec.version,
                    parts=parts,
                    lease=lease,
                )
            except DeleteJobRunningError:
                raise  # another delete job holds planned files: no new plan changes that
            except CommitConflictError:
                continue  # a merge replaced a planned file meanwhile: plan again
            tasks = [DeletePartTask(job.job_id, n, table) for n in range(len(parts))]
            unsent = sender.send(tasks)
            if unsent:
                store.end(job, state="failed", error=f"{len(unsent)} part task(s) not sent")
                job = store.get(job.job_id)
            return DeleteStarted(table, where, plan.snapshot_id, job, len(parts))
    finally:
        engine.close()
    raise CommitConflictError(
        f"delete from {table!r} gave up: {MAX_PLANS} plans in a row lost to merges (try again)"
    )


def split_parts(
    candidates: Sequence[DataFile], *, cap_bytes: int
) -> list[tuple[str, list[DataFile]]]:
    """The parts of a delete: each partition's candidate files, in groups of at most
    ``cap_bytes`` (the Lambda cap of merges; a file above it is a part of its own).

    A delete rewrites each file on its own (no row moves between files), so a partition too
    big for one Lambda is split across several rather than sent to Spark: every part stays
    within what a merge worker is sized for, whatever the partition's size."""
    by_partition: dict[str, list[DataFile]] = {}
    for f in candidates:
        by_partition.setdefault(f.partition_path, []).append(f)
    parts: list[tuple[str, list[DataFile]]] = []
    for partition, files in sorted(by_partition.items()):
        group: list[DataFile] = []
        size = 0
        for f in sorted(files, key=lambda f: f.file_id):
            if group and size + f.size_bytes > cap_bytes:
                parts.append((partition, group))
                group, size = [], 0
            group.append(f)
            size += f.size_bytes
        parts.append((partition, group))
    return parts


class DeletePartRunner:
    """Runs the parts of delete jobs (what a merge worker does with a ``delete_part`` task)."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        lease: timedelta = DEFAULT_DELETE_LEASE,
        limits: QueryLimits | None = None,
        configure: Configure | None = None,
        database: WorkDatabase | None = None,
    ) -> None:
        """The parts' rewrites run in ``database`` (by default one of the runner's own,
        bounded by ``limits``)."""
        self._meta = meta
        self._objects = objects
        self._store = DeleteJobStore(meta)
        self._lease = lease
        self._database = database or WorkDatabase(
            root_uri=objects.root_uri, limits=limits or QueryLimits(), configure=configure
        )

    @property
    def limits(self) -> QueryLimits:
        """What the parts' rewrites may use: their database's limits."""
        return self._database.limits

    def run_message(self, body: str) -> MergeOutcome:
        return self.run(DeletePartTask.from_json(body))

    def run(self, task: DeletePartTask) -> MergeOutcome:
        started = time.perf_counter()
        try:
            job = self._store.get(task.job_id)
        except NotFoundError:
            return _outcome(task.table, "", "claim_lost", f"no delete job {task.job_id}")
        parts = self._store.parts(job.job_id)
        if task.part >= len(parts):
            raise InvalidInputError(f"delete job {job.job_id} has no part {task.part}")
        part = parts[task.part]
        if job.state != "running":
            return _outcome(job.table, part.partition_path, "already_committed", job.state)
        if not part.done:
            with span("icefloe.delete.part"):
                outcome = self._run_part(job, part)
            if outcome is not None:
                return outcome
        finished = self.finish(self._store.get(job.job_id))
        return replace(finished, seconds=time.perf_counter() - started)

    def _run_part(self, job: DeleteJob, part: DeletePart) -> MergeOutcome | None:
        self._store.renew(job, lease=self._lease)
        inputs = self._meta.files_by_id(job.table, part.file_ids)
        problem = claim_problem(
            file_ids=part.file_ids,
            partition_path=part.partition_path,
            claim_token=job.claim_token,
            inputs=inputs,
        )
        if problem is not None:
            self.fail(job, f"part {part.part}: {problem}")
            return _outcome(job.table, part.partition_path, "failed", problem)
        # The spec the predicate was checked and the files planned against, whatever the
        # table's schema is now (the claimed files are of that version or older).
        spec = self._meta.table_spec(job.table, version=job.spec_version)
        try:
            changes, written, added = rewrite_files(
                self._objects, spec, job.predicate, inputs, database=self._database, write=True
            )
        except PredicateEvaluationError as e:
            # The predicate fails on a row of these files: every delivery would fail the same
            # way, so the job fails now (freeing its claims) rather than when its lease ends.
            self.fail(job, f"part {part.part} ({part.partition_path}): {e}")
            return _outcome(job.table, part.partition_path, "failed", str(e))
        changed = {c.path for c in changes}
        recorded = self._store.finish_part(
            job.job_id,
            part.part,
            changed_ids=[f.file_id for f in inputs if f.path in changed],
            added=added,
            rows_deleted=sum(c.rows_deleted for c in changes),
        )
        if not recorded:  # another delivery of this part recorded its own rewrites first
            discard_uncommitted(self._objects, written)
        return None

    def finish(self, job: DeleteJob) -> MergeOutcome:
        """Commit the job if every part is done; otherwise report this part as recorded."""
        parts = self._store.parts(job.job_id)
        if not all(p.done for p in parts):
            return _outcome(job.table, "", "part_done", f"{job.parts_done} of {job.parts} done")
        removed = [i for p in parts for i in p.changed_ids]
        added = [f for p in parts for f in p.added]
        if not removed:
            self._store.end(job, state="committed")
            return _outcome(job.table, "", "already_committed", "no row matched")
        try:
            # Every part's rewrites against its files, by the meta store's row counts.
            check_rows_lost(
                self._meta.files_by_id(job.table, removed),
                added,
                reported=sum(p.rows_deleted for p in parts),
            )
        except RowCountMismatchError as e:
            self.fail(job, str(e))
            return _outcome(job.table, "", "failed", str(e))
        try:
            result = self._meta.commit(
                job.table,
                operation="delete",
                remove=removed,
                add=added,
                claim_token=job.claim_token,
                idempotency_key=f"delete:{job.job_id}",
            )
        except CommitConflictError as e:
            self.fail(job, f"commit refused: {e}")
            return _outcome(job.table, "", "failed", str(e))
        if not self._store.end(job, state="committed", snapshot_id=result.snapshot_id):
            # A failure raced this commit and ended the job first: the commit is the truth.
            self._store.mark_committed(job, snapshot_id=result.snapshot_id)
        return MergeOutcome(
            table=job.table,
            partition_path="",
            status="committed" if result.committed else "already_committed",
            snapshot_id=result.snapshot_id,
            files_in=len(removed),
            files_out=len(added),
            rows_out=sum(f.row_count for f in added),
            reason=f"delete {job.job_id}",
        )

    def fail(self, job: DeleteJob, error: str) -> None:
        """End the job as failed (which frees its claims, so it can no longer commit), then
        delete its recorded rewrites, unless a commit got in before the claims were freed."""
        self._store.end(job, state="failed", error=error)
        earlier = self._meta.snapshot_for_key(job.table, f"delete:{job.job_id}")
        if earlier is not None:
            self._store.mark_committed(job, snapshot_id=earlier.snapshot_id)
            return
        parts = self._store.parts(job.job_id)
        discard_uncommitted(self._objects, [f.path for p in parts for f in p.added])
        logger.warning("delete job %s of %s failed: %s", job.job_id, job.table, error)


def reconcile_deletes(*, meta: MetaStore, objects: ObjectStore) -> list[DeleteJob]:
    """Finish running jobs whose parts are all done, and fail those whose lease ended; the
    jobs it changed, as they are now. (Neither reads data: no DuckDB set-up is needed.)"""
    store = DeleteJobStore(meta)
    runner = DeletePartRunner(meta=meta, objects=objects)
    changed = []
    for job in store.jobs(running_only=True):
        if job.parts_done == job.parts:
            runner.finish(job)
            changed.append(job.job_id)
    for job in store.expired():
        runner.fail(
            job, f"lease ended with {job.parts - job.parts_done} of {job.parts} parts undone"
        )
        changed.append(job.job_id)
    return [store.get(job_id) for job_id in changed]


def _outcome(table: str, partition: str, status: Any, reason: str) -> MergeOutcome:
    return MergeOutcome(table=table, partition_path=partition, status=status, reason=reason)
