"""The settings model: every variable read in one place, its default, its bad values named."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from icefloe.config import WarehouseLocation
from icefloe.errors import ConfigError
from icefloe.settings import (
    VARIABLES,
    IcefloeSettings,
    LambdaContainer,
    load_settings,
    reference_markdown,
)
from icefloe.settings.limits import QueryLimits
from icefloe.settings.parts import EmrJobConfig

REPO = Path(__file__).resolve().parents[3]

EMR = {
    "ICEFLOE_EMR_APPLICATION_ID": "app",
    "ICEFLOE_EMR_JOB_ROLE_ARN": "arn:aws:iam::123456789012:role/job",
    "ICEFLOE_EMR_ENTRY_POINT": "s3://a/compact_job.py",
    "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": "s3://a/env.tar.gz",
}

# variable -> (a good value, where it lands in the tree, what it becomes). Every variable of
# VARIABLES must be here: a new variable needs a case.
GOOD: dict[str, tuple[str, Callable[[IcefloeSettings], Any], Any]] = {
    "ICEFLOE_HOME": ("/srv/lake", lambda s: s.core.home, Path("/srv/lake")),
    "ICEFLOE_WAREHOUSE": (
        "s3://my-bucket/lake/prod/",
        lambda s: s.core.warehouse,
        WarehouseLocation(scheme="s3", bucket="my-bucket", prefix="lake/prod"),
    ),
    "ICEFLOE_DATABASE_URL": (
        "postgresql://u@h/db",
        lambda s: s.core.database_url,
        "postgresql://u@h/db",
    ),
    "ICEFLOE_DATABASE_SECRET_ARN": (
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db",
        lambda s: s.database_secret_arn,
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db",
    ),
    "ICEFLOE_DATABASE_SCHEMA": ("lake_2", lambda s: s.core.database_schema, "lake_2"),
    "ICEFLOE_S3_ENDPOINT_URL": (
        "http://127.0.0.1:9000",
        lambda s: s.core.s3_endpoint_url,
        "http://127.0.0.1:9000",
    ),
    "AWS_REGION": ("eu-west-1", lambda s: s.core.aws_region, "eu-west-1"),
    "AWS_DEFAULT_REGION": ("ap-south-1", lambda s: s.core.aws_region, "ap-south-1"),
    "ICEFLOE_RESULTS": (
        "s3://out/q",
        lambda s: s.core.results_location,
        WarehouseLocation(scheme="s3", bucket="out", prefix="q"),
    ),
    "ICEFLOE_TENANT_READ_ROLE_ARN": (
        "arn:aws:iam::123456789012:role/tenant",
        lambda s: s.core.tenant_read_role_arn,
        "arn:aws:iam::123456789012:role/tenant",
    ),
    "ICEFLOE_QUERY_MEMORY_LIMIT": ("512MB", lambda s: s.query.memory_limit, "512MB"),
    "ICEFLOE_QUERY_THREADS": ("3", lambda s: s.query.threads, 3),
    "ICEFLOE_QUERY_TIMEOUT_S": ("2.5", lambda s: s.query.timeout_s, 2.5),
    "ICEFLOE_QUERY_MAX_RESULT_ROWS": ("1000", lambda s: s.query.max_result_rows, 1000),
    "ICEFLOE_QUERY_MAX_RESULT_BYTES": ("65536", lambda s: s.query.result_bytes, 65536),
    "ICEFLOE_MERGE_MEMORY_LIMIT": ("2GiB", lambda s: s.merge.limits.memory_limit, "2GiB"),
    "ICEFLOE_MERGE_THREADS": ("4", lambda s: s.merge.limits.threads, 4),
    "ICEFLOE_MERGE_LEASE_SECONDS": ("960", lambda s: s.merge.lease, timedelta(seconds=960)),
    "ICEFLOE_MERGE_LOCAL_WORKERS": ("3", lambda s: s.merge.local_workers, 3),
    "ICEFLOE_MERGE_QUEUE_URL": (
        "https://sqs.us-east-1.amazonaws.com/123456789012/merge",
        lambda s: s.merge_queue_url,
        "https://sqs.us-east-1.amazonaws.com/123456789012/merge",
    ),
    "ICEFLOE_DEFAULT_TABLE": ("events", lambda s: s.insert.default_table, "events"),
    "ICEFLOE_EMR_APPLICATION_ID": ("app-1", lambda s: s.emr.application_id, "app-1"),
    "ICEFLOE_EMR_JOB_ROLE_ARN": ("arn:r", lambda s: s.emr.job_role_arn, "arn:r"),
    "ICEFLOE_EMR_ENTRY_POINT": ("s3://b/job.py", lambda s: s.emr.entry_point, "s3://b/job.py"),
    "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": (
        "s3://b/env.tar.gz",
        lambda s: s.emr.environment_archive,
        "s3://b/env.tar.gz",
    ),
    "ICEFLOE_EMR_LOG_URI": ("s3://b/logs/", lambda s: s.emr.log_uri, "s3://b/logs/"),
    "ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": ("120", lambda s: s.emr.job_timeout_minutes, 120),
    "ICEFLOE_ICEBERG_CATALOG": ("glue", lambda s: s.iceberg.catalog, "glue"),
    "ICEFLOE_ICEBERG_CATALOG_URI": (
        "postgresql+psycopg://u@h/d",
        lambda s: s.iceberg.catalog_uri,
        "postgresql+psycopg://u@h/d",
    ),
    "ICEFLOE_ICEBERG_NAMESPACE": ("analytics", lambda s: s.iceberg.namespace, "analytics"),
    "ICEFLOE_ICEBERG_METADATA_LOCATION": (
        "s3://b/meta",
        lambda s: s.iceberg.metadata_location,
        "s3://b/meta",
    ),
    "AWS_LAMBDA_FUNCTION_NAME": ("icefloe-insert", lambda s: s.in_lambda, True),
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": (
        "3538",
        lambda s: (s.query.memory_limit, s.query.threads),
        ("2299MB", 2),
    ),
}

# variable -> (a bad value, what the message says besides the variable's name).
BAD: dict[str, tuple[str, str]] = {
    "ICEFLOE_WAREHOUSE": ("ftp://x/y", "unsupported scheme"),
    "ICEFLOE_DATABASE_SCHEMA": ("x; drop", "plain lower-case identifier"),
    "ICEFLOE_S3_ENDPOINT_URL": ("localhost:9000", "http:// or https://"),
    "ICEFLOE_RESULTS": ("s3://Bad_Bucket/x", "invalid S3 bucket name"),
    "ICEFLOE_QUERY_MEMORY_LIMIT": ("lots", "memory size"),
    "ICEFLOE_QUERY_THREADS": ("zero", "positive whole number"),
    "ICEFLOE_QUERY_TIMEOUT_S": ("-1", "positive number"),
    "ICEFLOE_QUERY_MAX_RESULT_ROWS": ("0", "positive whole number"),
    "ICEFLOE_QUERY_MAX_RESULT_BYTES": ("many", "positive whole number"),
    "ICEFLOE_MERGE_MEMORY_LIMIT": ("1 gig", "memory size"),
    "ICEFLOE_MERGE_THREADS": ("0", "positive whole number"),
    "ICEFLOE_MERGE_LEASE_SECONDS": ("-5", "positive whole number"),
    "ICEFLOE_MERGE_LOCAL_WORKERS": ("0", "positive whole number"),
    "ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": ("360", "must stay below the compaction lease"),
    "ICEFLOE_ICEBERG_CATALOG": ("hive", "must be sql or glue"),
    "ICEFLOE_ICEBERG_NAMESPACE": ("my-db", "plain identifier"),
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": ("lots", "positive whole number"),
}


def test_every_variable_has_a_case_and_every_case_is_a_variable() -> None:
    assert {v.name for v in VARIABLES} == set(GOOD)
    assert set(BAD) <= set(GOOD)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_each_variable_lands_in_its_place(name: str) -> None:
    value, where, expected = GOOD[name]
    assert where(IcefloeSettings.from_environ({name: value})) == expected


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_refused_naming_the_variable(name: str) -> None:
    value, message = BAD[name]
    with pytest.raises(ConfigError, match=rf"{name}\b.*{re.escape(message)}"):
        IcefloeSettings.from_environ({name: value})


def test_every_bad_value_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as refused:
        IcefloeSettings.from_environ(
            {
                "ICEFLOE_QUERY_THREADS": "x",
                "ICEFLOE_MERGE_THREADS": "y",
                "ICEFLOE_WAREHOUSE": "z://",
            }
        )
    message = str(refused.value)
    assert message.startswith("3 bad settings")
    for name in ("ICEFLOE_QUERY_THREADS", "ICEFLOE_MERGE_THREADS", "ICEFLOE_WAREHOUSE"):
        assert name in message


def test_defaults_put_everything_under_icefloe_home(tmp_path: Path) -> None:
    settings = IcefloeSettings.from_environ({"ICEFLOE_HOME": str(tmp_path / "home")})
    core = settings.core
    assert core.home == (tmp_path / "home").resolve()
    assert core.warehouse == WarehouseLocation(scheme="file", path=core.home / "warehouse")
    assert core.results_location == WarehouseLocation(scheme="file", path=core.home / "results")
    assert core.database_url is None and core.embedded_database_dir == core.home / "postgres"
    assert (core.database_schema, core.aws_region, core.s3_endpoint_url) == (
        "icefloe",
        "us-east-1",
        None,
    )
    assert settings.query == QueryLimits()
    assert settings.merge.lease == timedelta(minutes=30)
    assert (settings.merge.limits.memory_limit, settings.merge.limits.threads) == ("1GB", 2)
    assert settings.merge.limits.temp_directory is not None
    assert settings.merge.limits.temp_directory.name == "icefloe-merge"
    assert (settings.insert.duckdb_memory_limit, settings.insert.duckdb_threads) == (None, None)
    assert settings.emr.job_config() is None
    assert settings.merge_queue_url is None and settings.database_secret_arn is None
    assert not settings.in_lambda


def test_the_region_prefers_aws_region_and_results_go_beside_an_s3_warehouse() -> None:
    both = IcefloeSettings.from_environ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "x"})
    assert both.core.aws_region == "eu-west-1"
    s3 = IcefloeSettings.from_environ({"ICEFLOE_WAREHOUSE": "s3://bucket/wh"}).core
    assert s3.results_location == WarehouseLocation(scheme="s3", bucket="bucket", prefix="results")


@pytest.mark.parametrize(
    ("memory_mb", "share", "expected"),
    [
        (2048, 0.5, ("1024MB", 1)),
        (10240, 0.6, ("6144MB", 6)),
        (3538, 0.5, ("1769MB", 2)),
        (3008, 0.6, ("1804MB", 2)),
        (128, 0.6, ("76MB", 1)),
    ],
)
def test_duckdb_shares_follow_the_functions_memory(
    memory_mb: int, share: float, expected: tuple[str, int]
) -> None:
    assert LambdaContainer(memory_mb=memory_mb).duckdb_share(share) == expected
    assert LambdaContainer().duckdb_share(share) is None


def test_in_lambda_each_duckdb_gets_its_share_and_variables_override_it() -> None:
    lambda_ = IcefloeSettings.from_environ({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008"})
    assert (lambda_.query.memory_limit, lambda_.query.threads) == ("1955MB", 2)
    assert (lambda_.merge.limits.memory_limit, lambda_.merge.limits.threads) == ("1804MB", 2)
    assert (lambda_.insert.duckdb_memory_limit, lambda_.insert.duckdb_threads) == ("1504MB", 2)
    chosen = IcefloeSettings.from_environ(
        {
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "3008",
            "ICEFLOE_MERGE_MEMORY_LIMIT": "1GB",
            "ICEFLOE_MERGE_THREADS": "3",
        }
    )
    assert (chosen.merge.limits.memory_limit, chosen.merge.limits.threads) == ("1GB", 3)


def test_emr_jobs_need_the_whole_configuration_but_the_application_alone_is_valid() -> None:
    assert IcefloeSettings.from_environ({"ICEFLOE_EMR_APPLICATION_ID": "app"}).emr.application_id
    config = IcefloeSettings.from_environ(
        {**EMR, "ICEFLOE_EMR_JOB_TIMEOUT_MINUTES": "120"}
    ).emr.job_config()
    assert config == EmrJobConfig(
        application_id="app",
        execution_role_arn=EMR["ICEFLOE_EMR_JOB_ROLE_ARN"],
        entry_point=EMR["ICEFLOE_EMR_ENTRY_POINT"],
        environment_archive=EMR["ICEFLOE_EMR_ENVIRONMENT_ARCHIVE"],
        job_timeout_minutes=120,
    )
    partial = IcefloeSettings.from_environ({**EMR, "ICEFLOE_EMR_ENTRY_POINT": ""})
    with pytest.raises(ConfigError, match="ICEFLOE_EMR_ENTRY_POINT is not"):
        partial.emr.job_config()


def test_load_settings_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEFLOE_QUERY_THREADS", "5")
    assert load_settings().query.threads == 5
    assert load_settings({}).query.threads == 2


def test_the_configuration_reference_is_the_generated_one() -> None:
    reference = (REPO / "docs" / "configuration.md").read_text()
    start, end = "<!-- settings:start -->\n", "\n<!-- settings:end -->"
    table = reference[reference.index(start) + len(start) : reference.index(end)]
    assert table == reference_markdown(), (
        "docs/configuration.md's table is stale: regenerate it with `python -m icefloe.settings`"
    )


def test_nothing_but_the_settings_module_reads_the_environment() -> None:
    readers = re.compile(r"os\.environ|os\.getenv|\bgetenv\(|environ\.get\(")
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for root in ("shared", "functions", "infra")
        for path in sorted((REPO / root).rglob("*.py"))
        if path != REPO / "shared" / "icefloe" / "settings" / "__init__.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if readers.search(line)
    ]
    assert offenders == []


def test_every_variable_the_code_or_the_stack_names_is_listed() -> None:
    named = re.compile(r"\bICEFLOE_[A-Z0-9_]*[A-Z0-9]\b")
    sources = [
        *(REPO / "shared").rglob("*.py"),
        *(REPO / "functions").rglob("*.py"),
        *(REPO / "infra").rglob("*.py"),
        REPO / "template.yaml",
    ]
    found = {name for path in sources for name in named.findall(path.read_text())}
    assert found - {v.name for v in VARIABLES} == set()
