"""Where the data lives: a warehouse location parsed from a path or an S3 URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefloe.config import WarehouseLocation
from icefloe.errors import ConfigError


def test_an_s3_uri_is_a_bucket_and_a_prefix_without_slashes_at_its_ends() -> None:
    location = WarehouseLocation.parse("s3://my-bucket/lake/prod/")
    assert location == WarehouseLocation(scheme="s3", bucket="my-bucket", prefix="lake/prod")
    assert location.uri == "s3://my-bucket/lake/prod"
    assert WarehouseLocation.parse("s3://my-bucket").uri == "s3://my-bucket"


def test_a_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    location = WarehouseLocation.parse("lake")
    assert location == WarehouseLocation(scheme="file", path=tmp_path.resolve() / "lake")
    assert location.uri == str(tmp_path.resolve() / "lake")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://x/y", "unsupported scheme"),
        ("s3://Bad_Bucket/x", "invalid S3 bucket name"),
        ("s3://bucket/a//b", "invalid S3 prefix"),
        ("s3://bucket/a/../b", "invalid S3 prefix"),
        ("", "empty path"),
    ],
)
def test_bad_locations_are_refused_saying_why(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WarehouseLocation.parse(value)
