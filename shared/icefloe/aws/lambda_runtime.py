"""The lake of a Lambda container, built on first use and kept for its lifetime.

A container serves many invocations one at a time; reading the settings, opening the meta
store's pool and the S3 client once per container (not per invocation, and never at import)
keeps warm starts cheap. The container's :class:`~icefloe.lake.Lake` is built from one
:class:`IcefloeSettings` (:func:`container_settings`), so that the orchestrator and the worker
agree on the merge lease and limits, and every function on where the data is; the functions
take their collaborators from it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from icefloe.ingest.insert import Inserter
from icefloe.lake import Lake
from icefloe.lifecycle import DeletePartRunner
from icefloe.merge.worker import MergeWorker
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings, load_settings

logger = logging.getLogger(__name__)

# One invocation at a time per container: a small pool, so that many containers stay under
# the database's connection limit.
LAMBDA_MAX_CONNECTIONS = 2

_lock = threading.Lock()
_settings: IcefloeSettings | None = None
_lake: Lake | None = None


def container_settings(environ: Mapping[str, str] | None = None) -> IcefloeSettings:
    """The container's settings: read from ``environ`` (the process's environment when
    ``None``) on the first call, and the same object on every later call."""
    global _settings
    with _lock:
        if _settings is None:
            _settings = load_settings(environ)
        return _settings


def lake_from_environment(environ: Mapping[str, str] | None = None) -> Lake:
    """The container's :class:`Lake`, built from :func:`container_settings` on the first
    call; later calls return the same object, whatever ``environ`` they pass. A secret is
    read once; the meta store reads it again only when a new connection fails (a rotated
    secret)."""
    global _lake
    settings = container_settings(environ)
    with _lock:
        if _lake is None:
            _lake = Lake.open(settings, max_connections=LAMBDA_MAX_CONNECTIONS)
            logger.info("lake opened (warehouse %s)", _lake.core.warehouse.uri)
        return _lake


def runtime_from_environment(environ: Mapping[str, str] | None = None) -> Runtime:
    """The container's meta store and object store (:func:`lake_from_environment`'s)."""
    return lake_from_environment(environ).runtime


def inserter_from_environment() -> Inserter:
    """The container's :class:`Inserter`, DuckDB bounded as
    :class:`icefloe.settings.InsertSettings` says."""
    return lake_from_environment().inserter()


def merge_worker_from_environment() -> MergeWorker:
    """The container's :class:`MergeWorker`, with the settings' merge limits and lease,
    reading S3 through DuckDB's httpfs."""
    return lake_from_environment().merge_worker()


def delete_part_runner_from_environment() -> DeletePartRunner:
    """What runs a delete's parts in the merge worker: the same lake, merge limits and S3
    set-up as merges."""
    return lake_from_environment().delete_part_runner()


def reset_for_tests() -> None:
    """Close and forget the container's lake (tests change the environment between cases)."""
    global _settings, _lake
    with _lock:
        lake = _lake
        _settings = None
        _lake = None
    if lake is not None:
        lake.close()
