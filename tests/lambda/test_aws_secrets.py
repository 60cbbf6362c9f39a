"""The meta store's DSN from a Secrets Manager secret: a DSN, or RDS fields made into a URL."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
import pytest
from moto import mock_aws
from psycopg.conninfo import conninfo_to_dict

from icefloe.errors import ConfigError
from icefloe.metastore.secrets import database_url_from_secret
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES

pytestmark = pytest.mark.integration

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:icefloe-db-AbCdEf"
PASSWORD = "p@ss:w/rd?#%&= é"


class StubClient:
    """A Secrets Manager client that returns one secret string."""

    def __init__(self, secret: object) -> None:
        self.secret = secret
        self.calls: list[str] = []

    def get_secret_value(self, *, SecretId: str) -> Mapping[str, Any]:
        self.calls.append(SecretId)
        text = self.secret if isinstance(self.secret, str) else json.dumps(self.secret)
        return {"ARN": SecretId, "SecretString": text}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


def test_a_dsn_key_is_used_as_it_is() -> None:
    client = StubClient({"dsn": "postgresql://u:p@db.example:6432/meta?sslmode=require"})
    url = database_url_from_secret(ARN, client=client)
    assert url == "postgresql://u:p@db.example:6432/meta?sslmode=require"
    assert client.calls == [ARN]


def test_rds_fields_become_a_url_that_libpq_parses_back_to_the_same_fields() -> None:
    fields = {
        "engine": "postgres",
        "host": "icefloe.cluster-abc.us-east-1.rds.amazonaws.com",
        "port": 5432,
        "username": "ice user@x",
        "password": PASSWORD,
        "dbname": "meta/db",
    }
    url = database_url_from_secret(ARN, client=StubClient(fields))
    assert PASSWORD not in url  # percent-encoded
    parsed = conninfo_to_dict(url)
    assert parsed == {
        "host": fields["host"],
        "port": "5432",
        "user": "ice user@x",
        "password": PASSWORD,
        "dbname": "meta/db",
    }


def test_port_may_be_a_string_and_port_and_dbname_may_be_left_out() -> None:
    fields = {"host": "10.0.0.7", "username": "u", "password": "p"}
    assert conninfo_to_dict(database_url_from_secret(ARN, client=StubClient(fields))) == {
        "host": "10.0.0.7",
        "port": "5432",
        "user": "u",
        "password": "p",
    }
    with_port = {**fields, "port": "6543", "host": "::1"}
    parsed = conninfo_to_dict(database_url_from_secret(ARN, client=StubClient(with_port)))
    assert (parsed["host"], parsed["port"]) == ("::1", "6543")


@pytest.mark.parametrize(
    ("secret", "words"),
    [
        ({"username": "u", "password": PASSWORD}, "missing key 'host'"),
        ({"host": "h", "password": PASSWORD}, "missing key 'username'"),
        ({"host": "h", "username": "u", "pass": PASSWORD}, "missing key 'password'"),
        ({"host": "h", "username": "u", "password": PASSWORD, "port": "x"}, "'port'"),
        ({"dsn": ""}, "'dsn'"),
        ([PASSWORD], "not a JSON object"),
        (f"dsn={PASSWORD}", "not JSON"),
    ],
    ids=["no host", "no username", "no password", "bad port", "empty dsn", "array", "not json"],
)
def test_a_bad_secret_is_a_config_error_naming_the_secret_and_key_never_the_password(
    secret: object, words: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        database_url_from_secret(ARN, client=StubClient(secret))
    message = str(raised.value)
    assert ARN in message and words in message
    assert PASSWORD not in message
    cause = raised.value.__cause__ or raised.value.__context__
    assert cause is None or raised.value.__suppress_context__


def test_the_secret_is_read_from_secrets_manager_by_arn(aws: Any) -> None:
    arn = aws.create_secret(Name="icefloe-db", SecretString=json.dumps({"dsn": "postgresql:///x"}))[
        "ARN"
    ]
    assert database_url_from_secret(arn) == "postgresql:///x"


def test_a_missing_secret_is_a_config_error_naming_it(aws: Any) -> None:
    with pytest.raises(ConfigError, match=r"icefloe-nope.*ResourceNotFoundException"):
        database_url_from_secret(
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:icefloe-nope-AbCdEf"
        )
