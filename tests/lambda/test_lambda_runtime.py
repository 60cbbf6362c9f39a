"""The container's collaborators: built once from the environment, the DSN from a secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from icefloe.aws.lambda_runtime import Container
from icefloe.errors import ConfigError
from icefloe.lake import resolve_database
from icefloe.metastore.secrets import SecretDsn
from icefloe.metastore.store import MetaStore
from icefloe.settings import load_settings
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES

pytestmark = pytest.mark.integration


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in (*UNSET_AWS_VARIABLES, "ICEFLOE_DATABASE_URL", "ICEFLOE_DATABASE_SECRET_ARN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


@pytest.fixture
def containers() -> Iterator[ExitStack]:
    """Where a test's containers go to be closed after it."""
    with ExitStack() as stack:
        yield stack


def environment(tmp_path: Path, schema: str, **extra: str) -> dict[str, str]:
    return {
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse"),
        "ICEFLOE_DATABASE_SCHEMA": schema,
        **extra,
    }


def test_the_dsn_comes_from_the_secret_once_and_the_runtime_is_built_once(
    secrets: Any, postgres_dsn: str, meta: MetaStore, tmp_path: Path, containers: ExitStack
) -> None:
    # Given a secret holding the DSN and an environment naming it, without a URL
    arn = secrets.create_secret(Name="db", SecretString=json.dumps({"dsn": postgres_dsn}))["ARN"]
    env = environment(tmp_path, meta.schema, ICEFLOE_DATABASE_SECRET_ARN=arn)
    container = containers.enter_context(Container(environ=env))
    assert container._lake is None  # nothing is built before the first call

    # When the runtime is asked for
    runtime = container.runtime

    # Then it reaches the meta store through the secret's DSN
    assert runtime.settings.database_url == postgres_dsn
    assert runtime.meta.list_tables() == []

    # And later calls reuse it without reading the secret again (it is gone now)
    secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    assert container.runtime is runtime
    inserter = container.inserter()
    assert container.inserter() is inserter

    # When the container ends, a new one builds afresh (and needs the secret again)
    container.close()
    with Container(environ=env) as another, pytest.raises(ConfigError, match="db"):
        _ = another.runtime


def test_a_database_url_wins_over_the_secret(secrets: Any, tmp_path: Path) -> None:
    env = environment(
        tmp_path,
        "icefloe",
        ICEFLOE_DATABASE_URL="postgresql://u:p@db.example/meta",
        ICEFLOE_DATABASE_SECRET_ARN="arn:aws:secretsmanager:us-east-1:123456789012:secret:nope",
    )
    core, secret = resolve_database(load_settings(env))  # the secret does not exist: not read
    assert core.database_url == "postgresql://u:p@db.example/meta" and secret is None


def test_in_lambda_a_missing_database_configuration_is_an_error_not_an_embedded_server(
    tmp_path: Path,
) -> None:
    env = environment(tmp_path, "icefloe", AWS_LAMBDA_FUNCTION_NAME="icefloe-insert")
    with pytest.raises(ConfigError, match="ICEFLOE_DATABASE_SECRET_ARN"):
        resolve_database(load_settings(env))
    core, _ = resolve_database(load_settings(environment(tmp_path, "icefloe")))
    assert core.database_url is None  # off Lambda: the embedded Postgres


def test_the_inserters_duckdb_is_bounded_by_the_functions_memory(
    secrets: Any,
    postgres_dsn: str,
    meta: MetaStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In Lambda (2,048 MB, the insert function's size): half for DuckDB, one thread per vCPU.
    env = environment(
        tmp_path,
        meta.schema,
        ICEFLOE_DATABASE_URL=postgres_dsn,
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="2048",
    )
    with Container(environ=env) as container:
        con = container.inserter()._duck
        settings = dict(
            con.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name IN ('memory_limit', 'threads')"
            ).fetchall()
        )
    assert settings["threads"] == "1"
    # DuckDB shows the limit in its own units: 1,024 MB is 976.5 MiB.
    assert settings["memory_limit"] == "976.5 MiB"


def test_the_settings_are_read_once_per_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment(tmp_path, "icefloe", ICEFLOE_QUERY_THREADS="3").items():
        monkeypatch.setenv(name, value)
    container = Container()  # the process's environment, read on first use
    first = container.settings
    assert first.query.threads == 3
    # A later call, whatever the environment says by then, gets the container's settings.
    monkeypatch.setenv("ICEFLOE_QUERY_THREADS", "5")
    assert container.settings is first and container.settings.query.threads == 3
    # While a new container reads it afresh
    assert Container().settings.query.threads == 5


def test_a_rotated_secret_is_read_again_when_a_new_connection_is_refused(
    secrets: Any, postgres_dsn: str, meta: MetaStore, tmp_path: Path, containers: ExitStack
) -> None:
    # Given a warm container that read the secret once
    arn = secrets.create_secret(Name="db", SecretString=json.dumps({"dsn": postgres_dsn}))["ARN"]
    env = environment(tmp_path, meta.schema, ICEFLOE_DATABASE_SECRET_ARN=arn)
    runtime = containers.enter_context(Container(environ=env)).runtime
    source = runtime.meta.dsn_source
    assert isinstance(source, SecretDsn) and source.reads == 1
    runtime.meta.list_tables()
    assert source.reads == 1  # connections come and go without reading the secret

    # When the secret is rotated and the password this container holds stops working
    rotated = postgres_dsn + ("&" if "?" in postgres_dsn else "?") + "application_name=rotated"
    secrets.put_secret_value(SecretId=arn, SecretString=json.dumps({"dsn": rotated}))
    fields = conninfo_to_dict(postgres_dsn)
    fields["user"] = "icefloe_retired_user"
    source._dsn = make_conninfo(**fields)  # what the old password now amounts to
    runtime.meta._pool.drain()  # the next operations need new connections

    # Then the next new connection reads the secret again and uses the rotated DSN
    assert runtime.meta.list_tables() == []
    assert source.reads == 2 and source.current() == rotated
