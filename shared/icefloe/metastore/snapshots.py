"""Snapshot and file reads: a table's snapshots, the snapshot a read pins, the files live at
a snapshot (or named by id or path), and the head's status and partition shapes."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from psycopg import sql

from icefloe.errors import SnapshotNotFoundError
from icefloe.metastore.access import Conn, StoreAccess
from icefloe.metastore.models import (
    FILE_SIZE_BUCKETS,
    ChangedFiles,
    DataFile,
    LiveFile,
    PartitionShape,
    Snapshot,
    TableStatus,
)
from icefloe.metastore.pinned import (
    Pin,
    PinnedSnapshot,
    files_at,
    live_at,
    resolve,
    resolve_from,
)
from icefloe.metastore.rows import (
    FILE_COLUMNS,
    FILE_COLUMNS_WITHOUT_STATS,
    SNAPSHOT_COLUMNS,
    data_file,
    snapshot_of,
)


class SnapshotReads(StoreAccess):
    """Reads of snapshots and files (a part of :class:`~icefloe.metastore.store.MetaStore`)."""

    def snapshots(self, table: str) -> list[Snapshot]:
        """Every snapshot of a table, oldest first (expired ones flagged)."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            query = sql.SQL(
                "SELECT {columns} FROM snapshots WHERE table_id = %s ORDER BY snapshot_id"
            ).format(columns=sql.SQL(SNAPSHOT_COLUMNS))
            rows = conn.execute(query, (info.table_id,)).fetchall()
        return [snapshot_of(row) for row in rows]

    def snapshot_for_key(self, table: str, idempotency_key: str) -> Snapshot | None:
        """The snapshot committed under ``idempotency_key``, if any (a cheap pre-check that
        spares a retried batch its writes; the commit itself re-checks under the head lock)."""
        with self._autocommit() as conn:
            query = sql.SQL(
                "SELECT {columns} FROM snapshots"
                " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND idempotency_key = %s"
            ).format(columns=sql.SQL(SNAPSHOT_COLUMNS))
            row = conn.execute(query, (table, idempotency_key)).fetchone()
        return None if row is None else snapshot_of(row)

    def resolve_snapshot(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> int:
        """The snapshot a read pins: the head, a given id, or the last one committed at ``as_of``.

        Returns 0 for a table that has no commit yet (and no id was asked for).
        """
        with self.pin(table, snapshot_id=snapshot_id, as_of=as_of) as pinned:
            return pinned.snapshot_id

    @contextmanager
    def pin(
        self, table: str, *, snapshot_id: int | None = None, as_of: datetime | None = None
    ) -> Iterator[PinnedSnapshot]:
        """Resolve a snapshot (as :meth:`resolve_snapshot`) inside one repeatable-read
        transaction, and list its files from the same transaction: whatever commits or janitor
        runs happen meanwhile, the listing is the complete file list of the snapshot that was
        resolved. SnapshotNotFoundError names a snapshot that is unknown or expired."""
        with self._read_only(repeatable=True) as conn:
            yield PinnedSnapshot(conn, resolve(conn, table, snapshot_id=snapshot_id, as_of=as_of))

    # -- files ----------------------------------------------------------------------------------

    def files(
        self,
        table: str,
        *,
        snapshot_id: int | None = None,
        partitions: Sequence[str] | None = None,
        start_from: datetime | None = None,
        start_before: datetime | None = None,
    ) -> list[DataFile]:
        """The files live at a snapshot (default: the head), optionally pruned.

        ``partitions`` keeps only those partition paths. ``start_from``/``start_before`` keep
        files whose partition period starts in ``[start_from, start_before)``; the caller aligns
        ``start_from`` down to the partition period so that a range never misses a period that
        overlaps it.
        """
        info = self.get_table(table)
        at = info.head_snapshot_id if snapshot_id is None else snapshot_id
        with self._connection() as conn:
            files = files_at(
                conn,
                info.table_id,
                at,
                partitions=partitions,
                start_from=start_from,
                start_before=start_before,
            )
            conn.rollback()
        return files

    def changed_files(
        self, table: str, *, since: int, until: int | None = None, table_id: int | None = None
    ) -> ChangedFiles:
        """The files whose liveness differs between snapshots ``since`` and ``until`` (the
        head by default), read in one repeatable-read transaction. ``since`` 0 stands for the
        table before its first commit, while no snapshot has expired. SnapshotNotFoundError
        when either is unknown or expired (naming the oldest snapshot kept), or ``since`` is
        after ``until``, or ``table_id`` is given and the table named ``table`` is another one
        (snapshot ids count from 1 in every table, so a position in one table's history means
        nothing in another's, such as a table created again under the name of a dropped one)."""
        with self._read_only(repeatable=True) as conn:
            head = resolve(conn, table, snapshot_id=None, as_of=None)
            if table_id is not None and table_id != head.table_id:
                raise SnapshotNotFoundError(_other_table(conn, table, table_id, head.table_id))
            end = resolve_from(
                conn,
                table,
                head.table_id,
                head.snapshot_id,
                head.spec_version,
                snapshot_id=until or None,
                as_of=None,
            )
            if until == 0:  # the table before its first commit, in its first schema
                end = Pin(table, end.table_id, 0, 1)
            kept = conn.execute(
                "SELECT min(snapshot_id) FILTER (WHERE expired_at IS NULL),"
                " count(*) FILTER (WHERE expired_at IS NOT NULL)"
                " FROM snapshots WHERE table_id = %s",
                (end.table_id,),
            ).fetchone()
            oldest, expired = (kept[0], int(kept[1])) if kept else (None, 0)
            if since < 0 or (since == 0 and expired) or since > end.snapshot_id:
                raise SnapshotNotFoundError(_since_refused(table, since, end.snapshot_id, oldest))
            if since:
                try:
                    resolve_from(
                        conn,
                        table,
                        head.table_id,
                        head.snapshot_id,
                        head.spec_version,
                        snapshot_id=since,
                        as_of=None,
                    )
                except SnapshotNotFoundError:
                    raise SnapshotNotFoundError(
                        _since_refused(table, since, end.snapshot_id, oldest)
                    ) from None
            rows = conn.execute(
                sql.SQL(
                    "SELECT {} FROM data_files WHERE table_id = %(t)s"
                    " AND begin_snapshot <= %(until)s"
                    " AND (end_snapshot IS NULL OR end_snapshot > %(since)s)"
                    " AND NOT (begin_snapshot <= %(since)s"
                    "          AND (end_snapshot IS NULL OR end_snapshot > %(until)s))"
                    " ORDER BY file_id"
                ).format(sql.SQL(FILE_COLUMNS)),
                {"t": end.table_id, "since": since, "until": end.snapshot_id},
            ).fetchall()
        files = [data_file(row) for row in rows]

        def live(f: DataFile, at: int) -> bool:
            return f.begin_snapshot <= at and (f.end_snapshot is None or f.end_snapshot > at)

        at_since = [live(f, since) for f in files]
        at_until = [live(f, end.snapshot_id) for f in files]
        return ChangedFiles(
            since=since,
            until=end.snapshot_id,
            spec_version=end.spec_version,
            added=tuple(f for f, s, u in zip(files, at_since, at_until, strict=True) if u),
            removed=tuple(f for f, s, u in zip(files, at_since, at_until, strict=True) if s),
            passed=tuple(
                f for f, s, u in zip(files, at_since, at_until, strict=True) if not (s or u)
            ),
        )

    def live_files(self, table: str) -> list[LiveFile]:
        """The files live at the head, in id order, as :meth:`files` gives them but without
        their statistics: what planning merges reads."""
        info = self.get_table(table)
        where, params = live_at(info.table_id, info.head_snapshot_id)
        query = sql.SQL(
            "SELECT file_id, partition_path, partition_start, size_bytes, row_count, created_at,"
            " coalesce(claim_token IS NOT NULL AND claim_expires_at > now(), false),"
            " spec_version FROM data_files WHERE {} ORDER BY file_id"
        ).format(where)
        with self._autocommit() as conn:
            rows = conn.execute(query, params).fetchall()
        return list(map(LiveFile._make, rows))

    def files_by_id(
        self, table: str, file_ids: Sequence[int], *, statistics: bool = True
    ) -> list[DataFile]:
        """The rows of these files of ``table``, live or not, in id order (missing ids are
        simply absent): what a merge worker checks its inputs against. Without
        ``statistics``, each file's ``column_stats`` is empty (a merge reads none)."""
        query = sql.SQL(
            "SELECT {columns} FROM data_files"
            " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND file_id = ANY(%s) ORDER BY file_id"
        ).format(columns=sql.SQL(FILE_COLUMNS if statistics else FILE_COLUMNS_WITHOUT_STATS))
        with self._autocommit() as conn:
            rows = conn.execute(query, (table, sorted(set(file_ids)))).fetchall()
        return [data_file(row) for row in rows]

    def files_by_path(self, table: str, paths: Sequence[str]) -> list[DataFile]:
        """The rows of the files of ``table`` at these object keys, live or not, in id order
        (a key names one file row at most): a query plan's files, without listing the rest."""
        query = sql.SQL(
            "SELECT {columns} FROM data_files"
            " WHERE table_id = (SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL) AND path = ANY(%s) ORDER BY file_id"
        ).format(columns=sql.SQL(FILE_COLUMNS))
        with self._autocommit() as conn:
            rows = conn.execute(query, (table, sorted(set(paths)))).fetchall()
        return [data_file(row) for row in rows]

    def status(self, table: str) -> TableStatus:
        """Live files, partitions, rows and bytes at the head."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            row = conn.execute(
                """
                SELECT count(*), count(DISTINCT partition_path),
                       coalesce(sum(row_count), 0), coalesce(sum(size_bytes), 0),
                       count(*) FILTER (WHERE claim_token IS NOT NULL AND claim_expires_at > now()),
                       max(claim_expires_at) FILTER (
                           WHERE claim_token IS NOT NULL AND claim_expires_at > now())
                FROM data_files WHERE table_id = %s AND end_snapshot IS NULL
                """,
                (info.table_id,),
            ).fetchone()
        assert row is not None
        return TableStatus(
            table=info.name,
            head_snapshot_id=info.head_snapshot_id,
            live_files=int(row[0]),
            partitions=int(row[1]),
            rows=int(row[2]),
            bytes=int(row[3]),
            claimed_files=int(row[4]),
            claimed_until=row[5],
        )

    def partition_shapes(self, table: str) -> list[PartitionShape]:
        """Each partition's live files at the head, with a histogram of their sizes."""
        info = self.get_table(table)
        with self._autocommit() as conn:
            rows = conn.execute(
                "SELECT partition_path, count(*), sum(row_count), sum(size_bytes),"
                " array_agg(size_bytes) FROM data_files"
                " WHERE table_id = %s AND end_snapshot IS NULL"
                " GROUP BY partition_path ORDER BY partition_path",
                (info.table_id,),
            ).fetchall()
        return [
            PartitionShape(
                partition_path=str(row[0]),
                files=int(row[1]),
                rows=int(row[2]),
                bytes=int(row[3]),
                size_buckets=_histogram([int(b) for b in row[4]]),
            )
            for row in rows
        ]


def _histogram(sizes: Sequence[int]) -> tuple[int, ...]:
    counts = [0] * (len(FILE_SIZE_BUCKETS) + 1)
    for size in sizes:
        counts[bisect.bisect_left(FILE_SIZE_BUCKETS, size)] += 1
    return tuple(counts)


def _since_refused(table: str, since: int, until: int, oldest: int | None) -> str:
    if since > until:
        return f"table {table!r}: changes since snapshot {since} cannot end at {until}, before it"
    kept = (
        "it has no snapshot yet"
        if oldest is None
        else f"the oldest snapshot it keeps is {oldest}: read the table at {oldest} and follow"
        f" its changes from there, and read changes more often than the table's retention"
    )
    return f"table {table!r}: snapshot {since} is unknown or expired, so its changes since it cannot be read ({kept})"


def _other_table(conn: Conn, table: str, given: int, current: int) -> str:
    """Why a position of table id ``given`` is refused on table ``table`` (id ``current``),
    and what the consumer does instead."""
    rows = conn.execute(
        "SELECT table_id, name, created_at, dropped_at FROM lake_tables WHERE table_id = ANY(%s)",
        ([given, current],),
    ).fetchall()
    found = {int(row[0]): row[1:] for row in rows}
    now = found.get(current)
    created = f", created {now[1].isoformat()}" if now is not None else ""
    was = found.get(given)
    if was is None:
        whose = f"of table id {given}, which no table has now (dropped and purged, or never)"
    elif was[0] == table and was[2] is not None:
        whose = (
            f"of an earlier table {table!r} (table id {given}), dropped"
            f" {was[2].isoformat()}: the table was dropped and created again since"
        )
    else:
        dropped = ", dropped" if was[2] is not None else ""
        whose = f"of another table, {was[0]!r} (table id {given}{dropped})"
    return (
        f"table {table!r} is table id {current}{created}, and the position given is {whose}."
        " Snapshot ids count from 1 in every table, so no changes can be read from it: start"
        f" again from snapshot 0 with table_id={current}, and let this table's rows replace"
        " what you hold of the other"
    )
