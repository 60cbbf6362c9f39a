"""Compaction job records: which job holds which claims, and whether it has been settled."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from icefloe.errors import NotFoundError
from icefloe.metastore.store import MetaStore

_COLUMNS = (
    "j.job_id, t.name, j.job_run_id, j.state, j.claim_tokens, j.manifest_key, j.created_at,"
    " j.settled_at, j.application_id, j.runner"
)


@dataclass(frozen=True, slots=True)
class CompactionJob:
    job_id: str
    table: str
    job_run_id: str | None
    state: str
    claim_tokens: tuple[uuid.UUID, ...]
    manifest_key: str
    created_at: datetime
    settled_at: datetime | None
    application_id: str | None = None
    # The local process running it (see icefloe.compaction.runner); None on EMR Serverless.
    runner: str | None = None


class JobStore:
    """The ``compaction_jobs`` table, over a :class:`MetaStore`'s pool."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def record(
        self,
        *,
        job_id: str,
        table: str,
        claim_tokens: Sequence[uuid.UUID],
        manifest_key: str,
        state: str = "STARTING",
        runner: str | None = None,
    ) -> None:
        table_id = self._meta.get_table(table).table_id
        with self._meta.transaction() as conn:
            conn.execute(
                "INSERT INTO compaction_jobs"
                " (job_id, table_id, state, claim_tokens, manifest_key, runner)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (job_id, table_id, state, list(claim_tokens), manifest_key, runner),
            )

    def started(
        self, job_id: str, *, job_run_id: str, state: str, application_id: str | None = None
    ) -> None:
        self._update(
            "job_run_id = %s, state = %s, application_id = %s",
            (job_run_id, state, application_id),
            job_id,
        )

    def set_state(self, job_id: str, state: str, *, settled: bool = False) -> None:
        if settled:
            self._update("state = %s, settled_at = now()", (state,), job_id)
        else:
            self._update("state = %s", (state,), job_id)

    def get(self, job_id: str) -> CompactionJob:
        jobs = self._select("j.job_id = %s", (job_id,))
        if not jobs:
            raise NotFoundError(f"no compaction job {job_id!r}")
        return jobs[0]

    def by_run_id(self, job_run_id: str) -> CompactionJob | None:
        jobs = self._select("j.job_run_id = %s", (job_run_id,))
        return jobs[0] if jobs else None

    def unsettled(self, *, older_than: timedelta) -> list[CompactionJob]:
        """Jobs not settled yet, created at least ``older_than`` ago, oldest first."""
        return self._select("j.settled_at IS NULL AND j.created_at <= now() - %s", (older_than,))

    def settled_before(self, *, age: timedelta) -> list[CompactionJob]:
        """Jobs settled at least ``age`` ago (their records can go)."""
        return self._select("j.settled_at <= now() - %s", (age,))

    def forget(self, job_id: str) -> None:
        with self._meta.transaction() as conn:
            conn.execute("DELETE FROM compaction_jobs WHERE job_id = %s", (job_id,))

    def _update(self, assignments: str, params: tuple[Any, ...], job_id: str) -> None:
        with self._meta.transaction() as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE compaction_jobs SET {}, updated_at = now() WHERE job_id = %s"
                ).format(sql.SQL(assignments)),
                (*params, job_id),
            )

    def _select(self, condition: str, params: tuple[Any, ...]) -> list[CompactionJob]:
        query = sql.SQL(
            "SELECT {columns} FROM compaction_jobs j JOIN lake_tables t USING (table_id)"
            " WHERE {condition} ORDER BY j.created_at"
        ).format(columns=sql.SQL(_COLUMNS), condition=sql.SQL(condition))
        with self._meta.read_transaction() as conn:
            rows = conn.execute(query, params).fetchall()
        return [
            CompactionJob(
                job_id=str(r[0]),
                table=str(r[1]),
                job_run_id=r[2],
                state=str(r[3]),
                claim_tokens=tuple(r[4]),
                manifest_key=str(r[5]),
                created_at=r[6],
                settled_at=r[7],
                application_id=r[8],
                runner=r[9],
            )
            for r in rows
        ]
