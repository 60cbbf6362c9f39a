"""A small least-recently-used map, for the query path's caches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A small thread-safe map that forgets its least recently used entry past ``size``."""

    def __init__(self, size: int, *, on_evict: Callable[[K, V], None] | None = None) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._on_evict = on_evict

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                evicted, value = self._items.popitem(last=False)
                if self._on_evict is not None:
                    self._on_evict(evicted, value)

    def clear(self) -> list[tuple[K, V]]:
        """Forget everything; returns what was held."""
        with self._lock:
            items = list(self._items.items())
            self._items.clear()
            return items
