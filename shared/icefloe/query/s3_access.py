"""Access to S3 for DuckDB (the offline httpfs extension and an S3 secret) and for pyarrow.

The extension comes from the ``duckdb-extension-httpfs`` wheel (signed, pinned to the duckdb
version); nothing is ever downloaded. Credentials come from the caller or boto3's default chain
(the function's role in Lambda). Call :func:`configure_s3` before the sandbox locks the
connection down: once ``enable_external_access`` is off, DuckDB refuses to load extensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import duckdb
from pyarrow import fs

from icefloe.config import CoreSettings
from icefloe.errors import ConfigError

SECRET_NAME = "icefloe_s3"


@dataclass(frozen=True, slots=True)
class S3Credentials:
    """An access key pair, with the session token of temporary credentials (a role's)."""

    key_id: str
    secret: str
    session_token: str | None = None

    def __repr__(self) -> str:  # never print the secret or the token
        return f"S3Credentials(key_id={self.key_id!r}, secret=***)"


def httpfs_extension_path() -> Path:
    """The httpfs extension file shipped for the installed duckdb version."""
    try:
        import duckdb_extension_httpfs
    except ImportError as e:
        raise ConfigError("reading S3 needs the duckdb-extension-httpfs package") from e
    base = Path(duckdb_extension_httpfs.__file__).parent
    path = base / "extensions" / f"v{duckdb.__version__}" / "httpfs.duckdb_extension"
    if not path.is_file():
        raise ConfigError(
            f"no httpfs extension for duckdb {duckdb.__version__} in {base}; pin"
            f" duckdb-extension-httpfs=={duckdb.__version__}"
        )
    return path


def default_credentials() -> S3Credentials:
    """Credentials from boto3's default chain (environment, profile, the Lambda role), frozen:
    a role's temporary credentials are copied as they are now and expire with the role session."""
    import boto3

    found = boto3.Session().get_credentials()
    if found is None:
        raise ConfigError("no AWS credentials found for reading S3")
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        raise ConfigError("incomplete AWS credentials for reading S3")
    return S3Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


def configure_s3(
    con: duckdb.DuckDBPyConnection,
    *,
    region: str,
    endpoint_url: str | None = None,
    credentials: S3Credentials | None = None,
) -> None:
    """Load httpfs from the wheel and create the S3 secret DuckDB reads with.

    Must run before the connection is locked down (DuckDB refuses LOAD after that); the secret
    stays usable afterwards, and ``allowed_paths`` still limits which objects can be read.
    """
    endpoint = _endpoint(endpoint_url) if endpoint_url else None
    con.execute(f"LOAD {_sql_string(str(httpfs_extension_path()))}")
    creds = credentials if credentials is not None else default_credentials()
    options = [
        "TYPE s3",
        f"KEY_ID {_sql_string(creds.key_id)}",
        f"SECRET {_sql_string(creds.secret)}",
        f"REGION {_sql_string(region)}",
    ]
    if creds.session_token:
        options.append(f"SESSION_TOKEN {_sql_string(creds.session_token)}")
    if endpoint is not None:
        scheme, host = endpoint
        options += [
            f"ENDPOINT {_sql_string(host)}",
            f"USE_SSL {'true' if scheme == 'https' else 'false'}",
            "URL_STYLE 'path'",
        ]
    con.execute(f"CREATE OR REPLACE TEMPORARY SECRET {SECRET_NAME} ({', '.join(options)})")


def assumed_credentials(
    *,
    role_arn: str,
    session_policy: str,
    session_name: str,
    region: str,
    endpoint_url: str | None = None,
    duration_s: int = 3600,
) -> S3Credentials:
    """Temporary credentials of ``role_arn`` narrowed by ``session_policy`` (STS AssumeRole with
    the caller's default-chain credentials; at ``endpoint_url`` when one is set, as for a local
    S3 stand-in)."""
    import boto3

    sts = boto3.client("sts", region_name=region, endpoint_url=endpoint_url)
    answer = sts.assume_role(
        RoleArn=role_arn,
        RoleSessionName=session_name,
        Policy=session_policy,
        DurationSeconds=duration_s,
    )
    creds = answer["Credentials"]
    return S3Credentials(creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"])


@dataclass(frozen=True, slots=True)
class S3Endpoint:
    """Where DuckDB reads S3. Credentials come from the default chain where it runs or, with
    ``role_arn``, from assuming that role with ``session_policy`` (a tenant's read session,
    see :mod:`icefloe.query.tenant_access`), each time a database is set up."""

    region: str
    endpoint_url: str | None = None
    role_arn: str | None = None
    session_policy: str | None = None
    session_name: str | None = None

    def credentials(self) -> S3Credentials:
        if self.role_arn is None:
            return default_credentials()
        if self.session_policy is None or self.session_name is None:
            raise ConfigError("an assumed-role S3 endpoint needs a session policy and name")
        return assumed_credentials(
            role_arn=self.role_arn,
            session_policy=self.session_policy,
            session_name=self.session_name,
            region=self.region,
            endpoint_url=self.endpoint_url,
        )

    @classmethod
    def from_settings(cls, settings: CoreSettings) -> S3Endpoint | None:
        """The warehouse's endpoint; None for a local warehouse."""
        if settings.warehouse.scheme != "s3":
            return None
        return cls(region=settings.aws_region, endpoint_url=settings.s3_endpoint_url)

    def configure(self, con: duckdb.DuckDBPyConnection) -> None:
        configure_s3(
            con,
            region=self.region,
            endpoint_url=self.endpoint_url,
            credentials=self.credentials(),
        )


def configure_s3_from_settings(con: duckdb.DuckDBPyConnection, settings: CoreSettings) -> None:
    """Set up S3 reads for an S3 warehouse; nothing for a local one."""
    if settings.warehouse.scheme != "s3":
        return
    configure_s3(con, region=settings.aws_region, endpoint_url=settings.s3_endpoint_url)


def pyarrow_s3_filesystem(
    *, region: str, endpoint_url: str | None = None, credentials: S3Credentials | None = None
) -> fs.S3FileSystem:
    """A pyarrow S3 filesystem with the same credentials DuckDB would get.

    pyarrow ignores ``AWS_ENDPOINT_URL``: an endpoint goes in as ``endpoint_override`` (host and
    port) and ``scheme``, and is addressed path-style.
    """
    creds = credentials if credentials is not None else default_credentials()
    if endpoint_url is None:
        return fs.S3FileSystem(
            access_key=creds.key_id,
            secret_key=creds.secret,
            session_token=creds.session_token,
            region=region,
        )
    scheme, host = _endpoint(endpoint_url)
    return fs.S3FileSystem(
        access_key=creds.key_id,
        secret_key=creds.secret,
        session_token=creds.session_token,
        region=region,
        endpoint_override=host,
        scheme=scheme,
        force_virtual_addressing=False,
    )


def _endpoint(url: str) -> tuple[Literal["http", "https"], str]:
    """``(scheme, host:port)`` of an ``http(s)://host[:port]`` endpoint; anything more (a path,
    a user name, a query) is refused rather than silently dropped."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"S3 endpoint {url!r} must look like http(s)://host[:port]")
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query:
        raise ConfigError(f"S3 endpoint {url!r} must be only a scheme, host and port")
    scheme: Literal["http", "https"] = "https" if parts.scheme == "https" else "http"
    return scheme, parts.netloc


def _sql_string(value: str) -> str:
    """A single-quoted SQL literal for a value going into ``LOAD`` or ``CREATE SECRET``.

    Neither statement takes prepared parameters, so values are inlined: a quote is doubled (it
    stays part of the value) and control characters are refused. The error never echoes the
    value, which may be a secret.
    """
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ConfigError("an S3 setting or credential contains a control character")
    return "'" + value.replace("'", "''") + "'"
