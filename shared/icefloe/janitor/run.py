"""The janitor: expire old snapshots, delete files no snapshot needs, sweep orphans, free claims.

Per table, in this order:

1. **Expire** snapshots older than the retention (the table's, default 3 days), keeping the
   newest one at or before the boundary and the head. Time travel to them then fails clearly.
2. **Delete dead files**: files that no live snapshot sees, once the last snapshot that saw
   them expired at least the deletion grace ago (``min(15 minutes, retention)``: a query that
   pinned a snapshot just before it expired finishes first). Objects first, then rows, a thousand at a time, at most ``max_files`` per
   run: a run that dies between the two leaves rows whose objects are gone, and the next run
   deletes them again (deleting a missing object succeeds) and forgets the rows.
3. **Sweep orphans**: objects under the table's data prefix that no file row names (nor a
   running delete job's record of its parts' rewrites, which wait for its last part), older than
   the orphan grace (default 1 day, never below :data:`ORPHAN_GRACE_FLOOR`, which is longer
   than any writer runs between its upload and its commit). The only listing of the bucket.

Before the tables: settle compaction and query jobs whose end event was lost (asking EMR
Serverless with ``get_job_run``; a job that never started or outlived its claims is settled as
failed). Then for the whole meta store: free claims whose lease ran out, and forget ingest
receipts older than any redelivery can be. Objects written after the oldest unsettled compaction job of a
table started are never swept as orphans while it runs. ``dry_run`` changes nothing and reports what would go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from icefloe.compaction.tracking import reconcile_jobs
from icefloe.errors import (
    CommitOutcomeUnknownError,
    IcefloeError,
    InvalidInputError,
    MetaStoreUnavailableError,
    TableNotFoundError,
)
from icefloe.janitor.durations import LONGEST_DURATION, format_duration
from icefloe.metastore.janitor import DroppedTable, JanitorStore
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.models import DataFile
from icefloe.metastore.store import MetaStore
from icefloe.storage import ObjectStore
from icefloe.storage.base import ObjectInfo

logger = logging.getLogger(__name__)

# Longer than any writer runs between uploading an object and committing it (a Lambda's 15
# minutes; a Spark compaction job's run time limit must stay below it too).
ORPHAN_GRACE_FLOOR = timedelta(hours=1)
# How long a query may still read files of a snapshot that expired while it ran.
QUERY_GRACE = timedelta(minutes=15)
# Longer than a message can be redelivered: the insert queue keeps 4 days, its DLQ 14.
RECEIPT_RETENTION = timedelta(days=15)
DELETE_BATCH = 1000
MAX_REPORTED_PATHS = 1000
DEFAULT_MAX_FILES = 10_000


@dataclass(frozen=True, slots=True)
class TableCleanup:
    """What one janitor run did (or, in a dry run, would do) for one table."""

    table: str
    retention: timedelta
    orphan_grace: timedelta
    snapshots_expired: int
    files_deleted: int
    bytes_deleted: int
    orphans_found: int
    orphans_deleted: int
    orphan_bytes: int
    dead_paths: tuple[str, ...] = field(default=())
    orphan_paths: tuple[str, ...] = field(default=())
    # Unfinished writes of writers that died (temporary files, incomplete multipart uploads).
    abandoned_writes_found: int = 0
    abandoned_writes_discarded: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "table": self.table,
            "retention": format_duration(self.retention),
            "orphan_grace": format_duration(self.orphan_grace),
            "snapshots_expired": self.snapshots_expired,
            "files_deleted": self.files_deleted,
            "bytes_deleted": self.bytes_deleted,
            "orphans_found": self.orphans_found,
            "orphans_deleted": self.orphans_deleted,
            "orphan_bytes": self.orphan_bytes,
            "abandoned_writes_found": self.abandoned_writes_found,
            "abandoned_writes_discarded": self.abandoned_writes_discarded,
            # At most MAX_REPORTED_PATHS of each (the counts above are complete): a Lambda's
            # response must stay under 6 MB however many tables a run collects.
            "dead_paths": list(self.dead_paths[:MAX_REPORTED_PATHS]),
            "orphan_paths": list(self.orphan_paths[:MAX_REPORTED_PATHS]),
        }


@dataclass(frozen=True, slots=True)
class JanitorReport:
    dry_run: bool
    tables: tuple[TableCleanup, ...]
    claims_freed: int
    receipts_pruned: int
    failed_tables: Mapping[str, str] = field(default_factory=dict)
    jobs_settled: int = 0  # compaction and query jobs whose end was reconciled
    # Dropped tables whose retention had passed: their objects and rows are gone.
    tables_purged: tuple[str, ...] = ()
    purged_objects: int = 0
    # Dropped tables past their retention whose Iceberg table is not dropped yet: purged once
    # a publication pass has dropped it (icefloe publish iceberg --all, the publisher).
    purges_held: tuple[str, ...] = ()

    def total(self, name: str) -> int:
        return sum(int(getattr(t, name)) for t in self.tables)

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "snapshots_expired": self.total("snapshots_expired"),
            "files_deleted": self.total("files_deleted"),
            "bytes_deleted": self.total("bytes_deleted"),
            "orphans_found": self.total("orphans_found"),
            "orphans_deleted": self.total("orphans_deleted"),
            "abandoned_writes_discarded": self.total("abandoned_writes_discarded"),
            "claims_freed": self.claims_freed,
            "receipts_pruned": self.receipts_pruned,
            "jobs_settled": self.jobs_settled,
            "tables_purged": list(self.tables_purged),
            "purged_objects": self.purged_objects,
            "purges_held": list(self.purges_held),
            "failed_tables": dict(self.failed_tables),
            "tables": [t.to_json() for t in self.tables],
        }


class Janitor:
    """Garbage collection over one meta store and object store."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        query_grace: timedelta = QUERY_GRACE,
        page_size: int = DELETE_BATCH,
        emr_client: Any | None = None,
        emr_application_id: str | None = None,
        before_forget: Callable[[Sequence[DataFile]], None] | None = None,
    ) -> None:
        self._meta = meta
        self._objects = objects
        self._books = JanitorStore(meta)
        self._clock = clock
        self._query_grace = query_grace
        self._page_size = page_size  # keys per delete and per registered-path lookup
        self._emr_client = emr_client
        self._emr_application_id = emr_application_id
        # A test seam: runs after a batch's objects are deleted, before their rows are.
        self._before_forget = before_forget

    def run(
        self,
        *,
        table: str | None = None,
        retention: timedelta | None = None,
        orphan_grace: timedelta | None = None,
        dry_run: bool = False,
        max_files: int = DEFAULT_MAX_FILES,
        on_progress: Callable[[int, int], None] | None = None,
        on_deleted: Callable[[int], None] | None = None,
    ) -> JanitorReport:
        """Collect ``table`` (or every table). ``retention`` and ``orphan_grace`` override each
        table's own; an orphan grace below :data:`ORPHAN_GRACE_FLOOR` is refused.
        ``on_progress(done, total)`` hears of each table collected (0 of them first),
        ``on_deleted(n)`` of each batch of ``n`` objects deleted (dead files, orphans, a
        dropped table's files; none in a dry run)."""
        if retention is not None and retention < timedelta(0):
            raise InvalidInputError("retention must not be negative")
        for name, value in (("retention", retention), ("orphan grace", orphan_grace)):
            if value is not None and value > LONGEST_DURATION:
                raise InvalidInputError(
                    f"{name} {format_duration(value)} is longer than"
                    f" {format_duration(LONGEST_DURATION)} (100 years)"
                )
        if orphan_grace is not None and orphan_grace < ORPHAN_GRACE_FLOOR:
            raise InvalidInputError(
                f"orphan grace {format_duration(orphan_grace)} is shorter than "
                f"{format_duration(ORPHAN_GRACE_FLOOR)}: an insert or merge that has uploaded "
                f"but not yet committed could lose its objects"
            )
        if max_files < 1:
            raise InvalidInputError("max_files must be at least 1")
        settled = (
            []
            if dry_run
            else reconcile_jobs(
                meta=self._meta,
                objects=self._objects,
                client=self._emr_client,
                application_id=self._emr_application_id,
            )
        )
        live = [t.name for t in self._meta.list_tables()]
        dropped = self._books.dropped_tables(name=table)
        if table is not None and table not in live and not dropped:
            raise TableNotFoundError(f"no table named {table!r}")
        names = ([table] if table in live else []) if table is not None else live
        collected: list[TableCleanup] = []
        failures: dict[str, str] = {}
        if on_progress is not None:
            on_progress(0, len(names))
        for done, name in enumerate(names, start=1):
            try:
                collected.append(
                    self._collect(
                        name,
                        retention=retention,
                        orphan_grace=orphan_grace,
                        dry_run=dry_run,
                        max_files=max_files,
                        on_deleted=on_deleted,
                    )
                )
            except (MetaStoreUnavailableError, CommitOutcomeUnknownError):
                raise
            except IcefloeError as e:
                if table is not None:
                    raise
                logger.warning("garbage collection of %s failed: %s", name, e)
                failures[name] = f"{type(e).__name__}: {e}"
            if on_progress is not None:
                on_progress(done, len(names))
        held = tuple(t.name for t in dropped if t.published and self._purge_due(t, retention))
        purged, purged_objects = self._purge_dropped(
            [t for t in dropped if not t.published],
            retention=retention,
            dry_run=dry_run,
            max_files=max_files,
            on_deleted=on_deleted,
        )
        report = JanitorReport(
            dry_run=dry_run,
            tables=tuple(collected),
            tables_purged=tuple(purged),
            purged_objects=purged_objects,
            purges_held=held,
            claims_freed=self._books.free_expired_claims(dry_run=dry_run),
            receipts_pruned=self._books.prune_receipts(
                older_than=RECEIPT_RETENTION, dry_run=dry_run
            ),
            failed_tables=failures,
            jobs_settled=len(settled),
        )
        logger.info("janitor %s: %s", "dry run" if dry_run else "run", report.to_json())
        return report

    def _collect(
        self,
        table: str,
        *,
        retention: timedelta | None,
        orphan_grace: timedelta | None,
        dry_run: bool,
        max_files: int,
        on_deleted: Callable[[int], None] | None = None,
    ) -> TableCleanup:
        policy = self._meta.get_table(table).spec.retention
        keep = (
            retention
            if retention is not None
            else timedelta(seconds=policy.snapshot_retention_seconds)
        )
        grace = (
            orphan_grace
            if orphan_grace is not None
            else max(ORPHAN_GRACE_FLOOR, timedelta(seconds=policy.orphan_grace_seconds))
        )
        expiry = self._books.plan_expiry(table, retention=keep)
        expired = len(expiry.snapshot_ids) if dry_run else self._books.expire_snapshots(expiry)
        dead = self._books.collectable_files(
            table,
            grace=min(self._query_grace, keep),
            limit=max_files,
            assume_expired_below=expiry.boundary if dry_run else None,
        )
        deleted_files, deleted_bytes = (
            (len(dead), sum(f.size_bytes for f in dead))
            if dry_run
            else self._delete_dead(table, dead, on_deleted=on_deleted)
        )
        cutoff = self._sweep_cutoff(table, grace)
        orphans = list(self._orphans(table, cutoff=cutoff, limit=max_files))
        if orphans and not dry_run:
            for start in range(0, len(orphans), self._page_size):
                page = orphans[start : start + self._page_size]
                self._objects.delete_many(o.key for o in page)
                if on_deleted is not None:
                    on_deleted(len(page))
        abandoned = self._objects.abandoned_writes(f"{table}/data/", started_before=cutoff)
        abandoned = abandoned[:max_files]
        discarded = 0 if dry_run else self._objects.discard_abandoned_writes(abandoned)
        return TableCleanup(
            table=table,
            retention=keep,
            orphan_grace=grace,
            snapshots_expired=expired,
            files_deleted=deleted_files,
            bytes_deleted=deleted_bytes,
            orphans_found=len(orphans),
            orphans_deleted=0 if dry_run else len(orphans),
            orphan_bytes=sum(o.size for o in orphans),
            dead_paths=tuple(f.path for f in dead),
            orphan_paths=tuple(o.key for o in orphans),
            abandoned_writes_found=len(abandoned),
            abandoned_writes_discarded=discarded,
        )

    def _delete_dead(
        self,
        table: str,
        dead: Sequence[DataFile],
        *,
        on_deleted: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        files = size = 0
        for start in range(0, len(dead), self._page_size):
            batch = dead[start : start + self._page_size]
            self._objects.delete_many(f.path for f in batch)
            if self._before_forget is not None:
                self._before_forget(batch)
            files += self._books.forget_files(table, [f.file_id for f in batch])
            size += sum(f.size_bytes for f in batch)
            if on_deleted is not None:
                on_deleted(len(batch))
        return files, size

    def _purge_due(self, table: DroppedTable, retention: timedelta | None) -> bool:
        """Whether a dropped table's retention (its own, or ``retention``) has passed."""
        keep = (
            retention
            if retention is not None
            else timedelta(seconds=table.spec.retention.snapshot_retention_seconds)
        )
        return table.dropped_at <= self._clock() - keep

    def _purge_dropped(
        self,
        dropped: Sequence[DroppedTable],
        *,
        retention: timedelta | None,
        dry_run: bool,
        max_files: int,
        on_deleted: Callable[[int], None] | None = None,
    ) -> tuple[list[str], int]:
        """Delete the objects, then the rows, of dropped tables past their retention (a
        table's own, or ``retention``); at most ``max_files`` objects a run, the rest next."""
        purged: list[str] = []
        deleted = 0
        for table in dropped:
            if not self._purge_due(table, retention):
                continue
            if dry_run:
                purged.append(table.name)
                continue
            while deleted < max_files:
                page = self._books.table_paths(
                    table.table_id, limit=min(self._page_size, max_files - deleted)
                )
                if not page:
                    break
                self._objects.delete_many(path for _, path in page)
                self._books.forget_file_rows(table.table_id, [i for i, _ in page])
                deleted += len(page)
                if on_deleted is not None:
                    on_deleted(len(page))
            if self._books.table_paths(table.table_id, limit=1):
                break  # this run's budget is spent; the next run goes on
            for job_id, manifest in self._books.table_jobs(table.table_id):
                listings = self._objects.list_prefix(f"{table.name}/jobs/{job_id}/")
                self._objects.delete_many([manifest, *(o.key for o in listings)])
            self._books.forget_table(table.table_id)
            logger.info("purged dropped table %s (id %d)", table.name, table.table_id)
            purged.append(table.name)
        return purged, deleted

    def _sweep_cutoff(self, table: str, grace: timedelta) -> datetime:
        """What is older than this and unregistered (or unfinished) was left by a writer that
        died: ``grace`` ago, or when the table's oldest unsettled compaction job started (its
        uploads wait for its commit longer than any grace)."""
        cutoff = self._clock() - grace
        running = [
            j.created_at
            for j in JobStore(self._meta).unsettled(older_than=timedelta(0))
            if j.table == table
        ]
        return min(cutoff, *running) if running else cutoff

    def _orphans(self, table: str, *, cutoff: datetime, limit: int) -> Iterator[ObjectInfo]:
        """Unregistered objects under the table's data prefix older than ``cutoff``."""
        found = 0
        page: list[ObjectInfo] = []
        for info in self._objects.list_prefix(f"{table}/data/"):
            if info.last_modified <= cutoff:
                page.append(info)
            if len(page) == self._page_size:
                orphans = self._unregistered(page, limit - found)
                yield from orphans
                found += len(orphans)
                page = []
                if found >= limit:
                    return
        yield from self._unregistered(page, limit - found)

    def _unregistered(self, page: Sequence[ObjectInfo], room: int) -> list[ObjectInfo]:
        if not page or room <= 0:
            return []
        known = self._books.registered_paths([o.key for o in page])
        return [o for o in page if o.key not in known][:room]
