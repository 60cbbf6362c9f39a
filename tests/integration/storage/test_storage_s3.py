"""What only the S3 backend does: conditional writes on the wire, batching, multipart, HTTP."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from icefloe.config import CoreSettings, WarehouseLocation
from icefloe.errors import ObjectExistsError, StorageError
from icefloe.storage import S3ObjectStore, object_store_from_settings, open_object_store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration

BUCKET = "icefloe-test-warehouse"  # created by conftest's s3_client
MiB = 1024 * 1024


def _record(client: S3Client, operation: str) -> list[dict[str, Any]]:
    """Collect the serialized requests the client sends for ``operation``."""
    requests: list[dict[str, Any]] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        requests.append(params)

    client.meta.events.register(f"before-call.s3.{operation}", hook)
    return requests


def test_put_sends_if_none_match_and_s3_refuses_an_existing_key(
    s3_client: S3Client, s3_store: S3ObjectStore
) -> None:
    # given an object another writer put directly
    s3_client.put_object(Bucket=BUCKET, Key="wh/t/a", Body=b"theirs")
    puts = _record(s3_client, "PutObject")

    # when / then: S3 (moto honours If-None-Match: *, answering 412) refuses the write
    with pytest.raises(ObjectExistsError):
        s3_store.put("t/a", b"ours")

    assert [p["headers"]["If-None-Match"] for p in puts] == ["*"]
    assert s3_store.get("t/a") == b"theirs"


def test_a_put_is_one_request(s3_client: S3Client, s3_store: S3ObjectStore, tmp_path: Path) -> None:
    # An insert's latency is its requests: a write is a PutObject, with no HEAD after it
    puts, heads = _record(s3_client, "PutObject"), _record(s3_client, "HeadObject")
    source = tmp_path / "f.parquet"
    source.write_bytes(b"x" * 100)

    s3_store.put("t/a.parquet", b"data")
    s3_store.put_file("t/f.parquet", source)

    assert [p["url_path"].rsplit("/", 1)[-1] for p in puts] == ["a.parquet", "f.parquet"]
    assert heads == []


def test_delete_many_sends_batches_of_at_most_1000_keys(
    s3_client: S3Client, s3_store: S3ObjectStore
) -> None:
    s3_store.put("t/first", b"1")
    deletes = _record(s3_client, "DeleteObjects")

    result = s3_store.delete_many(["t/first", *(f"t/missing/{i}" for i in range(2499))])

    assert result.deleted == 2500
    assert [len(d["body"].split(b"<Key>")) - 1 for d in deletes] == [1000, 1000, 500]
    assert s3_store.head("t/first") is None


def test_the_store_sees_and_deletes_only_under_its_prefix(
    s3_client: S3Client, s3_store: S3ObjectStore
) -> None:
    for key in ("wh/t/a", "whx/t/a", "other/t/a", "t/a"):
        s3_client.put_object(Bucket=BUCKET, Key=key, Body=b".")

    assert [i.key for i in s3_store.list_prefix("")] == ["t/a"]
    s3_store.delete_many(["t/a"])

    remaining = s3_client.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert sorted(o["Key"] for o in remaining) == ["other/t/a", "t/a", "whx/t/a"]


def test_list_prefix_skips_names_that_are_not_valid_keys(
    s3_client: S3Client, s3_store: S3ObjectStore
) -> None:
    for key in ("wh/t/folder/", "wh/t/a//b", "wh/t/ok"):
        s3_client.put_object(Bucket=BUCKET, Key=key, Body=b".")

    assert [i.key for i in s3_store.list_prefix("t/")] == ["t/ok"]


def test_list_prefix_follows_pagination(s3_client: S3Client, s3_store: S3ObjectStore) -> None:
    keys = [f"wh/t/{i:04d}" for i in range(1001)]  # moto, like S3, pages at 1000 keys
    for key in keys:
        s3_client.put_object(Bucket=BUCKET, Key=key, Body=b".")
    lists = _record(s3_client, "ListObjectsV2")

    listed = [i.key for i in s3_store.list_prefix("t/")]

    assert listed == [k.removeprefix("wh/") for k in keys]
    assert len(lists) == 2


@pytest.fixture
def multipart_store(s3_client: S3Client) -> S3ObjectStore:
    return S3ObjectStore(
        bucket=BUCKET,
        prefix="wh",
        client=s3_client,
        multipart_threshold=5 * MiB,
        multipart_part_size=5 * MiB,
    )


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.parquet"
    path.write_bytes(bytes(range(256)) * (11 * MiB // 256) + b"tail")
    return path


def test_put_file_above_the_threshold_uploads_parts(
    s3_client: S3Client, multipart_store: S3ObjectStore, big_file: Path
) -> None:
    parts = _record(s3_client, "UploadPart")
    completes = _record(s3_client, "CompleteMultipartUpload")

    multipart_store.put_file("t/big.parquet", big_file)

    assert len(parts) == 3  # 5 MiB + 5 MiB + the rest
    assert [c["headers"]["If-None-Match"] for c in completes] == ["*"]
    info = multipart_store.head("t/big.parquet")
    assert info is not None and info.size == big_file.stat().st_size
    assert multipart_store.get("t/big.parquet") == big_file.read_bytes()
    with pytest.raises(ObjectExistsError):
        multipart_store.put_file("t/big.parquet", big_file)


def test_multipart_put_file_loses_a_race_without_overwriting(
    s3_client: S3Client, multipart_store: S3ObjectStore, big_file: Path
) -> None:
    # given another writer that puts the same key while our parts are uploading
    rival = boto3.client("s3", region_name="us-east-1")

    def rival_writes(**_: Any) -> None:
        rival.put_object(Bucket=BUCKET, Key="wh/t/big.parquet", Body=b"rival")

    s3_client.meta.events.register("before-call.s3.CompleteMultipartUpload", rival_writes)

    # when / then: the condition on CompleteMultipartUpload refuses, and the upload is aborted
    with pytest.raises(ObjectExistsError):
        multipart_store.put_file("t/big.parquet", big_file)

    assert multipart_store.get("t/big.parquet") == b"rival"
    assert s3_client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_a_missing_bucket_is_a_storage_error_not_a_missing_object(s3_client: S3Client) -> None:
    store = S3ObjectStore(bucket="no-such-bucket-here", client=s3_client)

    with pytest.raises(StorageError):
        store.put("t/a", b"1")
    with pytest.raises(StorageError):
        store.get("t/a")
    with pytest.raises(StorageError):
        list(store.list_prefix(""))


def test_upload_file_cannot_carry_if_none_match(s3_client: S3Client, tmp_path: Path) -> None:
    """Why put_file does its own multipart upload: s3transfer refuses the condition."""
    source = tmp_path / "f"
    source.write_bytes(b"x")

    with pytest.raises(ValueError, match="IfNoneMatch"):
        s3_client.upload_file(str(source), BUCKET, "wh/f", ExtraArgs={"IfNoneMatch": "*"})


@pytest.fixture
def moto_server(aws_credentials: None) -> Any:
    """moto as a real HTTP server on a free port (what DuckDB and pyarrow need too)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_endpoint_url_reaches_an_s3_compatible_server_over_http(
    moto_server: str, tmp_path: Path
) -> None:
    # given a bucket on the server, and settings that name its endpoint
    admin = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    admin.create_bucket(Bucket="icefloe-http")
    settings = CoreSettings(
        home=tmp_path,
        warehouse=WarehouseLocation.parse("s3://icefloe-http/wh"),
        s3_endpoint_url=moto_server,
    )

    # when the store builds its own client from the settings
    store = object_store_from_settings(settings)
    assert isinstance(store, S3ObjectStore)
    store.put("t/a", b"0123456789")

    # then it talks to that server, with the same contract as everywhere
    assert store.client.meta.endpoint_url == moto_server
    assert admin.get_object(Bucket="icefloe-http", Key="wh/t/a")["Body"].read() == b"0123456789"
    assert store.get_range("t/a", start=8, length=5) == b"89"
    with pytest.raises(ObjectExistsError):
        store.put("t/a", b"again")
    assert [i.key for i in store.list_prefix("t/")] == ["t/a"]
    assert store.delete_many(["t/a"]).deleted == 1
    assert store.head("t/a") is None

    # and open_object_store takes the same path
    same = open_object_store(settings.warehouse, endpoint_url=moto_server)
    assert same.root_uri == "s3://icefloe-http/wh"


def test_an_upload_a_killed_writer_never_completed_is_found_once_old_and_aborted(
    s3_store: S3ObjectStore, s3_client: S3Client
) -> None:
    # Given a multipart upload started (one part stored) by a writer that then died
    s3_key = "wh/events/data/day=2026-03-01/killed.parquet"
    upload = s3_client.create_multipart_upload(Bucket=BUCKET, Key=s3_key)["UploadId"]
    s3_client.upload_part(
        Bucket=BUCKET, Key=s3_key, UploadId=upload, PartNumber=1, Body=b"x" * 5 * 2**20
    )
    # and one under another table's prefix
    other = s3_client.create_multipart_upload(Bucket=BUCKET, Key="wh/clicks/data/x.parquet")
    # (moto dates every upload 2010-11-10: the cut-offs are taken from what it reports)
    (listed,) = [
        u for u in s3_client.list_multipart_uploads(Bucket=BUCKET)["Uploads"] if u["Key"] == s3_key
    ]
    started = listed["Initiated"].astimezone(UTC)
    # Then it is not reported while it may still be in flight
    before = started - timedelta(hours=1)
    assert s3_store.abandoned_writes("events/data/", started_before=before) == []
    # And once older than the cut-off it is, under its table's prefix only, and is aborted
    after = started + timedelta(hours=1)
    (found,) = s3_store.abandoned_writes("events/data/", started_before=after)
    assert (found.key, found.handle) == ("events/data/day=2026-03-01/killed.parquet", upload)
    assert s3_store.discard_abandoned_writes([found]) == 1
    remaining = s3_client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
    assert [u["UploadId"] for u in remaining] == [other["UploadId"]]
    # Discarding it again (another janitor got there first) is fine
    assert s3_store.discard_abandoned_writes([found]) == 1
