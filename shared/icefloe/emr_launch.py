"""Starting one job on EMR Serverless: what the compaction and query launchers share.

A job is described by a JSON document in the object store (a compaction manifest, a query
request). :meth:`EmrJobLauncher.start` writes the document, records the job in its books (a
:class:`JobBooks`: ``compaction_jobs``, ``query_jobs``), sends ``start_job_run`` built from
:class:`EmrJobConfig` with the job id as the idempotent client token, and records the run as
``SUBMITTED``. If the start fails, the caller's ``undo`` runs (releasing claims,
say), the document is deleted, and the failure is the caller's start error, phrased the same
way for every kind of job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from icefloe.errors import IcefloeError
from icefloe.metastore.jobs import JobBooks
from icefloe.settings.parts import EmrJobConfig
from icefloe.storage import ObjectStore

logger = logging.getLogger(__name__)


class LaunchDocument(Protocol):
    """The JSON document a job reads (a compaction manifest, a query request): it names its
    job, the table it is recorded under, and the key it is stored under."""

    @property
    def job_id(self) -> str: ...

    @property
    def table(self) -> str: ...

    @property
    def key(self) -> str: ...

    def to_json(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EmrJob:
    """One job run to start: its document (whose job id is the client token), its name, and
    its entry point, given the document's key after ``option`` (e.g. ``--manifest``)."""

    document: LaunchDocument
    name: str
    entry_point: str
    option: str

    @property
    def job_id(self) -> str:
        return self.document.job_id

    def job_run_request(self, config: EmrJobConfig) -> dict[str, Any]:
        """The ``start_job_run`` arguments for this job on ``config``'s application."""
        return config.job_run_request(
            token=self.job_id,
            name=self.name,
            entry_point=self.entry_point,
            arguments=[self.option, self.document.key],
            tags={"icefloe:table": self.document.table, "icefloe:job": self.job_id},
        )


class EmrJobLauncher:
    """Sends ``start_job_run`` for :class:`EmrJob`s of one EMR Serverless application."""

    def __init__(self, *, objects: ObjectStore, client: Any, config: EmrJobConfig) -> None:
        self._objects = objects
        self._client = client
        self.config = config

    def entry_point_beside(self, name: str) -> str:
        """The URI of entry point ``name`` uploaded beside the compaction job's
        (``infra/emr/build_environment.py`` uploads them together)."""
        return f"{self.config.entry_point.rsplit('/', 1)[0]}/{name}"

    def start(
        self,
        job: EmrJob,
        *,
        books: JobBooks[Any],
        record: Callable[[], None],
        undo: Callable[[], None],
        error: Callable[[str], IcefloeError],
        failure: str,
    ) -> str:
        """Write ``job``'s document, ``record`` it in ``books``, start its run and mark it
        started there; the run id. On a failure, ``undo`` and delete the document, then raise
        the failure if it is an icefloe error, else ``error("<failure>: <AWS error code>:
        <message>")``. A job recorded but never started stays unsettled in ``books``: the
        janitor settles it as abandoned."""
        try:
            self._objects.put(job.document.key, job.document.to_json().encode())
            record()
            response = self._client.start_job_run(**job.job_run_request(self.config))
        except Exception as e:
            undo()
            try:
                self._objects.delete_many([job.document.key])
            except Exception:  # outside the data prefix: harmless if left
                logger.exception("could not delete %s", job.document.key)
            if isinstance(e, IcefloeError):
                raise
            code = getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
            raise error(f"{failure}: {code}: {e}") from e
        run_id = str(response["jobRunId"])
        books.started(
            job.job_id,
            job_run_id=run_id,
            state="SUBMITTED",
            application_id=self.config.application_id,
        )
        return run_id
