"""The meta store's DSN from a Secrets Manager secret.

The secret holds either ``{"dsn": "postgresql://..."}`` or the fields RDS writes for a database
secret: ``host``, ``port``, ``username``, ``password``, ``dbname``. Errors name the secret and the
key at fault, never a value: the secret holds a password.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol, cast
from urllib.parse import quote

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from icefloe.config import CoreSettings
from icefloe.errors import ConfigError, MetaStoreUnavailableError

logger = logging.getLogger(__name__)

DEFAULT_PORT = 5432
REQUIRED_RDS_KEYS = ("host", "username", "password")

# Error codes that mean the secret, its policy or its key is wrong: retrying will not help.
_CONFIG_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "AccessDeniedException",
        "AccessDenied",
        "DecryptionFailure",
        "InvalidRequestException",
        "InvalidParameterException",
        "ValidationException",
    }
)


class SecretsClient(Protocol):
    """The one Secrets Manager call this module makes (a boto3 client satisfies it)."""

    def get_secret_value(self, *, SecretId: str) -> Mapping[str, Any]: ...


class SecretDsn:
    """The meta store's DSN from a secret, as a :class:`~icefloe.metastore.DsnSource`: read
    once when built, and read again only when the meta store asks (a connection failed: the
    secret may have been rotated). A failed re-read keeps the DSN it had."""

    def __init__(
        self, secret_arn: str, *, region: str | None = None, client: SecretsClient | None = None
    ) -> None:
        self.secret_arn = secret_arn
        self._client = client or _build_client(_arn_region(secret_arn) or region)
        self._dsn = database_url_from_secret(secret_arn, client=self._client)
        self.reads = 1

    def current(self) -> str:
        return self._dsn

    def refresh(self) -> str:
        try:
            self._dsn = database_url_from_secret(self.secret_arn, client=self._client)
        except (ConfigError, MetaStoreUnavailableError) as e:
            logger.warning("database secret %s not re-read: %s", self.secret_arn, e)
        else:
            self.reads += 1
            logger.info("database secret %s re-read after a failed connection", self.secret_arn)
        return self._dsn


def with_database_secret(
    settings: CoreSettings, *, secret_arn: str | None
) -> tuple[CoreSettings, SecretDsn | None]:
    """``settings`` with the meta store's DSN read from the secret ``secret_arn`` (the
    ``ICEFLOE_DATABASE_SECRET_ARN`` setting), when no ``ICEFLOE_DATABASE_URL`` is set (a DSN given outright wins), and that secret
    as the meta store's :class:`SecretDsn` (``None`` when no secret is read).

    The functions and the command line share it: ``icefloe init`` and ``icefloe table create``
    reach a deployed stack's meta store through the same secret as its functions.
    """
    if settings.database_url is not None or secret_arn is None:
        return settings, None
    source = SecretDsn(secret_arn, region=settings.aws_region)
    return replace(settings, database_url=source.current()), source


def database_url_from_secret(
    secret_arn: str, *, client: SecretsClient | None = None, region: str | None = None
) -> str:
    """Read the secret and return a libpq URL for the meta store.

    ``client`` defaults to a Secrets Manager client for the secret's own region (taken from the
    ARN: a secret can only be read from its region), else ``region``.
    """
    if not secret_arn:
        raise ConfigError("ICEFLOE_DATABASE_SECRET_ARN is empty")
    if client is None:
        client = _build_client(_arn_region(secret_arn) or region)
    fields = _secret_fields(client, secret_arn)
    return dsn_from_fields(fields, secret_name=secret_arn)


def dsn_from_fields(fields: Mapping[str, object], *, secret_name: str) -> str:
    """A libpq URL from a secret's fields: ``dsn`` as is, else one built from RDS fields.

    User name, password and database name are percent-encoded, so any character is safe.
    """
    if "dsn" in fields:
        dsn = fields["dsn"]
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(f"database secret {secret_name}: key 'dsn' is not a non-empty string")
        return dsn.strip()
    missing = [key for key in REQUIRED_RDS_KEYS if not _text(fields.get(key))]
    if missing:
        raise ConfigError(
            f"database secret {secret_name}: missing key {missing[0]!r} (expected 'dsn', or"
            f" the RDS fields {', '.join(REQUIRED_RDS_KEYS)}, port, dbname)"
        )
    host = _text(fields["host"])
    user = quote(_text(fields["username"]), safe="")
    password = quote(_text(fields["password"]), safe="")
    port = _port(fields.get("port", DEFAULT_PORT), secret_name=secret_name)
    dbname = _text(fields.get("dbname"))
    path = f"/{quote(dbname, safe='')}" if dbname else ""  # libpq's default: the user's name
    return f"postgresql://{user}:{password}@{_url_host(host)}:{port}{path}"


def _secret_fields(client: SecretsClient, secret_arn: str) -> Mapping[str, object]:
    try:
        response = client.get_secret_value(SecretId=secret_arn)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in _CONFIG_CODES:
            raise ConfigError(f"database secret {secret_arn}: cannot be read ({code})") from e
        raise MetaStoreUnavailableError(
            f"database secret {secret_arn}: Secrets Manager failed ({code or 'unknown error'})"
        ) from e
    except BotoCoreError as e:
        raise MetaStoreUnavailableError(
            f"database secret {secret_arn}: Secrets Manager unreachable ({type(e).__name__})"
        ) from e
    text = response.get("SecretString")
    if not isinstance(text, str):
        raise ConfigError(f"database secret {secret_arn}: has no SecretString (binary secret?)")
    try:
        fields = json.loads(text)
    except json.JSONDecodeError:
        # ``from None``: the decode error carries the whole document, password included.
        raise ConfigError(f"database secret {secret_arn}: SecretString is not JSON") from None
    if not isinstance(fields, dict):
        raise ConfigError(f"database secret {secret_arn}: SecretString is not a JSON object")
    return cast(dict[str, object], fields)


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def _port(value: object, *, secret_name: str) -> int:
    text = _text(value)
    if text.isdigit() and 0 < int(text) < 65536:
        return int(text)
    raise ConfigError(f"database secret {secret_name}: key 'port' is not a TCP port number")


def _url_host(host: str) -> str:
    if host.startswith("/"):  # a unix socket directory
        return quote(host, safe="")
    if ":" in host and not host.startswith("["):  # an IPv6 address
        return f"[{host}]"
    return host


def _arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[3] if len(parts) > 6 and parts[0] == "arn" and parts[3] else None


def _build_client(region: str | None) -> SecretsClient:
    session = boto3.session.Session()
    config = Config(region_name=region, retries={"mode": "standard"})
    return cast(SecretsClient, session.client("secretsmanager", region_name=region, config=config))
