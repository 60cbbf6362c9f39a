"""A meta store whose DSN can change (a rotated secret), against a real Postgres: the DSN is
read once, read again only when opening a connection fails, and at most once per interval."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from icefloe.errors import MetaStoreUnavailableError
from icefloe.metastore.credentials import RefreshGate
from icefloe.metastore.store import MetaStore

pytestmark = pytest.mark.integration


class ScriptedDsn:
    """A DSN source whose current DSN and re-read answer the test sets."""

    def __init__(self, current: str, after_refresh: str) -> None:
        self.dsn = current
        self.after_refresh = after_refresh
        self.refreshes = 0
        self.attempts = 0  # connection attempts: each asks for the current DSN

    def current(self) -> str:
        self.attempts += 1
        return self.dsn

    def refresh(self) -> str:
        self.refreshes += 1
        self.dsn = self.after_refresh
        return self.dsn


def _refused(dsn: str) -> str:
    """The same server with credentials it refuses (a role that does not exist, as after a
    rotation retired the old password: the server answers FATAL either way)."""
    fields = conninfo_to_dict(dsn)
    fields["user"] = "icefloe_no_such_role"
    return make_conninfo(**fields)


def test_a_working_dsn_is_read_once_whatever_the_pool_does(
    postgres_dsn: str, schema_name: str
) -> None:
    source = ScriptedDsn(postgres_dsn, after_refresh=_refused(postgres_dsn))
    with MetaStore(source, schema=schema_name, max_connections=2) as meta:
        meta.migrate()
        meta._pool.drain()  # every connection replaced by a new one
        assert meta.list_tables() == []
    assert source.refreshes == 0


def test_refused_credentials_are_read_again_and_the_new_ones_used(
    postgres_dsn: str, schema_name: str
) -> None:
    # A cold start with credentials the server refuses, and a secret that now holds good ones.
    source = ScriptedDsn(_refused(postgres_dsn), after_refresh=postgres_dsn)
    with MetaStore(source, schema=schema_name, max_connections=2) as meta:
        meta.migrate()
        assert meta.list_tables() == []
    assert source.refreshes == 1


def test_a_warm_store_survives_a_rotation(postgres_dsn: str, schema_name: str) -> None:
    source = ScriptedDsn(postgres_dsn, after_refresh=postgres_dsn)
    with MetaStore(source, schema=schema_name, max_connections=2) as meta:
        meta.migrate()
        # The secret is rotated: the DSN this store read no longer works, the secret's does.
        source.dsn, source.after_refresh = _refused(postgres_dsn), postgres_dsn
        meta._pool.drain()  # the pool's next connections are new ones
        assert meta.list_tables() == []
        assert source.refreshes == 1


def test_while_the_database_refuses_the_dsn_is_read_again_at_most_once_per_interval(
    postgres_dsn: str, schema_name: str
) -> None:
    source = ScriptedDsn(_refused(postgres_dsn), after_refresh=_refused(postgres_dsn))
    with pytest.raises(MetaStoreUnavailableError):
        MetaStore(
            source,
            schema=schema_name,
            max_connections=2,
            connect_timeout_s=2,
            min_refresh_interval_s=3600,
        )
    # The pool retried its connection in those two seconds; the DSN was re-read once only.
    assert source.attempts >= 3  # the store's first read, then at least two connection attempts
    assert source.refreshes == 1


def test_the_refresh_gate_admits_once_per_interval() -> None:
    now = [100.0]
    gate = RefreshGate(interval_s=60, clock=lambda: now[0])
    assert gate.admit() and not gate.admit()
    now[0] += 59.9
    assert not gate.admit()
    now[0] += 0.2
    assert gate.admit()
