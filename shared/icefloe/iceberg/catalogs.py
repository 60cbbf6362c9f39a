"""The Iceberg catalogs icefloe publishes into: pyiceberg's SQL catalog (a SQLite file under
``ICEFLOE_HOME/iceberg`` by default, or any SQLAlchemy URI) and the AWS Glue Data Catalog
(:mod:`icefloe.iceberg.glue`), chosen by :class:`IcebergSettings`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from icefloe.config import CoreSettings
from icefloe.errors import ConfigError, InvalidInputError
from icefloe.settings.parts import IcebergSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


def local_catalog(home: Path, *, warehouse: str | None = None) -> Catalog:
    """The SQL catalog kept under ``home/iceberg`` (SQLite), with metadata files beside it
    (or under ``warehouse``, a file:// or s3:// URI)."""
    root = home / "iceberg"
    root.mkdir(parents=True, exist_ok=True)
    return sql_catalog(f"sqlite:///{root / 'catalog.db'}", warehouse=warehouse or root.as_uri())


def sql_catalog(uri: str, *, warehouse: str) -> Catalog:
    """pyiceberg's SQL catalog at a SQLAlchemy ``uri`` (SQLite, Postgres, ...)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("icefloe", uri=uri, warehouse=warehouse)


def shown_uri(uri: str) -> str:
    """A catalog URI as a message shows it: a password masked."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", uri)


def open_catalog(iceberg: IcebergSettings, core: CoreSettings) -> Catalog:
    """The catalog ``iceberg`` names: Glue (an S3 warehouse only: Glue's readers cannot reach
    local files), a SQL catalog at its URI, or the local one. Metadata files go to its metadata
    location, else beside the local catalog, else under the warehouse's ``iceberg/`` prefix."""
    beside_warehouse = f"{core.warehouse.uri.rstrip('/')}/iceberg"
    if iceberg.catalog == "glue":
        from icefloe.iceberg.glue import glue_catalog

        if core.warehouse.scheme != "s3":
            raise InvalidInputError(
                "the Glue catalog needs an S3 warehouse (ICEFLOE_WAREHOUSE=s3://...): Glue's"
                " readers cannot reach local files"
            )
        return glue_catalog(
            warehouse=iceberg.metadata_location or beside_warehouse,
            region=core.aws_region,
            s3_endpoint_url=core.s3_endpoint_url,
        )
    if iceberg.catalog_uri:
        try:
            return sql_catalog(
                iceberg.catalog_uri, warehouse=iceberg.metadata_location or beside_warehouse
            )
        except ImportError:
            raise
        except Exception as e:  # SQLAlchemy's or its driver's: the URI or the database
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(
                f"ICEFLOE_ICEBERG_CATALOG_URI {shown_uri(iceberg.catalog_uri)!r}: cannot open"
                f" the SQL catalog ({first})"
            ) from e
    return local_catalog(core.home, warehouse=iceberg.metadata_location)


def catalog_key(catalog: Catalog, namespace: str) -> str:
    """How the meta store names one published table's catalog: its name and namespace."""
    return f"{catalog.name}/{namespace}"


__all__ = [
    "IcebergSettings",
    "catalog_key",
    "local_catalog",
    "open_catalog",
    "sql_catalog",
]
