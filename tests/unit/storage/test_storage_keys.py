"""Object keys and prefixes: what is refused, and how a warehouse location picks a backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefloe.config import WarehouseLocation
from icefloe.errors import InvalidInputError
from icefloe.settings import load_settings
from icefloe.storage import (
    LocalObjectStore,
    S3ObjectStore,
    is_valid_key,
    object_store_from_settings,
    open_object_store,
    validate_key,
    validate_prefix,
)

BAD_KEYS = [
    "",
    "/abs",
    "a/",
    "../x",
    "a/../b",
    "a/..",
    "..",
    "a/./b",
    ".",
    "a//b",
    "a\\b",
    "a\x00b",
    "a\tb",
    "a\x1bb",
    "a\x85b",
    "a/\udc80",
    "é" * 513,
]
GOOD_KEYS = [
    "a",
    "t/data/day=2026-11-22/0190f3a2.parquet",
    "..a",
    "a..",
    "...",
    ".hidden",
    "a b/c%2Fd",
    "événements/日本",
    "x" * 1024,
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_validate_key_refuses_keys_that_escape_or_alias(key: str) -> None:
    with pytest.raises(InvalidInputError, match="object key"):
        validate_key(key)
    assert not is_valid_key(key)


@pytest.mark.parametrize("key", GOOD_KEYS)
def test_validate_key_returns_good_keys_unchanged(key: str) -> None:
    assert validate_key(key) == key
    assert is_valid_key(key)


@pytest.mark.parametrize("prefix", ["", "a", "a/", "t/data/day=", "t/data/"])
def test_validate_prefix_accepts_empty_and_trailing_slash(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "//", "/a", "a//", "a//b/", "../", "a/../", "a\\"])
def test_validate_prefix_refuses_what_a_key_refuses(prefix: str) -> None:
    with pytest.raises(InvalidInputError, match="prefix"):
        validate_prefix(prefix)


def test_a_local_location_opens_a_local_store(tmp_path: Path) -> None:
    store = open_object_store(WarehouseLocation.parse(str(tmp_path / "wh")))

    assert isinstance(store, LocalObjectStore)
    assert store.root_uri == str((tmp_path / "wh").resolve())


def test_an_s3_location_opens_an_s3_store_without_touching_the_network() -> None:
    store = open_object_store(
        WarehouseLocation.parse("s3://icefloe-bucket/some/prefix/"),
        endpoint_url="http://127.0.0.1:9",
        region="eu-west-1",
    )

    assert isinstance(store, S3ObjectStore)
    assert store.root_uri == "s3://icefloe-bucket/some/prefix"
    assert store.uri("t/a") == "s3://icefloe-bucket/some/prefix/t/a"
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert store.client.meta.region_name == "eu-west-1"


def test_settings_choose_the_store(tmp_path: Path) -> None:
    settings = load_settings({"ICEFLOE_HOME": str(tmp_path)}).core

    store = object_store_from_settings(settings)

    assert isinstance(store, LocalObjectStore)
    assert store.root == tmp_path.resolve() / "warehouse"


def test_an_s3_store_without_prefix_addresses_the_bucket_root() -> None:
    store = open_object_store(WarehouseLocation.parse("s3://icefloe-bucket"))

    assert store.root_uri == "s3://icefloe-bucket"
    assert store.uri("t/a") == "s3://icefloe-bucket/t/a"
