"""What the EMR Serverless entry points (``infra/emr/compact_job.py``, ``query_job.py``) share:
exit codes, the key of the document that describes the job, logging, and the driver's lake.
"""

from __future__ import annotations

import argparse
import logging
import sys

from icefloe.errors import ConfigError, InvalidInputError
from icefloe.lake import Lake
from icefloe.settings import IcefloeSettings
from icefloe.storage import validate_key

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_START = 2  # argparse's own status for usage errors


def document_key(value: str, *, document: str) -> str:
    """An argparse type: ``value`` as the warehouse key of a job's JSON ``document`` (a
    manifest, a query request)."""
    if "://" in value:
        raise argparse.ArgumentTypeError(
            f"{value!r} is a URI; give the key relative to ICEFLOE_WAREHOUSE"
        )
    try:
        key = validate_key(value)
    except InvalidInputError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    if not key.endswith(".json"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a {document} key (<table>/jobs/<id>.json)"
        )
    return key


def start_job_logging() -> None:
    """Timestamped lines on stderr, which EMR Serverless keeps with the job's logs."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


EMBEDDED_REFUSED = "spark.emr-serverless.driverEnv.* on EMR Serverless"


def check_meta_store_configured(settings: IcefloeSettings) -> None:
    """ConfigError unless a meta store is configured (a URL or a secret): checked before the
    job's document is read, so that a job with neither says so first."""
    if settings.core.database_url is None and settings.database_secret_arn is None:
        raise ConfigError(
            "no meta store configured: set ICEFLOE_DATABASE_URL or ICEFLOE_DATABASE_SECRET_ARN"
            f" ({EMBEDDED_REFUSED})"
        )


def job_lake(settings: IcefloeSettings, *, max_connections: int) -> Lake:
    """The driver's lake, the DSN from the secret; an embedded Postgres, which there would be
    an empty database, is refused."""
    return Lake.open(settings, max_connections=max_connections, embedded_refused=EMBEDDED_REFUSED)
