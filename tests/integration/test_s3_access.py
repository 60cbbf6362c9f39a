"""S3 access for DuckDB and pyarrow against moto's S3 server over real HTTP: the offline httpfs
extension, the secret, credentials, SQL quoting, and reads that survive the sandbox's lock-down."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from icefloe.datafiles import encode_parquet
from icefloe.errors import ConfigError
from icefloe.query.s3_access import (
    S3Credentials,
    _sql_string,
    configure_s3,
    configure_s3_from_settings,
    httpfs_extension_path,
    pyarrow_s3_filesystem,
)
from icefloe.query.sandbox import lock_down
from icefloe.settings import load_settings
from icefloe.settings.limits import QueryLimits
from icefloe.spec import TableSpec

pytestmark = pytest.mark.integration

BUCKET = "s3-access-tests"
CREDS = S3Credentials("testing", "testing")


SPEC = TableSpec.create(name="t", schema="day BIGINT, n BIGINT")


@dataclass(frozen=True)
class Snapshot:
    """Objects in the bucket: the snapshot's files and others the query must not reach."""

    endpoint: str
    uris: list[str]
    others: list[str]


@pytest.fixture(scope="module")
def snapshot(moto_endpoint: str) -> Snapshot:
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=BUCKET)
    uris = []
    for day in (1, 2):
        table = pa.table({"day": [day] * 3, "n": [10 * day + i for i in range(3)]})
        key = f"t/data/day={day}/f{day}.parquet"
        s3.put_object(
            Bucket=BUCKET,
            Key=key,
            Body=encode_parquet(table, spec=SPEC, row_group_sizes=2).data,
        )
        uris.append(f"s3://{BUCKET}/{key}")
    # Not in the snapshot: a file of the same table removed by a merge, and another object.
    old = encode_parquet(pa.table({"day": [1], "n": [999]}), spec=SPEC, row_group_sizes=1).data
    s3.put_object(Bucket=BUCKET, Key="t/data/day=1/old.parquet", Body=old)
    s3.put_object(Bucket=BUCKET, Key="elsewhere/secret.csv", Body=b"secret\n42\n")
    others = [f"s3://{BUCKET}/t/data/day=1/old.parquet", f"s3://{BUCKET}/elsewhere/secret.csv"]
    return Snapshot(endpoint=moto_endpoint, uris=uris, others=others)


@pytest.fixture
def con(snapshot: Snapshot) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    configure_s3(connection, region="us-east-1", endpoint_url=snapshot.endpoint, credentials=CREDS)
    yield connection
    connection.close()


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing boto3's default chain could find, and no metadata service to wait for."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _view(con: duckdb.DuckDBPyConnection, uris: list[str]) -> None:
    files = ", ".join(_sql_string(u) for u in uris)
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet([{files}], hive_partitioning=false)")


def test_the_extension_file_is_the_wheels_for_the_installed_duckdb() -> None:
    path = httpfs_extension_path()
    assert path.is_file()
    assert path.parts[-2:] == (f"v{duckdb.__version__}", "httpfs.duckdb_extension")


def test_duckdb_reads_exactly_the_rows_through_httpfs_loaded_from_the_wheel(
    snapshot: Snapshot, con: duckdb.DuckDBPyConnection
) -> None:
    # Given httpfs loaded from its file (never installed: autoinstall is off)
    con.execute("SET autoinstall_known_extensions = false")
    # When both files are read
    rows = con.execute(
        "SELECT day, n FROM read_parquet(?, hive_partitioning=false) ORDER BY n", [snapshot.uris]
    ).fetchall()
    # Then every row comes back once, and the loaded httpfs is the wheel's file
    assert rows == [(1, 10), (1, 11), (1, 12), (2, 20), (2, 21), (2, 22)]
    loaded = con.execute(
        "SELECT install_mode FROM duckdb_extensions() WHERE extension_name = 'httpfs' AND loaded"
    ).fetchall()
    assert loaded == [("NOT_INSTALLED",)]


def test_after_lock_down_the_snapshots_files_read_and_nothing_else_does(
    snapshot: Snapshot, con: duckdb.DuckDBPyConnection
) -> None:
    # Given S3 configured first, then a view over the snapshot's files and the lock-down
    _view(con, snapshot.uris)
    lock_down(con, allowed_paths=snapshot.uris, limits=QueryLimits())
    # When the view is read, then it works
    assert con.execute("SELECT count(*), sum(n) FROM t").fetchone() == (6, 96)
    # And any other object, by any spelling, is refused
    refused = [
        *snapshot.others,
        f"s3://{BUCKET}/t/data/day=1/*.parquet",
        f"s3://{BUCKET}/t/data/day=1/f1.parquet/../old.parquet",
        f"{snapshot.endpoint}/{BUCKET}/t/data/day=1/old.parquet",
    ]
    for uri in refused:
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"SELECT * FROM read_parquet({_sql_string(uri)})").fetchall()
    # And the secret cannot be read back or re-exposed
    with pytest.raises(duckdb.InvalidInputException):
        con.execute("SELECT * FROM duckdb_secrets(redact = false)").fetchall()
    with pytest.raises(duckdb.InvalidInputException):
        con.execute("SET allow_unredacted_secrets = true")


def test_httpfs_cannot_be_loaded_after_lock_down(snapshot: Snapshot) -> None:
    # Why configure_s3 must run first: a locked connection refuses LOAD.
    con = duckdb.connect()
    lock_down(con, allowed_paths=snapshot.uris, limits=QueryLimits())
    with pytest.raises(duckdb.PermissionException):
        configure_s3(con, region="us-east-1", endpoint_url=snapshot.endpoint, credentials=CREDS)


def test_credentials_come_from_boto3s_default_chain_with_the_session_token(
    snapshot: Snapshot, monkeypatch: pytest.MonkeyPatch, no_aws_credentials: None
) -> None:
    # Given temporary credentials in the environment (what a Lambda role provides)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIATESTING")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-testing")
    con = duckdb.connect()
    # When S3 is configured without explicit credentials
    configure_s3(con, region="eu-west-1", endpoint_url=snapshot.endpoint)
    # Then the secret carries them (redacted when listed) and reads work
    (description,) = con.execute("SELECT secret_string FROM duckdb_secrets()").fetchone() or ("",)
    assert "key_id=ASIATESTING" in description and "region=eu-west-1" in description
    assert "session_token=redacted" in description and "token-testing" not in description
    assert con.execute("SELECT count(*) FROM read_parquet(?)", [snapshot.uris]).fetchone() == (6,)


def test_missing_credentials_are_a_config_error(
    snapshot: Snapshot, no_aws_credentials: None
) -> None:
    with pytest.raises(ConfigError, match="no AWS credentials"):
        configure_s3(duckdb.connect(), region="us-east-1", endpoint_url=snapshot.endpoint)
    with pytest.raises(ConfigError, match="no AWS credentials"):
        pyarrow_s3_filesystem(region="us-east-1", endpoint_url=snapshot.endpoint)


def test_a_local_warehouse_needs_no_s3(tmp_path: object, no_aws_credentials: None) -> None:
    con = duckdb.connect()
    configure_s3_from_settings(con, load_settings({"ICEFLOE_HOME": str(tmp_path)}).core)
    assert con.execute("SELECT count(*) FROM duckdb_secrets()").fetchone() == (0,)


def test_an_s3_warehouse_gets_the_settings_region_and_endpoint(
    snapshot: Snapshot, monkeypatch: pytest.MonkeyPatch, tmp_path: object, no_aws_credentials: None
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = load_settings(
        {
            "ICEFLOE_HOME": str(tmp_path),
            "ICEFLOE_WAREHOUSE": f"s3://{BUCKET}/t",
            "ICEFLOE_S3_ENDPOINT_URL": snapshot.endpoint,
            "AWS_REGION": "eu-central-1",
        }
    ).core
    con = duckdb.connect()
    configure_s3_from_settings(con, settings)
    (description,) = con.execute("SELECT secret_string FROM duckdb_secrets()").fetchone() or ("",)
    host = snapshot.endpoint.removeprefix("http://")
    assert f"endpoint={host};" in description and "region=eu-central-1" in description
    assert "use_ssl=false" in description and "url_style=path" in description
    assert con.execute("SELECT count(*) FROM read_parquet(?)", [snapshot.uris]).fetchone() == (6,)


@pytest.mark.parametrize(
    "value",
    ["plain", "it's", "'", "x', TYPE gcs, KEY_ID 'y", "a'); DROP TABLE t; --", "back\\slash", "é✓"],
)
def test_sql_strings_round_trip_quotes_included(value: str) -> None:
    # A quote cannot end the literal early: it is doubled and stays part of the value.
    assert duckdb.connect().execute(f"SELECT {_sql_string(value)}").fetchone() == (value,)


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "tab\there", "del\x7f"])
def test_sql_strings_refuse_control_characters_without_echoing_them(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _sql_string(value)
    assert value not in str(refused.value)


def test_an_injection_attempt_in_a_credential_stays_inside_its_value(snapshot: Snapshot) -> None:
    con = duckdb.connect()
    sneaky = S3Credentials("id', ENDPOINT 'evil.example:80', KEY_ID 'x", "s")
    configure_s3(con, region="us-east-1", endpoint_url=snapshot.endpoint, credentials=sneaky)
    (description,) = con.execute("SELECT secret_string FROM duckdb_secrets()").fetchone() or ("",)
    assert f"key_id={sneaky.key_id};" in description
    assert f"endpoint={snapshot.endpoint.removeprefix('http://')};" in description


@pytest.mark.parametrize(
    "endpoint",
    ["localhost:9000", "ftp://host:21", "http://user:pw@host:9000", "http://host:9000/prefix"],
)
def test_endpoints_other_than_scheme_host_and_port_are_refused(endpoint: str) -> None:
    with pytest.raises(ConfigError):
        configure_s3(duckdb.connect(), region="us-east-1", endpoint_url=endpoint, credentials=CREDS)
    with pytest.raises(ConfigError):
        pyarrow_s3_filesystem(region="us-east-1", endpoint_url=endpoint, credentials=CREDS)


def test_pyarrow_reads_the_same_rows_with_a_filter_pushed_down(snapshot: Snapshot) -> None:
    s3fs = pyarrow_s3_filesystem(
        region="us-east-1", endpoint_url=snapshot.endpoint, credentials=CREDS
    )
    paths = [u.removeprefix("s3://") for u in snapshot.uris]
    table = ds.dataset(paths, format="parquet", filesystem=s3fs).to_table(
        columns=["n"], filter=ds.field("day") == 2
    )
    assert sorted(table.column("n").to_pylist()) == [20, 21, 22]
