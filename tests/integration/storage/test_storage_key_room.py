"""A partition path too long for a file's key under the store's own prefix is refused at
insert naming its row and field, before anything is stored (S3 counts the prefix in its
1,024 bytes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import S3ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration

BUCKET = "icefloe-test-warehouse"  # created by conftest's s3_client

# Three identity partitions of 250 characters: a 758-byte path, which fits S3's key beside a
# short prefix and not beside a 300-byte one.
ROWS = [{"a": "x" * 250, "b": "y" * 250, "c": "z" * 250, "n": 1}]


def _inserter(meta: MetaStore, client: S3Client, prefix: str) -> tuple[Inserter, S3ObjectStore]:
    meta.create_table(
        TableSpec.create(
            name="t", schema="a VARCHAR, b VARCHAR, c VARCHAR, n INTEGER", partition_by="a, b, c"
        )
    )
    objects = S3ObjectStore(bucket=BUCKET, prefix=prefix, client=client)
    return Inserter(meta=meta, objects=objects), objects


def test_a_path_too_long_beside_the_stores_prefix_is_refused_naming_row_and_field(
    meta: MetaStore, s3_client: S3Client
) -> None:
    # Given a warehouse under a 300-byte prefix
    inserter, objects = _inserter(meta, s3_client, "p" * 300)
    assert objects.max_key_bytes == 1024 - 301

    # When a row's partition path leaves no room for its file's key, Then it is refused
    # naming the row and the field, and nothing is stored or committed
    try:
        with pytest.raises(BatchRejectedError) as refused:
            inserter.insert_rows("t", ROWS)
    finally:
        inserter.close()
    (problem,) = refused.value.problems
    assert (problem.row, problem.field) == (0, "a")
    assert "a stored file's key allows" in problem.message
    assert list(objects.list_prefix("t/")) == []
    assert meta.status("t").rows == 0


def test_the_same_path_beside_a_short_prefix_is_stored(
    meta: MetaStore, s3_client: S3Client
) -> None:
    inserter, objects = _inserter(meta, s3_client, "wh")
    try:
        inserter.insert_rows("t", ROWS)
    finally:
        inserter.close()
    assert meta.status("t").rows == 1 and len(list(objects.list_prefix("t/data/"))) == 1
