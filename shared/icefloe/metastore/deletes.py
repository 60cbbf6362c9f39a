"""Delete job records: a planned delete, its parts, their rewrites, and how it ended."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import sql
from psycopg.types.json import Jsonb

from icefloe.errors import (
    CommitConflictError,
    DeleteJobRunningError,
    NotFoundError,
    TableNotFoundError,
)
from icefloe.metastore.access import TRANSIENT, Conn
from icefloe.metastore.commit_sql import held_by_delete_jobs
from icefloe.metastore.models import DataFile, NewFile
from icefloe.metastore.store import MetaStore

__all__ = [
    "DeleteJob",
    "DeleteJobRunningError",
    "DeleteJobStore",
    "DeletePart",
    "DeleteState",
]

DeleteState = Literal["running", "committed", "failed"]

_JOBS = """
    SELECT j.job_id, t.name, j.predicate, j.planned_at, j.claim_token, j.lease_until, j.state,
    j.snapshot_id, j.error, j.created_at, j.updated_at,
    (SELECT count(*) FROM delete_parts p WHERE p.job_id = j.job_id),
    (SELECT count(*) FROM delete_parts p WHERE p.job_id = j.job_id AND p.done_at IS NOT NULL),
    (SELECT coalesce(sum(p.rows_deleted), 0) FROM delete_parts p WHERE p.job_id = j.job_id),
    j.spec_version
    FROM delete_jobs j JOIN lake_tables t USING (table_id)
"""


@dataclass(frozen=True, slots=True)
class DeleteJob:
    job_id: uuid.UUID
    table: str
    predicate: str
    planned_at: int
    claim_token: uuid.UUID
    lease_until: datetime
    state: DeleteState
    snapshot_id: int | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    parts: int
    parts_done: int
    rows_deleted: int
    spec_version: int = 1  # the table spec the predicate was checked and planned against

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "table": self.table,
            "where": self.predicate,
            "state": self.state,
            "planned_at": self.planned_at,
            "parts": self.parts,
            "parts_done": self.parts_done,
            "rows_deleted": self.rows_deleted,
            "snapshot_id": self.snapshot_id,
            "error": self.error,
            "created_at": self.created_at.isoformat(),
            "lease_until": self.lease_until.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class DeletePart:
    job_id: uuid.UUID
    part: int
    partition_path: str
    file_ids: tuple[int, ...]
    done: bool
    changed_ids: tuple[int, ...] = ()
    added: tuple[NewFile, ...] = ()
    rows_deleted: int = 0


class DeleteJobStore:
    """The ``delete_jobs`` and ``delete_parts`` tables, over a :class:`MetaStore`'s pool."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def create(
        self,
        *,
        table: str,
        predicate: str,
        planned_at: int,
        spec_version: int,
        parts: Sequence[tuple[str, Sequence[DataFile]]],
        lease: timedelta,
    ) -> DeleteJob:
        """Record a job and its parts (partition path, files), and claim every planned file under
        the job's token, taking files a merge holds (that merge loses at its commit).
        CommitConflictError when a planned file is no longer live, or a concurrent transaction
        made Postgres abort this one (a deadlock or serialization failure: plan again);
        :class:`DeleteJobRunningError` when another running delete job holds one: taking it
        would make that job fail and its delete silently not happen, so this one waits for it
        to end (the caller starts it again)."""
        info = self._meta.get_table(table)
        job_id, token = uuid.uuid4(), uuid.uuid4()
        ids = sorted(f.file_id for _, files in parts for f in files)
        try:
            with self._meta.transaction() as conn:
                # Locks in a commit's order: the table's row first (the job's row references
                # it, so its insert waits on a commit holding that row, which would deadlock
                # with the commit waiting for these files), then the planned rows in file
                # order. A job claiming them concurrently has then committed, and the next
                # statement sees its record.
                table_row = conn.execute(
                    "SELECT 1 FROM lake_tables WHERE table_id = %s AND dropped_at IS NULL"
                    " FOR UPDATE",
                    (info.table_id,),
                ).fetchone()
                if table_row is None:
                    raise TableNotFoundError(f"no table named {table!r} (was it dropped?)")
                locked = conn.execute(
                    "SELECT file_id, claim_token, claim_expires_at > now() FROM data_files"
                    " WHERE table_id = %s AND file_id = ANY(%s) AND end_snapshot IS NULL"
                    " ORDER BY file_id FOR UPDATE",
                    (info.table_id, ids),
                ).fetchall()
                refusal = held_by_delete_jobs(
                    conn, table, [(int(r[0]), r[1]) for r in locked if r[1] is not None and r[2]]
                )
                if refusal is not None:
                    raise refusal
                claimed = conn.execute(
                    "UPDATE data_files SET claim_token = %s, claim_expires_at = now() + %s"
                    " WHERE table_id = %s AND file_id = ANY(%s) AND end_snapshot IS NULL",
                    (token, lease, info.table_id, ids),
                ).rowcount
                if claimed != len(ids):
                    raise CommitConflictError(
                        f"{table!r}: {len(ids) - claimed} planned file(s) were replaced meanwhile"
                    )
                conn.execute(
                    "INSERT INTO delete_jobs (job_id, table_id, predicate, planned_at,"
                    " claim_token, lease_until, state, spec_version)"
                    " VALUES (%s, %s, %s, %s, %s, now() + %s, 'running', %s)",
                    (job_id, info.table_id, predicate, planned_at, token, lease, spec_version),
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO delete_parts (job_id, part, partition_path, file_ids)"
                        " VALUES (%s, %s, %s, %s)",
                        [
                            (job_id, number, partition, [f.file_id for f in files])
                            for number, (partition, files) in enumerate(parts)
                        ],
                    )
        except TRANSIENT as e:
            # A deadlock or serialization failure rolled the transaction back: nothing was
            # recorded or claimed, and the caller plans again as after any conflict.
            raise CommitConflictError(
                f"{table!r}: recording the delete job met a concurrent transaction ({e});"
                " nothing was recorded"
            ) from e
        return self.get(job_id)

    def check_not_held(self, table: str, files: Sequence[DataFile]) -> None:
        """Raise :class:`DeleteJobRunningError` when a running delete job holds any of
        ``files`` (as they were listed): a local delete checks before it rewrites anything,
        and its commit checks again under the row locks."""
        held = [(f.file_id, f.claim_token) for f in files if f.claim_token and f.claimed]
        if not held:
            return
        with self._meta.read_transaction() as conn:
            refusal = held_by_delete_jobs(conn, table, held)
        if refusal is not None:
            raise refusal

    def get(self, job_id: uuid.UUID) -> DeleteJob:
        with self._meta.read_transaction() as conn:
            row = conn.execute(
                sql.SQL(_JOBS) + sql.SQL(" WHERE j.job_id = %s"), (job_id,)
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no delete job {job_id}")
        return _job(row)

    def jobs(self, table: str | None = None, *, running_only: bool = False) -> list[DeleteJob]:
        where = [sql.SQL("t.dropped_at IS NULL")]
        params: list[Any] = []
        if table is not None:
            where.append(sql.SQL("t.name = %s"))
            params.append(table)
        if running_only:
            where.append(sql.SQL("j.state = 'running'"))
        query = sql.SQL(_JOBS) + sql.SQL(" WHERE {} ORDER BY j.created_at").format(
            sql.SQL(" AND ").join(where)
        )
        with self._meta.read_transaction() as conn:
            rows = conn.execute(query, params).fetchall()
        return [_job(row) for row in rows]

    def parts(self, job_id: uuid.UUID) -> list[DeletePart]:
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT job_id, part, partition_path, file_ids, done_at IS NOT NULL,"
                " changed_ids, added, rows_deleted FROM delete_parts WHERE job_id = %s"
                " ORDER BY part",
                (job_id,),
            ).fetchall()
        return [
            DeletePart(
                job_id=row[0],
                part=int(row[1]),
                partition_path=str(row[2]),
                file_ids=tuple(int(i) for i in row[3]),
                done=bool(row[4]),
                changed_ids=tuple(int(i) for i in row[5] or ()),
                added=tuple(NewFile.from_json(f) for f in row[6] or ()),
                rows_deleted=int(row[7] or 0),
            )
            for row in rows
        ]

    def finish_part(
        self,
        job_id: uuid.UUID,
        part: int,
        *,
        changed_ids: Sequence[int],
        added: Sequence[NewFile],
        rows_deleted: int,
    ) -> bool:
        """Record a part's result; False when it was recorded already (a redelivery raced
        this one: the caller deletes its own rewrites)."""
        with self._meta.transaction() as conn:
            return (
                conn.execute(
                    "UPDATE delete_parts SET done_at = now(), changed_ids = %s, added = %s,"
                    " rows_deleted = %s WHERE job_id = %s AND part = %s AND done_at IS NULL",
                    (
                        list(changed_ids),
                        Jsonb([f.to_json() for f in added]),
                        rows_deleted,
                        job_id,
                        part,
                    ),
                ).rowcount
                == 1
            )

    def renew(self, job: DeleteJob, *, lease: timedelta) -> None:
        """Extend the job's lease and its claims (a part starts: the job is alive)."""
        with self._meta.transaction() as conn:
            _lock_in_commit_order(conn, job)
            conn.execute(
                "UPDATE delete_jobs SET lease_until = now() + %s, updated_at = now()"
                " WHERE job_id = %s AND state = 'running'",
                (lease, job.job_id),
            )
            conn.execute(
                "UPDATE data_files SET claim_expires_at = now() + %s"
                " WHERE claim_token = %s AND end_snapshot IS NULL",
                (lease, job.claim_token),
            )

    def end(
        self,
        job: DeleteJob,
        *,
        state: Literal["committed", "failed"],
        snapshot_id: int | None = None,
        error: str | None = None,
    ) -> bool:
        """Mark a running job ended and free its claims; False if it had ended already."""
        with self._meta.transaction() as conn:
            _lock_in_commit_order(conn, job)
            ended = conn.execute(
                "UPDATE delete_jobs SET state = %s, snapshot_id = %s, error = %s,"
                " updated_at = now() WHERE job_id = %s AND state = 'running'",
                (state, snapshot_id, error, job.job_id),
            ).rowcount
            conn.execute(
                "UPDATE data_files SET claim_token = NULL, claim_expires_at = NULL"
                " WHERE claim_token = %s",
                (job.claim_token,),
            )
        return ended == 1

    def mark_committed(self, job: DeleteJob, *, snapshot_id: int) -> None:
        """Record the job's commit, whatever state a racing failure left it in: a commit
        that landed is the truth (its claims were still held, so it was valid)."""
        with self._meta.transaction() as conn:
            conn.execute(
                "UPDATE delete_jobs SET state = 'committed', snapshot_id = %s, error = NULL,"
                " updated_at = now() WHERE job_id = %s",
                (snapshot_id, job.job_id),
            )

    def expired(self) -> list[DeleteJob]:
        """Running jobs whose lease has ended (a part never finished)."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                sql.SQL(_JOBS)
                + sql.SQL(
                    " WHERE j.state = 'running' AND j.lease_until < now() ORDER BY j.created_at"
                )
            ).fetchall()
        return [_job(row) for row in rows]


def _lock_in_commit_order(conn: Conn, job: DeleteJob) -> None:
    """Lock what a change of the job's claims touches in a commit's order: the table's row,
    then the claimed files in file order. An update of the claimed rows alone takes them in
    the order it meets them, which an earlier update may have made any order: a commit
    holding one of them and waiting for another would deadlock with it."""
    conn.execute(
        "SELECT 1 FROM lake_tables WHERE table_id ="
        " (SELECT table_id FROM delete_jobs WHERE job_id = %s) FOR UPDATE",
        (job.job_id,),
    )
    conn.execute(
        "SELECT file_id FROM data_files WHERE claim_token = %s ORDER BY file_id FOR UPDATE",
        (job.claim_token,),
    )


def _job(row: Sequence[Any]) -> DeleteJob:
    return DeleteJob(
        job_id=row[0],
        table=str(row[1]),
        predicate=str(row[2]),
        planned_at=int(row[3]),
        claim_token=row[4],
        lease_until=row[5],
        state=row[6],
        snapshot_id=None if row[7] is None else int(row[7]),
        error=row[8],
        created_at=row[9],
        updated_at=row[10],
        parts=int(row[11]),
        parts_done=int(row[12]),
        rows_deleted=int(row[13]),
        spec_version=int(row[14]),
    )
