"""The object store contract, run against every backend (local directory, S3 under moto)."""

from __future__ import annotations

import random
from datetime import UTC
from pathlib import Path

import pytest

from icefloe.errors import InvalidInputError, ObjectExistsError, ObjectNotFoundError
from icefloe.storage import LocalObjectStore, ObjectStore, S3ObjectStore

pytestmark = pytest.mark.integration

BAD_KEYS = [
    "",
    "../x",
    "a/../b",
    "..",
    ".",
    "/abs",
    "a/",
    "a//b",
    "a\\b",
    "a/./b",
    "./a",
    "a\x00b",
    "a\nb",
    "a\x7fb",
    "a/\ud800",
    "x" * 1025,
]


def test_put_then_get_returns_the_same_bytes_and_metadata(store: ObjectStore) -> None:
    # given / when
    store.put("t/data/day=2026-11-22/a.parquet", b"hello parquet")

    # then
    assert store.get("t/data/day=2026-11-22/a.parquet") == b"hello parquet"
    info = store.head("t/data/day=2026-11-22/a.parquet")
    assert info is not None
    assert info.key == "t/data/day=2026-11-22/a.parquet"
    assert info.size == len(b"hello parquet")
    assert info.last_modified.utcoffset() is not None
    assert info.last_modified.tzinfo == UTC
    assert store.head("t/data/day=2026-11-22/a.parquet") == info


def test_empty_and_non_ascii_objects_round_trip(store: ObjectStore) -> None:
    store.put("t/empty", b"")
    store.put("événements/jour=1/日本.parquet", b"\x00\xff")

    assert store.get("t/empty") == b""
    assert store.get("événements/jour=1/日本.parquet") == b"\x00\xff"
    assert [i.key for i in store.list_prefix("événements/")] == ["événements/jour=1/日本.parquet"]


def test_put_never_overwrites(store: ObjectStore) -> None:
    store.put("t/a", b"first")

    with pytest.raises(ObjectExistsError):
        store.put("t/a", b"second")

    assert store.get("t/a") == b"first"


def test_put_file_round_trip_and_never_overwrites(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "out.parquet"
    source.write_bytes(b"x" * 1000)

    store.put_file("t/f.parquet", source)
    with pytest.raises(ObjectExistsError):
        store.put_file("t/f.parquet", source)
    with pytest.raises(ObjectExistsError):
        store.put("t/f.parquet", b"other")

    info = store.head("t/f.parquet")
    assert info is not None and info.size == 1000
    assert store.get("t/f.parquet") == b"x" * 1000


def test_copy_stores_the_same_bytes_under_a_new_key_and_never_overwrites(
    store: ObjectStore,
) -> None:
    store.put("t/a.parquet", b"abc" * 100)
    store.put("t/taken.parquet", b"other")

    info = store.copy("t/a.parquet", "t/b/copy.parquet")

    assert (info.key, info.size) == ("t/b/copy.parquet", 300)
    assert store.get("t/b/copy.parquet") == store.get("t/a.parquet") == b"abc" * 100
    with pytest.raises(ObjectExistsError):
        store.copy("t/a.parquet", "t/taken.parquet")
    assert store.get("t/taken.parquet") == b"other"
    with pytest.raises(ObjectNotFoundError):
        store.copy("t/missing.parquet", "t/c.parquet")
    assert store.head("t/c.parquet") is None


def test_put_file_of_a_missing_source_is_refused(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        store.put_file("t/f", tmp_path / "missing")
    assert store.head("t/f") is None


def test_get_of_a_missing_key_raises_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.get("t/missing")
    with pytest.raises(ObjectNotFoundError):
        store.get_range("t/missing", start=0, length=10)


def test_head_of_a_missing_key_is_none(store: ObjectStore) -> None:
    store.put("t/dir/child", b"1")

    assert store.head("t/missing") is None
    assert store.head("t/dir") is None  # a key prefix is not an object


@pytest.mark.parametrize(
    ("start", "length", "expected"),
    [
        (0, 4, b"0123"),
        (3, 4, b"3456"),
        (9, 1, b"9"),
        (8, 100, b"89"),  # past the end: what is there
        (10, 5, b""),  # at the end: nothing
        (1000, 5, b""),  # far beyond: nothing
    ],
)
def test_get_range_follows_http_range_semantics(
    store: ObjectStore, start: int, length: int, expected: bytes
) -> None:
    store.put("t/digits", b"0123456789")

    assert store.get_range("t/digits", start=start, length=length) == expected


def test_get_range_of_an_empty_object_is_empty(store: ObjectStore) -> None:
    store.put("t/empty", b"")

    assert store.get_range("t/empty", start=0, length=10) == b""


@pytest.mark.parametrize(("start", "length"), [(-1, 5), (0, 0), (0, -3)])
def test_get_range_refuses_ranges_http_cannot_express(
    store: ObjectStore, start: int, length: int
) -> None:
    store.put("t/digits", b"0123456789")

    with pytest.raises(InvalidInputError):
        store.get_range("t/digits", start=start, length=length)


def test_delete_many_deletes_thousands_of_keys(store: ObjectStore) -> None:
    # given more keys than one S3 DeleteObjects request takes
    keys = [f"t/data/p={i % 7}/{i:05d}" for i in range(2500)]
    for key in keys:
        store.put(key, b".")

    # when
    result = store.delete_many(iter(keys))

    # then
    assert result.deleted == 2500
    assert list(store.list_prefix("t/")) == []


def test_delete_many_tolerates_missing_and_repeated_keys(store: ObjectStore) -> None:
    store.put("t/a", b"1")
    store.put("t/keep", b"2")

    result = store.delete_many(["t/a", "t/missing", "t/a", "never/was/here"])

    assert result.deleted == 3  # distinct keys now confirmed absent
    assert store.head("t/a") is None
    assert store.get("t/keep") == b"2"
    assert store.delete_many([]).deleted == 0


def test_delete_many_validates_every_key_before_deleting_any(store: ObjectStore) -> None:
    store.put("t/a", b"1")

    with pytest.raises(InvalidInputError):
        store.delete_many(["t/a", "../escape"])

    assert store.get("t/a") == b"1"


def test_list_prefix_is_recursive_sorted_and_a_plain_string_prefix(store: ObjectStore) -> None:
    # given keys written in random order, with a sibling prefix `a/bc` next to `a/b`
    keys = ["t/a/b/x", "t/a/b/y/z", "t/a/bc/w", "t/a/b.txt", "t/a/b-1", "t/a/c", "t/z", "u/1"]
    for key in random.Random(7).sample(keys, len(keys)):
        store.put(key, key.encode())

    def listed(prefix: str) -> list[str]:
        return [info.key for info in store.list_prefix(prefix)]

    # then: `/` ends a directory-like prefix, without it the prefix matches siblings too
    assert listed("t/a/b/") == ["t/a/b/x", "t/a/b/y/z"]
    assert listed("t/a/b") == ["t/a/b-1", "t/a/b.txt", "t/a/b/x", "t/a/b/y/z", "t/a/bc/w"]
    assert listed("t/a/bc") == ["t/a/bc/w"]
    assert listed("") == sorted(keys)
    assert listed("t/nothing/") == []
    assert listed("nothing") == []
    sizes = {info.key: info.size for info in store.list_prefix("t/")}
    assert sizes["t/a/b/y/z"] == len(b"t/a/b/y/z")


@pytest.mark.parametrize("prefix", ["/", "/a", "../", "a//", "a//b", "a/./", "a\\b", "a\x00"])
def test_list_prefix_refuses_bad_prefixes_before_iterating(store: ObjectStore, prefix: str) -> None:
    with pytest.raises(InvalidInputError):
        store.list_prefix(prefix)


def test_uri_is_what_duckdb_and_pyarrow_read(store: ObjectStore, tmp_path: Path) -> None:
    key = "t/data/day=2026-11-22/a.parquet"
    if isinstance(store, LocalObjectStore):
        root = (tmp_path / "warehouse").resolve()
        assert store.root_uri == str(root)
        assert store.uri(key) == str(root / "t" / "data" / "day=2026-11-22" / "a.parquet")
        assert Path(store.uri(key)).is_absolute()
    else:
        assert isinstance(store, S3ObjectStore)
        # the fixture's bucket and prefix ("wh/", normalised to "wh")
        assert store.root_uri == "s3://icefloe-test-warehouse/wh"
        assert store.uri(key) == f"s3://icefloe-test-warehouse/wh/{key}"


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_every_method_refuses_bad_keys(store: ObjectStore, key: str, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(b"x")

    for call in (
        lambda: store.put(key, b"x"),
        lambda: store.put_file(key, source),
        lambda: store.get(key),
        lambda: store.get_range(key, start=0, length=1),
        lambda: store.head(key),
        lambda: store.delete_many([key]),
        lambda: store.uri(key),
    ):
        with pytest.raises(InvalidInputError):
            call()

    assert list(store.list_prefix("")) == []
