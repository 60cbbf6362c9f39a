"""Fixtures for integration tests that need a whole small lake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from icefloe import connect
from icefloe.ingest import Inserter
from icefloe.lake import Lake as ConnectedLake
from icefloe.merge import MergeWorker
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.storage import LocalObjectStore
from support.merge_lake import Lake


@pytest.fixture
def lake(meta: MetaStore, tmp_path: Path) -> Iterator[Lake]:
    """Real Postgres (a fresh schema), real DuckDB, a local warehouse under ``tmp_path``."""
    objects = LocalObjectStore(tmp_path / "warehouse")
    inserter = Inserter(meta=meta, objects=objects)
    yield Lake(
        meta=meta,
        objects=objects,
        inserter=inserter,
        worker=MergeWorker(meta=meta, objects=objects),
        engine=QueryEngine(meta=meta, objects=objects),
    )
    inserter.close()


@pytest.fixture
def connected_lake(tmp_path: Path, postgres_dsn: str, schema_name: str) -> Iterator[ConnectedLake]:
    """The lake ``icefloe.connect`` opens on a fresh meta store schema, home under ``tmp_path``."""
    with connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as opened:
        yield opened


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for the whole run (it takes 7 to 16 s to start)."""
    from icefloe.compaction.session import local_spark_session

    session = local_spark_session(master="local[2]", driver_memory="1g")
    yield session
    session.stop()


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, postgres_dsn: str, schema_name: str, tmp_path: Path
) -> str:
    """The CLI's environment: this test's meta store schema and home, no warehouse or Iceberg
    catalog from the caller's environment; the schema's name."""
    monkeypatch.setenv("ICEFLOE_DATABASE_URL", postgres_dsn)
    monkeypatch.setenv("ICEFLOE_DATABASE_SCHEMA", schema_name)
    monkeypatch.setenv("ICEFLOE_HOME", str(tmp_path / "home"))
    for name in (
        "ICEFLOE_WAREHOUSE",
        "ICEFLOE_ICEBERG_CATALOG",
        "ICEFLOE_ICEBERG_CATALOG_URI",
        "ICEFLOE_ICEBERG_NAMESPACE",
        "ICEFLOE_ICEBERG_METADATA_LOCATION",
    ):
        monkeypatch.delenv(name, raising=False)
    return schema_name
