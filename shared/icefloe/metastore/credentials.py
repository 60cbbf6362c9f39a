"""Meta store DSNs that can change while a process runs (a rotated Secrets Manager secret).

A Lambda container reads the database secret once and keeps its connections for hours. When the
secret is rotated, the open connections go on working, but the next new connection would use
the old password. :class:`DsnSource` lets the pool ask again: the DSN is read once, and read
afresh only when opening a connection fails, at most once per ``min_refresh_interval`` (so an
unreachable database does not turn every retry into a Secrets Manager call).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

logger = logging.getLogger(__name__)

# At most one re-read of the DSN per this many seconds while connections fail.
DEFAULT_MIN_REFRESH_INTERVAL_S = 60.0


class DsnSource(Protocol):
    """Where a meta store's DSN comes from."""

    def current(self) -> str:
        """The DSN as last read (no I/O)."""
        ...

    def refresh(self) -> str:
        """Read the DSN again (the database refused a connection) and return it."""
        ...


class RefreshGate:
    """Lets a refresh through at most once per ``interval_s`` seconds."""

    def __init__(self, *, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def admit(self) -> bool:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._interval_s:
                return False
            self._last = now
            return True


def refreshing_connection_class(
    source: DsnSource, *, gate: RefreshGate
) -> type[psycopg.Connection[tuple[Any, ...]]]:
    """A connection class for the pool that connects with ``source``'s current DSN and, when
    that fails, re-reads the DSN (if ``gate`` admits it) and tries once more with a changed one.

    The pool's own conninfo is ignored: the source is the truth.
    """

    class RefreshingConnection(psycopg.Connection[tuple[Any, ...]]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> RefreshingConnection:
            dsn = source.current()
            try:
                return super().connect(dsn, **kwargs)
            except psycopg.OperationalError:
                if not gate.admit():
                    raise
                fresh = source.refresh()
                if fresh == dsn:
                    raise
                logger.info("meta store DSN changed (rotated credentials): reconnecting")
                return super().connect(fresh, **kwargs)

    return RefreshingConnection


class FixedDsn:
    """A DSN that never changes (a DSN given outright)."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def current(self) -> str:
        return self._dsn

    def refresh(self) -> str:
        return self._dsn
