"""Big scans on EMR Serverless: one SELECT over snapshot-pinned tables, run by a Spark job.

``icefloe query --engine emr "SELECT ..."`` pins, when it starts the job, the snapshot of every
table the query names (the head, a given snapshot id, or the last at ``--as-of``), writes a
request object beside the table's compaction manifests (``<table>/jobs/<job id>.json``),
records the job in ``query_jobs`` (no claims: a query changes nothing), and starts
``infra/emr/query_job.py`` with the job id as the idempotent client token
(:class:`icefloe.emr_launch.EmrJobLauncher`, as compaction jobs are started). The job
reads each table at its pinned snapshot (:func:`icefloe.spark.read_table`), runs the query and
writes the result as Parquet under ``<results location>/spark/<job id>/``.

The janitor settles the job record as it does a compaction job's (from ``get_job_run``, or
the job-state event), with nothing to release or delete. The pinned
snapshots' files stay readable for as long as the snapshots are kept (the retention); a job
running longer than that could find files collected under it.

Spark SQL is not sandboxed as DuckDB queries are: it can read any path the job's role can, and
has no result caps. It is for trusted users; the job's IAM role is what bounds it.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from icefloe.emr_launch import EmrJob, EmrJobLauncher
from icefloe.errors import IcefloeError, InvalidInputError
from icefloe.metastore.query_jobs import QueryJobStore
from icefloe.metastore.store import MetaStore
from icefloe.query.executor import without_semicolons
from icefloe.query.sandbox import check_query
from icefloe.query.sql_refs import analyze
from icefloe.settings.limits import QueryLimits
from icefloe.settings.parts import EmrJobConfig
from icefloe.storage import ObjectStore

logger = logging.getLogger(__name__)

QUERY_ENTRY_POINT = "query_job.py"


class QueryJobStartError(IcefloeError):
    """EMR Serverless refused to start a query job (nothing is left running)."""


@dataclass(frozen=True, slots=True)
class SparkQueryRequest:
    """What a query job runs: the statement, each table's pinned snapshot, where to write."""

    job_id: str
    sql: str
    snapshots: dict[str, int]
    result_uri: str

    @property
    def table(self) -> str:
        """The table the job is recorded under (the first the query names)."""
        return min(self.snapshots)

    @property
    def key(self) -> str:
        return f"{self.table}/jobs/{self.job_id}.json"

    def to_json(self) -> str:
        return json.dumps(
            {
                "job_id": self.job_id,
                "sql": self.sql,
                "snapshots": self.snapshots,
                "result_uri": self.result_uri,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> SparkQueryRequest:
        try:
            data = json.loads(text)
            request = cls(
                job_id=str(data["job_id"]),
                sql=str(data["sql"]),
                snapshots={str(k): int(v) for k, v in dict(data["snapshots"]).items()},
                result_uri=str(data["result_uri"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidInputError(f"not a query job request: {e}") from e
        if not request.snapshots:
            raise InvalidInputError("not a query job request: it names no table")
        return request


def select_statement(sql: str) -> str:
    """The statement without the semicolons around it, if it is one SELECT (or WITH ...), as
    DuckDB's parser reads it (:func:`icefloe.query.sandbox.check_query`, which the table names
    are read with too): comments and parentheses before it are no matter, and a ``;`` inside a
    string or a comment is none. Its length is not limited here: Spark SQL is not sandboxed."""
    check_query(sql, limits=QueryLimits(max_sql_chars=max(len(sql), 1)))
    return without_semicolons(sql).strip()


def pin_snapshots(
    meta: MetaStore, sql: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
) -> dict[str, int]:
    """The snapshot of every table ``sql`` names: the head, ``snapshot_id`` (one table
    only), or the last committed at ``as_of``."""
    names = sorted(analyze(select_statement(sql)).tables)
    if not names:
        raise InvalidInputError("query refused: it names no table")
    if snapshot_id is not None and len(names) != 1:
        raise InvalidInputError("a snapshot id pins one table; use as_of for several")
    pinned = {}
    for name in names:
        snapshot = meta.resolve_snapshot(name, snapshot_id=snapshot_id, as_of=as_of)
        if snapshot == 0:
            raise InvalidInputError(f"table {name!r} has no committed rows to query yet")
        pinned[name] = snapshot
    return pinned


@dataclass(frozen=True, slots=True)
class LaunchedQuery:
    job_id: str
    job_run_id: str
    snapshots: dict[str, int]
    result_uri: str


class EmrQueryLauncher:
    """Pins, records and starts one EMR Serverless query job per call."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        client: Any,
        config: EmrJobConfig,
        results_uri: str,
    ) -> None:
        self._meta = meta
        self._jobs = QueryJobStore(meta)
        self._launcher = EmrJobLauncher(objects=objects, client=client, config=config)
        self._results_uri = results_uri.rstrip("/")

    def launch(
        self, sql: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> LaunchedQuery:
        snapshots = pin_snapshots(self._meta, sql, snapshot_id=snapshot_id, as_of=as_of)
        job_id = f"query-{uuid.uuid4().hex[:20]}"
        request = SparkQueryRequest(
            job_id=job_id,
            sql=select_statement(sql),
            snapshots=snapshots,
            result_uri=f"{self._results_uri}/spark/{job_id}",
        )
        run_id = self._launcher.start(
            self._job(request),
            books=self._jobs,
            record=lambda: self._jobs.record(
                job_id=job_id,
                table=request.table,
                request_key=request.key,
                result_uri=request.result_uri,
            ),
            undo=lambda: None,  # the record stays, unstarted: the janitor settles it
            error=QueryJobStartError,
            failure="could not start the query job",
        )
        logger.info("query job %s started as EMR job run %s", job_id, run_id)
        return LaunchedQuery(job_id, run_id, snapshots, request.result_uri)

    def job_run_request(self, request: SparkQueryRequest) -> dict[str, Any]:
        """The ``start_job_run`` arguments: the query entry point (beside ``compact_job.py``)
        with the request's key."""
        return self._job(request).job_run_request(self._launcher.config)

    def _job(self, request: SparkQueryRequest) -> EmrJob:
        return EmrJob(
            document=request,
            name=f"icefloe query {request.job_id}",
            entry_point=self._launcher.entry_point_beside(QUERY_ENTRY_POINT),
            option="--request",
        )
