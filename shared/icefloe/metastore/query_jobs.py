"""Query job records (``query_jobs``): a big-scan query job on EMR Serverless
(:mod:`icefloe.emr_query`) holds no claim and writes no file of the lake; its record says
where its request and result are, and whether its run has been settled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from icefloe.metastore.jobs import JobBooks


@dataclass(frozen=True, slots=True)
class QueryJob:
    job_id: str
    table: str  # the first table the query names, whose jobs/ prefix holds the request
    job_run_id: str | None
    state: str
    request_key: str
    result_uri: str | None  # None for a job recorded before query_jobs (its request says)
    created_at: datetime
    settled_at: datetime | None
    application_id: str | None = None

    @property
    def document_key(self) -> str:
        """The object that describes the job (its request)."""
        return self.request_key


class QueryJobStore(JobBooks[QueryJob]):
    """The ``query_jobs`` table."""

    TABLE = "query_jobs"
    KIND = "query job"
    COLUMNS = (
        "j.job_id, t.name, j.job_run_id, j.state, j.request_key, j.result_uri, j.created_at,"
        " j.settled_at, j.application_id"
    )

    def record(
        self, *, job_id: str, table: str, request_key: str, result_uri: str, state: str = "STARTING"
    ) -> None:
        self._insert(
            table,
            {
                "job_id": job_id,
                "state": state,
                "request_key": request_key,
                "result_uri": result_uri,
            },
        )

    def _job(self, row: Sequence[Any]) -> QueryJob:
        return QueryJob(
            job_id=str(row[0]),
            table=str(row[1]),
            job_run_id=row[2],
            state=str(row[3]),
            request_key=str(row[4]),
            result_uri=row[5],
            created_at=row[6],
            settled_at=row[7],
            application_id=row[8],
        )
