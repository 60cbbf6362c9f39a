"""S3 errors become icefloe errors by code, never by message (botocore's Stubber, no network)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from icefloe.errors import (
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from icefloe.storage import S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def _client(**config: Any) -> S3Client:
    return boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config),
    )


@pytest.fixture
def stubbed() -> Iterator[tuple[S3ObjectStore, Stubber]]:
    client = _client()
    with Stubber(client) as stubber:
        yield S3ObjectStore(bucket="icefloe-bucket", prefix="wh", client=client), stubber
        stubber.assert_no_pending_responses()


def test_delete_many_tries_every_batch_then_names_the_failed_keys(
    stubbed: tuple[S3ObjectStore, Stubber],
) -> None:
    store, stubber = stubbed
    denied = {"Key": "wh/k/0007", "Code": "AccessDenied", "Message": "denied"}
    stubber.add_response("delete_objects", {"Errors": [denied]})
    stubber.add_response("delete_objects", {})
    stubber.add_response("delete_objects", {"Errors": [{**denied, "Key": "wh/k/2000"}]})

    with pytest.raises(StorageError, match=r"2 of 2001") as raised:
        store.delete_many(f"k/{i:04d}" for i in range(2001))

    assert "'k/0007' (AccessDenied)" in str(raised.value)
    assert "'k/2000' (AccessDenied)" in str(raised.value)


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, ObjectNotFoundError),
        ("AccessDenied", 403, StorageError),
        ("NoSuchBucket", 404, StorageError),
        ("InternalError", 500, StorageError),
    ],
)
def test_get_translates_by_code(
    stubbed: tuple[S3ObjectStore, Stubber], code: str, status: int, expected: type[Exception]
) -> None:
    store, stubber = stubbed
    stubber.add_client_error(
        "get_object",
        service_error_code=code,
        service_message="The specified key does not exist.",  # misleading on purpose
        http_status_code=status,
    )

    with pytest.raises(expected) as raised:
        store.get("t/a")

    assert type(raised.value) is expected  # not a subclass picked up by accident
    assert raised.value.__cause__ is not None


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("PreconditionFailed", 412, ObjectExistsError),
        ("ConditionalRequestConflict", 409, StorageError),
        ("SlowDown", 503, StorageError),
    ],
)
def test_put_translates_by_code(
    stubbed: tuple[S3ObjectStore, Stubber], code: str, status: int, expected: type[Exception]
) -> None:
    store, stubber = stubbed
    stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)

    with pytest.raises(expected):
        store.put("t/a", b"1")


def test_head_is_none_only_for_not_found(stubbed: tuple[S3ObjectStore, Stubber]) -> None:
    store, stubber = stubbed
    stubber.add_client_error("head_object", service_error_code="404", http_status_code=404)
    stubber.add_client_error("head_object", service_error_code="403", http_status_code=403)

    assert store.head("t/a") is None
    with pytest.raises(StorageError):
        store.head("t/a")


def test_an_unsatisfiable_range_is_empty(stubbed: tuple[S3ObjectStore, Stubber]) -> None:
    store, stubber = stubbed
    stubber.add_client_error("get_object", service_error_code="InvalidRange", http_status_code=416)

    assert store.get_range("t/a", start=100, length=5) == b""


def test_a_connection_failure_is_a_storage_error() -> None:
    client = _client(retries={"total_max_attempts": 1})

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://s3.example")

    client.meta.events.register("before-send.s3.GetObject", refuse)
    store = S3ObjectStore(bucket="icefloe-bucket", client=client)

    with pytest.raises(StorageError):
        store.get("t/a")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket": ""},
        {"bucket": "icefloe-bucket", "prefix": "a//b"},
        {"bucket": "icefloe-bucket", "multipart_part_size": 1024},
    ],
)
def test_the_constructor_refuses_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        S3ObjectStore(client=_client(), **kwargs)


def test_a_key_too_long_with_the_prefix_is_refused() -> None:
    store = S3ObjectStore(bucket="icefloe-bucket", prefix="p" * 100, client=_client())

    with pytest.raises(InvalidInputError):
        store.uri("k" * 1000)
