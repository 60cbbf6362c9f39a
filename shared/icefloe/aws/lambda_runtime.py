"""The collaborators of a Lambda container, built on first use and kept for its lifetime.

A container serves many invocations one at a time; opening the meta store's pool and the S3
client once per container (not per invocation, and never at import) keeps warm starts cheap.
The merge functions' knobs (DuckDB memory and threads, the claim lease) are read here too, so
that the orchestrator and the worker agree on them.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from icefloe.aws.secrets import SECRET_ARN_VARIABLE, SecretDsn, with_database_secret
from icefloe.config import Settings
from icefloe.errors import ConfigError
from icefloe.ingest.insert import Inserter
from icefloe.lifecycle import DeletePartRunner
from icefloe.merge.worker import DEFAULT_LEASE, MergeLimits, MergeWorker
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.query.sandbox import QueryLimits
from icefloe.runtime import Runtime

logger = logging.getLogger(__name__)

# One invocation at a time per container: a small pool, so that many containers stay under
# the database's connection limit.
LAMBDA_MAX_CONNECTIONS = 2

MERGE_LEASE_VARIABLE = "ICEFLOE_MERGE_LEASE_SECONDS"
MERGE_MEMORY_VARIABLE = "ICEFLOE_MERGE_MEMORY_LIMIT"
MERGE_THREADS_VARIABLE = "ICEFLOE_MERGE_THREADS"
# Lambda gives one vCPU per 1,769 MB of memory, and at most six.
LAMBDA_MB_PER_VCPU = 1769
LAMBDA_MAX_VCPUS = 6
# DuckDB's share of the function's memory; the rest is Python, pyarrow's write buffers and
# the runtime. DuckDB spills to the temp directory past its limit instead of failing.
# The worker process peaks about 500 MiB above DuckDB's limit (Python, Arrow, the row group
# being cut; docs/benchmarks.md), so DuckDB gets less of the function than a query does.
MERGE_MEMORY_SHARE = 0.6
# An insert holds its whole batch in Python and Arrow besides DuckDB's sort (a delivered batch
# of 1,000 messages can be hundreds of MB of JSON): DuckDB gets half the function.
INSERT_MEMORY_SHARE = 0.5

_lock = threading.Lock()
_runtime: Runtime | None = None
_inserter: Inserter | None = None
_merge_worker: MergeWorker | None = None


def settings_from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """:meth:`Settings.from_env`, with the DSN read from ``ICEFLOE_DATABASE_SECRET_ARN`` when
    ``ICEFLOE_DATABASE_URL`` is not set."""
    return _settings_and_secret(os.environ if environ is None else environ)[0]


def job_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings of a Spark job's driver (EMR Serverless): :func:`settings_from_environment`,
    refusing to fall back on an embedded Postgres, which there would be an empty database."""
    settings = settings_from_environment(environ)
    if settings.database_url is None:
        raise ConfigError(
            f"no meta store configured: set {SECRET_ARN_VARIABLE} or ICEFLOE_DATABASE_URL"
            " (spark.emr-serverless.driverEnv.* on EMR Serverless)"
        )
    return settings


def _settings_and_secret(env: Mapping[str, str]) -> tuple[Settings, SecretDsn | None]:
    settings, secret = with_database_secret(Settings.from_env(env), env)
    if settings.database_url is None and env.get("AWS_LAMBDA_FUNCTION_NAME"):
        # The embedded Postgres is for one machine; in Lambda it would be a fresh, empty
        # database per container. Say what to set instead.
        raise ConfigError(
            f"no meta store configured: set ICEFLOE_DATABASE_URL or {SECRET_ARN_VARIABLE}"
        )
    return settings, secret


def runtime_from_environment(environ: Mapping[str, str] | None = None) -> Runtime:
    """The container's :class:`Runtime`, built from the environment on the first call.

    Later calls return the same object, whatever ``environ`` they pass. A secret is read once;
    the meta store reads it again only when a new connection fails (a rotated secret).
    """
    global _runtime
    with _lock:
        if _runtime is None:
            settings, secret = _settings_and_secret(os.environ if environ is None else environ)
            _runtime = Runtime.open(settings, max_connections=LAMBDA_MAX_CONNECTIONS, dsn=secret)
            logger.info("runtime opened (warehouse %s)", settings.warehouse.uri)
        return _runtime


def lambda_duckdb_share(
    share: float, environ: Mapping[str, str] | None = None
) -> tuple[str, int] | None:
    """``(memory_limit, threads)`` for DuckDB in this Lambda container: ``share`` of
    ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` and one thread per vCPU (1,769 MB each, at most six);
    ``None`` outside Lambda."""
    env = os.environ if environ is None else environ
    lambda_mb = env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") or ""
    if not (lambda_mb.isdigit() and int(lambda_mb) > 0):
        return None
    megabytes = int(lambda_mb)
    threads = max(1, min(LAMBDA_MAX_VCPUS, round(megabytes / LAMBDA_MB_PER_VCPU)))
    return f"{int(megabytes * share)}MB", threads


def inserter_from_environment() -> Inserter:
    """The container's :class:`Inserter` over :func:`runtime_from_environment`, scratch in the
    temporary directory (``/tmp``, the function's ephemeral storage, in Lambda), DuckDB bounded
    by :data:`INSERT_MEMORY_SHARE` of the function's memory."""
    global _inserter
    runtime = runtime_from_environment()
    with _lock:
        if _inserter is None:
            memory, threads = lambda_duckdb_share(INSERT_MEMORY_SHARE) or (None, None)
            _inserter = Inserter(
                meta=runtime.meta,
                objects=runtime.objects,
                scratch_dir=Path(tempfile.gettempdir()),
                duckdb_threads=threads,
                duckdb_memory_limit=memory,
            )
        return _inserter


def merge_lease_from_environment(environ: Mapping[str, str] | None = None) -> timedelta:
    """``ICEFLOE_MERGE_LEASE_SECONDS`` (default 1800): how long a claim on a merge group holds.

    The orchestrator claims with it and the worker renews with it; it must outlast the worker
    function's timeout, so that a running merge never loses its files to a new claim.
    """
    env = os.environ if environ is None else environ
    value = env.get(MERGE_LEASE_VARIABLE) or None
    if value is None:
        return DEFAULT_LEASE
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{MERGE_LEASE_VARIABLE}: {value!r} is not a positive whole number")
    return timedelta(seconds=int(value))


def merge_limits_from_environment(environ: Mapping[str, str] | None = None) -> MergeLimits:
    """What one merge may use in this container.

    In Lambda the defaults follow ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``: 60% of it for DuckDB and
    one thread per vCPU (1,769 MB each); elsewhere :class:`MergeLimits`' defaults.
    ``ICEFLOE_MERGE_MEMORY_LIMIT`` (e.g. ``2GB``) and ``ICEFLOE_MERGE_THREADS`` override them.
    DuckDB spills under the temporary directory (``/tmp``, the ephemeral storage, in Lambda).
    """
    env = os.environ if environ is None else environ
    defaults = MergeLimits()
    memory, threads = lambda_duckdb_share(MERGE_MEMORY_SHARE, env) or (
        defaults.memory_limit,
        defaults.threads,
    )
    memory = env.get(MERGE_MEMORY_VARIABLE) or memory
    threads_value = env.get(MERGE_THREADS_VARIABLE) or str(threads)
    if not threads_value.isdigit() or int(threads_value) < 1:
        raise ConfigError(f"{MERGE_THREADS_VARIABLE}: {threads_value!r} is not a positive integer")
    # The same rules as a query's limits: refuse a bad value now, not at every merge.
    try:
        QueryLimits(memory_limit=memory, threads=int(threads_value))
    except ConfigError as e:
        raise ConfigError(f"{MERGE_MEMORY_VARIABLE}: {e}") from e
    return MergeLimits(
        memory_limit=memory,
        threads=int(threads_value),
        temp_directory=Path(tempfile.gettempdir()) / "icefloe-merge",
    )


def merge_worker_from_environment() -> MergeWorker:
    """The container's :class:`MergeWorker` over :func:`runtime_from_environment`, its limits
    from :func:`merge_limits_from_environment`, reading S3 through DuckDB's httpfs."""
    global _merge_worker
    runtime = runtime_from_environment()
    with _lock:
        if _merge_worker is None:
            limits = merge_limits_from_environment()
            assert limits.temp_directory is not None
            limits.temp_directory.mkdir(parents=True, exist_ok=True)
            settings = runtime.settings
            _merge_worker = MergeWorker(
                meta=runtime.meta,
                objects=runtime.objects,
                limits=limits,
                lease=merge_lease_from_environment(),
                configure=lambda con: configure_s3_from_settings(con, settings),
            )
            logger.info(
                "merge worker ready (memory %s, %d threads)", limits.memory_limit, limits.threads
            )
        return _merge_worker


def delete_part_runner_from_environment() -> DeletePartRunner:
    """What runs a delete's parts in the merge worker: the same runtime, merge limits and S3
    set-up as merges."""
    runtime = runtime_from_environment()
    limits = merge_limits_from_environment()
    settings = runtime.settings
    return DeletePartRunner(
        meta=runtime.meta,
        objects=runtime.objects,
        limits=QueryLimits(memory_limit=limits.memory_limit, threads=limits.threads),
        configure=lambda con: configure_s3_from_settings(con, settings),
    )


def reset_for_tests() -> None:
    """Close and forget the cached collaborators (tests change the environment between cases)."""
    global _runtime, _inserter, _merge_worker
    with _lock:
        inserter, runtime = _inserter, _runtime
        # The worker holds no resources of its own (a DuckDB connection lives for one merge);
        # closing the runtime closes the meta store it uses.
        _inserter = _runtime = _merge_worker = None
    if inserter is not None:
        inserter.close()
    if runtime is not None:
        runtime.close()
