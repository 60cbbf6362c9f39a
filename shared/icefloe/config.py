"""The core's configuration: where the meta store and the data live. One immutable object,
built once and injected.

:mod:`icefloe.settings` reads it from the environment, with the rest of icefloe's settings;
nothing here reads the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from icefloe.errors import ConfigError

DEFAULT_HOME = ".icefloe"
DEFAULT_SCHEMA = "icefloe"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class WarehouseLocation:
    """Where data objects live: a local directory or an S3 bucket and key prefix."""

    scheme: Literal["file", "s3"]
    bucket: str = ""
    prefix: str = ""
    path: Path | None = None

    @classmethod
    def parse(cls, value: str) -> WarehouseLocation:
        """Parse ``s3://bucket/prefix`` or a local directory path (made absolute)."""
        if value.startswith("s3://"):
            bucket, _, prefix = value[len("s3://") :].partition("/")
            if not _BUCKET_NAME.match(bucket):
                raise ConfigError(f"invalid S3 bucket name {bucket!r}")
            prefix = prefix.strip("/")
            if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
                raise ConfigError(f"invalid S3 prefix {prefix!r}")
            return cls(scheme="s3", bucket=bucket, prefix=prefix)
        if "://" in value:
            raise ConfigError(f"unsupported scheme in {value!r} (use s3:// or a path)")
        if not value:
            raise ConfigError("empty path")
        return cls(scheme="file", path=Path(value).expanduser().resolve())

    @property
    def uri(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        assert self.path is not None
        return str(self.path)


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """Where the meta store and the data live: the core of icefloe's settings
    (``IcefloeSettings.core``), all that the meta store and the object store are built from.

    ``database_url`` is ``None`` for the embedded Postgres under ``home``.
    """

    home: Path
    warehouse: WarehouseLocation
    database_url: str | None = None
    database_schema: str = DEFAULT_SCHEMA
    s3_endpoint_url: str | None = None
    aws_region: str = "us-east-1"
    # Where large query results go (the query function may write only there).
    results: WarehouseLocation | None = None
    # The role a tenant's query assumes, narrowed to the tenant's objects (S3 warehouses).
    tenant_read_role_arn: str | None = None

    @property
    def results_location(self) -> WarehouseLocation:
        """``ICEFLOE_RESULTS``, else ``results/`` beside the warehouse prefix (S3) or under
        ``ICEFLOE_HOME`` (local)."""
        if self.results is not None:
            return self.results
        if self.warehouse.scheme == "s3":
            return WarehouseLocation(scheme="s3", bucket=self.warehouse.bucket, prefix="results")
        return WarehouseLocation(scheme="file", path=self.home / "results")

    def __post_init__(self) -> None:
        if not _SCHEMA_NAME.match(self.database_schema):
            raise ConfigError(
                f"ICEFLOE_DATABASE_SCHEMA: {self.database_schema!r} is not a plain lower-case identifier"
            )

    @property
    def embedded_database_dir(self) -> Path:
        return self.home / "postgres"
