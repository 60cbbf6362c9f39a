"""Object-store helpers for tests: a fault injector around a real store."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

from icefloe.storage import AbandonedWrite, DeleteResult, ObjectInfo, ObjectStore


class InjectedFault(RuntimeError):
    """Raised by :class:`FailingAfterPuts` to simulate a crash of the writer."""


class FailingAfterPuts(ObjectStore):
    """A real store that lets ``allowed`` puts through, then fails every put (a writer crash
    between writing some files and committing). Everything else goes to the real store."""

    def __init__(self, inner: ObjectStore, *, allowed: int) -> None:
        self.inner = inner
        self.allowed = allowed
        self.puts: list[str] = []
        self._granted = 0
        self._lock = threading.Lock()

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    def uri(self, key: str) -> str:
        return self.inner.uri(key)

    def put(self, key: str, data: bytes) -> None:
        with self._lock:  # writers may upload concurrently: reserve a slot atomically
            if self._granted >= self.allowed:
                raise InjectedFault(f"injected failure before writing {key}")
            self._granted += 1
        self.inner.put(key, data)
        self.puts.append(key)

    def put_file(self, key: str, path: Path) -> None:
        self.put(key, path.read_bytes())

    def copy(self, source: str, key: str) -> ObjectInfo:
        self.put(key, self.inner.get(source))
        info = self.inner.head(key)
        assert info is not None
        return info

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, *, start: int, length: int) -> bytes:
        return self.inner.get_range(key, start=start, length=length)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def delete_many(self, keys: Iterable[str]) -> DeleteResult:
        return self.inner.delete_many(keys)

    def download_url(self, key: str, *, expires_s: int) -> str:
        return self.inner.download_url(key, expires_s=expires_s)

    def abandoned_writes(self, prefix: str, *, started_before: datetime) -> list[AbandonedWrite]:
        return self.inner.abandoned_writes(prefix, started_before=started_before)

    def discard_abandoned_writes(self, writes: Iterable[AbandonedWrite]) -> int:
        return self.inner.discard_abandoned_writes(writes)

    def list_prefix(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.list_prefix(prefix)
