"""The collaborators of a Lambda container, built on its first invocation and kept for its
lifetime.

A container serves many invocations one at a time; reading the settings, opening the meta
store's pool, the S3 client and the other AWS clients once per container (not per invocation,
and never at import) keeps warm starts cheap. A :class:`Container` holds them: its
:class:`~icefloe.lake.Lake` is built from one :class:`IcefloeSettings`, so that the orchestrator
and the worker agree on the merge lease and limits, and every function on where the data is.

Each handler module (``functions/<name>/app.py``) makes its ``lambda_handler`` over a
``Container()`` of its own, made when the module loads and built on the first invocation; a
test makes the same handler over a container it builds from the environment it set up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from icefloe.aws.clients import emr_serverless_client, sqs_client
from icefloe.ingest.insert import Inserter
from icefloe.lake import Lake
from icefloe.lifecycle import DeletePartRunner
from icefloe.merge.worker import MergeWorker
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings, load_settings
from icefloe.storage import ObjectStore

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_sqs import SQSClient

logger = logging.getLogger(__name__)

# One invocation at a time per container: a small pool, so that many containers stay under
# the database's connection limit.
LAMBDA_MAX_CONNECTIONS = 2


class Container:
    """What one Lambda container builds once and reuses across its invocations: the settings
    (read from ``environ``, the process's environment when ``None``, on first use), the lake
    built from them, and the AWS clients. Nothing is built before it is first asked for.

    A secret is read once, when the lake opens; the meta store reads it again only when a new
    connection fails (a rotated secret)."""

    def __init__(self, *, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._lock = threading.RLock()
        self._settings: IcefloeSettings | None = None
        self._lake: Lake | None = None
        self._results: ObjectStore | None = None
        self._sqs: SQSClient | None = None
        self._emr: BaseClient | None = None

    @property
    def settings(self) -> IcefloeSettings:
        """The container's settings: read on the first call, the same object afterwards
        (whatever the environment says by then)."""
        with self._lock:
            if self._settings is None:
                self._settings = load_settings(self._environ)
            return self._settings

    @property
    def lake(self) -> Lake:
        """The container's :class:`Lake`, opened from :attr:`settings` on the first call."""
        with self._lock:
            if self._lake is None:
                self._lake = Lake.open(self.settings, max_connections=LAMBDA_MAX_CONNECTIONS)
                logger.info("lake opened (warehouse %s)", self._lake.core.warehouse.uri)
            return self._lake

    @property
    def runtime(self) -> Runtime:
        """The lake's meta store and object store."""
        return self.lake.runtime

    def inserter(self) -> Inserter:
        """The lake's :class:`Inserter`, DuckDB bounded as
        :class:`icefloe.settings.InsertSettings` says."""
        return self.lake.inserter()

    def merge_worker(self) -> MergeWorker:
        """The lake's :class:`MergeWorker`, with the settings' merge limits and lease, reading
        S3 through DuckDB's httpfs."""
        return self.lake.merge_worker()

    def delete_part_runner(self) -> DeletePartRunner:
        """What runs a delete's parts in the merge worker: the same lake, merge limits and S3
        set-up as merges."""
        return self.lake.delete_part_runner()

    def results_store(self) -> ObjectStore:
        """Where large query results are written, opened on the first call."""
        with self._lock:
            if self._results is None:
                self._results = self.lake.results_store()
            return self._results

    def sqs_client(self) -> SQSClient:
        """The container's SQS client, in the settings' region."""
        with self._lock:
            if self._sqs is None:
                self._sqs = sqs_client(self.settings.core.aws_region)
            return self._sqs

    def emr_serverless_client(self) -> BaseClient:
        """The container's EMR Serverless client, in the settings' region."""
        with self._lock:
            if self._emr is None:
                self._emr = emr_serverless_client(self.settings.core.aws_region)
            return self._emr

    def close(self) -> None:
        """Close the lake, if it was opened (a container that ends: in tests)."""
        with self._lock:
            lake, self._lake = self._lake, None
            self._results = self._sqs = self._emr = None
        if lake is not None:
            lake.close()

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
