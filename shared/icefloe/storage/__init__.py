"""Object storage: write-once objects in a local directory or under an S3 prefix.

This package is the only place in the core that talks to S3 objects through boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icefloe.config import CoreSettings, WarehouseLocation
from icefloe.errors import ConfigError
from icefloe.storage.base import (
    MAX_KEY_BYTES,
    AbandonedWrite,
    DeleteResult,
    ObjectInfo,
    ObjectStore,
    discard_uncommitted,
    is_valid_key,
    validate_key,
    validate_prefix,
)
from icefloe.storage.local import LocalObjectStore
from icefloe.storage.s3 import S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "MAX_KEY_BYTES",
    "AbandonedWrite",
    "DeleteResult",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectStore",
    "S3ObjectStore",
    "discard_uncommitted",
    "is_valid_key",
    "object_store_from_settings",
    "open_object_store",
    "validate_key",
    "validate_prefix",
]


def open_object_store(
    location: WarehouseLocation,
    *,
    s3_client: S3Client | None = None,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
) -> ObjectStore:
    """The store of a warehouse location; ``s3_client`` overrides the client built for S3."""
    if location.scheme == "s3":
        return S3ObjectStore(
            bucket=location.bucket,
            prefix=location.prefix,
            client=s3_client,
            endpoint_url=endpoint_url,
            region=region,
        )
    if location.path is None:
        raise ConfigError(f"warehouse location {location!r} has no local path")
    return LocalObjectStore(location.path)


def object_store_from_settings(settings: CoreSettings) -> ObjectStore:
    """The warehouse's store, with the S3 endpoint and region the settings name."""
    return open_object_store(
        settings.warehouse, endpoint_url=settings.s3_endpoint_url, region=settings.aws_region
    )
