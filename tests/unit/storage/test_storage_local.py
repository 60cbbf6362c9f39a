"""What only the local directory store does: directories, temp files, the root boundary."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from icefloe.errors import InvalidInputError, ObjectExistsError, StorageError
from icefloe.storage import LocalObjectStore
from icefloe.storage.local import TEMP_MARKER


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "warehouse"


@pytest.fixture
def store(root: Path) -> LocalObjectStore:
    return LocalObjectStore(root)


def test_root_is_created_on_the_first_write(root: Path, store: LocalObjectStore) -> None:
    assert not root.exists()
    assert list(store.list_prefix("")) == []
    assert store.head("t/a") is None

    store.put("t/a", b"1")

    assert (root / "t" / "a").read_bytes() == b"1"


def test_delete_many_removes_emptied_directories_but_never_the_root(
    root: Path, store: LocalObjectStore
) -> None:
    # given two partitions, one of which keeps a file
    store.put("t/data/day=1/a", b"1")
    store.put("t/data/day=1/sub/b", b"2")
    store.put("t/data/day=2/c", b"3")

    # when
    store.delete_many(["t/data/day=1/a", "t/data/day=1/sub/b"])

    # then the emptied partition is gone, its still-used ancestors stay
    assert not (root / "t" / "data" / "day=1").exists()
    assert (root / "t" / "data" / "day=2" / "c").exists()

    store.delete_many(["t/data/day=2/c"])
    assert root.is_dir()
    assert list(root.iterdir()) == []


def test_writes_leave_no_temporary_files(root: Path, store: LocalObjectStore) -> None:
    store.put("t/a", b"1")
    with pytest.raises(ObjectExistsError):
        store.put("t/a", b"2")

    assert [p.name for p in (root / "t").iterdir()] == ["a"]


def test_listing_skips_writes_in_flight_and_their_names_are_reserved(
    root: Path, store: LocalObjectStore
) -> None:
    store.put("t/a", b"1")
    (root / "t" / f"{TEMP_MARKER}123").write_bytes(b"partial")

    assert [i.key for i in store.list_prefix("t/")] == ["t/a"]
    with pytest.raises(InvalidInputError):
        store.put(f"t/{TEMP_MARKER}x", b"1")


def test_a_symlink_cannot_lead_a_key_outside_the_root(
    tmp_path: Path, root: Path, store: LocalObjectStore
) -> None:
    # given a directory outside the root, linked from inside it
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root.mkdir()
    os.symlink(outside, root / "link")

    # then no method follows the link
    with pytest.raises(InvalidInputError):
        store.get("link/secret")
    with pytest.raises(InvalidInputError):
        store.put("link/new", b"x")
    with pytest.raises(InvalidInputError):
        store.delete_many(["link/secret"])
    with pytest.raises(InvalidInputError):
        store.list_prefix("link/")
    assert list(store.list_prefix("")) == []  # the link itself is not an object
    assert (outside / "secret").read_bytes() == b"secret"
    assert not (outside / "new").exists()


def test_every_path_stays_inside_the_root(root: Path, store: LocalObjectStore) -> None:
    for key in ("a", "a/b/c.parquet", "day=2026-11-22/x", "..a/b..", "...", ".hidden"):
        path = Path(store.uri(key))
        assert path.is_absolute()
        assert path.resolve().is_relative_to(root.resolve())


def test_a_key_cannot_be_both_an_object_and_a_directory(store: LocalObjectStore) -> None:
    """S3 allows `a` and `a/b` together; a file system does not, so the store says so."""
    store.put("t/a/b", b"1")
    with pytest.raises(StorageError):
        store.put("t/a", b"2")

    store.put("t/c", b"3")
    with pytest.raises(StorageError):
        store.put("t/c/d", b"4")


def test_root_uri_is_the_absolute_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    store = LocalObjectStore(Path("relative/wh"))

    assert store.root_uri == str(tmp_path.resolve() / "relative" / "wh")
    assert store.root == tmp_path.resolve() / "relative" / "wh"


def test_concurrent_puts_of_one_key_have_exactly_one_winner(store: LocalObjectStore) -> None:
    def attempt(i: int) -> bytes | None:
        try:
            store.put("t/contended", f"writer {i}".encode())
        except ObjectExistsError:
            return None
        return f"writer {i}".encode()

    with ThreadPoolExecutor(max_workers=8) as pool:
        winners = [w for w in pool.map(attempt, range(32)) if w is not None]

    assert len(winners) == 1
    assert store.get("t/contended") == winners[0]


def test_writes_survive_concurrent_pruning_of_their_directory(store: LocalObjectStore) -> None:
    """delete_many may remove a directory a writer has just created; the writer retries."""

    def churn(worker: int) -> None:
        for i in range(200):
            key = f"t/p/q/{worker}-{i}"
            store.put(key, b".")
            store.delete_many([key])

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(churn, range(4)))

    assert list(store.list_prefix("")) == []
