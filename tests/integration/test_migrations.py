"""Schema migrations: idempotent, and safe when several `icefloe init` run at once."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from icefloe.metastore.migrate import available_migrations
from icefloe.metastore.store import MetaStore

pytestmark = pytest.mark.integration

EXPECTED_TABLES = {
    "schema_migrations",
    "lake_tables",
    "snapshots",
    "data_files",
    "ingest_receipts",
    "compaction_jobs",
    "delete_jobs",
    "delete_parts",
    "table_specs",
    "iceberg_publications",
}


def schema_shape(dsn: str, schema: str) -> tuple[list[int], set[str], int]:
    with psycopg.connect(dsn) as conn:
        versions = [
            int(r[0])
            for r in conn.execute(
                f'SELECT version FROM "{schema}".schema_migrations ORDER BY version'
            )
        ]
        tables = {
            str(r[0])
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
        indexes = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert indexes is not None
    return versions, tables, int(indexes[0])


def test_migrating_twice_applies_each_migration_once(postgres_dsn: str, schema_name: str) -> None:
    with MetaStore(postgres_dsn, schema=schema_name) as meta:
        first = meta.migrate()
        second = meta.migrate()
    n = len(available_migrations())
    assert first.applied == tuple(range(1, n + 1))
    assert second.applied == ()
    assert second.current_version == n
    versions, tables, _ = schema_shape(postgres_dsn, schema_name)
    assert versions == list(range(1, n + 1))
    assert tables == EXPECTED_TABLES


def test_concurrent_migrations_leave_one_correct_schema(
    postgres_dsn: str, schema_name: str
) -> None:
    def run(_: int) -> tuple[int, ...]:
        with MetaStore(postgres_dsn, schema=schema_name, max_connections=1) as meta:
            return meta.migrate().applied

    with ThreadPoolExecutor(6) as pool:
        applied = list(pool.map(run, range(6)))
    n = len(available_migrations())
    assert sorted(applied, key=len) == [()] * 5 + [tuple(range(1, n + 1))]
    versions, tables, _ = schema_shape(postgres_dsn, schema_name)
    assert versions == list(range(1, n + 1)) and tables == EXPECTED_TABLES


def test_two_icefloe_init_processes_at_once_leave_one_correct_schema(
    postgres_dsn: str, schema_name: str, tmp_path: object
) -> None:
    env = {
        **os.environ,
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
        "ICEFLOE_HOME": str(tmp_path),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "icefloe.cli", "init"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("applied now: none" in out for out, _ in outputs) == 1
    versions, tables, indexes = schema_shape(postgres_dsn, schema_name)
    assert versions == list(range(1, len(available_migrations()) + 1))
    assert tables == EXPECTED_TABLES
    # Same shape as a schema migrated alone: nothing created twice, nothing missing.
    assert indexes == _indexes_of_a_fresh_schema(postgres_dsn)


def _indexes_of_a_fresh_schema(dsn: str) -> int:
    fresh = "t_fresh_reference"
    try:
        with MetaStore(dsn, schema=fresh) as meta:
            meta.migrate()
        return schema_shape(dsn, fresh)[2]
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE')
