"""Fixtures of the storage suites: one `store` per backend, S3 faked by moto."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from moto import mock_aws

from icefloe.storage import LocalObjectStore, ObjectStore, S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BUCKET = "icefloe-test-warehouse"
PREFIX = "wh/"


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials, and no profile or endpoint from the developer's machine."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")


@pytest.fixture
def s3_client(aws_credentials: None) -> Iterator[S3Client]:
    """A client inside moto's mock_aws, with the test bucket created."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def s3_store(s3_client: S3Client) -> S3ObjectStore:
    return S3ObjectStore(bucket=BUCKET, prefix=PREFIX, client=s3_client)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Every backend in turn: the behaviour suite must hold for all of them."""
    if request.param == "local":
        return LocalObjectStore(tmp_path / "warehouse")
    s3_store: S3ObjectStore = request.getfixturevalue("s3_store")
    return s3_store
