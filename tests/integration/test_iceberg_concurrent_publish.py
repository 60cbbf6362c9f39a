"""Publications of one table that overlap (the publisher function's pass, a local `merge --wait`
or `gc`, a one-off `publish iceberg`) leave the Iceberg table showing the head once: each new
file registered once, never taken back to an older snapshot, and the meta store's publications
saying what the Iceberg table shows.

Publisher A runs in a thread on pyiceberg's own SQL catalog, subclassed to stop A at one call
(before it loads the table: after it read the head; or before its commit: after it diffed the
files). Publisher B runs meanwhile, in the test's process or another one, on the same catalog
(so under the same publication lock), or as a writer that takes no lock (what an icefloe
publisher from before the lock commits: the head's new files and the snapshot property), which
a failed commit and the check of the published snapshot guard against."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icefloe.iceberg import NAMESPACE, local_catalog
from icefloe.iceberg.mapping import data_file_record, iceberg_schema
from icefloe.iceberg.publish import SNAPSHOT_PROPERTY
from icefloe.lake import Lake
from icefloe.metastore.publications import PublicationStore

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, e VARCHAR"
WAIT_S = 120.0  # a bound on waiting for the other publisher, never an assertion on time


class StoppingCatalog(SqlCatalog):
    """pyiceberg's SQL catalog, stopping the thread named ``thread`` at its first call of
    ``at`` (``load_table`` or ``commit_table``) until :attr:`go` is set."""

    def __init__(self, name: str, *, at: str, thread: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self.at = at
        self.thread = thread
        self.reached = threading.Event()
        self.go = threading.Event()

    def _maybe_stop(self, call: str) -> None:
        if (
            call == self.at
            and threading.current_thread().name == self.thread
            and not self.reached.is_set()
        ):
            self.reached.set()
            assert self.go.wait(WAIT_S)

    def load_table(self, identifier: Any) -> Any:
        self._maybe_stop("load_table")
        return super().load_table(identifier)

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        self._maybe_stop("commit_table")
        return super().commit_table(table, requirements, updates)


def catalog_properties(home: Path) -> dict[str, str]:
    """Where ``local_catalog(home)`` keeps its catalog: the same store, for another instance."""
    root = home / "iceberg"
    root.mkdir(parents=True, exist_ok=True)
    return {"uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": root.as_uri()}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def published(connected_lake: Lake) -> Iterator[Lake]:
    """Table ``ev``, opted in, published at its first commit, then one more insert."""
    lake = connected_lake
    lake.create_table("ev", schema=SCHEMA, publish="iceberg")
    lake.insert("ev", [{"ts": "2026-01-01T01:00:00", "e": "s1"}])
    assert [r.snapshot_id for r in lake.publish_all().published] == [1]
    lake.insert("ev", [{"ts": "2026-01-01T02:00:00", "e": "s2"}])
    yield lake


def in_thread(name: str, run: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as e:  # reported by the test
            errors.append(e)

    thread = threading.Thread(name=name, target=target, daemon=True)
    thread.start()
    return thread, errors


def lock_waiters(lake: Lake, *, table: str, catalog: str) -> int:
    """Connections waiting for the publication lock of ``table`` in ``catalog``."""
    key = PublicationStore(lake.meta)._lock_key(table, catalog) & 0xFFFF_FFFF_FFFF_FFFF
    with lake.meta.read_transaction() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            (key >> 32, key & 0xFFFF_FFFF),
        ).fetchone()
    assert row is not None
    return int(row[0])


def until_done_or_waiting(lake: Lake, done: Callable[[], bool], *, table: str = "ev") -> None:
    """Until publisher B has finished, or waits for the lock publisher A holds."""
    deadline = time.monotonic() + WAIT_S
    while not done() and not lock_waiters(lake, table=table, catalog=f"icefloe/{NAMESPACE}"):
        assert time.monotonic() < deadline, "publisher B neither finished nor waited"
        time.sleep(0.02)


def publish_without_lock(lake: Lake, home: Path) -> None:
    """Commit the head to the Iceberg table as a publisher that takes no lock would: a fast
    append of the head's files the table lacks, and the head's snapshot id."""
    info = lake.table("ev")
    iceberg = local_catalog(home).load_table((NAMESPACE, "ev"))
    there = {task.file.file_path for task in iceberg.scan().plan_files()}
    schema = iceberg_schema(info.spec)
    new = [f for f in lake.meta.files("ev") if lake.objects.uri(f.path) not in there]
    assert new
    head = str(info.head_snapshot_id)
    with iceberg.transaction() as tx:
        tx.set_properties({SNAPSHOT_PROPERTY: head})
        with tx.update_snapshot({SNAPSHOT_PROPERTY: head}).fast_append() as append:
            for f in new:
                uri = lake.objects.uri(f.path)
                append.append_data_file(data_file_record(iceberg, schema, info.spec, uri, f))


def check_shows_head(lake: Lake, home: Path, *, rows: int) -> None:
    """The Iceberg table shows the head: its files, each once, and its rows; and a pass after
    it finds the table current and leaves it so."""
    head = lake.table("ev").head_snapshot_id

    def check() -> None:
        iceberg = local_catalog(home).load_table((NAMESPACE, "ev"))
        assert iceberg.properties[SNAPSHOT_PROPERTY] == str(head)
        paths = [task.file.file_path for task in iceberg.scan().plan_files()]
        assert len(paths) == len(set(paths)), "a file registered twice"
        assert set(paths) == {lake.objects.uri(f.path) for f in lake.meta.files("ev")}
        assert iceberg.scan().to_arrow().num_rows == rows

    check()
    again = lake.publish_all()
    assert again.published == () and again.current == ("ev",) and again.failed == ()
    check()


def test_two_publications_of_one_head_register_its_files_once(published: Lake, home: Path) -> None:
    lake = published
    # Given publisher A stopped after it diffed the head's files against the Iceberg table
    stopping = StoppingCatalog("icefloe", at="commit_table", thread="A", **catalog_properties(home))
    a, a_errors = in_thread("A", lambda: lake.publish_iceberg("ev", catalog=stopping))
    assert stopping.reached.wait(WAIT_S)
    # When publisher B's pass publishes the same head meanwhile, then A goes on
    b, b_errors = in_thread("B", lambda: lake.publish_all(catalog=local_catalog(home)))
    until_done_or_waiting(lake, lambda: not b.is_alive())
    stopping.go.set()
    a.join(WAIT_S)
    b.join(WAIT_S)
    assert not a.is_alive() and not b.is_alive() and a_errors == [] and b_errors == []
    # Then the Iceberg table holds each new row once
    check_shows_head(lake, home, rows=2)


def test_a_slow_publication_never_takes_iceberg_back(published: Lake, home: Path) -> None:
    lake = published
    # Given publisher A stopped after it read the head (snapshot 2), before the catalog
    stopping = StoppingCatalog("icefloe", at="load_table", thread="A", **catalog_properties(home))
    a, a_errors = in_thread("A", lambda: lake.publish_iceberg("ev", catalog=stopping))
    assert stopping.reached.wait(WAIT_S)
    # When one more commit lands and publisher B's pass publishes it, then A goes on
    lake.insert("ev", [{"ts": "2026-01-01T03:00:00", "e": "s3"}])
    b, b_errors = in_thread("B", lambda: lake.publish_all(catalog=local_catalog(home)))
    until_done_or_waiting(lake, lambda: not b.is_alive())
    stopping.go.set()
    a.join(WAIT_S)
    b.join(WAIT_S)
    assert not a.is_alive() and not b.is_alive() and a_errors == [] and b_errors == []
    # Then the Iceberg table shows the head, as the meta store says it does
    check_shows_head(lake, home, rows=3)
    (state,) = PublicationStore(lake.meta).states("ev")
    assert state.snapshot_id == lake.table("ev").head_snapshot_id == 3


def test_a_commit_after_the_table_moved_is_recomputed_not_retried(
    published: Lake, home: Path
) -> None:
    lake = published
    # Given publisher A stopped after it diffed the head's files against the Iceberg table
    stopping = StoppingCatalog("icefloe", at="commit_table", thread="A", **catalog_properties(home))
    a, a_errors = in_thread("A", lambda: lake.publish_iceberg("ev", catalog=stopping))
    assert stopping.reached.wait(WAIT_S)
    # When the same head is published meanwhile by a writer that takes no lock, then A goes
    # on: its commit finds the table moved
    publish_without_lock(lake, home)
    stopping.go.set()
    a.join(WAIT_S)
    assert not a.is_alive() and a_errors == []
    # Then the Iceberg table holds each new row once
    check_shows_head(lake, home, rows=2)


def test_an_older_head_never_replaces_a_newer_publication(published: Lake, home: Path) -> None:
    lake = published
    # Given publisher A stopped after it read the head (snapshot 2), before the catalog
    stopping = StoppingCatalog("icefloe", at="load_table", thread="A", **catalog_properties(home))
    a, a_errors = in_thread("A", lambda: lake.publish_iceberg("ev", catalog=stopping))
    assert stopping.reached.wait(WAIT_S)
    # When snapshot 3 is published meanwhile by a writer that takes no lock
    lake.insert("ev", [{"ts": "2026-01-01T03:00:00", "e": "s3"}])
    publish_without_lock(lake, home)
    stopping.go.set()
    a.join(WAIT_S)
    assert not a.is_alive() and a_errors == []
    # Then A read the head again: the Iceberg table still shows snapshot 3
    check_shows_head(lake, home, rows=3)


PUBLISH_ALL = """
import sys
from pathlib import Path
import icefloe
from icefloe.iceberg import local_catalog
home, url, schema = sys.argv[1:]
with icefloe.connect(home=home, database_url=url, database_schema=schema) as lake:
    done = lake.publish_all(catalog=local_catalog(Path(home)))
    assert done.failed == (), done.failed
"""


def test_a_pass_in_another_process_waits_for_a_publication_running(
    published: Lake, home: Path, postgres_dsn: str, schema_name: str
) -> None:
    lake = published
    # Given publisher A stopped after it diffed the head's files against the Iceberg table
    stopping = StoppingCatalog("icefloe", at="commit_table", thread="A", **catalog_properties(home))
    a, a_errors = in_thread("A", lambda: lake.publish_iceberg("ev", catalog=stopping))
    assert stopping.reached.wait(WAIT_S)
    # When a pass runs in another process meanwhile, then A goes on
    b = subprocess.Popen(
        [sys.executable, "-c", PUBLISH_ALL, str(home), postgres_dsn, schema_name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        until_done_or_waiting(lake, lambda: b.poll() is not None)
        stopping.go.set()
        a.join(WAIT_S)
        out, _ = b.communicate(timeout=WAIT_S)
    finally:
        if b.poll() is None:
            b.kill()
    assert b.returncode == 0, out
    assert not a.is_alive() and a_errors == []
    # Then the Iceberg table holds each new row once
    check_shows_head(lake, home, rows=2)


def test_publications_are_serialized_per_table_and_catalog(published: Lake) -> None:
    # The lock is the Iceberg table's: other tables and other catalogs publish meanwhile
    store = PublicationStore(published.meta)
    key = f"icefloe/{NAMESPACE}"
    assert store._lock_key("ev", key) != store._lock_key("other", key)
    assert store._lock_key("ev", key) != store._lock_key("ev", f"aliased/{NAMESPACE}")
    with (
        store.lock("ev", catalog=key),
        store.lock("other", catalog=key),
        store.lock("ev", catalog=f"aliased/{NAMESPACE}"),
    ):
        pass
