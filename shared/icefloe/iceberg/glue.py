"""Iceberg publication to AWS Glue: the catalog, and a FileIO that writes metadata with boto3.

pyiceberg's Glue catalog keeps each table's pointer to its current metadata file in the Glue
Data Catalog (database = the Iceberg namespace), where Athena, Trino on EMR and Spark with the
Glue catalog find it. The metadata files themselves (JSON, manifest lists, manifests) are
written to S3 under the catalog's warehouse.

They are written here with one boto3 ``put_object`` per file (:class:`S3PutFileIO`), not
through pyarrow's S3 filesystem, which pyiceberg uses by default: pyarrow closes every output
stream with a multipart upload, and some S3-compatible stores (moto, which the tests run
against) answer its completion in a form pyarrow rejects. Metadata files are small (kilobytes
to a few megabytes), so one put each costs nothing. Reads still go through pyarrow.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import boto3
from pyiceberg.io import OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFileIO

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import InputFile

_S3_SCHEMES = ("s3://", "s3a://")


class S3PutFileIO(PyArrowFileIO):
    """pyarrow's FileIO, but S3 outputs are written with one boto3 put when closed."""

    # pyarrow's FileIO types its outputs as its own file class; a plain OutputFile serves every
    # caller (pyiceberg only creates and closes outputs). Subclassed rather than wrapped: scans
    # need a PyArrowFileIO for their reads.
    def new_output(self, location: str) -> OutputFile:  # type: ignore[override]
        if not location.startswith(_S3_SCHEMES):
            return super().new_output(location)
        client = boto3.client(
            "s3",
            endpoint_url=self.properties.get("s3.endpoint"),
            region_name=self.properties.get("s3.region"),
        )
        return _S3PutOutputFile(location, client=client, io=self)


class _S3PutOutputFile(OutputFile):
    def __init__(self, location: str, *, client: Any, io: PyArrowFileIO) -> None:
        super().__init__(location)
        self._client = client
        self._io = io
        self._bucket, _, self._key = location.split("://", 1)[1].partition("/")

    def __len__(self) -> int:
        return int(self._client.head_object(Bucket=self._bucket, Key=self._key)["ContentLength"])

    def exists(self) -> bool:
        try:
            self._client.head_object(Bucket=self._bucket, Key=self._key)
        except self._client.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def to_input_file(self) -> InputFile:
        return self._io.new_input(self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        if not overwrite and self.exists():
            raise FileExistsError(f"{self.location} exists (Iceberg metadata is never rewritten)")
        return _PutWhenClosed(self._client, self._bucket, self._key)


class _PutWhenClosed(io.BytesIO):
    """The bytes written, put as one object when the stream is closed."""

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        super().__init__()
        self._client, self._bucket, self._key = client, bucket, key

    def close(self) -> None:
        if not self.closed:
            self._client.put_object(Bucket=self._bucket, Key=self._key, Body=self.getvalue())
        super().close()


def glue_catalog(
    *,
    warehouse: str,
    region: str,
    glue_endpoint_url: str | None = None,
    s3_endpoint_url: str | None = None,
) -> Catalog:
    """pyiceberg's Glue catalog, its metadata under ``warehouse`` (an ``s3://`` URI)."""
    from pyiceberg.catalog.glue import GlueCatalog

    properties = {
        "warehouse": warehouse,
        "py-io-impl": f"{S3PutFileIO.__module__}.{S3PutFileIO.__qualname__}",
        "glue.region": region,
        "s3.region": region,
    }
    if glue_endpoint_url:
        properties["glue.endpoint"] = glue_endpoint_url
    if s3_endpoint_url:
        properties["s3.endpoint"] = s3_endpoint_url
    return GlueCatalog("icefloe", **properties)
