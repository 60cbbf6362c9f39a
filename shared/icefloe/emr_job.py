"""What the EMR Serverless entry points (``infra/emr/compact_job.py``, ``query_job.py``) share:
exit codes, the key of the document that describes the job and its loading, logging, and the
driver's lake.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from icefloe.errors import ConfigError, IcefloeError, InvalidInputError, ObjectNotFoundError
from icefloe.lake import Lake
from icefloe.settings import IcefloeSettings, load_settings
from icefloe.storage import ObjectStore, object_store_from_settings, validate_key

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


class JobDocument(Protocol):
    """A job's JSON document (a compaction manifest, a query request): it names its job and
    the key it must be stored under."""

    @property
    def job_id(self) -> str: ...

    @property
    def key(self) -> str: ...


Document = TypeVar("Document", bound=JobDocument)


class JobDocumentError(IcefloeError):
    """The job's document cannot be used: missing, not such a document, or not where it says
    (each entry point raises its own kind: ``ManifestError``, ``RequestError``)."""


@dataclass(frozen=True, slots=True)
class JobDocumentKind(Generic[Document]):
    """What an entry point's document is: its name in messages (e.g. "compaction manifest"),
    its parser (raising InvalidInputError), and the error that it cannot be used."""

    name: str
    parse: Callable[[bytes], Document]
    error: type[JobDocumentError] = JobDocumentError


def load_job_document(
    objects: ObjectStore, key: str, *, kind: JobDocumentKind[Document]
) -> Document:
    """The document of ``kind`` stored under ``key``; it must name ``key`` as its own: one
    copied or renamed by hand has its job record and listings elsewhere."""
    try:
        text = objects.get(key)
    except ObjectNotFoundError as e:
        raise kind.error(f"no {kind.name} under {objects.uri(key)}") from e
    try:
        loaded = kind.parse(text)
    except InvalidInputError as e:
        raise kind.error(f"{objects.uri(key)}: {e}") from e
    if loaded.key != key:
        raise kind.error(
            f"{objects.uri(key)} describes job {loaded.job_id!r}, whose {kind.name} key is"
            f" {loaded.key!r}"
        )
    return loaded


def open_job(
    environ: Mapping[str, str] | None,
    kind: JobDocumentKind[Document],
    *,
    key: str,
    max_connections: int,
) -> tuple[Document, Lake]:
    """The job's document and the driver's lake, in the order an entry point checks them: the
    settings, a configured meta store, the document, then the lake. Raises ConfigError or
    ``kind.error`` when the job cannot start (nothing read or written yet)."""
    settings = load_settings(environ)
    check_meta_store_configured(settings)
    loaded = load_job_document(object_store_from_settings(settings.core), key, kind=kind)
    return loaded, job_lake(settings, max_connections=max_connections)
