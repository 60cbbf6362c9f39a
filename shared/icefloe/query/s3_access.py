"""DuckDB's access to S3: the offline httpfs extension and an S3 secret, set up before lock-down.

The extension comes from the ``duckdb-extension-httpfs`` wheel (signed, pinned to the duckdb
version); nothing is ever downloaded. Credentials come from the caller or boto3's default chain
(the function's role in Lambda).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import duckdb

from icefloe.config import Settings
from icefloe.duck import string_literal
from icefloe.errors import ConfigError


@dataclass(frozen=True, slots=True)
class S3Credentials:
    key_id: str
    secret: str
    session_token: str | None = None

    def __repr__(self) -> str:  # never print the secret
        return f"S3Credentials(key_id={self.key_id!r}, secret=***)"


def httpfs_extension_path() -> Path:
    """The httpfs extension file shipped for the installed duckdb version."""
    try:
        import duckdb_extension_httpfs
    except ImportError as e:
        raise ConfigError("reading S3 needs the duckdb-extension-httpfs package") from e
    base = Path(duckdb_extension_httpfs.__file__).parent
    path = base / "extensions" / f"v{duckdb.__version__}" / "httpfs.duckdb_extension"
    if not path.exists():
        raise ConfigError(
            f"no httpfs extension for duckdb {duckdb.__version__} in {base}; pin"
            f" duckdb-extension-httpfs=={duckdb.__version__}"
        )
    return path


def default_credentials() -> S3Credentials:
    """Credentials from boto3's default chain (environment, profile, the Lambda role)."""
    import boto3

    found = boto3.Session().get_credentials()
    if found is None:
        raise ConfigError("no AWS credentials found for reading S3")
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        raise ConfigError("incomplete AWS credentials for reading S3")
    return S3Credentials(frozen.access_key, frozen.secret_key, frozen.token)


def configure_s3(
    con: duckdb.DuckDBPyConnection,
    *,
    region: str,
    endpoint_url: str | None = None,
    credentials: S3Credentials | None = None,
) -> None:
    """Load httpfs from the wheel and create the S3 secret DuckDB reads with."""
    con.execute(f"LOAD {string_literal(str(httpfs_extension_path()))}")
    creds = credentials or default_credentials()
    options = [
        "TYPE s3",
        f"KEY_ID {string_literal(creds.key_id)}",
        f"SECRET {string_literal(creds.secret)}",
        f"REGION {string_literal(region)}",
    ]
    if creds.session_token:
        options.append(f"SESSION_TOKEN {string_literal(creds.session_token)}")
    if endpoint_url:
        parsed = urlparse(endpoint_url)
        if not parsed.netloc:
            raise ConfigError(f"S3 endpoint {endpoint_url!r} has no host")
        options += [
            f"ENDPOINT {string_literal(parsed.netloc)}",
            f"USE_SSL {'true' if parsed.scheme == 'https' else 'false'}",
            "URL_STYLE 'path'",
        ]
    # CREATE SECRET takes no prepared parameters; values go through string_literal.
    con.execute(f"CREATE OR REPLACE TEMPORARY SECRET icefloe_s3 ({', '.join(options)})")


def configure_s3_from_settings(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Set up S3 reads for an S3 warehouse; nothing for a local one."""
    if settings.warehouse.scheme != "s3":
        return
    configure_s3(con, region=settings.aws_region, endpoint_url=settings.s3_endpoint_url)
