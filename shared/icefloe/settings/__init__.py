"""Every setting icefloe takes from its environment, read in one place.

:meth:`IcefloeSettings.from_environ` reads a mapping of environment variables into one typed,
immutable tree; :func:`load_settings` reads the process's own environment. Nothing else in the
package, the functions or the Spark jobs reads ``os.environ``: they are handed the part of the
tree they need. A bad value is refused when the settings are read, not when it is first used,
and the error names every variable at fault.

:data:`VARIABLES` lists each variable with its default and meaning; the configuration
reference (docs/configuration.md) is generated from it (``python -m icefloe.settings``), and a
test keeps the two equal.
Variables that only boto3 or Powertools read (``AWS_ENDPOINT_URL_*``, ``POWERTOOLS_*``) are
theirs, and not listed here.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from icefloe.config import DEFAULT_HOME, DEFAULT_SCHEMA, CoreSettings, WarehouseLocation
from icefloe.errors import ConfigError
from icefloe.settings.limits import (
    DEFAULT_COMPACTION_LEASE,
    DEFAULT_LEASE,
    MEMORY_SIZE,
    MergeLimits,
    QueryLimits,
)
from icefloe.settings.parts import (
    EmrJobConfig,
    EmrSettings,
    IcebergCatalogKind,
    IcebergSettings,
    InsertSettings,
    LambdaContainer,
    MergeSettings,
)
from icefloe.settings.variables import (
    BY_NAME,
    DEFAULT_EMR_JOB_TIMEOUT_MINUTES,
    INSERT_MEMORY_SHARE,
    MERGE_MEMORY_SHARE,
    QUERY_MEMORY_SHARE,
    VARIABLES,
    Reader,
    SettingShown,
    Variable,
    masked,
    reference_markdown,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IcefloeSettings:
    """The whole configuration of one icefloe process.

    ``core`` is what every operation needs (where the meta store and the data are);
    ``database_secret_arn`` is resolved into ``core.database_url`` by
    :func:`icefloe.metastore.secrets.with_database_secret` where a secret is allowed.
    """

    core: CoreSettings
    database_secret_arn: str | None
    query: QueryLimits
    merge: MergeSettings
    insert: InsertSettings
    emr: EmrSettings
    merge_queue_url: str | None
    lambda_container: LambdaContainer
    iceberg: IcebergSettings = field(default_factory=IcebergSettings)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> IcefloeSettings:
        """Read every setting from ``environ``; a :class:`ConfigError` names each bad value."""
        read = _Reading(environ)
        home = Path(read.text("ICEFLOE_HOME") or DEFAULT_HOME).expanduser().resolve()
        container = LambdaContainer(
            function_name=read.text("AWS_LAMBDA_FUNCTION_NAME"),
            memory_mb=read.optional("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", _positive_int),
        )
        core = read.build(
            lambda: CoreSettings(
                home=home,
                warehouse=read.required(
                    "ICEFLOE_WAREHOUSE", WarehouseLocation.parse, str(home / "warehouse")
                ),
                database_url=read.text("ICEFLOE_DATABASE_URL"),
                database_schema=read.text("ICEFLOE_DATABASE_SCHEMA") or DEFAULT_SCHEMA,
                s3_endpoint_url=read.optional("ICEFLOE_S3_ENDPOINT_URL", _http_url),
                aws_region=read.text("AWS_REGION")
                or read.text("AWS_DEFAULT_REGION")
                or "us-east-1",
                results=read.optional("ICEFLOE_RESULTS", WarehouseLocation.parse),
                tenant_read_role_arn=read.text("ICEFLOE_TENANT_READ_ROLE_ARN"),
            )
        )
        query = _query_limits(read, container)
        merge = _merge_settings(read, container)
        insert = _insert_settings(read, container)
        emr = _emr_settings(read)
        iceberg = _iceberg_settings(read)
        read.raise_problems()
        assert core is not None and query is not None  # None only with a problem raised
        return cls(
            core=core,
            database_secret_arn=read.text("ICEFLOE_DATABASE_SECRET_ARN"),
            query=query,
            merge=merge,
            insert=insert,
            emr=emr,
            merge_queue_url=read.text("ICEFLOE_MERGE_QUEUE_URL"),
            lambda_container=container,
            iceberg=iceberg,
        )

    @property
    def in_lambda(self) -> bool:
        return self.lambda_container.function_name is not None


def shown_settings(
    environ: Mapping[str, str] | None = None, *, reader: Reader = "cli"
) -> list[SettingShown]:
    """Every variable ``reader`` reads, as set in ``environ`` (the process's by default): its
    value (a DSN's password masked), or ``None`` when unset and its default applies."""
    env = os.environ if environ is None else environ
    return [
        SettingShown(
            name=variable.name,
            value=masked(variable.name, env.get(variable.name) or None),
            default=variable.default.replace("`", ""),
            meaning=variable.meaning.replace("`", ""),
        )
        for variable in VARIABLES
        if reader in variable.read_by
    ]


def load_settings(environ: Mapping[str, str] | None = None) -> IcefloeSettings:
    """The settings of ``environ``, else of this process's environment."""
    return IcefloeSettings.from_environ(os.environ if environ is None else environ)


def process_environment() -> dict[str, str]:
    """A copy of this process's environment, for a child process that must see the same
    settings (the query's watched process, a local Spark job)."""
    return dict(os.environ)


def use_this_python_for_spark() -> None:
    """Make a local Spark session's Python workers run this interpreter: PySpark reads
    ``PYSPARK_PYTHON`` from the process environment (a worker of another Python fails at the
    first UDF). A value already set wins."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


class _Reading:
    """Reads variables from one mapping, collecting every problem before raising."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.problems: list[str] = []

    def text(self, name: str) -> str | None:
        """The variable's value; unset and empty are both ``None``."""
        if name not in BY_NAME:  # every variable read is documented
            raise AssertionError(f"{name} is read but not listed in VARIABLES")
        return self._environ.get(name) or None

    def optional(self, name: str, parse: Callable[[str], T]) -> T | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            return parse(value)
        except (ConfigError, ValueError) as e:
            self.problems.append(f"{name}: {_reason(e, value)}")
            return None

    def required(self, name: str, parse: Callable[[str], T], default: str) -> T:
        value = self.optional(name, parse)
        return parse(default) if value is None else value

    def build(self, make: Callable[[], T]) -> T | None:
        """``make()``, or ``None`` (with the problem recorded) when it refuses its values."""
        try:
            return make()
        except ConfigError as e:
            self.problems.append(str(e))
            return None

    def raise_problems(self) -> None:
        if self.problems:
            if len(self.problems) == 1:
                raise ConfigError(self.problems[0])
            raise ConfigError(f"{len(self.problems)} bad settings: " + "; ".join(self.problems))


def _reason(error: Exception, value: str) -> str:
    message = str(error)
    return message if message else f"{value!r} is not valid"


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{value!r} is not a positive whole number")
    return int(value)


def _positive_number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ConfigError(f"{value!r} is not a positive number")
    return number


def _memory(value: str) -> str:
    if not MEMORY_SIZE.match(value):
        raise ConfigError(f"{value!r} is not a memory size like 512MB or 2GiB")
    return value


def _http_url(value: str) -> str:
    if not re.match(r"^https?://", value):
        raise ConfigError(f"{value!r} must start with http:// or https://")
    return value


def _lease(value: str) -> timedelta:
    return timedelta(seconds=_positive_int(value))


def _query_limits(read: _Reading, container: LambdaContainer) -> QueryLimits | None:
    defaults = QueryLimits()
    memory, threads = container.duckdb_share(QUERY_MEMORY_SHARE) or (
        defaults.memory_limit,
        defaults.threads,
    )
    return read.build(
        lambda: QueryLimits(
            memory_limit=read.required("ICEFLOE_QUERY_MEMORY_LIMIT", _memory, memory),
            threads=read.optional("ICEFLOE_QUERY_THREADS", _positive_int) or threads,
            timeout_s=read.optional("ICEFLOE_QUERY_TIMEOUT_S", _positive_number)
            or defaults.timeout_s,
            max_result_rows=read.optional("ICEFLOE_QUERY_MAX_RESULT_ROWS", _positive_int)
            or defaults.max_result_rows,
            max_result_bytes=read.optional("ICEFLOE_QUERY_MAX_RESULT_BYTES", _positive_int),
        )
    )


def _merge_settings(read: _Reading, container: LambdaContainer) -> MergeSettings:
    defaults = MergeLimits()
    memory, threads = container.duckdb_share(MERGE_MEMORY_SHARE) or (
        defaults.memory_limit,
        defaults.threads,
    )
    return MergeSettings(
        limits=MergeLimits(
            memory_limit=read.required("ICEFLOE_MERGE_MEMORY_LIMIT", _memory, memory),
            threads=read.optional("ICEFLOE_MERGE_THREADS", _positive_int) or threads,
            # DuckDB spills here past its limit (/tmp, the ephemeral storage, in Lambda).
            temp_directory=Path(tempfile.gettempdir()) / "icefloe-merge",
        ),
        lease=read.optional("ICEFLOE_MERGE_LEASE_SECONDS", _lease) or DEFAULT_LEASE,
        local_workers=read.optional("ICEFLOE_MERGE_LOCAL_WORKERS", _positive_int)
        or default_local_merge_workers(),
    )


def default_local_merge_workers() -> int:
    """One merge at a time per core, at most four: a merge's DuckDB has two threads, and half
    of a small merge's time is Python and meta store round trips, which another merge's
    work fills."""
    return max(1, min(4, os.cpu_count() or 1))


def _insert_settings(read: _Reading, container: LambdaContainer) -> InsertSettings:
    memory, threads = container.duckdb_share(INSERT_MEMORY_SHARE) or (None, None)
    return InsertSettings(
        duckdb_memory_limit=memory,
        duckdb_threads=threads,
        default_table=read.text("ICEFLOE_DEFAULT_TABLE"),
    )


def _emr_settings(read: _Reading) -> EmrSettings:
    compaction_lease_minutes = int(DEFAULT_COMPACTION_LEASE.total_seconds() // 60)

    def timeout(value: str) -> int:
        minutes = _positive_int(value)
        if minutes >= compaction_lease_minutes:
            # A job still running when its claims' lease ends could see its files claimed again.
            raise ConfigError(
                f"{minutes} minutes must stay below the compaction lease"
                f" ({compaction_lease_minutes} minutes)"
            )
        return minutes

    return EmrSettings(
        application_id=read.text("ICEFLOE_EMR_APPLICATION_ID"),
        job_role_arn=read.text("ICEFLOE_EMR_JOB_ROLE_ARN"),
        entry_point=read.text("ICEFLOE_EMR_ENTRY_POINT"),
        environment_archive=read.text("ICEFLOE_EMR_ENVIRONMENT_ARCHIVE"),
        log_uri=read.text("ICEFLOE_EMR_LOG_URI"),
        job_timeout_minutes=read.optional("ICEFLOE_EMR_JOB_TIMEOUT_MINUTES", timeout)
        or DEFAULT_EMR_JOB_TIMEOUT_MINUTES,
    )


def _iceberg_catalog_kind(value: str) -> IcebergCatalogKind:
    if value not in ("sql", "glue"):
        raise ConfigError("must be sql or glue")
    return "glue" if value == "glue" else "sql"


def _iceberg_namespace(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ConfigError("must be a plain identifier (letters, digits, underscores)")
    return value


def _iceberg_settings(read: _Reading) -> IcebergSettings:
    return IcebergSettings(
        catalog=read.optional("ICEFLOE_ICEBERG_CATALOG", _iceberg_catalog_kind) or "sql",
        catalog_uri=read.text("ICEFLOE_ICEBERG_CATALOG_URI"),
        namespace=read.optional("ICEFLOE_ICEBERG_NAMESPACE", _iceberg_namespace) or "icefloe",
        metadata_location=read.text("ICEFLOE_ICEBERG_METADATA_LOCATION"),
    )


__all__ = [
    "VARIABLES",
    "EmrJobConfig",
    "EmrSettings",
    "IcebergSettings",
    "IcefloeSettings",
    "InsertSettings",
    "LambdaContainer",
    "MergeLimits",
    "MergeSettings",
    "QueryLimits",
    "SettingShown",
    "Variable",
    "load_settings",
    "process_environment",
    "reference_markdown",
    "shown_settings",
    "use_this_python_for_spark",
]
