"""Iceberg publication records: which icefloe snapshots Iceberg snapshots show, and which of
them are still retained (so the janitor keeps their files).

A publication is recorded, under the table's head lock, before its Iceberg commit: from then
on the janitor's snapshot expiry (which takes the same lock) stops below it, so the files an
Iceberg reader will reach cannot be collected between the listing and the commit. It is
expired once its Iceberg snapshot is gone from the catalog.

Publications of one table to one catalog run one at a time (:meth:`PublicationStore.lock`),
from reading the head to the Iceberg commit and its confirmation: so the newest confirmed
publication is what the Iceberg table shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from icefloe.errors import SnapshotNotFoundError, TableNotFoundError
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec


@dataclass(frozen=True, slots=True)
class PublishedState:
    """A table's newest publication in one catalog, and its lag behind the head."""

    catalog: str
    snapshot_id: int  # the icefloe snapshot the current Iceberg snapshot shows
    iceberg_snapshot_id: int
    published_at: datetime
    snapshots_behind: int  # commits since (0: current)
    behind_since: datetime | None  # when the first commit it does not show landed

    def lag(self, now: datetime) -> timedelta:
        """How long the published table has been behind the head (zero while current)."""
        return timedelta(0) if self.behind_since is None else now - self.behind_since


@dataclass(frozen=True, slots=True)
class DroppedPublication:
    """A dropped table still published in a catalog: its Iceberg table is dropped once the
    drop's retention has passed, and the janitor purges the table after that."""

    table_id: int
    name: str
    retention: timedelta
    dropped_at: datetime


@dataclass(frozen=True, slots=True)
class Publication:
    """One Iceberg snapshot of a table, in one catalog, showing icefloe snapshot
    ``snapshot_id`` (``iceberg_snapshot_id`` None: its commit has not been confirmed)."""

    table: str
    catalog: str
    snapshot_id: int
    iceberg_snapshot_id: int | None
    published_at: datetime
    expired_at: datetime | None


class PublicationStore:
    """Records and retains Iceberg publications, over a :class:`MetaStore`'s pool."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    @contextmanager
    def lock(self, table: str, *, catalog: str) -> Iterator[None]:
        """Hold, for the block, the lock that makes publications (and drops) of ``table``'s
        Iceberg table in ``catalog`` run one at a time, across processes: a Postgres advisory
        lock in a transaction held open on one pooled connection, released when the block ends
        (or the connection is lost). Waits while another publisher holds it.

        Keyed by the Iceberg table (this meta store's schema, the catalog and namespace, the
        table's name), not the table id: a table dropped and created again under its name
        publishes to the same Iceberg table."""
        with self._meta.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key(table, catalog),))
            yield

    def _lock_key(self, table: str, catalog: str) -> int:
        text = f"icefloe.publish\0{self._meta.schema}\0{catalog}\0{table}"
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def pin(self, table: str, *, catalog: str, snapshot_id: int) -> None:
        """Record (or retain again) a publication of ``snapshot_id`` before its Iceberg commit.
        SnapshotNotFoundError when that snapshot expired already (publish a newer one)."""
        with self._meta.transaction() as conn:
            head = conn.execute(
                "SELECT table_id FROM lake_tables WHERE name = %s AND dropped_at IS NULL"
                " FOR UPDATE",
                (table,),
            ).fetchone()
            if head is None:
                raise TableNotFoundError(f"no table {table!r}")
            table_id = int(head[0])
            live = conn.execute(
                "SELECT 1 FROM snapshots WHERE table_id = %s AND snapshot_id = %s"
                " AND expired_at IS NULL",
                (table_id, snapshot_id),
            ).fetchone()
            if live is None and snapshot_id != 0:
                raise SnapshotNotFoundError(
                    f"snapshot {snapshot_id} of {table!r} expired before it was published"
                )
            conn.execute(
                "INSERT INTO iceberg_publications (table_id, catalog, snapshot_id)"
                " VALUES (%s, %s, %s) ON CONFLICT (table_id, catalog, snapshot_id)"
                " DO UPDATE SET expired_at = NULL",
                (table_id, catalog, snapshot_id),
            )

    def confirm(
        self, table: str, *, catalog: str, snapshot_id: int, iceberg_snapshot_id: int
    ) -> None:
        """Name the Iceberg snapshot a recorded publication committed."""
        with self._meta.transaction() as conn:
            conn.execute(
                "UPDATE iceberg_publications p SET iceberg_snapshot_id = %s"
                " FROM lake_tables t WHERE t.table_id = p.table_id AND t.name = %s"
                " AND t.dropped_at IS NULL AND p.catalog = %s AND p.snapshot_id = %s",
                (iceberg_snapshot_id, table, catalog, snapshot_id),
            )

    def retained(self, table: str, *, catalog: str | None = None) -> list[Publication]:
        """The table's retained publications (in one catalog, or all), oldest first."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT p.catalog, p.snapshot_id, p.iceberg_snapshot_id, p.published_at,"
                " p.expired_at FROM iceberg_publications p JOIN lake_tables t"
                " ON t.table_id = p.table_id AND t.name = %s AND t.dropped_at IS NULL"
                " WHERE p.expired_at IS NULL AND (%s::text IS NULL OR p.catalog = %s)"
                " ORDER BY p.snapshot_id, p.catalog",
                (table, catalog, catalog),
            ).fetchall()
        return [
            Publication(
                table, str(r[0]), int(r[1]), None if r[2] is None else int(r[2]), r[3], r[4]
            )
            for r in rows
        ]

    def states(self, table: str) -> list[PublishedState]:
        """Where ``table`` stands in each catalog it is published in: its newest confirmed
        publication, and how far the head has moved past it."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (p.catalog) p.catalog, p.snapshot_id, p.iceberg_snapshot_id,"
                " p.published_at, t.head_snapshot_id, (SELECT min(s.committed_at) FROM snapshots"
                " s WHERE s.table_id = t.table_id AND s.snapshot_id > p.snapshot_id)"
                " FROM iceberg_publications p JOIN lake_tables t"
                " ON t.table_id = p.table_id AND t.name = %s AND t.dropped_at IS NULL"
                " WHERE p.expired_at IS NULL AND p.iceberg_snapshot_id IS NOT NULL"
                " ORDER BY p.catalog, p.snapshot_id DESC",
                (table,),
            ).fetchall()
        return [
            PublishedState(
                catalog=str(r[0]),
                snapshot_id=int(r[1]),
                iceberg_snapshot_id=int(r[2]),
                published_at=r[3],
                snapshots_behind=int(r[4]) - int(r[1]),
                behind_since=r[5],
            )
            for r in rows
        ]

    def dropped_tables(self, *, catalog: str) -> list[DroppedPublication]:
        """Dropped tables (not purged yet) with publications retained in ``catalog``."""
        with self._meta.read_transaction() as conn:
            rows = conn.execute(
                "SELECT t.table_id, t.name, t.spec, t.dropped_at FROM lake_tables t"
                " WHERE t.dropped_at IS NOT NULL AND EXISTS (SELECT 1 FROM"
                " iceberg_publications p WHERE p.table_id = t.table_id AND p.catalog = %s"
                " AND p.expired_at IS NULL) ORDER BY t.dropped_at",
                (catalog,),
            ).fetchall()
        return [
            DroppedPublication(
                table_id=int(r[0]),
                name=str(r[1]),
                retention=timedelta(
                    seconds=TableSpec.from_dict(r[2]).retention.snapshot_retention_seconds
                ),
                dropped_at=r[3],
            )
            for r in rows
        ]

    def any_dropped_table_published(self) -> bool:
        """Whether any dropped table still has a retained publication, in any catalog."""
        with self._meta.read_transaction() as conn:
            row = conn.execute(
                "SELECT 1 FROM iceberg_publications p JOIN lake_tables t USING (table_id)"
                " WHERE t.dropped_at IS NOT NULL AND p.expired_at IS NULL LIMIT 1"
            ).fetchone()
        return row is not None

    def release_table(self, table_id: int, *, catalog: str) -> int:
        """Stop retaining every publication of a table (live or dropped) in ``catalog``: its
        Iceberg table is gone from that catalog. How many."""
        with self._meta.transaction() as conn:
            cur = conn.execute(
                "UPDATE iceberg_publications SET expired_at = now() WHERE table_id = %s"
                " AND catalog = %s AND expired_at IS NULL",
                (table_id, catalog),
            )
            return cur.rowcount

    def expire(self, table: str, *, catalog: str, snapshot_ids: Collection[int]) -> int:
        """Stop retaining these publications (their Iceberg snapshots are gone); how many."""
        if not snapshot_ids:
            return 0
        with self._meta.transaction() as conn:
            cur = conn.execute(
                "UPDATE iceberg_publications p SET expired_at = now() FROM lake_tables t"
                " WHERE t.table_id = p.table_id AND t.name = %s AND t.dropped_at IS NULL"
                " AND p.catalog = %s AND p.snapshot_id = ANY(%s) AND p.expired_at IS NULL",
                (table, catalog, sorted(snapshot_ids)),
            )
            return cur.rowcount
