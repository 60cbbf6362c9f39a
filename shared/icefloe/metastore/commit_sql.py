"""One attempt of the commit protocol, in SQL.

A plain append is one statement (:func:`append_statement`); any other commit, or an append
that statement cannot answer, runs stepwise (:func:`commit_statements`): lock the table's
head row, validate the commit's assumptions, take ``head + 1`` as the snapshot id, add and end
file rows, record the snapshot and move the head.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg.types.json import Jsonb

from icefloe.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    DeleteJobRunningError,
    DuplicateReceiptError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    SpecChangedError,
    TableNotFoundError,
)
from icefloe.metastore.access import Conn, statements_commit_alone
from icefloe.metastore.models import CommitResult, NewFile, Operation
from icefloe.metastore.rows import INSERT_SNAPSHOT

logger = logging.getLogger(__name__)

_INSERT_FILE = """
    INSERT INTO data_files (table_id, path, partition_path, partition_values, partition_start,
        size_bytes, row_count, row_group_count, column_stats, begin_snapshot, copy_of,
        spec_version)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
_END_FILES = """
    UPDATE data_files
    SET end_snapshot = %s, removed_at = now(), claim_token = NULL, claim_expires_at = NULL
    WHERE file_id = ANY(%s)
"""


def held_by_delete_jobs(
    conn: Conn, table: str, held: Sequence[tuple[int, uuid.UUID]]
) -> DeleteJobRunningError | None:
    """The refusal to give when a running delete job holds any of ``held`` (file id, claim
    token under an unexpired lease), naming the oldest such job; None when none does.

    A merge's claim may be taken (the merge loses at its commit and plans again later), but a
    delete job's may not: the job would fail and its delete would silently not happen."""
    if not held:
        return None
    jobs = conn.execute(
        "SELECT claim_token, job_id FROM delete_jobs WHERE state = 'running'"
        " AND claim_token = ANY(%s) ORDER BY created_at",
        (sorted({token for _, token in held}),),
    ).fetchall()
    if not jobs:
        return None
    token, job_id = jobs[0]
    files = sorted(file_id for file_id, holder in held if holder == token)
    shown = ", ".join(str(i) for i in files[:5]) + (", ..." if len(files) > 5 else "")
    return DeleteJobRunningError(
        f"{table!r}: file(s) {shown} are held by running delete job {job_id}, which would fail"
        f" (and its rows survive) if they were taken; run this delete again once that job has"
        f" ended (icefloe deletes {table})",
        job_id=job_id,
    )


_INSERT_RECEIPT = "INSERT INTO ingest_receipts (table_id, receipt, snapshot_id) VALUES (%s, %s, %s)"
_MOVE_HEAD = "UPDATE lake_tables SET head_snapshot_id = %s WHERE table_id = %s"
# An append in one statement: lock the head row, add the snapshot, its files and receipts, move
# the head. Every insert hangs off the locked row, so a missing table, another table of the same
# name or a changed spec adds nothing (the answer's snapshot_id is then NULL). A used idempotency
# key, receipt or path is a unique violation, and the stepwise protocol then says which.
_APPEND = """
    WITH head AS (
        SELECT table_id, head_snapshot_id, spec_version FROM lake_tables
        WHERE name = %(name)s AND dropped_at IS NULL FOR UPDATE
    ), snapshot AS (
        INSERT INTO snapshots (table_id, snapshot_id, parent_id, operation, idempotency_key,
            files_added, files_removed, rows_added, rows_removed, bytes_added, bytes_removed,
            batch_digest, rolled_back_to, spec_version)
        SELECT table_id, head_snapshot_id + 1, nullif(head_snapshot_id, 0), 'append', %(key)s,
            %(files_added)s, 0, %(rows_added)s, 0, %(bytes_added)s, 0, %(digest)s, NULL,
            spec_version
        FROM head
        WHERE table_id = coalesce(%(table_id)s, table_id)
            AND spec_version = coalesce(%(spec_version)s, spec_version)
        RETURNING table_id, snapshot_id
    ), files AS (
        INSERT INTO data_files (table_id, path, partition_path, partition_values,
            partition_start, size_bytes, row_count, row_group_count, column_stats,
            begin_snapshot, copy_of, spec_version)
        SELECT s.table_id, f.path, f.partition_path, f.partition_values, f.partition_start,
            f.size_bytes, f.row_count, f.row_group_count, f.column_stats, s.snapshot_id,
            f.copy_of, f.spec_version
        FROM snapshot s, jsonb_to_recordset(%(files)s) AS f(path text, partition_path text,
            partition_values jsonb, partition_start timestamp, size_bytes bigint,
            row_count bigint, row_group_count integer, column_stats jsonb, copy_of bigint,
            spec_version integer)
    ), receipts AS (
        INSERT INTO ingest_receipts (table_id, receipt, snapshot_id)
        SELECT s.table_id, r.receipt, s.snapshot_id
        FROM snapshot s, unnest(%(receipts)s::text[]) AS r(receipt)
    ), moved AS (
        UPDATE lake_tables t SET head_snapshot_id = s.snapshot_id
        FROM snapshot s WHERE t.table_id = s.table_id
    )
    SELECT h.table_id, h.spec_version, s.snapshot_id FROM head h LEFT JOIN snapshot s USING (table_id)
"""


@dataclass(frozen=True, slots=True)
class TableRef:
    table_id: int | None  # None: whichever live table has the name when the commit runs
    name: str


@dataclass(frozen=True, slots=True)
class CommitRequest:
    info: TableRef
    operation: Operation
    add: Sequence[NewFile]
    remove: Sequence[int]
    idempotency_key: str | None
    claim_token: uuid.UUID | None
    receipts: Sequence[str]
    batch_digest: str | None = None
    # A rollback: the snapshot it restores, and the head it was planned at (a commit that finds
    # the head moved is a conflict: the plan no longer gives exactly that snapshot's files).
    rolled_back_to: int | None = None
    planned_head: int | None = None
    # An append converted under this spec version: refused if the table's spec moved on.
    spec_version: int | None = None

    @property
    def is_plain_append(self) -> bool:
        """An append, which :data:`_APPEND` commits in one statement (a used key, receipt or
        path, or a changed table under a key, leaves the answer to the stepwise protocol)."""
        return self.operation == "append" and not self.remove and self.claim_token is None


def append_statement(conn: Conn, request: CommitRequest) -> CommitResult | None:
    """An append as one statement in a transaction of its own (autocommit): one round
    trip, COMMIT included. None when it met a taken idempotency key, receipt or path, or a
    key committed before the table changed: nothing was written, and the stepwise
    protocol, which looks each up, answers. Any other failure raises
    :class:`AppendAnswerLost` (the statement may have committed)."""
    info, add = request.info, request.add
    rows_added = sum(f.row_count for f in add)
    params = {
        "name": info.name,
        "table_id": info.table_id,
        "spec_version": request.spec_version,
        "key": request.idempotency_key,
        "digest": request.batch_digest if request.idempotency_key is not None else None,
        "files_added": len(add),
        "rows_added": rows_added,
        "bytes_added": sum(f.size_bytes for f in add),
        "files": Jsonb(
            [{**f.to_json(), "partition_start": _utc_text(f.partition_start)} for f in add]
        ),
        "receipts": list(request.receipts),
    }
    try:
        # Through a cursor, as the stepwise writes: tracing wraps cursors, not execute.
        with statements_commit_alone(conn), conn.cursor() as cursor:
            cursor.execute(_APPEND, params)
            row = cursor.fetchone()
    except pgerrors.UniqueViolation:
        return None  # the statement failed: nothing was written
    except psycopg.Error as e:
        # Any other failure may come after the statement committed (with COMMIT in the same
        # round trip, an error does not prove a rollback: a proxy may answer one for a
        # statement that went through), so the next attempt looks for the files first.
        raise AppendAnswerLost(
            f"no answer to an append to {info.name!r} ({e}); it may have committed"
        ) from e
    if row is None:
        raise TableNotFoundError(f"no table named {info.name!r} (was it dropped?)")
    if row[2] is None:
        if request.idempotency_key is not None:
            # A key committed before the table changed answers with its snapshot, which
            # only the stepwise protocol looks up before the table's checks.
            return None
        if info.table_id is not None and int(row[0]) != info.table_id:
            raise _recreated(info.name)
        raise _spec_changed(info.name, request.spec_version, int(row[1]))
    logger.debug("committed append snapshot %d of %s", int(row[2]), info.name)
    return CommitResult(
        table=info.name,
        snapshot_id=int(row[2]),
        committed=True,
        files_added=len(add),
        files_removed=0,
        rows_added=rows_added,
    )


def commit_statements(conn: Conn, request: CommitRequest) -> CommitResult:
    info, operation, add, remove = request.info, request.operation, request.add, request.remove
    idempotency_key, claim_token, receipts = (
        request.idempotency_key,
        request.claim_token,
        request.receipts,
    )
    # One round trip, two statements: lock the head row, then look the idempotency key up.
    # The lookup must be a statement of its own: at read committed each statement sees what
    # was committed when it started, so a key committed by an attempt this one waited for
    # (while it held the lock) is visible only to a statement that starts after the lock.
    with conn.pipeline():
        locked = conn.execute(
            "SELECT table_id, head_snapshot_id, spec_version FROM lake_tables"
            " WHERE name = %s AND dropped_at IS NULL FOR UPDATE",
            (info.name,),
        )
        earlier = conn.execute(
            "SELECT snapshot_id, batch_digest FROM snapshots WHERE table_id = ("
            "SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL)"
            " AND idempotency_key = %s",
            (info.name, idempotency_key),
        )
    head_row = locked.fetchone()
    if head_row is None:
        raise TableNotFoundError(f"no table named {info.name!r} (was it dropped?)")
    if info.table_id is not None and int(head_row[0]) != info.table_id:
        raise _recreated(info.name)
    table_id = int(head_row[0])
    head = int(head_row[1])
    if request.planned_head is not None and head != request.planned_head:
        raise CommitConflictError(
            f"{info.name!r}: snapshot {head} was committed while this {operation} was"
            f" planned at snapshot {request.planned_head}"
        )
    earlier_row = earlier.fetchone() if idempotency_key is not None else None
    if earlier_row is not None:
        check_same_batch(
            info.name,
            idempotency_key,
            int(earlier_row[0]),
            earlier_row[1],
            request.batch_digest,
        )
        return _already_committed(info.name, int(earlier_row[0]))
    if request.spec_version is not None and int(head_row[2]) != request.spec_version:
        raise _spec_changed(info.name, request.spec_version, int(head_row[2]))

    if receipts:
        seen = conn.execute(
            "SELECT receipt FROM ingest_receipts WHERE table_id = %s AND receipt = ANY(%s)",
            (table_id, list(receipts)),
        ).fetchall()
        if seen:
            raise DuplicateReceiptError(
                f"{info.name!r}: {len(seen)} message(s) were committed already",
                receipts=tuple(sorted(str(r[0]) for r in seen)),
            )

    rows_removed = bytes_removed = 0
    if remove:
        rows_removed, bytes_removed = _validate_inputs(
            conn,
            TableRef(table_id, info.name),
            remove,
            claim_token,
            # A rollback or delete overrides merges: one holding these files loses at its
            # commit (and a merge that committed first makes this commit a conflict).
            respect_claims=operation not in ("rollback", "delete"),
            # A local delete does not override a running delete job: that one would fail.
            respect_delete_jobs=operation == "delete",
        )

    new_id = head + 1
    rows_added = sum(f.row_count for f in add)
    bytes_added = sum(f.size_bytes for f in add)
    snapshot_params = (
        table_id,
        new_id,
        head or None,
        operation,
        idempotency_key,
        len(add),
        len(remove),
        rows_added,
        rows_removed,
        bytes_added,
        bytes_removed,
        request.batch_digest if idempotency_key is not None else None,
        request.rolled_back_to,
        int(head_row[2]),
    )
    try:
        # Pipelined: the writes go out together and the head lock is held for one round trip.
        with conn.pipeline(), conn.cursor() as cur:
            cur.execute(INSERT_SNAPSHOT, snapshot_params)
            if add:
                cur.executemany(_INSERT_FILE, [_file_params(table_id, f, new_id) for f in add])
            if remove:
                cur.execute(_END_FILES, (new_id, list(remove)))
            if receipts:
                cur.executemany(_INSERT_RECEIPT, [(table_id, r, new_id) for r in receipts])
            cur.execute(_MOVE_HEAD, (new_id, table_id))
    except pgerrors.UniqueViolation as e:
        raise _unique_violation(info.name, e) from e
    return CommitResult(
        table=info.name,
        snapshot_id=new_id,
        committed=True,
        files_added=len(add),
        files_removed=len(remove),
        rows_added=rows_added,
    )


def _validate_inputs(
    conn: Conn,
    info: TableRef,
    remove: Sequence[int],
    claim_token: uuid.UUID | None,
    *,
    respect_claims: bool = True,
    respect_delete_jobs: bool = False,
) -> tuple[int, int]:
    """Check that every input file is live and (un)claimed as the commit assumes; with
    ``respect_delete_jobs``, a commit without a claim of its own may not take a file a running
    delete job holds (:class:`DeleteJobRunningError`)."""
    rows = conn.execute(
        """
        SELECT file_id, end_snapshot, claim_token, claim_expires_at > now(), row_count, size_bytes
        FROM data_files WHERE table_id = %s AND file_id = ANY(%s)
        ORDER BY file_id FOR UPDATE
        """,
        (info.table_id, sorted(set(remove))),
    ).fetchall()
    found = {int(r[0]): r for r in rows}
    for file_id in remove:
        row = found.get(file_id)
        if row is None:
            raise CommitConflictError(f"{info.name!r}: input file {file_id} does not exist")
        if row[1] is not None:
            raise CommitConflictError(
                f"{info.name!r}: input file {file_id} was removed by snapshot {row[1]}"
            )
        holder, lease_active = row[2], bool(row[3])
        if claim_token is not None and holder != claim_token:
            raise CommitConflictError(
                f"{info.name!r}: input file {file_id} is no longer claimed by this job"
            )
        if claim_token is None and respect_claims and holder is not None and lease_active:
            raise CommitConflictError(f"{info.name!r}: input file {file_id} is claimed by a merge")
    if claim_token is None and respect_delete_jobs:
        # The rows are locked, so a job claiming them committed before this read: the next
        # statement sees its record.
        held = [(int(r[0]), r[2]) for r in rows if r[2] is not None and bool(r[3])]
        refusal = held_by_delete_jobs(conn, info.name, held)
        if refusal is not None:
            raise refusal
    return sum(int(r[4]) for r in rows), sum(int(r[5]) for r in rows)


def check_commit_input(operation: Operation, add: Sequence[NewFile], remove: Sequence[int]) -> None:
    if operation == "append" and (remove or not add):
        raise InvalidInputError("an append adds at least one file and removes none")
    if operation in ("replace", "delete") and not remove:
        raise InvalidInputError(f"a {operation} removes at least one file")
    if operation == "rollback" and not (add or remove):
        raise InvalidInputError("a rollback that changes no file is not committed")
    if len(remove) != len(set(remove)):
        raise InvalidInputError("a commit names the same input file twice")
    paths = [f.path for f in add]
    if len(paths) != len(set(paths)):
        raise InvalidInputError("a commit adds the same path twice")


def check_same_batch(
    table: str, key: str | None, snapshot_id: int, committed: str | None, retried: str | None
) -> None:
    """Refuse a retry of an idempotency key whose batch differs from the one it committed
    (snapshots committed before digests were kept, or without one, are trusted)."""
    if committed is not None and retried is not None and committed != retried:
        raise IdempotencyKeyReusedError(
            f"idempotency key {key!r} of {table!r} committed snapshot {snapshot_id} with another"
            " batch; a retry must send the same rows, and new rows need a new key"
        )


def _naive_utc(moment: datetime | None) -> datetime | None:
    """A partition start as stored (``timestamp``, UTC): an aware one as its UTC instant,
    whatever the session's time zone."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def _utc_text(moment: datetime | None) -> str | None:
    utc = _naive_utc(moment)
    return None if utc is None else utc.isoformat()


def _recreated(table: str) -> TableNotFoundError:
    return TableNotFoundError(
        f"table {table!r} was dropped (and created again) while this commit was prepared;"
        " nothing was committed"
    )


def _spec_changed(table: str, written: int | None, current: int) -> SpecChangedError:
    return SpecChangedError(
        f"the spec of {table!r} changed (version {written} to {current}) while this batch was"
        " written; nothing was committed"
    )


def _already_committed(table: str, snapshot_id: int) -> CommitResult:
    return CommitResult(
        table=table,
        snapshot_id=snapshot_id,
        committed=False,
        files_added=0,
        files_removed=0,
        rows_added=0,
    )


def _unique_violation(table: str, error: pgerrors.UniqueViolation) -> Exception:
    """What a commit's unique violation means, told by the constraint that was violated (the
    idempotency key and the receipts are looked up under the head lock, so only a file path
    is expected to collide)."""
    constraint = error.diag.constraint_name or ""
    if constraint == "data_files_path_key":
        return CommitConflictError(f"a file path of this commit is registered already in {table!r}")
    return CommitConflictError(
        f"commit to {table!r} violates the meta store constraint {constraint or '(unnamed)'}:"
        f" {str(error).strip().splitlines()[0]}"
    )


class AppendAnswerLost(CommitOutcomeUnknownError):
    """An append statement got no answer (its connection broke, or any error came back but a
    unique violation): it may have committed. The meta store catches it and looks the append
    up; should one ever escape, it means what its base says."""


def committed_before(conn: Conn, request: CommitRequest) -> CommitResult | None:
    """The snapshot holding the append's files, if an attempt whose answer was lost committed
    them (their paths are unique: committed once or not at all); None when none is there."""
    if request.operation != "append" or not request.add:
        return None
    paths = sorted({f.path for f in request.add})
    with statements_commit_alone(conn):
        found = conn.execute(
            "SELECT begin_snapshot, count(*) FROM data_files WHERE path = ANY(%s)"
            " GROUP BY begin_snapshot",
            (paths,),
        ).fetchall()
    if not found:
        return None
    if len(found) != 1 or int(found[0][1]) != len(paths):
        raise CommitConflictError(
            f"{request.info.name!r}: files of this append are registered already, not all of"
            " them in one snapshot"
        )
    snapshot_id = int(found[0][0])
    logger.warning(
        "the lost answer to an append to %s is found: it committed snapshot %d",
        request.info.name,
        snapshot_id,
    )
    return CommitResult(
        table=request.info.name,
        snapshot_id=snapshot_id,
        committed=True,
        files_added=len(request.add),
        files_removed=0,
        rows_added=sum(f.row_count for f in request.add),
    )


def _file_params(table_id: int, f: NewFile, snapshot_id: int) -> tuple[Any, ...]:
    return (
        table_id,
        f.path,
        f.partition_path,
        Jsonb(dict(f.partition_values)),
        _naive_utc(f.partition_start),
        f.size_bytes,
        f.row_count,
        f.row_group_count,
        Jsonb({name: stats.to_json() for name, stats in f.column_stats.items()}),
        snapshot_id,
        f.copy_of,
        f.spec_version,
    )
