"""Every setting icefloe takes from its environment, read in one place.

:meth:`IcefloeSettings.from_environ` reads a mapping of environment variables into one typed,
immutable tree; :func:`load_settings` reads the process's own environment. Nothing else in the
package, the functions or the Spark jobs reads ``os.environ``: they are handed the part of the
tree they need. A bad value is refused when the settings are read, not when it is first used,
and the error names every variable at fault.

:data:`VARIABLES` lists each variable with its default and meaning; the README's configuration
table is generated from it (``python -m icefloe.settings``), and a test keeps the two equal.
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
from typing import Literal, TypeVar

from icefloe.compaction.emr import EmrJobConfig
from icefloe.compaction.planning import DEFAULT_COMPACTION_LEASE
from icefloe.config import DEFAULT_HOME, DEFAULT_SCHEMA, Settings, WarehouseLocation
from icefloe.errors import ConfigError
from icefloe.iceberg.catalogs import IcebergCatalogKind, IcebergSettings
from icefloe.merge.worker import DEFAULT_LEASE, MergeLimits
from icefloe.query.sandbox import MEMORY_SIZE, QueryLimits

T = TypeVar("T")

Reader = Literal["cli", "functions", "spark"]

# Lambda gives a function one vCPU per 1,769 MB of memory, and at most six.
LAMBDA_MB_PER_VCPU = 1769
LAMBDA_MAX_VCPUS = 6
# DuckDB's share of a function's memory; the rest is Python, Arrow and the runtime. DuckDB
# spills to the temporary directory past its limit instead of failing.
# A query's process is watched and stopped 384 MiB past its limit: 65% leaves room for that
# margin and for the handler's own process.
QUERY_MEMORY_SHARE = 0.65
# The merge worker's process peaks about 500 MiB above DuckDB's limit (Python, Arrow, the row
# group being cut; docs/benchmarks.md), so DuckDB gets less of the function than a query does.
MERGE_MEMORY_SHARE = 0.6
# An insert holds its whole batch in Python and Arrow besides DuckDB's sort (a delivered batch
# of 1,000 messages can be hundreds of MB of JSON): DuckDB gets half the function.
INSERT_MEMORY_SHARE = 0.5
DEFAULT_EMR_JOB_TIMEOUT_MINUTES = 300


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable: its default (in words) and what it means."""

    name: str
    default: str
    meaning: str
    read_by: tuple[Reader, ...]


_ALL: tuple[Reader, ...] = ("cli", "functions", "spark")
_CLI_AND_FUNCTIONS: tuple[Reader, ...] = ("cli", "functions")

VARIABLES: tuple[Variable, ...] = (
    Variable(
        "ICEFLOE_HOME",
        "`./.icefloe`",
        "local state: the embedded Postgres, the default warehouse, the Iceberg catalog",
        _ALL,
    ),
    Variable(
        "ICEFLOE_WAREHOUSE",
        "`$ICEFLOE_HOME/warehouse`",
        "where data files live: a local directory or `s3://bucket/prefix`",
        _ALL,
    ),
    Variable(
        "ICEFLOE_DATABASE_URL",
        "the embedded Postgres under `ICEFLOE_HOME` (an error in Lambda and Spark jobs)",
        "any Postgres DSN for the meta store",
        _ALL,
    ),
    Variable(
        "ICEFLOE_DATABASE_SECRET_ARN",
        "none",
        "a Secrets Manager secret holding the DSN (`dsn`, or RDS's fields), read when"
        " `ICEFLOE_DATABASE_URL` is unset",
        _ALL,
    ),
    Variable(
        "ICEFLOE_DATABASE_SCHEMA",
        f"`{DEFAULT_SCHEMA}`",
        "the Postgres schema holding icefloe's tables (a plain lower-case identifier)",
        _ALL,
    ),
    Variable(
        "ICEFLOE_S3_ENDPOINT_URL",
        "AWS",
        "an S3-compatible endpoint (`http://host:port`) for DuckDB, pyarrow and boto3",
        _ALL,
    ),
    Variable(
        "AWS_REGION",
        "`AWS_DEFAULT_REGION`, else `us-east-1`",
        "the region of the bucket and of the AWS APIs icefloe calls",
        _ALL,
    ),
    Variable(
        "AWS_DEFAULT_REGION",
        "`us-east-1`",
        "read when `AWS_REGION` is unset",
        _ALL,
    ),
    Variable(
        "ICEFLOE_RESULTS",
        "`results/` beside the warehouse prefix (S3), `$ICEFLOE_HOME/results` (local)",
        "where large query results and EMR query jobs' results are written",
        _ALL,
    ),
    Variable(
        "ICEFLOE_TENANT_READ_ROLE_ARN",
        "none (the stack sets its `TenantReadRole`)",
        "with an S3 warehouse: a tenant's query reads S3 as this role, narrowed by a session"
        " policy to that tenant's objects",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_QUERY_MEMORY_LIMIT",
        f"`1GB` (in Lambda: {QUERY_MEMORY_SHARE:.0%} of the function's memory)",
        "DuckDB's memory for one query (`512MB`, `2GiB`); the query's process is stopped"
        " 384 MiB past it",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_QUERY_THREADS",
        "2 (in Lambda: one per vCPU)",
        "DuckDB's threads for one query",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_QUERY_TIMEOUT_S",
        "60",
        "seconds a query may run before it is interrupted",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_QUERY_MAX_RESULT_ROWS",
        "10,000,000",
        "the most rows a query may return",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_QUERY_MAX_RESULT_BYTES",
        "half the query memory limit",
        "the most Arrow bytes a query's result may hold",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_MEMORY_LIMIT",
        f"`1GB` (in Lambda: {MERGE_MEMORY_SHARE:.0%} of the function's memory)",
        "DuckDB's memory for one merge or delete part",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_THREADS",
        "2 (in Lambda: one per vCPU)",
        "DuckDB's threads for one merge or delete part",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_LEASE_SECONDS",
        f"{int(DEFAULT_LEASE.total_seconds())}",
        "how long a claim on a merge group holds; must outlast the merge worker's timeout",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_QUEUE_URL",
        "none (the stack sets its merge queue)",
        "the queue the merge orchestrator sends merge tasks and delete parts to",
        ("functions",),
    ),
    Variable(
        "ICEFLOE_DEFAULT_TABLE",
        "none (the stack sets its `DefaultTable` parameter)",
        "the insert function's table for a queue message that is one event without a `table`"
        " message attribute",
        ("functions",),
    ),
    Variable(
        "ICEFLOE_EMR_APPLICATION_ID",
        "none: heavy groups are only counted as deferred",
        "the EMR Serverless application that runs compaction and query jobs",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_EMR_JOB_ROLE_ARN",
        "none (needed with an application)",
        "the role EMR Serverless jobs run as",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_EMR_ENTRY_POINT",
        "none (needed with an application)",
        "`s3://.../compact_job.py`; the query job's `query_job.py` sits beside it",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE",
        "none (needed with an application)",
        "`s3://.../icefloe-env.tar.gz`, the jobs' Python environment",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_EMR_LOG_URI",
        "none: EMR Serverless keeps the logs",
        "where EMR Serverless writes the jobs' logs",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_EMR_JOB_TIMEOUT_MINUTES",
        f"{DEFAULT_EMR_JOB_TIMEOUT_MINUTES}",
        "a job's run time limit; must stay below the compaction lease"
        f" ({int(DEFAULT_COMPACTION_LEASE.total_seconds() // 60)} minutes)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_ICEBERG_CATALOG",
        "`sql`",
        "where tables are published as Iceberg: `sql` (pyiceberg's SQL catalog) or `glue`"
        " (the AWS Glue Data Catalog; S3 warehouses)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_ICEBERG_CATALOG_URI",
        "a SQLite file under `$ICEFLOE_HOME/iceberg`",
        "the SQL catalog's SQLAlchemy URI (`postgresql+psycopg://...`)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_ICEBERG_NAMESPACE",
        "`icefloe`",
        "the Iceberg namespace (in Glue: the database) tables are published into",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_ICEBERG_METADATA_LOCATION",
        "beside the local catalog, else the warehouse's `iceberg/` prefix",
        "where Iceberg metadata files are written (a `file://` or `s3://` URI)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "AWS_LAMBDA_FUNCTION_NAME",
        "set by Lambda",
        "marks a Lambda container: there the embedded Postgres is refused",
        ("functions",),
    ),
    Variable(
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "set by Lambda",
        "the function's memory in MB: DuckDB gets a share of it by default (queries"
        f" {QUERY_MEMORY_SHARE:.0%}, merges {MERGE_MEMORY_SHARE:.0%}, inserts"
        f" {INSERT_MEMORY_SHARE:.0%}) and one thread per 1,769 MB, at most six",
        ("functions",),
    ),
)

_BY_NAME = {variable.name: variable for variable in VARIABLES}


@dataclass(frozen=True, slots=True)
class LambdaContainer:
    """What Lambda tells a function about itself (nothing outside Lambda)."""

    function_name: str | None = None
    memory_mb: int | None = None

    def duckdb_share(self, share: float) -> tuple[str, int] | None:
        """``(memory_limit, threads)`` for DuckDB: ``share`` of the function's memory and one
        thread per vCPU; ``None`` outside Lambda."""
        if self.memory_mb is None:
            return None
        threads = max(1, min(LAMBDA_MAX_VCPUS, round(self.memory_mb / LAMBDA_MB_PER_VCPU)))
        return f"{int(self.memory_mb * share)}MB", threads


@dataclass(frozen=True, slots=True)
class MergeSettings:
    """What one merge (or delete part) may use, and how long a claim on its files holds. The
    orchestrator claims with ``lease`` and the worker renews with it, so both read it here."""

    limits: MergeLimits
    lease: timedelta


@dataclass(frozen=True, slots=True)
class InsertSettings:
    """The insert function's DuckDB bounds (``None``: DuckDB's own defaults, off Lambda) and
    its table for a queue message that names none."""

    duckdb_memory_limit: str | None
    duckdb_threads: int | None
    default_table: str | None


@dataclass(frozen=True, slots=True)
class EmrSettings:
    """The EMR Serverless application and how its jobs run (``ICEFLOE_EMR_*``).

    The janitor and the job-event function need only the application id; starting a job needs
    all of it, which :meth:`job_config` checks.
    """

    application_id: str | None = None
    job_role_arn: str | None = None
    entry_point: str | None = None
    environment_archive: str | None = None
    log_uri: str | None = None
    job_timeout_minutes: int = DEFAULT_EMR_JOB_TIMEOUT_MINUTES

    def job_config(self) -> EmrJobConfig | None:
        """How to start jobs, or ``None`` without an application (heavy groups are then only
        counted as deferred). An application without a role, entry point or environment is a
        configuration error naming the variable missing."""
        if self.application_id is None:
            return None
        required = {
            "ICEFLOE_EMR_JOB_ROLE_ARN": self.job_role_arn,
            "ICEFLOE_EMR_ENTRY_POINT": self.entry_point,
            "ICEFLOE_EMR_ENVIRONMENT_ARCHIVE": self.environment_archive,
        }
        missing = [name for name, value in required.items() if value is None]
        if missing:
            raise ConfigError(f"ICEFLOE_EMR_APPLICATION_ID is set but {missing[0]} is not")
        assert self.job_role_arn and self.entry_point and self.environment_archive
        return EmrJobConfig(
            application_id=self.application_id,
            execution_role_arn=self.job_role_arn,
            entry_point=self.entry_point,
            environment_archive=self.environment_archive,
            log_uri=self.log_uri,
            job_timeout_minutes=self.job_timeout_minutes,
        )


@dataclass(frozen=True, slots=True)
class IcefloeSettings:
    """The whole configuration of one icefloe process.

    ``core`` is what every operation needs (where the meta store and the data are);
    ``database_secret_arn`` is resolved into ``core.database_url`` by
    :func:`icefloe.aws.secrets.with_database_secret` where a secret is allowed.
    """

    core: Settings
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
            lambda: Settings(
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


@dataclass(frozen=True, slots=True)
class SettingShown:
    """One variable as ``icefloe settings`` shows it: its value (a DSN's password masked), or
    ``None`` when unset and its default applies."""

    name: str
    value: str | None
    default: str
    meaning: str


def shown_settings(
    environ: Mapping[str, str] | None = None, *, reader: Reader = "cli"
) -> list[SettingShown]:
    """Every variable ``reader`` reads, as set in ``environ`` (the process's by default)."""
    env = os.environ if environ is None else environ
    return [
        SettingShown(
            name=variable.name,
            value=_masked(variable.name, env.get(variable.name) or None),
            default=variable.default.replace("`", ""),
            meaning=variable.meaning.replace("`", ""),
        )
        for variable in VARIABLES
        if reader in variable.read_by
    ]


def _masked(name: str, value: str | None) -> str | None:
    if value is None or name != "ICEFLOE_DATABASE_URL":
        return value
    value = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", value)
    return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", value)


def reference_markdown() -> str:
    """The README's configuration table, generated from :data:`VARIABLES`."""
    lines = ["| variable | default | meaning | read by |", "| --- | --- | --- | --- |"]
    for variable in VARIABLES:
        readers = ", ".join(_READER_NAMES[reader] for reader in variable.read_by)
        lines.append(f"| `{variable.name}` | {variable.default} | {variable.meaning} | {readers} |")
    return "\n".join(lines)


_READER_NAMES: dict[Reader, str] = {"cli": "CLI", "functions": "functions", "spark": "Spark jobs"}


class _Reading:
    """Reads variables from one mapping, collecting every problem before raising."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.problems: list[str] = []

    def text(self, name: str) -> str | None:
        """The variable's value; unset and empty are both ``None``."""
        if name not in _BY_NAME:  # every variable read is documented
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
    )


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


if __name__ == "__main__":
    print(reference_markdown())


def _iceberg_catalog_kind(value: str) -> IcebergCatalogKind:
    if value not in ("sql", "glue"):
        raise ValueError("must be sql or glue")
    return "glue" if value == "glue" else "sql"


def _iceberg_namespace(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("must be a plain identifier (letters, digits, underscores)")
    return value


def _iceberg_settings(read: _Reading) -> IcebergSettings:
    return IcebergSettings(
        catalog=read.optional("ICEFLOE_ICEBERG_CATALOG", _iceberg_catalog_kind) or "sql",
        catalog_uri=read.text("ICEFLOE_ICEBERG_CATALOG_URI"),
        namespace=read.optional("ICEFLOE_ICEBERG_NAMESPACE", _iceberg_namespace) or "icefloe",
        metadata_location=read.text("ICEFLOE_ICEBERG_METADATA_LOCATION"),
    )
