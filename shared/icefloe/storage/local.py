"""Object store on a local directory: the local default, and S3's stand-in on a laptop.

A write goes to a temporary file in the target directory and is published with ``os.link``, which
fails if the name exists: a reader never sees a partial object and nothing is overwritten.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from icefloe.errors import (
    InvalidInputError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from icefloe.storage.base import (
    AbandonedWrite,
    DeleteResult,
    ObjectInfo,
    ObjectStore,
    check_range,
    is_valid_key,
    validate_key,
    validate_prefix,
)

logger = logging.getLogger(__name__)

# Temporary files live next to their target (os.link needs one file system). Keys may not use
# this name, so listings can skip in-flight writes without ambiguity.
TEMP_MARKER = ".icefloe-tmp-"
# A concurrent delete_many may remove a directory a writer has just created; retry that race.
_MKDIR_ATTEMPTS = 10


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root``; a key's segments are its directories and file name."""

    def __init__(self, root: Path) -> None:
        self._root = Path(root).expanduser().resolve()
        self._root_text = str(self._root).rstrip("/")

    @property
    def root(self) -> Path:
        return self._root

    @property
    def root_uri(self) -> str:
        return str(self._root)

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self._root)!r})"

    def uri(self, key: str) -> str:
        # Plain text, no filesystem call: a query plans thousands of these (writes still
        # resolve links). The root is absolute and a valid key has no '.', '..' or empty part.
        validate_key(key)
        return f"{self._root_text}/{key}"

    def download_url(self, key: str, *, expires_s: int) -> str:
        return self._path(key).as_uri()  # local files do not expire

    def put(self, key: str, data: bytes) -> None:
        self._publish(key, self._path(key), lambda out: out.write(data))

    def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)
        try:
            source = open(path, "rb")  # noqa: SIM115 - closed below, after the publish
        except OSError as e:
            raise InvalidInputError(f"cannot read source file {str(path)!r}: {e}") from e
        with source:
            self._publish(key, target, lambda out: shutil.copyfileobj(source, out))

    def copy(self, source: str, key: str) -> ObjectInfo:
        target = self._path(key)
        try:
            original = open(self._path(source), "rb")  # noqa: SIM115 - closed below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise ObjectNotFoundError(f"no object under key {source!r}") from e
        except OSError as e:
            raise StorageError(f"cannot read object {source!r}: {e}") from e
        with original:
            return self._publish(key, target, lambda out: shutil.copyfileobj(original, out))

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise ObjectNotFoundError(f"no object under key {key!r}") from e
        except OSError as e:
            raise StorageError(f"cannot read object {key!r}: {e}") from e

    def get_range(self, key: str, *, start: int, length: int) -> bytes:
        path = self._path(key)
        check_range(start, length)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(length)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise ObjectNotFoundError(f"no object under key {key!r}") from e
        except OSError as e:
            raise StorageError(f"cannot read object {key!r}: {e}") from e

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise StorageError(f"cannot stat object {key!r}: {e}") from e
        return _info(key, st) if stat.S_ISREG(st.st_mode) else None

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        paths = {key: self._path(key) for key in keys}
        failures: list[str] = []
        for key, path in paths.items():
            try:
                path.unlink()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                pass  # no object under that key: already gone is what the caller wants
            except OSError as e:
                logger.warning("cannot delete object %r: %s", key, e)
                failures.append(key)
        # Deepest first, so a parent is tried after its children.
        for directory in sorted({p.parent for p in paths.values()}, key=_depth, reverse=True):
            self._prune(directory)
        if failures:
            raise StorageError(
                f"could not delete {len(failures)} of {len(paths)} objects, "
                f"first: {', '.join(map(repr, failures[:5]))}"
            )
        return DeleteResult(deleted=len(paths))

    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        directory, _, name_start = prefix.rpartition("/")
        base = self._root.joinpath(*directory.split("/")) if directory else self._root
        if not base.resolve().is_relative_to(self._root):
            raise InvalidInputError(f"object key prefix {prefix!r}: resolves outside the root")
        return iter(sorted(self._walk(base, directory, name_start), key=lambda i: i.key))

    def abandoned_writes(self, prefix: str, *, started_before: datetime) -> list[AbandonedWrite]:
        """Temporary files of writers that died between writing and publishing (``_publish``
        removes its own on any error, so only a killed process leaves one)."""
        validate_prefix(prefix)
        directory, _, name_start = prefix.rpartition("/")
        base = self._root.joinpath(*directory.split("/")) if directory else self._root
        found = []
        for path in _files_under(base, name_start):
            if not path.name.startswith(TEMP_MARKER):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # published or discarded meanwhile
            started = datetime.fromtimestamp(st.st_mtime, tz=UTC)
            if started < started_before:
                key = path.relative_to(self._root).as_posix()
                found.append(AbandonedWrite(key=key, started=started, size=st.st_size))
        return sorted(found, key=lambda w: w.key)

    def discard_abandoned_writes(self, writes: Iterable[AbandonedWrite]) -> int:
        count = 0
        directories = set()
        for write in writes:
            path = self._root.joinpath(*write.key.split("/"))
            if not path.name.startswith(TEMP_MARKER) or not path.resolve().is_relative_to(
                self._root
            ):
                raise InvalidInputError(f"{write.key!r} is not a temporary file of this store")
            path.unlink(missing_ok=True)
            directories.add(path.parent)
            count += 1
        for directory in sorted(directories, key=_depth, reverse=True):
            self._prune(directory)
        return count

    def _path(self, key: str) -> Path:
        """The file of ``key``, refusing reserved names and anything that resolves outside root."""
        validate_key(key)
        segments = key.split("/")
        if any(segment.startswith(TEMP_MARKER) for segment in segments):
            raise InvalidInputError(f"object key {key!r}: {TEMP_MARKER!r} names are reserved")
        path = self._root.joinpath(*segments)
        # Defence in depth: validate_key already forbids '..', this also catches symlinks.
        resolved = path.resolve()
        if resolved == self._root or not resolved.is_relative_to(self._root):
            raise InvalidInputError(f"object key {key!r}: resolves outside the store root")
        return path

    def _publish(self, key: str, path: Path, write: Callable[[BinaryIO], object]) -> ObjectInfo:
        temp, out = self._open_temp(key, path)
        try:
            with out:
                write(out)
            try:
                os.link(temp, path)
            except FileExistsError as e:
                if path.is_dir():
                    raise StorageError(f"key {key!r} is a directory of other objects") from e
                raise ObjectExistsError(f"an object exists under key {key!r}") from e
            return _info(key, path.stat())
        except OSError as e:
            raise StorageError(f"cannot write object {key!r}: {e}") from e
        finally:
            temp.unlink(missing_ok=True)

    def _open_temp(self, key: str, path: Path) -> tuple[Path, BinaryIO]:
        for _ in range(_MKDIR_ATTEMPTS):
            temp = path.parent / f"{TEMP_MARKER}{uuid.uuid4().hex}"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                return temp, open(temp, "xb")  # the caller closes it
            except FileNotFoundError:
                continue  # a concurrent delete_many pruned the directory we just made
            except (FileExistsError, NotADirectoryError) as e:
                # Either a parent is a file, or mkdir lost a race with a concurrent prune.
                if self._file_among_parents(path):
                    raise StorageError(f"key {key!r}: a parent of it is an object") from e
                continue
            except OSError as e:
                raise StorageError(f"cannot write object {key!r}: {e}") from e
        raise StorageError(f"cannot create the directory of key {key!r}: removed concurrently")

    def _file_among_parents(self, path: Path) -> bool:
        parent = path.parent
        while parent != self._root and parent.is_relative_to(self._root):
            # One lstat, not exists() then is_dir(): a concurrent prune may remove the
            # directory between two calls and make it look like a file.
            try:
                if not stat.S_ISDIR(parent.lstat().st_mode):
                    return True
            except FileNotFoundError:
                pass
            parent = parent.parent
        return False

    def _prune(self, directory: Path) -> None:
        """Remove ``directory`` and its ancestors while they are empty, never the root."""
        while directory != self._root and directory.is_relative_to(self._root):
            try:
                directory.rmdir()
            except OSError:
                return  # not empty (or gone, or busy): its ancestors are not empty either
            directory = directory.parent

    def _walk(self, base: Path, base_key: str, name_start: str) -> Iterator[ObjectInfo]:
        """Regular files under ``base`` whose first name starts with ``name_start``."""
        stack: list[tuple[Path, str]] = [(base, base_key)]
        first = True
        while stack:
            directory, directory_key = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                entries = []
            except OSError as e:
                raise StorageError(f"cannot list {str(directory)!r}: {e}") from e
            for entry in entries:
                if first and not entry.name.startswith(name_start):
                    continue
                if entry.name.startswith(TEMP_MARKER):
                    continue  # a write in flight, not an object
                key = f"{directory_key}/{entry.name}" if directory_key else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), key))
                    elif not entry.is_file(follow_symlinks=False):
                        continue  # symlinks and special files are not objects
                    elif is_valid_key(key):
                        yield _info(key, entry.stat(follow_symlinks=False))
                    else:
                        logger.debug("skipping file whose name is not a valid key: %r", key)
                except FileNotFoundError:
                    continue  # deleted while we listed
            first = False


def _files_under(base: Path, name_start: str) -> Iterator[Path]:
    """Regular files under ``base`` whose first name starts with ``name_start``."""
    stack = [base]
    first = True
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            if first and not entry.name.startswith(name_start):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    yield Path(entry.path)
            except FileNotFoundError:
                continue
        first = False


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(
        key=key, size=st.st_size, last_modified=datetime.fromtimestamp(st.st_mtime, tz=UTC)
    )


def _depth(path: Path) -> int:
    return len(path.parts)
