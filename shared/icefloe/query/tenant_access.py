"""Tenant isolation in IAM: a tenant's query reads S3 with credentials that can open only that
tenant's objects.

The sandbox and the views already keep a tenant's query to its own files. This is the second
lock, held by AWS rather than by icefloe's code: the query function assumes the tenant read
role (``TenantReadRole`` in the stack, which may itself read the warehouse) with a *session
policy* naming the tenant's partition prefixes. A session's permissions are the intersection of
the role's and the session policy's, so even a query that escaped DuckDB's sandbox could not
read another tenant's objects, the results prefix, or anything else.

A tenant's files live under ``<warehouse>/<table>/data/.../<field>=<value>/...``, where the
value is percent-escaped (:mod:`icefloe.spec.hive`): letters, digits and ``._-`` only, so no
IAM wildcard (``*``, ``?``) or policy variable (``${...}``) can appear in it. The session
policy allows ``s3:GetObject`` on exactly two patterns per tenant partition field:

- ``<warehouse>/*/data/<field>=<value>/*`` (the tenant field first in the path);
- ``<warehouse>/*/data/*/<field>=<value>/*`` (after other partition fields).

The ``/`` on both sides of the segment means ``tenant=acme`` never matches ``tenant=acme-2``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import duckdb

from icefloe import duck
from icefloe.errors import ConfigError
from icefloe.query.sandbox import QueryRefusedError
from icefloe.spec import PartitionValue, TableSpec, normalize_type
from icefloe.spec.hive import escape_path_value

# AWS allows a packed session policy of at most 2,048 characters.
MAX_SESSION_POLICY_CHARS = 2048
SESSION_SECONDS = 3600


def tenant_segments(specs: Iterable[TableSpec], tenant: str) -> tuple[str, ...]:
    """The path segments (``field=value``) of ``tenant``'s partitions in these tables."""
    segments = set()
    for spec in specs:
        ((name, value),) = tenant_partition(spec, tenant).items()
        segments.add(f"{name}={escape_path_value(value)}")
    return tuple(sorted(segments))


def tenant_partition(spec: TableSpec, tenant: str) -> dict[str, str]:
    """The tenant partition field of ``spec`` and the path value of ``tenant``'s files under
    it: that of the value the tenant column holds where ``column = 'tenant'`` holds, as DuckDB
    compares them (the tenant ``05`` of an INTEGER column is the files of ``5``).
    QueryRefusedError naming the tenant when it is no value of the column's type; ConfigError
    when the table has no tenant partition field."""
    field = next(
        (
            f
            for f in spec.partition_by
            if f.transform == "identity" and f.source == spec.tenant_column
        ),
        None,
    )
    if field is None:
        raise ConfigError(f"table {spec.name!r} has no tenant partition field")
    value = _tenant_value(spec.column(field.source).type, tenant)
    return {field.name: field.to_path_value(value)}


@functools.lru_cache(maxsize=1024)
def _tenant_value(column_type: str, tenant: str) -> PartitionValue:
    if normalize_type(column_type) == "VARCHAR":
        return tenant
    con = duck.connect(threads=1)
    try:
        row = con.execute(f"SELECT CAST(? AS {column_type})", [tenant]).fetchone()
    except duckdb.Error as e:
        shown = tenant if len(tenant) <= 100 else tenant[:100] + "..."
        raise QueryRefusedError(
            f"query refused: the tenant {shown!r} is not a value of the tenant column's type"
            f" {column_type} ({str(e).splitlines()[0]})"
        ) from None
    finally:
        con.close()
    assert row is not None  # one row, always
    return cast(PartitionValue, row[0])


def object_patterns(*, bucket: str, prefix: str, segments: Sequence[str]) -> list[str]:
    """The S3 object ARNs (IAM wildcards) a tenant's session may read."""
    base = (
        f"arn:aws:s3:::{bucket}/{prefix.strip('/')}"
        if prefix.strip("/")
        else f"arn:aws:s3:::{bucket}"
    )
    patterns = []
    for segment in segments:
        patterns.append(f"{base}/*/data/{segment}/*")
        patterns.append(f"{base}/*/data/*/{segment}/*")
    return patterns


def session_policy(*, bucket: str, prefix: str, segments: Sequence[str]) -> str:
    """The session policy (compact JSON) of a tenant's read session."""
    if not segments:
        raise ConfigError("a tenant session needs at least one tenant partition")
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "TenantObjects",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": object_patterns(bucket=bucket, prefix=prefix, segments=segments),
            }
        ],
    }
    text = json.dumps(document, separators=(",", ":"))
    if len(text) > MAX_SESSION_POLICY_CHARS:
        raise ConfigError(
            f"the tenant session policy would be {len(text)} characters, more than AWS's"
            f" {MAX_SESSION_POLICY_CHARS}: the tables name too many tenant partition fields"
        )
    return text


def session_name(tenant: str) -> str:
    """A role session name for the tenant (CloudTrail shows it): a hash, so that any tenant
    value fits AWS's 64 characters of ``[\\w+=,.@-]``."""
    return "icefloe-tenant-" + hashlib.sha256(tenant.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class TenantRead:
    """What a tenant's executor assumes: the role, and the session policy that narrows it."""

    role_arn: str
    session_policy: str
    session_name: str


def tenant_read(
    *, role_arn: str, root_uri: str, specs: Mapping[str, TableSpec], tenant: str
) -> TenantRead:
    """The session a tenant's query over these tables reads S3 with."""
    if not root_uri.startswith("s3://"):
        raise ConfigError("tenant read sessions need an S3 warehouse")
    bucket, _, prefix = root_uri.removeprefix("s3://").partition("/")
    segments = tenant_segments(specs.values(), tenant)
    return TenantRead(
        role_arn=role_arn,
        session_policy=session_policy(bucket=bucket, prefix=prefix, segments=segments),
        session_name=session_name(tenant),
    )
