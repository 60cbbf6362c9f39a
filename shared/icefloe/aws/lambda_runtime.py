"""The collaborators of a Lambda container, built on first use and kept for its lifetime.

A container serves many invocations one at a time; reading the settings, opening the meta
store's pool and the S3 client once per container (not per invocation, and never at import)
keeps warm starts cheap. Everything here is built from one :class:`IcefloeSettings`
(:func:`container_settings`), so that the orchestrator and the worker agree on the merge lease
and limits, and every function on where the data is.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from icefloe.aws.secrets import SecretDsn, with_database_secret
from icefloe.config import Settings
from icefloe.errors import ConfigError
from icefloe.ingest.insert import Inserter
from icefloe.lifecycle import DeletePartRunner
from icefloe.merge.worker import MergeWorker
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.query.sandbox import QueryLimits
from icefloe.runtime import Runtime
from icefloe.settings import IcefloeSettings, load_settings

logger = logging.getLogger(__name__)

# One invocation at a time per container: a small pool, so that many containers stay under
# the database's connection limit.
LAMBDA_MAX_CONNECTIONS = 2

_lock = threading.Lock()
_settings: IcefloeSettings | None = None
_runtime: Runtime | None = None
_inserter: Inserter | None = None
_merge_worker: MergeWorker | None = None


def container_settings(environ: Mapping[str, str] | None = None) -> IcefloeSettings:
    """The container's settings: read from ``environ`` (the process's environment when
    ``None``) on the first call, and the same object on every later call."""
    global _settings
    with _lock:
        if _settings is None:
            _settings = load_settings(environ)
        return _settings


def resolve_database(settings: IcefloeSettings) -> tuple[Settings, SecretDsn | None]:
    """The core settings with the meta store's DSN (read from the secret when no URL is set),
    and the secret to read again when a connection fails. Where the embedded Postgres would be
    a fresh, empty database (a Lambda container, a Spark job's driver), a missing meta store is
    an error saying what to set."""
    core, secret = with_database_secret(settings.core, secret_arn=settings.database_secret_arn)
    if core.database_url is None and settings.in_lambda:
        raise ConfigError(
            "no meta store configured: set ICEFLOE_DATABASE_URL or ICEFLOE_DATABASE_SECRET_ARN"
        )
    return core, secret


def runtime_from_environment(environ: Mapping[str, str] | None = None) -> Runtime:
    """The container's :class:`Runtime`, built from :func:`container_settings` on the first
    call; later calls return the same object, whatever ``environ`` they pass. A secret is
    read once; the meta store reads it again only when a new connection fails (a rotated
    secret)."""
    global _runtime
    settings = container_settings(environ)
    with _lock:
        if _runtime is None:
            core, secret = resolve_database(settings)
            _runtime = Runtime.open(core, max_connections=LAMBDA_MAX_CONNECTIONS, dsn=secret)
            logger.info("runtime opened (warehouse %s)", core.warehouse.uri)
        return _runtime


def inserter_from_environment() -> Inserter:
    """The container's :class:`Inserter` over :func:`runtime_from_environment`, scratch in the
    temporary directory (``/tmp``, the function's ephemeral storage, in Lambda), DuckDB bounded
    as :class:`icefloe.settings.InsertSettings` says."""
    global _inserter
    runtime = runtime_from_environment()
    limits = container_settings().insert
    with _lock:
        if _inserter is None:
            _inserter = Inserter(
                meta=runtime.meta,
                objects=runtime.objects,
                scratch_dir=Path(tempfile.gettempdir()),
                duckdb_threads=limits.duckdb_threads,
                duckdb_memory_limit=limits.duckdb_memory_limit,
            )
        return _inserter


def merge_worker_from_environment() -> MergeWorker:
    """The container's :class:`MergeWorker` over :func:`runtime_from_environment`, with the
    settings' merge limits and lease, reading S3 through DuckDB's httpfs."""
    global _merge_worker
    runtime = runtime_from_environment()
    merge = container_settings().merge
    with _lock:
        if _merge_worker is None:
            assert merge.limits.temp_directory is not None
            merge.limits.temp_directory.mkdir(parents=True, exist_ok=True)
            settings = runtime.settings
            _merge_worker = MergeWorker(
                meta=runtime.meta,
                objects=runtime.objects,
                limits=merge.limits,
                lease=merge.lease,
                configure=lambda con: configure_s3_from_settings(con, settings),
            )
            logger.info(
                "merge worker ready (memory %s, %d threads)",
                merge.limits.memory_limit,
                merge.limits.threads,
            )
        return _merge_worker


def delete_part_runner_from_environment() -> DeletePartRunner:
    """What runs a delete's parts in the merge worker: the same runtime, merge limits and S3
    set-up as merges."""
    runtime = runtime_from_environment()
    limits = container_settings().merge.limits
    settings = runtime.settings
    return DeletePartRunner(
        meta=runtime.meta,
        objects=runtime.objects,
        limits=QueryLimits(memory_limit=limits.memory_limit, threads=limits.threads),
        configure=lambda con: configure_s3_from_settings(con, settings),
    )


def reset_for_tests() -> None:
    """Close and forget the cached collaborators (tests change the environment between cases)."""
    global _settings, _runtime, _inserter, _merge_worker
    with _lock:
        inserter, runtime = _inserter, _runtime
        # The worker holds no resources of its own (a DuckDB connection lives for one merge);
        # closing the runtime closes the meta store it uses.
        _settings = None
        _inserter = _runtime = _merge_worker = None
    if inserter is not None:
        inserter.close()
    if runtime is not None:
        runtime.close()
