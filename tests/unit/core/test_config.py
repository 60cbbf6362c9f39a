"""Settings come from the environment once, with defaults for one machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from icefloe.config import Settings, WarehouseLocation
from icefloe.errors import ConfigError


def test_defaults_put_everything_under_icefloe_home(tmp_path: Path) -> None:
    settings = Settings.from_env({"ICEFLOE_HOME": str(tmp_path / "home")})
    assert settings.home == (tmp_path / "home").resolve()
    assert settings.warehouse.scheme == "file"
    assert settings.warehouse.path == settings.home / "warehouse"
    assert settings.database_url is None
    assert settings.embedded_database_dir == settings.home / "postgres"
    assert settings.database_schema == "icefloe"


def test_s3_warehouse_and_endpoint_are_parsed() -> None:
    settings = Settings.from_env(
        {
            "ICEFLOE_WAREHOUSE": "s3://my-bucket/lake/prod/",
            "ICEFLOE_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
            "ICEFLOE_DATABASE_URL": "postgresql://u@h/db",
            "AWS_REGION": "eu-west-1",
        }
    )
    assert settings.warehouse == WarehouseLocation(
        scheme="s3", bucket="my-bucket", prefix="lake/prod"
    )
    assert settings.warehouse.uri == "s3://my-bucket/lake/prod"
    assert settings.s3_endpoint_url == "http://127.0.0.1:9000"
    assert settings.aws_region == "eu-west-1"


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"ICEFLOE_WAREHOUSE": "ftp://x/y"}, "ICEFLOE_WAREHOUSE"),
        ({"ICEFLOE_WAREHOUSE": "s3://Bad_Bucket/x"}, "ICEFLOE_WAREHOUSE"),
        ({"ICEFLOE_WAREHOUSE": "s3://bucket/a//b"}, "ICEFLOE_WAREHOUSE"),
        ({"ICEFLOE_WAREHOUSE": "s3://bucket/a/../b"}, "ICEFLOE_WAREHOUSE"),
        ({"ICEFLOE_S3_ENDPOINT_URL": "localhost:9000"}, "ICEFLOE_S3_ENDPOINT_URL"),
        ({"ICEFLOE_DATABASE_SCHEMA": "x; drop"}, "ICEFLOE_DATABASE_SCHEMA"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Settings.from_env(env)


def test_query_results_go_beside_the_warehouse_unless_configured(tmp_path: Path) -> None:
    local = Settings.from_env({"ICEFLOE_HOME": str(tmp_path)})
    assert local.results_location == WarehouseLocation(
        scheme="file", path=tmp_path.resolve() / "results"
    )
    s3 = Settings.from_env({"ICEFLOE_WAREHOUSE": "s3://bucket/wh"})
    assert s3.results_location == WarehouseLocation(scheme="s3", bucket="bucket", prefix="results")
    chosen = Settings.from_env(
        {"ICEFLOE_WAREHOUSE": "s3://bucket/wh", "ICEFLOE_RESULTS": "s3://out/q"}
    )
    assert chosen.results_location == WarehouseLocation(scheme="s3", bucket="out", prefix="q")
