"""Job records of EMR Serverless (and local Spark) jobs: what both job tables share
(:class:`JobBooks`), and compaction jobs' own (``compaction_jobs``: which job holds which
claims, and whether it has been settled). Query jobs are in ``query_jobs``
(:mod:`icefloe.metastore.query_jobs`)."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

from psycopg import sql

from icefloe.errors import NotFoundError
from icefloe.metastore.store import MetaStore

Job = TypeVar("Job")


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

    @property
    def document_key(self) -> str:
        """The object that describes the job (its manifest)."""
        return self.manifest_key


class JobBooks(ABC, Generic[Job]):
    """One job table over a :class:`MetaStore`'s pool: a job's start, states and settlement,
    looked up by id, by job run id, or by age. Subclasses name the table, its columns (the
    first two are the job id and, through ``lake_tables``, the table's name) and a row's
    record, and add their own ``record``."""

    TABLE: ClassVar[str]
    KIND: ClassVar[str]  # in messages: "compaction job"
    COLUMNS: ClassVar[str]

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

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

    def get(self, job_id: str) -> Job:
        jobs = self._select("j.job_id = %s", (job_id,))
        if not jobs:
            raise NotFoundError(f"no {self.KIND} {job_id!r}")
        return jobs[0]

    def by_run_id(self, job_run_id: str) -> Job | None:
        jobs = self._select("j.job_run_id = %s", (job_run_id,))
        return jobs[0] if jobs else None

    def unsettled(self, *, older_than: timedelta) -> list[Job]:
        """Jobs not settled yet, created at least ``older_than`` ago, oldest first."""
        return self._select("j.settled_at IS NULL AND j.created_at <= now() - %s", (older_than,))

    def settled_before(self, *, age: timedelta) -> list[Job]:
        """Jobs settled at least ``age`` ago (their records can go)."""
        return self._select("j.settled_at <= now() - %s", (age,))

    def forget(self, job_id: str) -> None:
        with self._meta.transaction() as conn:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE job_id = %s").format(sql.Identifier(self.TABLE)),
                (job_id,),
            )

    def _insert(self, table: str, values: dict[str, Any]) -> None:
        """A new job row for ``table`` (its id looked up): ``values`` by column."""
        table_id = self._meta.get_table(table).table_id
        columns = ["table_id", *values]
        with self._meta.transaction() as conn:
            conn.execute(
                sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    sql.Identifier(self.TABLE),
                    sql.SQL(", ").join(map(sql.Identifier, columns)),
                    sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                ),
                (table_id, *values.values()),
            )

    def _update(self, assignments: str, params: tuple[Any, ...], job_id: str) -> None:
        with self._meta.transaction() as conn:
            conn.execute(
                sql.SQL("UPDATE {} SET {}, updated_at = now() WHERE job_id = %s").format(
                    sql.Identifier(self.TABLE), sql.SQL(assignments)
                ),
                (*params, job_id),
            )

    def _select(self, condition: str, params: tuple[Any, ...]) -> list[Job]:
        query = sql.SQL(
            "SELECT {columns} FROM {table} j JOIN lake_tables t USING (table_id)"
            " WHERE {condition} ORDER BY j.created_at"
        ).format(
            columns=sql.SQL(self.COLUMNS),
            table=sql.Identifier(self.TABLE),
            condition=sql.SQL(condition),
        )
        with self._meta.read_transaction() as conn:
            rows = conn.execute(query, params).fetchall()
        return [self._job(r) for r in rows]

    @abstractmethod
    def _job(self, row: Sequence[Any]) -> Job:
        """The record of one row of :attr:`COLUMNS`."""


class JobStore(JobBooks[CompactionJob]):
    """The ``compaction_jobs`` table."""

    TABLE = "compaction_jobs"
    KIND = "compaction job"
    COLUMNS = (
        "j.job_id, t.name, j.job_run_id, j.state, j.claim_tokens, j.manifest_key, j.created_at,"
        " j.settled_at, j.application_id, j.runner"
    )

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
        self._insert(
            table,
            {
                "job_id": job_id,
                "state": state,
                "claim_tokens": list(claim_tokens),
                "manifest_key": manifest_key,
                "runner": runner,
            },
        )

    def _job(self, row: Sequence[Any]) -> CompactionJob:
        return CompactionJob(
            job_id=str(row[0]),
            table=str(row[1]),
            job_run_id=row[2],
            state=str(row[3]),
            claim_tokens=tuple(row[4]),
            manifest_key=str(row[5]),
            created_at=row[6],
            settled_at=row[7],
            application_id=row[8],
            runner=row[9],
        )
