"""Schema migrations: idempotent, and safe when several `icefloe init` run at once."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from icefloe.metastore.jobs import JobStore
from icefloe.metastore.migrate import available_migrations
from icefloe.metastore.query_jobs import QueryJobStore
from icefloe.metastore.store import MetaStore

pytestmark = pytest.mark.integration

EXPECTED_TABLES = {
    "schema_migrations",
    "lake_tables",
    "snapshots",
    "data_files",
    "ingest_receipts",
    "compaction_jobs",
    "query_jobs",
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


def migrate_to(dsn: str, schema: str, version: int) -> None:
    """A database as a release shipping migrations 1..``version`` left it."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in available_migrations()[:version]:
            conn.execute(sql.SQL(migration.sql_text))  # type: ignore[arg-type]
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )


def test_query_jobs_recorded_among_compaction_jobs_move_to_their_own_table(
    postgres_dsn: str, schema_name: str
) -> None:
    # Given a database before query_jobs (0012), where a query job was recorded in
    # compaction_jobs with no claims, beside a compaction job with claims and one without
    migrate_to(postgres_dsn, schema_name, 11)
    with psycopg.connect(postgres_dsn) as conn, conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema_name)))
        row = conn.execute(
            "INSERT INTO lake_tables (name, spec) VALUES ('events', '{}') RETURNING table_id"
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO compaction_jobs (job_id, table_id, application_id, job_run_id, state,"
            " claim_tokens, manifest_key, settled_at) VALUES"
            " ('query-0123', %(t)s, 'app', 'run-q', 'SUCCESS', '{}', 'events/jobs/query-0123.json',"
            "  now()),"
            " ('compact-0123', %(t)s, 'app', 'run-c', 'SUBMITTED',"
            "  ARRAY['6f1c1a4e-0000-4000-8000-000000000001']::uuid[],"
            "  'events/jobs/compact-0123.json', NULL),"
            " ('compact-noclaims', %(t)s, NULL, NULL, 'STARTING', '{}',"
            "  'events/jobs/compact-noclaims.json', NULL)",
            {"t": row[0]},
        )

    # When it is migrated
    with MetaStore(postgres_dsn, schema=schema_name) as meta:
        report = meta.migrate()

        # Then the query job is in query_jobs, as it was, and gone from compaction_jobs
        assert report.applied == tuple(range(12, len(available_migrations()) + 1))
        query = QueryJobStore(meta).get("query-0123")
        assert (query.table, query.job_run_id, query.state) == ("events", "run-q", "SUCCESS")
        assert query.application_id == "app" and query.settled_at is not None
        assert query.request_key == "events/jobs/query-0123.json" and query.result_uri is None
        assert QueryJobStore(meta).by_run_id("run-q") == query
        jobs = JobStore(meta)
        assert jobs.by_run_id("run-q") is None
        # And the compaction jobs stay where they were
        assert {j.job_id for j in jobs.unsettled(older_than=timedelta(0))} == {
            "compact-0123",
            "compact-noclaims",
        }
        assert jobs.get("compact-0123").claim_tokens != ()
    _, tables, _ = schema_shape(postgres_dsn, schema_name)
    assert tables == EXPECTED_TABLES
