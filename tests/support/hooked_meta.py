"""A real meta store that calls a test back at a chosen point: the seam where a test kills,
races or tampers with a worker after its outputs are uploaded and before its commit.

Given to a merge worker, a compaction, a delete or a delete part runner as its ``meta``, it
does what any meta store does (a pool of its own on the same database and schema), calling
``before_commit`` just before each commit (a replace commit included) and
``before_files_by_id`` just before each read of files by id. A callback that raises stops the
caller there, as a worker dying at that point would.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from icefloe.metastore.models import CommitResult, DataFile, NewFile, Operation
from icefloe.metastore.store import MetaStore


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """The commit about to be made."""

    table: str
    operation: Operation
    add: Sequence[NewFile]
    remove: Sequence[int]
    idempotency_key: str | None
    claim_token: uuid.UUID | None


class HookedMetaStore(MetaStore):
    """See the module docstring. Close it (or use it in a ``with``) like any meta store."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        before_commit: Callable[[PendingCommit], None] | None = None,
        before_files_by_id: Callable[[Sequence[int]], None] | None = None,
        max_connections: int = 4,
    ) -> None:
        super().__init__(dsn, schema=schema, max_connections=max_connections)
        self._before_commit = before_commit
        self._before_files_by_id = before_files_by_id

    @classmethod
    def like(
        cls,
        meta: MetaStore,
        *,
        before_commit: Callable[[PendingCommit], None] | None = None,
        before_files_by_id: Callable[[Sequence[int]], None] | None = None,
    ) -> HookedMetaStore:
        """A hooked store on ``meta``'s database and schema."""
        return cls(
            meta.dsn_source.current(),
            schema=meta.schema,
            before_commit=before_commit,
            before_files_by_id=before_files_by_id,
        )

    def commit(self, table: str, **request: Any) -> CommitResult:
        """The meta store's commit (``request`` is its keyword arguments), after the hook."""
        if self._before_commit is not None:
            self._before_commit(
                PendingCommit(
                    table=table,
                    operation=request["operation"],
                    add=request.get("add", ()),
                    remove=request.get("remove", ()),
                    idempotency_key=request.get("idempotency_key"),
                    claim_token=request.get("claim_token"),
                )
            )
        return super().commit(table, **request)

    def files_by_id(
        self, table: str, file_ids: Sequence[int], *, statistics: bool = True
    ) -> list[DataFile]:
        if self._before_files_by_id is not None:
            self._before_files_by_id(file_ids)
        return super().files_by_id(table, file_ids, statistics=statistics)
