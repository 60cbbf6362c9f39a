"""A tenant's read session allows its own objects and nothing else, by IAM's own matching rules
for resource ARNs (``*`` any run of characters, ``?`` one character), which moto does not
evaluate: the rules are applied here to object keys the writers produce."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from icefloe.errors import ConfigError
from icefloe.query.tenant_access import (
    object_patterns,
    session_name,
    session_policy,
    tenant_read,
    tenant_segments,
)
from icefloe.spec import TableSpec

TENANT_FIRST = TableSpec.create(
    name="events",
    schema="ts TIMESTAMP NOT NULL, tenant VARCHAR NOT NULL, v BIGINT",
    partition_by="tenant, day(ts)",
    tenant_column="tenant",
)
TENANT_SECOND = TableSpec.create(
    name="clicks",
    schema="ts TIMESTAMP NOT NULL, org VARCHAR NOT NULL",
    partition_by="day(ts), org",
    tenant_column="org",
)
TENANTS = ["acme", "acme-2", "acm", "a*", "a?c", "${aws:username}", "o'brien", "x/y", "日本"]


def iam_matches(pattern: str, arn: str) -> bool:
    """IAM's resource matching: ``*`` matches any characters (``/`` included), ``?`` one."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, arn, flags=re.DOTALL) is not None


def object_arn(spec: TableSpec, tenant: str, day: datetime) -> str:
    values = {
        f.name: (tenant if f.source == spec.tenant_column else day) for f in spec.partition_by
    }
    path = spec.partition_path(tuple(values[f.name] for f in spec.partition_by))
    return f"arn:aws:s3:::lake/wh/{spec.name}/data/{path}/0001.parquet"


def allowed(policy: str, arn: str) -> bool:
    (statement,) = json.loads(policy)["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "s3:GetObject"
    return any(iam_matches(p, arn) for p in statement["Resource"])


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_session_reads_its_tenants_objects_and_no_one_elses(tenant: str) -> None:
    specs = {"events": TENANT_FIRST, "clicks": TENANT_SECOND}
    read = tenant_read(
        role_arn="arn:aws:iam::123456789012:role/r",
        root_uri="s3://lake/wh",
        specs=specs,
        tenant=tenant,
    )
    day = datetime(2026, 11, 2)
    for spec in specs.values():
        assert allowed(read.session_policy, object_arn(spec, tenant, day)), spec.name
        for other in TENANTS:
            if other != tenant:
                assert not allowed(read.session_policy, object_arn(spec, other, day)), other
    # Nothing outside the warehouse's table data: not the results, not another prefix.
    assert not allowed(read.session_policy, "arn:aws:s3:::lake/results/2026/11/q/result.json")
    assert not allowed(read.session_policy, "arn:aws:s3:::lake/elsewhere/secret.csv")
    assert not allowed(read.session_policy, "arn:aws:s3:::other/wh/events/data/x")


def test_escaped_values_carry_no_iam_wildcard_or_variable() -> None:
    for tenant in TENANTS:
        (segment,) = tenant_segments([TENANT_FIRST], tenant)
        value = segment.split("=", 1)[1]
        assert re.fullmatch(r"[A-Za-z0-9._%-]+", value), value


def test_the_policy_names_exactly_two_patterns_per_tenant_field() -> None:
    segments = tenant_segments([TENANT_FIRST, TENANT_SECOND], "acme")
    assert segments == ("org=acme", "tenant=acme")
    assert object_patterns(bucket="lake", prefix="wh/", segments=segments) == [
        "arn:aws:s3:::lake/wh/*/data/org=acme/*",
        "arn:aws:s3:::lake/wh/*/data/*/org=acme/*",
        "arn:aws:s3:::lake/wh/*/data/tenant=acme/*",
        "arn:aws:s3:::lake/wh/*/data/*/tenant=acme/*",
    ]


def test_session_names_fit_aws_rules_for_any_tenant() -> None:
    for tenant in [*TENANTS, "x" * 500]:
        name = session_name(tenant)
        assert re.fullmatch(r"[\w+=,.@-]{2,64}", name), name
    assert session_name("a") != session_name("b")


def test_a_table_without_a_tenant_partition_or_a_policy_past_the_aws_limit_is_refused() -> None:
    plain = TableSpec.create(name="plain", schema="ts TIMESTAMP NOT NULL", partition_by="day(ts)")
    with pytest.raises(ConfigError, match="no tenant partition field"):
        tenant_segments([plain], "acme")
    with pytest.raises(ConfigError, match="2048"):
        session_policy(bucket="lake", prefix="wh", segments=[f"f{i}=v" for i in range(40)])
    with pytest.raises(ConfigError, match="S3 warehouse"):
        tenant_read(role_arn="r", root_uri="/tmp/wh", specs={"events": TENANT_FIRST}, tenant="a")


def test_a_tenant_of_a_typed_column_opens_the_objects_of_its_value() -> None:
    # The tenant "05" of an INTEGER column is the value 5, whose objects are under tenant=5
    numbered = TableSpec.create(
        name="numbered",
        schema="ts TIMESTAMP NOT NULL, tenant INTEGER NOT NULL",
        partition_by="tenant, day(ts)",
        tenant_column="tenant",
    )
    assert tenant_segments([numbered], "05") == ("tenant=5",)
    assert tenant_segments([numbered], "5") == ("tenant=5",)
