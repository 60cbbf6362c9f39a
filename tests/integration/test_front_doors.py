"""Every front door gets the same lake from the same environment: the command line, the Python
API (`icefloe.connect()`), the notebook views, the Lambda functions, the Spark reader and the
EMR jobs' driver all open a `Lake` from one reading of the settings, so none of them drifts
from the others (a meta store reached through the secret, the merge and query limits, the
Iceberg catalog)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import icefloe
from icefloe import spark
from icefloe.aws.lambda_runtime import Container
from icefloe.cli import main
from icefloe.emr_job import job_lake
from icefloe.errors import ConfigError
from icefloe.lake import Lake
from icefloe.settings import load_settings
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES

pytestmark = pytest.mark.integration

# A setting of every kind a collaborator takes, none of them a default.
SETTINGS = {
    "ICEFLOE_QUERY_MEMORY_LIMIT": "700MB",
    "ICEFLOE_QUERY_THREADS": "3",
    "ICEFLOE_QUERY_TIMEOUT_S": "41",
    "ICEFLOE_QUERY_MAX_RESULT_ROWS": "12345",
    "ICEFLOE_MERGE_MEMORY_LIMIT": "900MB",
    "ICEFLOE_MERGE_THREADS": "1",
    "ICEFLOE_MERGE_LEASE_SECONDS": "777",
    "ICEFLOE_ICEBERG_NAMESPACE": "analytics",
}


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, postgres_dsn: str, schema_name: str, tmp_path: Path
) -> Iterator[dict[str, str]]:
    """The process environment of a deployed stack's user: the meta store only through its
    secret (no ICEFLOE_DATABASE_URL), and every setting above."""
    for name in (*UNSET_AWS_VARIABLES, "ICEFLOE_DATABASE_URL", "ICEFLOE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name=REGION)
        arn = secrets.create_secret(Name="meta", SecretString=json.dumps({"dsn": postgres_dsn}))
        env = {
            "ICEFLOE_HOME": str(tmp_path / "home"),
            "ICEFLOE_DATABASE_SCHEMA": schema_name,
            "ICEFLOE_DATABASE_SECRET_ARN": arn["ARN"],
            **SETTINGS,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield env


def collaborators(lake: Lake) -> dict[str, Any]:
    """What a front door's lake was built with, collaborator by collaborator."""
    worker = lake.merge_worker()
    return {
        "database_url": lake.core.database_url,
        "schema": lake.meta.schema,
        "warehouse": lake.core.warehouse.uri,
        "query_limits": lake.query_engine().limits,
        "merge_limits": worker.limits,
        "merge_lease": worker.lease,
        "delete_part_limits": lake.delete_part_runner().limits,
        "iceberg": lake.iceberg,
    }


def test_every_front_door_builds_the_same_collaborators_from_the_environment(
    environment: dict[str, str], postgres_dsn: str, schema_name: str, tmp_path: Path
) -> None:
    settings = load_settings()
    expected = {
        "database_url": postgres_dsn,  # read from the secret
        "schema": schema_name,
        "warehouse": str(tmp_path / "home" / "warehouse"),
        "query_limits": settings.query,
        "merge_limits": settings.merge.limits,
        "merge_lease": settings.merge.lease,
        "delete_part_limits": lake_delete_limits(settings.merge.limits),
        "iceberg": settings.iceberg,
    }
    assert settings.query.timeout_s == 41 and settings.merge.limits.memory_limit == "900MB"

    # The Python API
    with icefloe.connect() as lake:
        assert collaborators(lake) == expected

    # The command line (what main opens for a command)
    with Lake.open(load_settings(), max_connections=2) as lake:
        assert collaborators(lake) == expected

    # A Lambda container
    with Container() as container:
        assert collaborators(container.lake) == expected
        assert container.merge_worker() is container.lake.merge_worker()

    # The Spark reader, given no runtime
    with spark.open_lake() as lake:
        assert collaborators(lake) == expected

    # An EMR Serverless job's driver (what open_job opens once its document is read)
    with job_lake(load_settings(), max_connections=2) as lake:
        assert collaborators(lake) == expected


def lake_delete_limits(merge: Any) -> Any:
    from icefloe.query import QueryLimits

    return QueryLimits(memory_limit=merge.memory_limit, threads=merge.threads)


def test_connect_with_only_the_secret_reaches_the_stacks_meta_store_not_an_embedded_one(
    environment: dict[str, str], tmp_path: Path
) -> None:
    # Given a table created through the command line (which reads the secret)
    out = io.StringIO()
    assert main(["init"], out=out) == 0
    assert main(["table", "create", "events", "--schema", "ts TIMESTAMP"], out=out) == 0

    # When the Python API opens the lake with the same environment
    with icefloe.connect() as lake:
        # Then it sees that table: it reached the same meta store, through the secret
        assert [t.name for t in lake.tables()] == ["events"]
        lake.insert("events", [{"ts": "2026-03-01T00:00:00"}])
        assert lake.query("SELECT count(*) AS n FROM events").to_pylist() == [{"n": 1}]

    # And no embedded Postgres was ever started under ICEFLOE_HOME
    assert not (tmp_path / "home" / "postgres").exists()


def test_the_python_apis_merge_holds_the_merge_settings(
    environment: dict[str, str], tmp_path: Path
) -> None:
    with icefloe.connect() as lake:
        lake.create_table("events", schema="ts TIMESTAMP")
        for hour in range(5):
            lake.insert("events", [{"ts": f"2026-03-01T0{hour}:00:00"}])
        report = lake.merge("events")
        # The worker that merged is the lake's, built with ICEFLOE_MERGE_*
        assert lake.merge_worker().limits.memory_limit == "900MB"
        assert lake.merge_worker().limits.threads == 1
        assert report.outcomes and all(o.status == "committed" for o in report.outcomes)
        assert len(lake.meta.files("events")) == 1


def test_in_lambda_a_catalog_inside_the_container_is_refused(
    postgres_dsn: str, schema_name: str, tmp_path: Path
) -> None:
    environ = {
        "AWS_LAMBDA_FUNCTION_NAME": "icefloe-publisher",
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
    }
    with (
        Lake.open(load_settings(environ)) as lake,
        pytest.raises(ConfigError, match="needs a catalog outside the container"),
    ):
        lake.iceberg_catalog()
    # Off Lambda, the same settings give the local SQL catalog under ICEFLOE_HOME
    del environ["AWS_LAMBDA_FUNCTION_NAME"]
    with Lake.open(load_settings(environ)) as lake:
        assert lake.iceberg_catalog() is lake.iceberg_catalog()
        assert (tmp_path / "home" / "iceberg").is_dir()
