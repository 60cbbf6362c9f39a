"""The janitor's statements: expire snapshots, find and forget dead files, know which objects
are registered (a file row names them, or a running delete job recorded them), free expired
claims, prune old receipts.

Kept apart from the read and commit paths (:mod:`icefloe.metastore.snapshots`,
:mod:`icefloe.metastore.commits`); its statements go through the meta store's transactions, on
the same pool. A retained Iceberg publication (:mod:`icefloe.metastore.publications`) holds the
snapshot it shows and every later one. Snapshots expire as a prefix: every snapshot older than the newest one committed at or
before ``now - retention`` (that one stays: it is what ``as_of`` the retention boundary reads),
so the head never expires, and a dead file whose last snapshot (``end - 1``) expired is seen
by no live snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg import sql

from icefloe.metastore.access import Conn
from icefloe.metastore.models import DataFile
from icefloe.metastore.rows import FILE_COLUMNS, data_file
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec


def _below_publications(conn: Conn, table_id: int, boundary: int | None) -> int | None:
    """``boundary`` lowered to the oldest snapshot a retained Iceberg publication shows: an
    Iceberg reader may still read that snapshot's files, so it and every later one stay."""
    row = conn.execute(
        "SELECT min(snapshot_id) FROM iceberg_publications"
        " WHERE table_id = %s AND expired_at IS NULL",
        (table_id,),
    ).fetchone()
    if boundary is None or row is None or row[0] is None:
        return boundary
    return min(boundary, int(row[0]))


@dataclass(frozen=True, slots=True)
class ExpiryPlan:
    """Which snapshots of a table are (or would be) expired by a retention."""

    table: str
    boundary: int | None  # snapshots below this id expire; None: nothing is old enough
    snapshot_ids: tuple[int, ...]


class JanitorStore:
    """The janitor's statements (garbage collection) over a :class:`MetaStore`'s pool."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def plan_expiry(self, table: str, *, retention: timedelta) -> ExpiryPlan:
        """The unexpired snapshots that ``retention`` expires now (nothing changes)."""
        table_id = self._meta.get_table(table).table_id
        with self._meta.read_transaction() as conn:
            row = conn.execute(
                "SELECT max(snapshot_id) FROM snapshots"
                " WHERE table_id = %s AND committed_at <= now() - %s",
                (table_id, retention),
            ).fetchone()
            boundary = None if row is None or row[0] is None else int(row[0])
            boundary = _below_publications(conn, table_id, boundary)
            ids: list[int] = []
            if boundary is not None:
                ids = [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT snapshot_id FROM snapshots WHERE table_id = %s"
                        " AND snapshot_id < %s AND expired_at IS NULL ORDER BY snapshot_id",
                        (table_id, boundary),
                    ).fetchall()
                ]
        return ExpiryPlan(table=table, boundary=boundary, snapshot_ids=tuple(ids))

    def expire_snapshots(self, plan: ExpiryPlan) -> int:
        """Expire the snapshots below the plan's boundary; returns how many were expired."""
        if plan.boundary is None:
            return 0
        table_id = self._meta.get_table(plan.table).table_id
        with self._meta.transaction() as conn:
            # The head lock orders this against a publication being recorded (it takes the
            # same lock): a publication recorded since the plan still holds its snapshot.
            conn.execute(
                "SELECT 1 FROM lake_tables WHERE table_id = %s FOR UPDATE", (table_id,)
            ).fetchone()
            boundary = _below_publications(conn, table_id, plan.boundary)
            cur = conn.execute(
                "UPDATE snapshots SET expired_at = now()"
                " WHERE table_id = %s AND snapshot_id < %s AND expired_at IS NULL",
                (table_id, boundary),
            )
            return cur.rowcount

    def collectable_files(
        self,
        table: str,
        *,
        grace: timedelta,
        limit: int,
        assume_expired_below: int | None = None,
    ) -> list[DataFile]:
        """Dead files that no live snapshot sees: the last snapshot that saw one (its end
        snapshot - 1; ids have no gaps) expired at least ``grace`` ago. Oldest first.

        Snapshots expire as a prefix, so when that one expired every earlier one had too.
        ``assume_expired_below`` (a dry run) also counts snapshots below that id as expired
        now, which is what a real run would do first.
        """
        table_id = self._meta.get_table(table).table_id
        query = sql.SQL(
            """
            SELECT {columns} FROM data_files WHERE file_id IN (
                SELECT f.file_id FROM data_files f
                JOIN snapshots s
                  ON s.table_id = f.table_id AND s.snapshot_id = f.end_snapshot - 1
                WHERE f.table_id = %(table_id)s AND f.end_snapshot IS NOT NULL
                  AND (s.expired_at <= now() - %(grace)s
                       OR (%(assume)s::bigint IS NOT NULL AND s.expired_at IS NULL
                           AND s.snapshot_id < %(assume)s AND %(grace)s <= interval '0'))
                ORDER BY f.file_id
                LIMIT %(limit)s
            )
            ORDER BY file_id
            """
        ).format(columns=sql.SQL(FILE_COLUMNS))
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                query,
                {
                    "table_id": table_id,
                    "grace": grace,
                    "assume": assume_expired_below,
                    "limit": limit,
                },
            ).fetchall()
        return [data_file(row) for row in rows]

    def forget_files(self, table: str, file_ids: Sequence[int]) -> int:
        """Delete the rows of dead files whose objects are gone; returns how many."""
        if not file_ids:
            return 0
        table_id = self._meta.get_table(table).table_id
        with self._meta.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM data_files WHERE table_id = %s AND file_id = ANY(%s)"
                " AND end_snapshot IS NOT NULL",
                (table_id, list(file_ids)),
            )
            return cur.rowcount

    def registered_paths(self, paths: Sequence[str]) -> set[str]:
        """Which of ``paths`` a file row names (live or dead, in any table), or a running
        delete job has recorded as a part's rewrite.

        A job's recorded rewrites get their file rows only when its last part commits, which
        may be hours later (its parts wait behind merges on the queue): until then the part
        record is what names them, and sweeping them would make the job commit rows whose
        objects are gone. One statement, so a job committing meanwhile is seen either still
        running or with its rows; a job that ended failed names nothing (it deletes its
        rewrites itself, and the sweep takes what a kill left)."""
        if not paths:
            return set()
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT path FROM data_files WHERE path = ANY(%(paths)s)"
                " UNION SELECT f.rewrite ->> 'path' FROM delete_jobs j"
                " JOIN delete_parts p ON p.job_id = j.job_id,"
                " jsonb_array_elements(p.added) AS f(rewrite)"
                " WHERE j.state = 'running' AND p.added IS NOT NULL"
                " AND f.rewrite ->> 'path' = ANY(%(paths)s)",
                {"paths": list(paths)},
            ).fetchall()
        return {str(r[0]) for r in rows}

    def free_expired_claims(self, *, dry_run: bool = False) -> int:
        """Clear claims whose lease ran out (their workers are gone or late)."""
        condition = "claim_token IS NOT NULL AND claim_expires_at <= now() AND end_snapshot IS NULL"
        with self._meta.transaction() as conn:
            if dry_run:
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM data_files WHERE {}").format(sql.SQL(condition))
                ).fetchone()
                return int(row[0]) if row else 0
            cur = conn.execute(
                sql.SQL(
                    "UPDATE data_files SET claim_token = NULL, claim_expires_at = NULL WHERE {}"
                ).format(sql.SQL(condition))
            )
            return cur.rowcount

    def prune_receipts(self, *, older_than: timedelta, dry_run: bool = False) -> int:
        """Forget ingest receipts older than any redelivery can be."""
        with self._meta.transaction() as conn:
            if dry_run:
                row = conn.execute(
                    "SELECT count(*) FROM ingest_receipts WHERE received_at < now() - %s",
                    (older_than,),
                ).fetchone()
                return int(row[0]) if row else 0
            cur = conn.execute(
                "DELETE FROM ingest_receipts WHERE received_at < now() - %s", (older_than,)
            )
            return cur.rowcount

    def dropped_tables(self, *, name: str | None = None) -> list[DroppedTable]:
        """Dropped tables not purged yet (of one name, when given), oldest drop first."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT t.table_id, t.name, t.spec, t.dropped_at, EXISTS (SELECT 1 FROM"
                " iceberg_publications p WHERE p.table_id = t.table_id AND p.expired_at IS NULL)"
                " FROM lake_tables t WHERE t.dropped_at IS NOT NULL"
                " AND (%(name)s::text IS NULL OR t.name = %(name)s) ORDER BY t.dropped_at",
                {"name": name},
            ).fetchall()
        return [
            DroppedTable(
                table_id=int(r[0]),
                name=str(r[1]),
                spec=TableSpec.from_dict(r[2]),
                dropped_at=r[3],
                published=bool(r[4]),
            )
            for r in rows
        ]

    def table_paths(self, table_id: int, *, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` (file id, path) of a dropped table's file rows, live or dead."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT file_id, path FROM data_files WHERE table_id = %s ORDER BY file_id LIMIT %s",
                (table_id, limit),
            ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def forget_file_rows(self, table_id: int, file_ids: Sequence[int]) -> int:
        with self._meta.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM data_files WHERE table_id = %s AND file_id = ANY(%s)",
                (table_id, list(file_ids)),
            )
            return cur.rowcount

    def table_jobs(self, table_id: int) -> list[tuple[str, str]]:
        """(job id, manifest or request key) of every compaction and query job recorded for a
        table."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT job_id, manifest_key FROM compaction_jobs WHERE table_id = %s"
                " UNION ALL SELECT job_id, request_key FROM query_jobs WHERE table_id = %s",
                (table_id, table_id),
            ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def forget_table(self, table_id: int) -> None:
        """Delete a dropped table's row and, by cascade, its snapshots, receipts and jobs."""
        with self._meta.transaction() as conn:
            conn.execute(
                "DELETE FROM lake_tables WHERE table_id = %s AND dropped_at IS NOT NULL",
                (table_id,),
            )


@dataclass(frozen=True, slots=True)
class DroppedTable:
    table_id: int
    name: str
    spec: TableSpec
    dropped_at: datetime
    # Iceberg publications still retained: its Iceberg table is not dropped yet, and its files
    # must stay until it is (icefloe.iceberg.current drops it; the purge waits).
    published: bool = False
