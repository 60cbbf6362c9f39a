"""The collaborators of a Lambda container, built on first use and kept for its lifetime.

A container serves many invocations one at a time; opening the meta store's pool and the S3
client once per container (not per invocation, and never at import) keeps warm starts cheap.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from icefloe.aws.secrets import database_url_from_secret
from icefloe.config import Settings
from icefloe.errors import ConfigError
from icefloe.ingest.insert import Inserter
from icefloe.runtime import Runtime

logger = logging.getLogger(__name__)

SECRET_ARN_VARIABLE = "ICEFLOE_DATABASE_SECRET_ARN"
# One invocation at a time per container: a small pool, so that many containers stay under
# the database's connection limit.
LAMBDA_MAX_CONNECTIONS = 2

_lock = threading.Lock()
_runtime: Runtime | None = None
_inserter: Inserter | None = None


def settings_from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """:meth:`Settings.from_env`, with the DSN read from ``ICEFLOE_DATABASE_SECRET_ARN`` when
    ``ICEFLOE_DATABASE_URL`` is not set."""
    env = os.environ if environ is None else environ
    settings = Settings.from_env(env)
    secret_arn = env.get(SECRET_ARN_VARIABLE) or None
    if settings.database_url is None and secret_arn is not None:
        url = database_url_from_secret(secret_arn, region=settings.aws_region)
        settings = replace(settings, database_url=url)
    if settings.database_url is None and env.get("AWS_LAMBDA_FUNCTION_NAME"):
        # The embedded Postgres is for one machine; in Lambda it would be a fresh, empty
        # database per container. Say what to set instead.
        raise ConfigError(
            f"no meta store configured: set ICEFLOE_DATABASE_URL or {SECRET_ARN_VARIABLE}"
        )
    return settings


def runtime_from_environment(environ: Mapping[str, str] | None = None) -> Runtime:
    """The container's :class:`Runtime`, built from the environment on the first call.

    Later calls return the same object, whatever ``environ`` they pass.
    """
    global _runtime
    with _lock:
        if _runtime is None:
            settings = settings_from_environment(environ)
            _runtime = Runtime.open(settings, max_connections=LAMBDA_MAX_CONNECTIONS)
            logger.info("runtime opened (warehouse %s)", settings.warehouse.uri)
        return _runtime


def inserter_from_environment() -> Inserter:
    """The container's :class:`Inserter` over :func:`runtime_from_environment`, scratch in the
    temporary directory (``/tmp``, the function's ephemeral storage, in Lambda)."""
    global _inserter
    runtime = runtime_from_environment()
    with _lock:
        if _inserter is None:
            _inserter = Inserter(
                meta=runtime.meta,
                objects=runtime.objects,
                scratch_dir=Path(tempfile.gettempdir()),
            )
        return _inserter


def reset_for_tests() -> None:
    """Close and forget the cached collaborators (tests change the environment between cases)."""
    global _runtime, _inserter
    with _lock:
        inserter, runtime = _inserter, _runtime
        _inserter = _runtime = None
    if inserter is not None:
        inserter.close()
    if runtime is not None:
        runtime.close()
