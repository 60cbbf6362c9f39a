"""Dropped connections at each point of a commit, injected with a real TCP proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from icefloe.errors import CommitOutcomeUnknownError, MetaStoreUnavailableError
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.files import new_file
from support.pg_fault_proxy import PgFaultProxy

pytestmark = pytest.mark.integration

COMMIT_MESSAGE = b"COMMIT\x00"


@pytest.fixture
def proxy(postgres_dsn: str) -> Iterator[PgFaultProxy]:
    p = PgFaultProxy(postgres_dsn)
    yield p
    p.close()


@pytest.fixture
def proxied(meta: MetaStore, proxy: PgFaultProxy, events_spec: TableSpec) -> Iterator[MetaStore]:
    """A second meta store on the same schema whose connections pass through the proxy."""
    meta.create_table(events_spec)
    store = MetaStore(proxy.dsn, schema=meta.schema, max_connections=4)
    yield store
    store.close()


def test_connection_dropped_before_commit_is_retried_and_commits_once(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_before")
    result = proxied.commit_append("events", files=[new_file("a")], idempotency_key="k")
    assert fault.fired.is_set()
    assert result.committed and result.snapshot_id == 1
    assert len(meta.snapshots("events")) == 1
    assert len(meta.files("events")) == 1


def test_an_append_whose_answer_is_lost_is_found_and_not_repeated(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given an append (one statement, its own transaction) that reaches the server and
    # commits, but whose answer is lost
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")

    # When it is committed, Then the next attempt finds its files and answers with their snapshot
    result = proxied.commit_append("events", files=[new_file("a")], idempotency_key="k")
    assert fault.fired.is_set()
    assert result.committed and result.snapshot_id == 1 and result.rows_added == 10
    # And it committed once
    assert len(meta.snapshots("events")) == 1
    assert [f.path for f in meta.files("events")] == [new_file("a").path]
    # And a retry under the same key adds nothing
    again = proxied.commit_append("events", files=[new_file("a-retry")], idempotency_key="k")
    assert not again.committed and again.snapshot_id == 1
    assert len(meta.files("events")) == 1


def test_an_append_whose_answer_is_lost_without_a_key_commits_once(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given two files appended without a key or receipt, the answer lost after the server ran it
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")
    files = [new_file("a"), new_file("b")]

    # When it is committed, Then it committed once, and says so
    result = proxied.commit_append("events", files=files)
    assert fault.fired.is_set()
    assert result.committed and result.snapshot_id == 1 and result.files_added == 2
    assert len(meta.snapshots("events")) == 1
    assert sorted(f.path for f in meta.files("events")) == sorted(f.path for f in files)


def test_a_lost_answer_on_the_last_attempt_is_still_looked_up(
    proxy: PgFaultProxy, meta: MetaStore, events_spec: TableSpec
) -> None:
    # Given a store that makes one attempt, and an append whose answer is lost after it ran
    meta.create_table(events_spec)
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")
    with MetaStore(proxy.dsn, schema=meta.schema, commit_attempts=1) as store:
        # When it is committed, Then the lookup finds it: committed, not "unavailable"
        result = store.commit_append("events", files=[new_file("a")])
    assert fault.fired.is_set()
    assert result.committed and result.snapshot_id == 1
    assert [f.path for f in meta.files("events")] == [new_file("a").path]


def test_an_append_lost_while_the_meta_store_stays_away_reports_unknown_outcome(
    proxy: PgFaultProxy, meta: MetaStore, events_spec: TableSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an append whose answer is lost, after which no connection can be made (the proxy
    # stops accepting), so that no attempt can look its files up
    meta.create_table(events_spec)
    store = MetaStore(proxy.dsn, schema=meta.schema, max_connections=1, connect_timeout_s=0.5)
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")
    monkeypatch.setattr(MetaStore, "_pause_before_retry", lambda *_: proxy.close())
    try:
        # When it is committed, Then the outcome is unknown (not "unavailable": it may be in)
        with pytest.raises(CommitOutcomeUnknownError):
            store.commit_append("events", files=[new_file("a")])
    finally:
        store.close()
    assert fault.fired.is_set()
    # And it did commit (the server ran it): the caller was right to leave its objects
    assert meta.get_table("events").head_snapshot_id == 1


@pytest.mark.parametrize("kind", ["key", "receipt", "plain"])
def test_an_append_answered_with_an_error_after_it_committed_is_found(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore, kind: str
) -> None:
    # Given an append that commits, answered with an error instead (the connection kept, as a
    # pooler might): an error does not prove the statement rolled back
    fault = proxy.arm(b"INSERT INTO snapshots", "answer_error")
    extra: dict[str, object] = {
        "key": {"idempotency_key": "k"},
        "receipt": {"receipts": ["message-1"]},
        "plain": {},
    }[kind]

    # When it is committed, Then its files are found and it answers committed, once
    result = proxied.commit_append("events", files=[new_file("a")], **extra)  # type: ignore[arg-type]
    assert fault.fired.is_set()
    assert result.committed and result.snapshot_id == 1
    assert [f.path for f in meta.files("events")] == [new_file("a").path]


def test_a_lost_append_still_waiting_when_the_retries_fail_reports_unknown_outcome(
    proxy: PgFaultProxy,
    meta: MetaStore,
    events_spec: TableSpec,
    postgres_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an append whose answer is lost while its statement waits for the table's head
    # (another transaction holds it), and retries that fail for another reason (they land on
    # a read-only server, as after a failover)
    meta.create_table(events_spec)
    store = MetaStore(proxy.dsn, schema=meta.schema, max_connections=1)
    holder = psycopg.connect(postgres_dsn, options=f"-c search_path={meta.schema}")
    holder.execute("SELECT 1 FROM lake_tables WHERE name = 'events' FOR UPDATE")
    fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")

    def read_only_from_now(*_: object) -> None:
        # New connections (the lost one is discarded) open read-only
        store._pool.kwargs["options"] += " -c default_transaction_read_only=on"  # type: ignore[attr-defined]

    monkeypatch.setattr(MetaStore, "_pause_before_retry", staticmethod(read_only_from_now))
    try:
        # When it is committed, Then the outcome is unknown: not a failure the caller would
        # answer by deleting its objects
        with pytest.raises(CommitOutcomeUnknownError):
            store.commit_append("events", files=[new_file("a")], receipts=["message-1"])
        assert fault.fired.is_set()
        assert meta.get_table("events").head_snapshot_id == 0
        # And indeed the waiting statement commits once the head is free
        holder.rollback()
        deadline = time.monotonic() + 10
        while meta.get_table("events").head_snapshot_id == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [f.path for f in meta.files("events")] == [new_file("a").path]
    finally:
        holder.close()
        store.close()


def test_a_stepwise_commit_dropped_after_commit_was_sent_reports_unknown_outcome(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given a delete (the stepwise protocol: its writes, then COMMIT) whose COMMIT reaches the
    # server but whose answer is lost
    meta.commit_append("events", files=[new_file("a")])
    (live,) = meta.files("events")
    fault = proxy.arm(COMMIT_MESSAGE, "drop_after")
    with pytest.raises(CommitOutcomeUnknownError):
        proxied.commit("events", operation="delete", remove=[live.file_id])
    assert fault.fired.is_set()
    # Then it did commit
    assert meta.get_table("events").head_snapshot_id == 2
    assert meta.files("events") == []


def test_a_stepwise_commit_whose_commit_never_reached_the_server_reports_unknown_outcome(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given a delete whose COMMIT never reaches the server
    meta.commit_append("events", files=[new_file("a")])
    (live,) = meta.files("events")
    fault = proxy.arm(COMMIT_MESSAGE, "drop_before")
    with pytest.raises(CommitOutcomeUnknownError):
        proxied.commit("events", operation="delete", remove=[live.file_id])
    assert fault.fired.is_set()
    # Then nothing is committed, and the delete can be made again
    assert meta.get_table("events").head_snapshot_id == 1
    again = proxied.commit("events", operation="delete", remove=[live.file_id])
    assert again.committed and again.snapshot_id == 2


def test_an_unreachable_meta_store_is_a_clear_error() -> None:
    with pytest.raises(MetaStoreUnavailableError, match="connect"):
        MetaStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1.0)
