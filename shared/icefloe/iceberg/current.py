"""Keep opted-in tables published: one pass over a catalog that republishes every table whose
spec says ``publish: iceberg`` and whose head moved since its last publication, expires the
Iceberg snapshots past its retention, and drops the Iceberg tables of dropped tables once
their drop is due for purge.

The pass runs wherever icefloe keeps tables current: the publisher function on its schedule,
and locally after ``icefloe merge --wait`` and before ``icefloe gc`` collects (and their Python
API counterparts), and as ``icefloe publish iceberg --all``. Each table is published on its
own: one that fails (a type Iceberg lacks, a catalog error) is reported and the others go on.

A table's lag is bounded by how often the pass runs plus how long one pass takes: a commit is
visible in Iceberg at the end of the first pass that starts after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from icefloe.errors import CommitOutcomeUnknownError, MetaStoreUnavailableError
from icefloe.iceberg.catalogs import catalog_key
from icefloe.iceberg.mapping import NAMESPACE, PublicationWaitsError
from icefloe.iceberg.publish import (
    TABLE_ID_PROPERTY,
    UNCONFIRMED_PUBLICATION_GRACE,
    PublishResult,
    publish_iceberg,
)
from icefloe.metastore.models import TableInfo
from icefloe.metastore.publications import Publication, PublicationStore
from icefloe.metastore.store import MetaStore
from icefloe.storage import ObjectStore

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PublicationFailure:
    """A table the pass could not publish, and why (the other tables went on)."""

    table: str
    error: str


@dataclass(frozen=True, slots=True)
class PublicationPass:
    """What one pass over a catalog did."""

    catalog: str  # the catalog's name and namespace, as the meta store records them
    published: tuple[PublishResult, ...]  # heads that moved, and retention-due expiries
    current: tuple[str, ...]  # opted-in tables whose publication was current already
    dropped: tuple[str, ...]  # Iceberg tables dropped with their (purge-due) icefloe table
    failed: tuple[PublicationFailure, ...]
    # Tables whose head waits for merges to write a generated column into older files (their
    # last publication stays); not a failure.
    waiting: tuple[PublicationFailure, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "catalog": self.catalog,
            "published": [r.to_json() for r in self.published],
            "current": list(self.current),
            "dropped": list(self.dropped),
            "failed": [{"table": f.table, "error": f.error} for f in self.failed],
            "waiting": [{"table": f.table, "reason": f.error} for f in self.waiting],
        }


def publication_wanted(meta: MetaStore) -> bool:
    """Whether any table is opted in, or any dropped table is still published: a pass has
    work to look at (checked without importing pyiceberg)."""
    if any(t.spec.publish == "iceberg" for t in meta.list_tables()):
        return True
    return PublicationStore(meta).any_dropped_table_published()


def publish_due(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    catalog: Catalog,
    namespace: str = NAMESPACE,
    tables: Collection[str] | None = None,
    retention: timedelta | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PublicationPass:
    """Publish every opted-in table (of ``tables``, when given) that is due, and drop the
    Iceberg tables of dropped tables whose retention has passed. ``retention`` stands for
    every table's own, as ``icefloe gc --retention`` does for the collection that follows."""
    key = catalog_key(catalog, namespace)
    publications = PublicationStore(meta)
    published: list[PublishResult] = []
    current: list[str] = []
    failed: list[PublicationFailure] = []
    waiting: list[PublicationFailure] = []
    for info in meta.list_tables():
        if info.spec.publish != "iceberg" or (tables is not None and info.name not in tables):
            continue
        retained = publications.retained(info.name, catalog=key)
        keep = (
            retention
            if retention is not None
            else timedelta(seconds=info.spec.retention.snapshot_retention_seconds)
        )
        if not _due(info, retained, keep=keep, now=clock()):
            current.append(info.name)
            continue
        try:
            published.append(
                publish_iceberg(
                    meta=meta,
                    objects=objects,
                    table=info.name,
                    catalog=catalog,
                    namespace=namespace,
                    retention=keep,
                )
            )
        except (MetaStoreUnavailableError, CommitOutcomeUnknownError):
            raise
        except PublicationWaitsError as e:
            waiting.append(PublicationFailure(info.name, str(e)))
        except Exception as e:  # one table's failure never stops the others
            logger.warning("publishing %s to %s failed: %s", info.name, key, e)
            failed.append(PublicationFailure(info.name, f"{type(e).__name__}: {e}"))
    dropped: list[str] = []
    for gone in publications.dropped_tables(catalog=key):
        if tables is not None and gone.name not in tables:
            continue
        if gone.dropped_at > clock() - (gone.retention if retention is None else retention):
            continue  # still within its retention, as its files are
        try:
            with publications.lock(gone.name, catalog=key):
                drop_published_table(
                    catalog, namespace=namespace, table=gone.name, table_id=gone.table_id
                )
        except (MetaStoreUnavailableError, CommitOutcomeUnknownError):
            raise
        except Exception as e:
            logger.warning("dropping %s from %s failed: %s", gone.name, key, e)
            failed.append(PublicationFailure(gone.name, f"{type(e).__name__}: {e}"))
            continue
        publications.release_table(gone.table_id, catalog=key)
        dropped.append(gone.name)
    return PublicationPass(
        catalog=key,
        published=tuple(published),
        current=tuple(current),
        dropped=tuple(dropped),
        failed=tuple(failed),
        waiting=tuple(waiting),
    )


def unpublish_iceberg(
    *, meta: MetaStore, table: str, catalog: Catalog, namespace: str = NAMESPACE
) -> bool:
    """Drop ``table``'s Iceberg table from ``catalog`` and stop retaining its publications
    there, so the janitor may collect what only they kept. Whether there was one to drop."""
    info = meta.get_table(table)
    publications = PublicationStore(meta)
    key = catalog_key(catalog, namespace)
    with publications.lock(table, catalog=key):  # not while a publication of it runs
        existed = drop_published_table(
            catalog, namespace=namespace, table=table, table_id=info.table_id
        )
        publications.release_table(info.table_id, catalog=key)
    return existed


def drop_published_table(catalog: Catalog, *, namespace: str, table: str, table_id: int) -> bool:
    """Drop ``namespace.table`` if it is the one icefloe published for ``table_id`` (a table of
    the same name created since is another one's). Whether it was dropped."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        iceberg = catalog.load_table((namespace, table))
    except NoSuchTableError:
        return False
    if iceberg.properties.get(TABLE_ID_PROPERTY) != str(table_id):
        return False
    catalog.drop_table((namespace, table))
    return True


def _due(info: TableInfo, retained: list[Publication], *, keep: timedelta, now: datetime) -> bool:
    """Whether a table needs a publication: its head moved past the newest confirmed one, or
    some of its Iceberg snapshots have passed its retention (the newest at that age and the
    current one stay), or a publication has stayed unconfirmed past the grace (the pass
    confirms it if an Iceberg snapshot shows it, and takes it as dead otherwise).

    Read from the meta store alone, without loading the Iceberg table (a catalog and metadata
    file read per table per pass): publications run one at a time from the head read to the
    confirmation, and never take an Iceberg table back to an older snapshot, so the newest
    confirmed publication is the one the Iceberg table shows."""
    if info.head_snapshot_id == 0:
        return False  # nothing committed yet: published at its first commit
    confirmed = [p for p in retained if p.iceberg_snapshot_id is not None]
    if not confirmed or max(p.snapshot_id for p in confirmed) != info.head_snapshot_id:
        return True
    boundary = now - keep
    old = {p.iceberg_snapshot_id for p in confirmed if p.published_at <= boundary}
    if len(old) >= 2:
        return True
    stale = now - UNCONFIRMED_PUBLICATION_GRACE
    return any(p.iceberg_snapshot_id is None and p.published_at < stale for p in retained)
