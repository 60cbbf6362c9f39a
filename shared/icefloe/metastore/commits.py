"""Commits: append, replace, delete and rollback, each one attempt of the commit protocol
(:mod:`icefloe.metastore.commit_sql`) retried while a failure surely did not commit, and a
lost answer to an append looked up before it is repeated."""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Sequence
from contextlib import suppress

import psycopg

from icefloe.errors import (
    CommitOutcomeUnknownError,
    InvalidInputError,
    MetaStoreUnavailableError,
    SnapshotNotFoundError,
)
from icefloe.metastore.access import TRANSIENT, Conn, StoreAccess
from icefloe.metastore.commit_sql import (
    AppendAnswerLost,
    CommitRequest,
    TableRef,
    append_statement,
    check_commit_input,
    commit_statements,
    committed_before,
)
from icefloe.metastore.models import CommitResult, NewFile, Operation, RollbackPlan
from icefloe.metastore.pinned import files_at, integer_argument, resolve, resolve_from
from icefloe.tracing import span

logger = logging.getLogger(__name__)


class Commits(StoreAccess):
    """The commit protocol (a part of :class:`~icefloe.metastore.store.MetaStore`)."""

    _commit_attempts: int  # attempts per commit, transient failures included

    def commit_append(
        self,
        table: str,
        *,
        files: Sequence[NewFile],
        idempotency_key: str | None = None,
        receipts: Sequence[str] = (),
        batch_digest: str | None = None,
        table_id: int | None = None,
        spec_version: int | None = None,
    ) -> CommitResult:
        """Add files in one new snapshot; a used ``idempotency_key`` returns the earlier one
        (unless the earlier batch's ``batch_digest`` differs: :class:`IdempotencyKeyReusedError`).

        ``receipts`` (message ids) are recorded with the snapshot; if any was recorded before,
        :class:`DuplicateReceiptError` names them and nothing is committed. ``table_id`` (the
        table the files were written for) refuses the commit if the table was dropped and
        created again meanwhile; ``spec_version`` (the spec the rows were converted under)
        refuses it with :class:`SpecChangedError` if the table's spec changed meanwhile.
        One round trip: the whole append is one statement, its own transaction. If the
        connection breaks once it is sent, the next attempt first looks for the append's files
        (their paths are unique), so a lost answer neither repeats nor loses the append.
        """
        return self.commit(
            table,
            operation="append",
            add=files,
            idempotency_key=idempotency_key,
            receipts=receipts,
            batch_digest=batch_digest,
            table_id=table_id,
            spec_version=spec_version,
        )

    def committed_receipts(self, table: str, receipts: Sequence[str]) -> dict[str, int]:
        """Which of ``receipts`` are committed already, and in which snapshot."""
        if not receipts:
            return {}
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT receipt, snapshot_id FROM ingest_receipts"
                " WHERE table_id = (SELECT table_id FROM lake_tables"
                "  WHERE name = %s AND dropped_at IS NULL) AND receipt = ANY(%s)",
                (table, list(receipts)),
            ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def commit_replace(
        self,
        table: str,
        *,
        remove: Sequence[int],
        add: Sequence[NewFile],
        claim_token: uuid.UUID | None = None,
        idempotency_key: str | None = None,
    ) -> CommitResult:
        """Swap live files for new ones (a merge). Every input must still be live and, when a
        token is given, claimed under it; otherwise :class:`CommitConflictError`. A used
        ``idempotency_key`` returns the earlier snapshot and changes nothing."""
        return self.commit(
            table,
            operation="replace",
            add=add,
            remove=remove,
            claim_token=claim_token,
            idempotency_key=idempotency_key,
        )

    def commit(
        self,
        table: str,
        *,
        operation: Operation,
        add: Sequence[NewFile] = (),
        remove: Sequence[int] = (),
        idempotency_key: str | None = None,
        claim_token: uuid.UUID | None = None,
        receipts: Sequence[str] = (),
        batch_digest: str | None = None,
        table_id: int | None = None,
        spec_version: int | None = None,
    ) -> CommitResult:
        """Run the commit protocol, retrying transient failures that surely did not commit.

        Raises :class:`CommitConflictError` (nothing committed: delete your objects),
        :class:`CommitOutcomeUnknownError` (leave your objects for the orphan sweep) or
        :class:`MetaStoreUnavailableError` (nothing committed).
        """
        check_commit_input(operation, add, remove)
        if idempotency_key is not None and "\x00" in idempotency_key:
            raise InvalidInputError("an idempotency key may not hold NUL")
        # A caller committing messages checks each of its receipts first (the queue fails a
        # message by its id); these refuse the commit as a whole, naming the receipt.
        seen: set[str] = set()
        for receipt in receipts:
            if "\x00" in receipt:
                raise InvalidInputError(f"receipt {receipt!r} holds NUL, which a receipt may not")
            if receipt in seen:
                raise InvalidInputError(f"a commit names the receipt {receipt!r} twice")
            seen.add(receipt)
        request = CommitRequest(
            info=TableRef(table_id=table_id, name=table),
            operation=operation,
            add=add,
            remove=remove,
            idempotency_key=idempotency_key,
            claim_token=claim_token,
            receipts=receipts,
            batch_digest=batch_digest,
            spec_version=spec_version,
        )
        return self._commit_with_retries(request)

    def plan_rollback(self, table: str, *, to_snapshot: int) -> RollbackPlan:
        """What making the live files those of ``to_snapshot`` takes, read in one
        repeatable-read transaction: which live files stay, which go, and which of the
        snapshot's files are no longer live (they must be restored). SnapshotNotFoundError
        when the snapshot is unknown or expired (its files may have been collected)."""
        to_snapshot = integer_argument("to_snapshot", to_snapshot)
        with self._read_only(repeatable=True) as conn:
            head = resolve(conn, table, snapshot_id=None, as_of=None)
            if to_snapshot > head.snapshot_id or to_snapshot < 1:
                raise SnapshotNotFoundError(
                    f"table {table!r} has no snapshot {to_snapshot} (its head is snapshot"
                    f" {head.snapshot_id})"
                )
            try:
                target = resolve_from(
                    conn,
                    table,
                    head.table_id,
                    head.snapshot_id,
                    head.spec_version,
                    snapshot_id=to_snapshot,
                    as_of=None,
                )
            except SnapshotNotFoundError as e:
                oldest = conn.execute(
                    "SELECT min(snapshot_id) FROM snapshots"
                    " WHERE table_id = %s AND expired_at IS NULL",
                    (head.table_id,),
                ).fetchone()
                raise SnapshotNotFoundError(
                    f"cannot roll {table!r} back to snapshot {to_snapshot}: it has expired, and"
                    " the files only it needed may have been collected; the oldest snapshot"
                    f" kept is {oldest[0] if oldest and oldest[0] is not None else 'none'}"
                ) from e
            at_head = files_at(conn, head.table_id, head.snapshot_id)
            at_target = files_at(conn, head.table_id, target.snapshot_id)
        # A restored copy stands for its original: asked again, a rollback changes nothing.
        live = {f.origin for f in at_head}
        wanted = {f.origin for f in at_target}
        return RollbackPlan(
            table=table,
            table_id=head.table_id,
            head_snapshot_id=head.snapshot_id,
            target_snapshot_id=target.snapshot_id,
            keep=tuple(f for f in at_head if f.origin in wanted),
            remove=tuple(f for f in at_head if f.origin not in wanted),
            restore=tuple(f for f in at_target if f.origin not in live),
        )

    def commit_rollback(self, plan: RollbackPlan, *, restored: Sequence[NewFile]) -> CommitResult:
        """One new snapshot whose live files are those of ``plan.target_snapshot_id``: the
        plan's ``remove`` files end, ``restored`` (copies of its ``restore`` files) are added.
        CommitConflictError when another snapshot was committed since the plan (plan again);
        a merge holding any removed file loses at its own commit."""
        remove = [f.file_id for f in plan.remove]
        check_commit_input("rollback", restored, remove)
        return self._commit_with_retries(
            CommitRequest(
                info=TableRef(table_id=plan.table_id, name=plan.table),
                operation="rollback",
                add=restored,
                remove=remove,
                idempotency_key=None,
                claim_token=None,
                receipts=(),
                rolled_back_to=plan.target_snapshot_id,
                planned_head=plan.head_snapshot_id,
            )
        )

    def _commit_with_retries(self, request: CommitRequest) -> CommitResult:
        attempt = 0
        lost = False  # an append statement may have committed without its answer arriving
        while True:
            attempt += 1
            error: Exception
            try:
                return self._commit_once(request, after_loss=lost)
            except AppendAnswerLost as e:
                lost, error = True, e
            except (*TRANSIENT, MetaStoreUnavailableError) as e:
                error = e
            except Exception as e:
                if not lost:
                    raise
                # After a loss, a failure is no answer: the lost statement may still commit
                # (queued behind a lock, say), and the caller must not delete its objects.
                return self._found_after_loss(request, e)
            if attempt >= self._commit_attempts:
                if lost:
                    return self._found_after_loss(request, error)
                if isinstance(error, MetaStoreUnavailableError):
                    raise error
                raise MetaStoreUnavailableError(
                    f"commit failed after {attempt} attempts: {error}"
                ) from error
            self._pause_before_retry(request, error, attempt)

    def _found_after_loss(self, request: CommitRequest, error: Exception) -> CommitResult:
        """The append whose answer was lost, if its files are committed by now; otherwise
        :class:`CommitOutcomeUnknownError` (it may still commit, or never)."""
        try:
            with self._connection() as conn:
                found = committed_before(conn, request)
        except Exception as e:
            raise CommitOutcomeUnknownError(
                f"the answer to an append to {request.info.name!r} was lost, and the meta"
                f" store could not be asked whether it committed: {e}"
            ) from error
        if found is not None:
            return found
        raise CommitOutcomeUnknownError(
            f"the answer to an append to {request.info.name!r} was lost, and it is not"
            f" committed yet: it may still be ({error})"
        ) from error

    @staticmethod
    def _pause_before_retry(request: CommitRequest, error: Exception, attempt: int) -> None:
        delay = min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5)
        logger.warning(
            "commit to %s failed (%s); retrying in %.2fs", request.info.name, error, delay
        )
        time.sleep(delay)

    def _commit_once(self, request: CommitRequest, *, after_loss: bool = False) -> CommitResult:
        """One attempt. ``after_loss``: an earlier attempt's append statement may have
        committed (its connection broke with the statement sent), so the append's files are
        looked up first; their paths are unique, so they are committed once or not at all."""
        with span("icefloe.commit"), self._connection() as conn:
            if after_loss:
                found = committed_before(conn, request)
                if found is not None:
                    return found
            if request.is_plain_append:
                result = append_statement(conn, request)
                if result is None and after_loss:
                    # A unique value was taken: by the lost attempt, committed while this one
                    # was on its way (then its files are there now), or by another commit.
                    result = committed_before(conn, request)
                if result is not None:
                    return result
            try:
                result = commit_statements(conn, request)
            except BaseException:
                _rollback_quietly(conn)
                raise
            if not result.committed:
                conn.rollback()
                return result
            try:
                conn.commit()
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                raise CommitOutcomeUnknownError(
                    f"connection lost while committing snapshot {result.snapshot_id} of "
                    f"{request.info.name!r}; it may or may not be committed"
                ) from e
            logger.debug(
                "committed %s snapshot %d of %s",
                request.operation,
                result.snapshot_id,
                result.table,
            )
            return result


def _rollback_quietly(conn: Conn) -> None:
    # A broken connection cannot roll back; the pool discards it and the server rolled back.
    with suppress(psycopg.Error):
        conn.rollback()
