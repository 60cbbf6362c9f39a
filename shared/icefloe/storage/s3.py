"""Object store on an S3 bucket under a key prefix: the only user of boto3 for S3 objects.

Every write is conditional (``If-None-Match: *``), so S3 itself refuses to overwrite an object.
botocore errors are translated by error code, never by message text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from icefloe.errors import (
    IcefloeError,
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from icefloe.storage.base import (
    MAX_KEY_BYTES,
    AbandonedWrite,
    DeleteResult,
    ObjectInfo,
    ObjectStore,
    check_range,
    is_valid_key,
    validate_key,
    validate_prefix,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
DELETE_BATCH = 1000  # DeleteObjects accepts at most 1000 keys per request
MAX_PARTS = 10_000  # a multipart upload has at most 10 000 parts
MIN_PART_SIZE = 5 * MiB  # every part but the last must be at least 5 MiB

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404"})
_EXISTS = frozenset({"PreconditionFailed", "412"})
_BAD_RANGE = frozenset({"InvalidRange", "416"})


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix/``.

    ``put_file`` sends files up to ``multipart_threshold`` bytes as one streamed PutObject, and
    larger ones as a multipart upload whose CompleteMultipartUpload carries the condition
    (boto3's ``upload_file`` cannot: s3transfer rejects ``IfNoneMatch`` in ``ExtraArgs``).
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: S3Client | None = None,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        multipart_threshold: int = 100 * MiB,
        multipart_part_size: int = 16 * MiB,
    ) -> None:
        if not bucket:
            raise InvalidInputError("S3 bucket name must not be empty")
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        if multipart_part_size < MIN_PART_SIZE:
            raise InvalidInputError(f"multipart_part_size must be at least {MIN_PART_SIZE} bytes")
        self._bucket = bucket
        self._prefix = prefix
        self._key_root = f"{prefix}/" if prefix else ""
        self._multipart_threshold = multipart_threshold
        self._part_size = multipart_part_size
        self._client = client if client is not None else _build_client(endpoint_url, region)

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def client(self) -> S3Client:
        return self._client

    @property
    def root_uri(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.root_uri!r})"

    def uri(self, key: str) -> str:
        return f"s3://{self._bucket}/{self._s3_key(key)}"

    def put(self, key: str, data: bytes) -> None:
        s3_key = self._s3_key(key)
        with self._errors("put", s3_key):
            self._client.put_object(Bucket=self._bucket, Key=s3_key, Body=data, IfNoneMatch="*")

    def put_file(self, key: str, path: Path) -> None:
        s3_key = self._s3_key(key)
        try:
            size = Path(path).stat().st_size
        except OSError as e:
            raise InvalidInputError(f"cannot read source file {str(path)!r}: {e}") from e
        if size > self._multipart_threshold:
            self._put_multipart(key, s3_key, Path(path), size)
        else:
            with open(path, "rb") as body, self._errors("put", s3_key):
                self._client.put_object(Bucket=self._bucket, Key=s3_key, Body=body, IfNoneMatch="*")

    def copy(self, source: str, key: str) -> ObjectInfo:
        # One CopyObject: objects up to 5 GB, far above any data file's target size. The
        # condition makes it atomic where S3 honours it on copies; the look first keeps the
        # promise where it does not (moto): copies go to fresh unique names, never raced.
        source_key, s3_key = self._s3_key(source), self._s3_key(key)
        if self.head(key) is not None:
            raise ObjectExistsError(f"an object exists under key {key!r}")
        with self._errors("copy", source_key):
            self._client.copy_object(
                Bucket=self._bucket,
                Key=s3_key,
                CopySource={"Bucket": self._bucket, "Key": source_key},
                IfNoneMatch="*",
            )
        return self._written(key)

    def get(self, key: str) -> bytes:
        s3_key = self._s3_key(key)
        with self._errors("get", s3_key):
            response = self._client.get_object(Bucket=self._bucket, Key=s3_key)
            return response["Body"].read()

    def get_range(self, key: str, *, start: int, length: int) -> bytes:
        s3_key = self._s3_key(key)
        check_range(start, length)
        with self._errors("get", s3_key):
            try:
                response = self._client.get_object(
                    Bucket=self._bucket, Key=s3_key, Range=f"bytes={start}-{start + length - 1}"
                )
            except ClientError as e:
                if _code(e) in _BAD_RANGE:
                    return b""  # start at or past the end (S3 answers 416 only if the key exists)
                raise
            return response["Body"].read()

    def head(self, key: str) -> ObjectInfo | None:
        s3_key = self._s3_key(key)
        with self._errors("head", s3_key):
            try:
                response = self._client.head_object(Bucket=self._bucket, Key=s3_key)
            except ClientError as e:
                if _code(e) in _NOT_FOUND:
                    return None
                raise
        return ObjectInfo(
            key=key, size=response["ContentLength"], last_modified=_utc(response["LastModified"])
        )

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        distinct = list(dict.fromkeys(self._s3_key(key) for key in keys))
        failures: list[str] = []
        for offset in range(0, len(distinct), DELETE_BATCH):
            batch = distinct[offset : offset + DELETE_BATCH]
            with self._errors("delete", batch[0]):
                response = self._client.delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            for error in response.get("Errors", []):
                key = self._relative(error.get("Key", "?"))
                failures.append(f"{key!r} ({error.get('Code', '?')})")
        if failures:
            raise StorageError(
                f"could not delete {len(failures)} of {len(distinct)} objects, "
                f"first: {', '.join(failures[:5])}"
            )
        return DeleteResult(deleted=len(distinct))

    def download_url(self, key: str, *, expires_s: int) -> str:
        s3_key = self._s3_key(key)
        with self._errors("presign", s3_key):
            return str(
                self.client.generate_presigned_url(
                    "get_object",
                    Params={"Bucket": self.bucket, "Key": s3_key},
                    ExpiresIn=expires_s,
                )
            )

    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        return self._list(prefix)

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        s3_prefix = self._key_root + prefix
        with self._errors("list", s3_prefix):
            for page in paginator.paginate(Bucket=self._bucket, Prefix=s3_prefix):
                for item in page.get("Contents", []):
                    key = self._relative(item["Key"])
                    if not is_valid_key(key):
                        logger.debug("skipping object whose name is not a valid key: %r", key)
                        continue
                    yield ObjectInfo(
                        key=key, size=item["Size"], last_modified=_utc(item["LastModified"])
                    )

    def abandoned_writes(self, prefix: str, *, started_before: datetime) -> list[AbandonedWrite]:
        """Multipart uploads under ``prefix`` that were started and never completed nor aborted
        (a writer killed mid-upload; its parts are stored and billed until aborted)."""
        validate_prefix(prefix)
        s3_prefix = self._key_root + prefix
        found = []
        paginator = self._client.get_paginator("list_multipart_uploads")
        with self._errors("list uploads", s3_prefix):
            for page in paginator.paginate(Bucket=self._bucket, Prefix=s3_prefix):
                for upload in page.get("Uploads", []):
                    started = _utc(upload["Initiated"])
                    if started < started_before:
                        found.append(
                            AbandonedWrite(
                                key=self._relative(upload["Key"]),
                                started=started,
                                size=0,
                                handle=upload["UploadId"],
                            )
                        )
        return sorted(found, key=lambda w: (w.key, w.handle))

    def discard_abandoned_writes(self, writes: Iterable[AbandonedWrite]) -> int:
        count = 0
        for write in writes:
            s3_key = self._s3_key(write.key)
            with self._errors("abort upload", s3_key):
                try:
                    self._client.abort_multipart_upload(
                        Bucket=self._bucket, Key=s3_key, UploadId=write.handle
                    )
                except ClientError as e:
                    if e.response.get("Error", {}).get("Code") != "NoSuchUpload":
                        raise
            count += 1
        return count

    @property
    def max_key_bytes(self) -> int:
        return MAX_KEY_BYTES - len(self._key_root.encode("utf-8"))

    def _s3_key(self, key: str) -> str:
        s3_key = self._key_root + validate_key(key)
        if len(s3_key.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidInputError(f"object key {key!r}: with the store prefix, too long for S3")
        return s3_key

    def _relative(self, s3_key: str) -> str:
        return s3_key.removeprefix(self._key_root)

    def _written(self, key: str) -> ObjectInfo:
        """The metadata of an object just written (PutObject does not return its mtime)."""
        info = self.head(key)
        if info is None:
            raise StorageError(f"object {key!r} vanished right after it was written")
        return info

    def _put_multipart(self, key: str, s3_key: str, path: Path, size: int) -> None:
        # Fail fast before sending gigabytes; the condition on Complete is what guarantees it.
        if self.head(key) is not None:
            raise ObjectExistsError(f"an object exists under key {key!r}")
        part_size = max(self._part_size, -(-size // MAX_PARTS))
        with self._errors("put", s3_key):
            upload_id = self._client.create_multipart_upload(Bucket=self._bucket, Key=s3_key)[
                "UploadId"
            ]
        try:
            parts: list[CompletedPartTypeDef] = []
            with open(path, "rb") as source, self._errors("put", s3_key):
                while chunk := source.read(part_size):
                    number = len(parts) + 1
                    response = self._client.upload_part(
                        Bucket=self._bucket,
                        Key=s3_key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=chunk,
                    )
                    parts.append({"PartNumber": number, "ETag": response["ETag"]})
                self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=s3_key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                )
        except BaseException:
            self._abort(s3_key, upload_id)
            raise

    def _abort(self, s3_key: str, upload_id: str) -> None:
        try:
            self._client.abort_multipart_upload(Bucket=self._bucket, Key=s3_key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as e:
            # Left to the bucket's AbortIncompleteMultipartUpload lifecycle rule.
            logger.warning("cannot abort multipart upload %s of %r: %s", upload_id, s3_key, e)

    @contextmanager
    def _errors(self, action: str, s3_key: str) -> Iterator[None]:
        """Translate botocore's exceptions into icefloe's, by error code."""
        where = f"s3://{self._bucket}/{s3_key}"
        try:
            yield
        except ClientError as e:
            raise _translate(e, action, where) from e
        except BotoCoreError as e:
            raise StorageError(f"S3 {action} of {where} failed: {e}") from e


def _build_client(endpoint_url: str | None, region: str) -> S3Client:
    """A client of its own session (thread-safe); path-style addressing for custom endpoints."""
    config = Config(
        region_name=region,
        retries={"mode": "standard"},
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=region, config=config
    )


def _code(error: ClientError) -> str:
    """The S3 error code; HEAD responses have no body, so fall back on the HTTP status."""
    code = error.response.get("Error", {}).get("Code")
    if code:
        return str(code)
    return str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _translate(error: ClientError, action: str, where: str) -> IcefloeError:
    code = _code(error)
    if code in _NOT_FOUND:
        return ObjectNotFoundError(f"no object at {where}")
    if code in _EXISTS:
        return ObjectExistsError(f"an object exists at {where}")
    return StorageError(f"S3 {action} of {where} failed: {code}")


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
