"""The parts of the settings tree besides the limits: what Lambda says of a container, the
merge, insert, EMR and Iceberg settings. Plain typed data."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from icefloe.errors import ConfigError
from icefloe.settings.limits import MergeLimits
from icefloe.settings.variables import (
    DEFAULT_EMR_JOB_TIMEOUT_MINUTES,
    LAMBDA_MAX_VCPUS,
    LAMBDA_MB_PER_VCPU,
)


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
    orchestrator claims with ``lease`` and the worker renews with it, so both read it here.
    ``local_workers``: how many merges one machine runs at once (``icefloe merge``,
    ``lake.merge()``), as that many worker Lambdas would."""

    limits: MergeLimits
    lease: timedelta
    local_workers: int = 1


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
class EmrJobConfig:
    """Where and how compaction jobs run (``ICEFLOE_EMR_*`` in the orchestrator's environment)."""

    application_id: str
    execution_role_arn: str
    entry_point: str  # s3://.../compact_job.py
    environment_archive: str  # s3://.../icefloe-env.tar.gz
    log_uri: str | None = None
    job_timeout_minutes: int = 300

    def job_run_request(
        self,
        *,
        token: str,
        name: str,
        entry_point: str,
        arguments: list[str],
        tags: dict[str, str],
    ) -> dict[str, Any]:
        """``start_job_run`` arguments for one job of this application (``token`` is the
        idempotent client token: a job's id)."""
        request: dict[str, Any] = {
            "applicationId": self.application_id,
            "clientToken": token,
            "executionRoleArn": self.execution_role_arn,
            "name": name,
            "executionTimeoutMinutes": self.job_timeout_minutes,
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": entry_point,
                    "entryPointArguments": arguments,
                    "sparkSubmitParameters": self.spark_submit_parameters(),
                }
            },
            "tags": tags,
        }
        if self.log_uri:
            request["configurationOverrides"] = {
                "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": self.log_uri}}
            }
        return request

    def spark_submit_parameters(self) -> str:
        """The packaged Python environment as the driver's and executors' Python."""
        return " ".join(
            [
                f"--conf spark.archives={self.environment_archive}#environment",
                "--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python",
                "--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python",
                "--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
                "--conf spark.sql.session.timeZone=UTC",
                "--conf spark.speculation=false",
            ]
        )


IcebergCatalogKind = Literal["sql", "glue"]


@dataclass(frozen=True, slots=True)
class IcebergSettings:
    """Where tables are published as Iceberg (``ICEFLOE_ICEBERG_*``): the catalog, its
    namespace, and where metadata files go (``None``: the catalog's default place)."""

    catalog: IcebergCatalogKind = "sql"
    catalog_uri: str | None = None
    namespace: str = "icefloe"
    metadata_location: str | None = None
