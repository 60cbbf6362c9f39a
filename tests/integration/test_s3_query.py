"""Insert and query through a real HTTP S3 endpoint (moto's server): DuckDB reads with the
offline httpfs extension, and the sandbox still opens only the snapshot's own objects."""

from __future__ import annotations

import io
import json
from pathlib import Path

import boto3
import pytest

from icefloe import duck
from icefloe.cli import main
from icefloe.config import CoreSettings
from icefloe.errors import ConfigError, InvalidInputError, TableNotFoundError
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine, QueryRefusedError
from icefloe.query.s3_access import (
    S3Credentials,
    S3Endpoint,
    configure_s3,
    configure_s3_from_settings,
)
from icefloe.query.tenant_access import session_name
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_env(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    postgres_dsn: str,
    schema_name: str,
    tmp_path: object,
) -> CoreSettings:
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "ICEFLOE_WAREHOUSE": "s3://lake-bucket/wh",
        "ICEFLOE_S3_ENDPOINT_URL": moto_endpoint,
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
        "ICEFLOE_HOME": str(tmp_path),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    if "lake-bucket" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="lake-bucket")
    s3.put_object(Bucket="lake-bucket", Key="elsewhere/secret.csv", Body=b"secret\n42\n")
    return load_settings().core


def test_insert_and_query_over_s3_with_the_sandbox_on(s3_env: CoreSettings) -> None:
    with Runtime.open(s3_env) as runtime:
        runtime.meta.migrate()
        runtime.meta.create_table(
            TableSpec.create(
                name="events", schema="ts TIMESTAMP NOT NULL, event VARCHAR", partition_by="day(ts)"
            )
        )
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows(
            "events", [{"ts": f"2026-05-0{d}T10:00:00Z", "event": e} for d in (1, 2) for e in "abc"]
        )
        inserter.close()
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, s3_env),
        )
        result = engine.query("SELECT count(*) AS n FROM events WHERE ts < '2026-05-02'")
        assert result.rows.to_pylist() == [{"n": 3}]
        plan = result.plan("events")
        assert plan.files_scanned == 1 and plan.paths[0].startswith("events/data/day=2026-05-01/")
        with pytest.raises(QueryRefusedError, match=r"read_csv\(\) is not allowed"):
            engine.query("SELECT * FROM read_csv('s3://lake-bucket/elsewhere/secret.csv')")


# What a caller tried, to read the S3 secret, a setting or a host path from a query.
CREDENTIAL_PROBES = [
    "SELECT * FROM duckdb_secrets()",
    "SELECT secret_string FROM duckdb_secrets()",
    "SELECT * FROM events, duckdb_secrets()",
    "SELECT (SELECT secret_string FROM duckdb_secrets() LIMIT 1) AS s FROM events",
    "WITH s AS (SELECT * FROM duckdb_secrets()) SELECT * FROM s",
    "SELECT * FROM query('SELECT * FROM duckdb_secrets()')",
    "SELECT which_secret('s3://lake-bucket/wh/x', 's3') AS s",
    "SELECT * FROM duckdb_settings()",
    "SELECT current_setting('s3_access_key_id') AS s",
    "SELECT current_setting('home_directory') AS s",
    "SELECT current_setting('temp_directory') AS s",
    "SELECT getenv('AWS_SECRET_ACCESS_KEY') AS s",
    "SELECT getvariable('x') AS s",
    "FROM duckdb_views",
    "SELECT * FROM duckdb_views()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM duckdb_databases()",
    "SELECT * FROM duckdb_temporary_files()",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM pragma_database_list()",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT * FROM memory.main.events",
    "SELECT * FROM (DESCRIBE events)",
    "SELECT * FROM (SUMMARIZE events)",
    "SELECT * FROM glob('s3://lake-bucket/**')",
    "SELECT * FROM read_blob('s3://lake-bucket/elsewhere/secret.csv')",
    "SELECT * FROM sniff_csv('s3://lake-bucket/elsewhere/secret.csv')",
    "SELECT * FROM parquet_metadata('s3://lake-bucket/wh/events/data/x.parquet')",
    "SELECT sql FROM sqlite_master",
]


def test_no_query_reads_a_credential_a_setting_or_a_host_path(
    s3_env: CoreSettings, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str
) -> None:
    key_id, secret = "AKIAICEFLOEPROBE0001", "icefloe-probe-secret-value"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    host = moto_endpoint.split("://", 1)[1]
    revealing = [key_id, secret, host, str(duck.duckdb_home()), "/tmp"]
    with Runtime.open(s3_env) as runtime:
        runtime.meta.migrate()
        runtime.meta.create_table(
            TableSpec.create(name="events", schema="ts TIMESTAMP NOT NULL, event VARCHAR")
        )
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows("events", [{"ts": "2026-05-01T10:00:00Z", "event": "a"}])
        inserter.close()
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, s3_env),
        )
        # The secret is in place: the lake's own table reads through it.
        assert engine.query("SELECT count(*) AS n FROM events").rows.to_pylist() == [{"n": 1}]
        answered = []
        for probe in CREDENTIAL_PROBES:
            try:
                rows = engine.query(probe).rows.to_pylist()
            except (InvalidInputError, TableNotFoundError) as refused:
                text = str(refused)
            else:
                answered.append(probe)
                text = json.dumps(rows, default=str)
            leaked = [value for value in revealing if value in text]
            assert not leaked, f"{probe!r} revealed {leaked}: {text[:300]}"
        # Every probe is refused before it runs; none needed DuckDB's own lock to stop it.
        assert answered == []


def test_the_cli_queries_an_s3_warehouse(s3_env: CoreSettings) -> None:
    out = io.StringIO()
    assert main(["init"], out=out) == 0
    assert main(["table", "create", "t", "--schema", "k VARCHAR"], out=out) == 0
    with Runtime.open(s3_env) as runtime:
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows("t", [{"k": "x"}, {"k": "y"}])
        inserter.close()
    out = io.StringIO()
    assert main(["query", "SELECT k FROM t ORDER BY k", "--format", "json"], out=out) == 0
    assert json.loads(out.getvalue()) == [{"k": "x"}, {"k": "y"}]
    out = io.StringIO()
    assert main(["files", "t", "--format", "json"], out=out) == 0
    assert json.loads(out.getvalue())[0]["path"].startswith("s3://lake-bucket/wh/t/data/")


def test_credentials_never_show_in_their_repr() -> None:
    assert "hunter2" not in repr(S3Credentials("AKIA", "hunter2"))


def test_a_quote_in_a_credential_cannot_break_out_of_the_secret(moto_endpoint: str) -> None:
    import duckdb

    con = duckdb.connect()
    configure_s3(
        con,
        region="us-east-1",
        endpoint_url=moto_endpoint,
        credentials=S3Credentials("id', TYPE gcs, KEY_ID 'x", "s"),
    )
    secrets = con.execute("SELECT type FROM duckdb_secrets()").fetchall()
    assert secrets == [("s3",)]


def test_a_tenants_query_reads_s3_as_the_tenant_read_role_narrowed_to_its_objects(
    s3_env: CoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # moto records each AssumeRole (role, session name, session policy) but does not evaluate
    # the policy: what it allows is checked by IAM's matching rules in test_tenant_access.
    from moto.sts.models import sts_backends

    role = "arn:aws:iam::123456789012:role/icefloe-tenant-read"
    spec = TableSpec.create(
        name="shared_events",
        schema="ts TIMESTAMP NOT NULL, tenant VARCHAR NOT NULL, v BIGINT",
        partition_by="tenant, day(ts)",
        tenant_column="tenant",
    )
    with Runtime.open(s3_env) as runtime:
        runtime.meta.migrate()
        runtime.meta.create_table(spec)
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows(
            "shared_events",
            [
                {"ts": f"2026-05-0{1 + i % 2}T10:00:00Z", "tenant": tenant, "v": i}
                for tenant in ("acme", "acme-2")
                for i in range(6)
            ],
        )
        inserter.close()
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            s3=S3Endpoint.from_settings(s3_env),
            tenant_read_role=role,
        )
        sessions = sts_backends["123456789012"]["aws"].assumed_roles
        before = len(sessions)
        try:
            answer = engine.query(
                "SELECT count(*) AS n, sum(v) AS s FROM shared_events", tenant="acme"
            )
            assert answer.rows.to_pylist() == [{"n": 6, "s": 15}]
            engine.query(
                "SELECT count(*) FROM shared_events", tenant="acme"
            )  # warm: no new session
            other = engine.query("SELECT count(*) AS n FROM shared_events", tenant="acme-2")
            assert other.rows.to_pylist() == [{"n": 6}]
            # Without a tenant, the function's own credentials (no session at all).
            engine.query("SELECT count(*) FROM shared_events")
        finally:
            engine.close()
        assumed = sessions[before:]
        assert [(s.role_arn, s.session_name) for s in assumed] == [
            (role, session_name("acme")),
            (role, session_name("acme-2")),
        ]
        for session, tenant in zip(assumed, ("acme", "acme-2"), strict=True):
            (statement,) = json.loads(session.policy)["Statement"]
            assert statement["Resource"] == [
                f"arn:aws:s3:::lake-bucket/wh/*/data/tenant={tenant}/*",
                f"arn:aws:s3:::lake-bucket/wh/*/data/*/tenant={tenant}/*",
            ]
    # The CLI (DuckDB in a child process) assumes the role named by the setting, in the child.
    monkeypatch.setenv("ICEFLOE_TENANT_READ_ROLE_ARN", role)
    out = io.StringIO()
    before = len(sessions)
    args = ["query", "SELECT count(*) AS n FROM shared_events", "--tenant", "acme-2"]
    assert main([*args, "--format", "json"], out=out) == 0
    assert json.loads(out.getvalue()) == [{"n": 6}]
    assert [s.session_name for s in sessions[before:]] == [session_name("acme-2")]


def test_a_tenant_read_role_needs_an_s3_warehouse(meta: MetaStore, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="S3 warehouse"):
        QueryEngine(
            meta=meta, objects=LocalObjectStore(tmp_path), tenant_read_role="arn:aws:iam::1:role/r"
        )
