"""A published Iceberg table never names a collected file: every retained Iceberg snapshot
reads in full after merges, deletes, rollbacks, schema changes and garbage collection with no
retention; publishing again expires the old Iceberg snapshots and releases their files, so an
erasure reaches Iceberg too."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

import pytest
from pyiceberg.table import Table
from test_iceberg_publish import COLUMNS, SCHEMA, check_same_rows, insert_batches

import icefloe.iceberg.current
import icefloe.iceberg.publish
from icefloe.iceberg import (
    NAMESPACE,
    PublishResult,
    catalog_key,
    local_catalog,
    publish_due,
    publish_iceberg,
)
from icefloe.iceberg.publish import SNAPSHOT_PROPERTY
from icefloe.janitor import Janitor
from icefloe.lifecycle import alter_table, delete_rows, rollback_table
from icefloe.lifecycle.alter import add_column
from icefloe.metastore.publications import PublicationStore
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

NONE = timedelta(0)


def publish(lake: Lake, tmp_path: Path, *, retention: timedelta | None = None) -> PublishResult:
    return publish_iceberg(
        meta=lake.meta,
        objects=lake.objects,
        table="events",
        catalog=local_catalog(tmp_path),
        retention=retention,
    )


def gc(lake: Lake) -> None:
    Janitor(meta=lake.meta, objects=lake.objects).run(table="events", retention=NONE)


def iceberg_table(tmp_path: Path) -> Table:
    return local_catalog(tmp_path).load_table((NAMESPACE, "events"))


def read_every_snapshot(tmp_path: Path) -> dict[int, int]:
    """Each retained Iceberg snapshot's row count, read in full by pyiceberg (a missing file
    raises)."""
    table = iceberg_table(tmp_path)
    return {
        s.snapshot_id: table.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows
        for s in table.metadata.snapshots
    }


def test_gc_after_a_merge_keeps_every_file_the_published_table_reads(
    lake: Lake, tmp_path: Path
) -> None:
    # Given a published table, merged afterwards
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=6, rows=40, days=2)
    published = publish(lake, tmp_path)
    lake.merge("events")
    assert lake.head() > published.snapshot_id

    # When garbage is collected with no retention
    gc(lake)

    # Then the published Iceberg snapshot still reads in full, and equals its icefloe snapshot
    check_same_rows(lake, tmp_path, published, COLUMNS)
    assert read_every_snapshot(tmp_path) == {published.iceberg_snapshot_id: 240}


def test_publishing_again_expires_old_iceberg_snapshots_and_releases_their_files(
    lake: Lake, tmp_path: Path
) -> None:
    # Given a publication, a merge, and another publication that expires the old Iceberg
    # snapshot at once
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=6, rows=40, days=2)
    first = publish(lake, tmp_path)
    small_files = {f.path for f in lake.meta.files("events")}
    lake.merge("events")
    second = publish(lake, tmp_path, retention=NONE)
    assert second.iceberg_snapshots_expired == 1
    retained = PublicationStore(lake.meta).retained("events")
    assert [p.snapshot_id for p in retained] == [second.snapshot_id] != [first.snapshot_id]

    # When garbage is collected, then the merged-away files are deleted and Iceberg reads on
    gc(lake)
    assert not small_files & set(lake.data_objects())
    assert read_every_snapshot(tmp_path) == {second.iceberg_snapshot_id: 240}
    check_same_rows(lake, tmp_path, second, COLUMNS)


def test_an_erasure_reaches_iceberg(lake: Lake, tmp_path: Path) -> None:
    # Given a published table holding u3's rows
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=4, rows=50, days=2)
    publish(lake, tmp_path)
    holding = {f.path for f in lake.meta.files("events")}

    # When u3 is deleted, published with no retention, and garbage collected with none
    delete_rows(meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'u3'")
    latest = publish(lake, tmp_path, retention=NONE)
    gc(lake)

    # Then no object holds a row of u3, and no Iceberg snapshot names one that did
    rewritten = holding - {f.path for f in lake.meta.files("events")}
    assert rewritten and not rewritten & set(lake.data_objects())
    table = iceberg_table(tmp_path)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [latest.iceberg_snapshot_id]
    users = table.scan().to_arrow().column("user_id").to_pylist()
    assert "u3" not in users and users


def test_a_failed_publication_keeps_its_files_until_it_is_taken_as_dead(
    lake: Lake, tmp_path: Path
) -> None:
    # Given a publication recorded but never committed (the publisher died), for a snapshot
    # that was then merged away
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=6, rows=40, days=2)
    head = lake.head()
    key = catalog_key(local_catalog(tmp_path), NAMESPACE)
    PublicationStore(lake.meta).pin("events", catalog=key, snapshot_id=head)
    small_files = {f.path for f in lake.meta.files("events")}
    lake.merge("events")

    # When garbage is collected, then its files stay (an Iceberg commit might still follow)
    gc(lake)
    assert small_files <= set(lake.data_objects())


class PublisherKilled(Exception):
    """The fault injected: the publisher dies between its Iceberg commit and its record."""


def killed_before_confirming(*args: object, **kwargs: object) -> NoReturn:
    raise PublisherKilled


def no_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unconfirmed publication is taken as dead at once (not after an hour)."""
    for module in (icefloe.iceberg.publish, icefloe.iceberg.current):
        monkeypatch.setattr(module, "UNCONFIRMED_PUBLICATION_GRACE", NONE)


def published_pairs(lake: Lake) -> list[tuple[int, int | None]]:
    """The retained publications: (icefloe snapshot, the Iceberg snapshot showing it)."""
    return [
        (p.snapshot_id, p.iceberg_snapshot_id)
        for p in PublicationStore(lake.meta).retained("events")
    ]


def test_a_publication_committed_but_never_confirmed_keeps_its_files_while_iceberg_shows_it(
    lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an opted-in table published once, then one more insert published by a publisher
    # that dies after its Iceberg commit, before the meta store confirms the publication
    lake.create(schema=SCHEMA, sort_by="event, ts", publish="iceberg")
    insert_batches(lake, batches=3, rows=40, days=2)
    first = publish(lake, tmp_path)
    insert_batches(lake, batches=1, rows=40, days=2, seed=2)
    killed_at = lake.head()
    with monkeypatch.context() as fault:
        fault.setattr(PublicationStore, "confirm", killed_before_confirming)
        with pytest.raises(PublisherKilled):
            publish(lake, tmp_path)
    shown = iceberg_table(tmp_path).current_snapshot()
    assert shown is not None and shown.snapshot_id != first.iceberg_snapshot_id
    assert iceberg_table(tmp_path).properties[SNAPSHOT_PROPERTY] == str(killed_at)
    assert published_pairs(lake) == [
        (first.snapshot_id, first.iceberg_snapshot_id),
        (killed_at, None),
    ]
    # and a delete that rewrites files that Iceberg snapshot names
    named = {f.path for f in lake.meta.files("events", snapshot_id=killed_at)}
    delete_rows(meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'u3'")
    rewritten = named - {f.path for f in lake.meta.files("events")}
    assert rewritten

    # When the grace has passed, and the next pass publishes the head with a retention that
    # expires the first Iceberg snapshot and keeps the killed publisher's (the newest at that
    # age), and garbage is collected with no retention
    no_grace(monkeypatch)
    time.sleep(max(0.0, 2.0 - (time.time() * 1000 - shown.timestamp_ms) / 1000))
    keep = datetime.now(UTC) - datetime.fromtimestamp(shown.timestamp_ms / 1000, UTC)
    done = publish_due(
        meta=lake.meta, objects=lake.objects, catalog=local_catalog(tmp_path), retention=keep
    )
    (latest,) = done.published
    assert latest.snapshot_id == lake.head() and latest.iceberg_snapshots_expired == 1
    gc(lake)

    # Then the files the killed publisher's Iceberg snapshot names are kept, and it reads in
    # full: its publication is confirmed with that Iceberg snapshot, and retained
    assert rewritten <= set(lake.data_objects())
    rows_at_killed = lake.rows("SELECT count(*) AS n FROM events", snapshot_id=killed_at)
    assert read_every_snapshot(tmp_path) == {
        shown.snapshot_id: rows_at_killed[0]["n"],
        latest.iceberg_snapshot_id: lake.rows("SELECT count(*) AS n FROM events")[0]["n"],
    }
    assert published_pairs(lake) == [
        (killed_at, shown.snapshot_id),
        (latest.snapshot_id, latest.iceberg_snapshot_id),
    ]
    # and the status (read from the meta store) names the head as published
    (state,) = PublicationStore(lake.meta).states("events")
    assert state.snapshot_id == latest.snapshot_id and state.behind_since is None

    # When that Iceberg snapshot expires (a pass with no retention), then its files go
    publish(lake, tmp_path, retention=NONE)
    gc(lake)
    assert published_pairs(lake) == [(latest.snapshot_id, latest.iceberg_snapshot_id)]
    assert not rewritten & set(lake.data_objects())
    assert set(read_every_snapshot(tmp_path)) == {latest.iceberg_snapshot_id}


def test_a_publication_no_iceberg_snapshot_shows_is_dropped_once_its_grace_has_passed(
    lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a publication recorded but never committed (the publisher died before its Iceberg
    # commit), and a newer head
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=2, rows=40, days=2)
    dead = lake.head()
    key = catalog_key(local_catalog(tmp_path), NAMESPACE)
    PublicationStore(lake.meta).pin("events", catalog=key, snapshot_id=dead)
    insert_batches(lake, batches=1, rows=40, days=2, seed=2)

    # When the head is published within the grace, then the dead one is still retained
    published = publish(lake, tmp_path)
    assert published_pairs(lake) == [
        (dead, None),
        (published.snapshot_id, published.iceberg_snapshot_id),
    ]

    # When the head is published again once the grace has passed, then it is dropped
    no_grace(monkeypatch)
    publish(lake, tmp_path)
    assert published_pairs(lake) == [(published.snapshot_id, published.iceberg_snapshot_id)]


def test_random_histories_never_leave_an_iceberg_snapshot_with_a_missing_file(
    lake: Lake, tmp_path: Path
) -> None:
    rng = random.Random(20261127)
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=3, rows=30, days=2, seed=0)
    published = [publish(lake, tmp_path)]
    history = []
    for step in range(24):
        operation = rng.choice(
            ["insert", "insert", "merge", "delete", "rollback", "alter", "gc", "gc", "publish"]
        )
        history.append(operation)
        if operation == "insert":
            insert_batches(lake, batches=2, rows=20, days=2, seed=step + 1)
        elif operation == "merge":
            lake.merge("events")
        elif operation == "delete":
            user = f"u{rng.randrange(8)}"
            delete_rows(
                meta=lake.meta, objects=lake.objects, table="events", where=f"user_id = '{user}'"
            )
        elif operation == "rollback" and lake.head() > 2:
            to = rng.randrange(max(1, lake.head() - 3), lake.head())
            try:
                rollback_table(meta=lake.meta, objects=lake.objects, table="events", to_snapshot=to)
            except Exception as e:  # an expired target is refused: that is fine here
                assert "expired" in str(e) or "no snapshot" in str(e), e
        elif operation == "alter":
            alter_table(meta=lake.meta, table="events", changes=[add_column(f"c{step} BIGINT")])
        elif operation == "gc":
            gc(lake)
        else:
            published.append(publish(lake, tmp_path, retention=rng.choice([NONE, None])))
        # Then every retained Iceberg snapshot reads in full (no missing file), and the
        # current one holds exactly icefloe's rows at the snapshot it shows
        read_every_snapshot(tmp_path)
        check_same_rows(lake, tmp_path, published[-1], COLUMNS)
    assert {"merge", "gc", "publish", "delete"} <= set(history), history
