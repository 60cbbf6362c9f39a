"""Every environment variable icefloe reads: its default (in words), what it means and who reads
it. The configuration reference (docs/configuration.md) is generated from :data:`VARIABLES`
(``python -m icefloe.settings``), and :func:`shown_settings` is what ``icefloe settings``
prints."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from icefloe.config import DEFAULT_SCHEMA
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE, DEFAULT_LEASE

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
        "DuckDB's memory for a process's merges and deletes (shared by those running at once)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_THREADS",
        "2 (in Lambda: one per vCPU)",
        "DuckDB's threads for a process's merges and deletes (shared by those running at once)",
        _CLI_AND_FUNCTIONS,
    ),
    Variable(
        "ICEFLOE_MERGE_LOCAL_WORKERS",
        "one per core, at most 4",
        "how many merges `icefloe merge` and `lake.merge()` run at once on one machine",
        ("cli",),
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

BY_NAME = {variable.name: variable for variable in VARIABLES}


@dataclass(frozen=True, slots=True)
class SettingShown:
    """One variable as ``icefloe settings`` shows it: its value (a DSN's password masked), or
    ``None`` when unset and its default applies."""

    name: str
    value: str | None
    default: str
    meaning: str


def masked(name: str, value: str | None) -> str | None:
    if value is None or name != "ICEFLOE_DATABASE_URL":
        return value
    value = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", value)
    return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", value)


def reference_markdown() -> str:
    """The configuration reference (docs/configuration.md), generated from :data:`VARIABLES`."""
    lines = ["| variable | default | meaning | read by |", "| --- | --- | --- | --- |"]
    for variable in VARIABLES:
        readers = ", ".join(_READER_NAMES[reader] for reader in variable.read_by)
        lines.append(f"| `{variable.name}` | {variable.default} | {variable.meaning} | {readers} |")
    return "\n".join(lines)


_READER_NAMES: dict[Reader, str] = {"cli": "CLI", "functions": "functions", "spark": "Spark jobs"}
