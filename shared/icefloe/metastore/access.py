"""What each part of :class:`~icefloe.metastore.store.MetaStore` needs from the others.

``MetaStore`` is composed of one class per concern (:mod:`~icefloe.metastore.catalog`,
:mod:`~icefloe.metastore.snapshots`, :mod:`~icefloe.metastore.claims`,
:mod:`~icefloe.metastore.commits`). Each derives from :class:`StoreAccess`, which declares
what it uses and does not define: pooled connections, opened in the three ways they are used
(:mod:`icefloe.metastore.store` provides them), and the lookup of a live table by name (the
catalog provides it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from icefloe.metastore.models import TableInfo

Conn = psycopg.Connection[tuple[Any, ...]]

# Errors after which the transaction surely did not commit and a fresh attempt is safe.
TRANSIENT = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected, pgerrors.LockNotAvailable)


class StoreAccess(ABC):
    """The meta store as each of its parts sees it."""

    schema: str

    @abstractmethod
    def _connection(self) -> AbstractContextManager[Conn]:
        """A pooled connection; its failures raise as the meta store's errors (unavailable,
        not initialized), but :data:`TRANSIENT` ones as they are, for a commit to retry."""

    @abstractmethod
    def _autocommit(self) -> AbstractContextManager[Conn]:
        """A pooled connection on which each statement is a transaction of its own."""

    @abstractmethod
    def _read_only(self, *, repeatable: bool) -> AbstractContextManager[Conn]:
        """A pooled connection in a read-only transaction (repeatable read if asked), rolled
        back when the block ends."""

    @abstractmethod
    def get_table(self, name: str) -> TableInfo:
        """The live table named ``name`` (:class:`~icefloe.errors.TableNotFoundError` if none)."""


@contextmanager
def statements_commit_alone(conn: Conn) -> Iterator[None]:
    """Autocommit (each statement its own transaction) for the block, then back, as every
    pooled connection must be; a connection that cannot go back (it broke) is closed, and
    the pool discards it."""
    conn.autocommit = True
    try:
        yield
    finally:
        try:
            conn.autocommit = False
        except psycopg.Error:
            conn.close()
