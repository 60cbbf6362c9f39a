"""Dropped connections at each point of a commit, injected with a real TCP proxy."""

from __future__ import annotations

from collections.abc import Iterator

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


def test_connection_dropped_after_commit_was_sent_reports_unknown_outcome(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given a commit whose COMMIT reaches the server but whose answer is lost
    fault = proxy.arm(COMMIT_MESSAGE, "drop_after")
    with pytest.raises(CommitOutcomeUnknownError):
        proxied.commit_append("events", files=[new_file("a")], idempotency_key="k")
    assert fault.fired.is_set()
    # Then it did commit, and a retry under the same key adds nothing
    assert meta.get_table("events").head_snapshot_id == 1
    again = proxied.commit_append("events", files=[new_file("a-retry")], idempotency_key="k")
    assert not again.committed and again.snapshot_id == 1
    assert len(meta.files("events")) == 1


def test_connection_dropped_before_commit_reached_the_server_reports_unknown_outcome(
    proxied: MetaStore, proxy: PgFaultProxy, meta: MetaStore
) -> None:
    # Given a commit whose COMMIT never reaches the server
    fault = proxy.arm(COMMIT_MESSAGE, "drop_before")
    with pytest.raises(CommitOutcomeUnknownError):
        proxied.commit_append("events", files=[new_file("a")], idempotency_key="k")
    assert fault.fired.is_set()
    # Then nothing is committed, and a retry under the same key commits once
    assert meta.get_table("events").head_snapshot_id == 0
    again = proxied.commit_append("events", files=[new_file("a-retry")], idempotency_key="k")
    assert again.committed and again.snapshot_id == 1


def test_an_unreachable_meta_store_is_a_clear_error() -> None:
    with pytest.raises(MetaStoreUnavailableError, match="connect"):
        MetaStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1.0)
