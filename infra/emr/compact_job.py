"""EMR Serverless entry point of a heavy compaction job.

    python compact_job.py --manifest <key relative to the warehouse>

The merge orchestrator starts it (``icefloe.compaction.emr``) with the key of the manifest it
wrote, e.g. ``events/jobs/compact-0123abcd.json``. Settings come from the driver's environment,
as for every icefloe process: ``ICEFLOE_WAREHOUSE``, ``ICEFLOE_DATABASE_SECRET_ARN`` (or
``ICEFLOE_DATABASE_URL``), ``ICEFLOE_DATABASE_SCHEMA``, ``AWS_REGION``. On EMR Serverless the
template sets them with ``spark.emr-serverless.driverEnv.*`` in the application's
``spark-defaults`` (see ``infra/emr/README.md``).

The job reads the manifest, runs :func:`icefloe.compaction.compact_with_spark` on the session
EMR gives it, and prints one JSON line per partition and one summary line. Exit status:

- 0: the job ran. Partitions whose claim was lost or whose commit conflicted are outcomes, not
  failures: their files are freed when the job is settled.
- 1: the job failed while running (an exception; its traceback is in the driver's log).
- 2: the job could not start: bad arguments, no meta store configured, or the manifest is
  missing or invalid. Nothing was read or written.

This file is copied beside the job's environment archive by ``build_environment.py``; it holds
no rule of the system, only the wiring.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from icefloe.compaction import CompactionManifest, CompactionResult, compact_with_spark
from icefloe.emr_job import (
    EXIT_CANNOT_START,
    EXIT_OK,
    JobDocumentError,
    JobDocumentKind,
    document_key,
    open_job,
    start_job_logging,
)
from icefloe.errors import ConfigError
from icefloe.lake import Lake
from icefloe.runtime import Runtime

logger = logging.getLogger("icefloe.compact_job")

# The driver commits partitions one at a time: one connection is enough, two leave room.
MAX_CONNECTIONS = 2


class ManifestError(JobDocumentError):
    """The job's manifest cannot be used: missing, not a manifest, or not where it says."""


MANIFEST = JobDocumentKind(
    name="compaction manifest", parse=CompactionManifest.from_json, error=ManifestError
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The job's arguments; exits with status 2 on a usage error (argparse's convention)."""
    parser = argparse.ArgumentParser(
        prog="compact_job.py",
        description="Run one icefloe heavy compaction job (PySpark) from its manifest.",
    )
    parser.add_argument(
        "--manifest",
        required=True,
        type=_manifest_key,
        help="key of the job's manifest relative to the warehouse, e.g. events/jobs/<job id>.json",
    )
    return parser.parse_args(argv)


def _manifest_key(value: str) -> str:
    return document_key(value, document="manifest")


def result_lines(result: CompactionResult) -> Iterator[str]:
    """One JSON line per partition outcome, then one summary line."""
    for outcome in result.partitions:
        yield json.dumps(
            {
                "job_id": result.job_id,
                "table": result.table,
                "partition": outcome.partition_path,
                "status": outcome.status,
                "snapshot_id": outcome.snapshot_id,
                "files_in": outcome.files_in,
                "files_out": outcome.files_out,
                "rows_in": outcome.rows_in,
                "rows_out": outcome.rows_out,
                "reason": outcome.reason,
            }
        )
    yield json.dumps(
        {
            "job_id": result.job_id,
            "table": result.table,
            "partitions": len(result.partitions),
            "committed": result.count("committed"),
            "already_committed": result.count("already_committed"),
            "claim_lost": result.count("claim_lost"),
            "conflict": result.count("conflict"),
        }
    )


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the job; returns the exit status (see the module docstring)."""
    args = parse_args(argv)
    start_job_logging()
    try:
        manifest, lake = open_job(
            environ, MANIFEST, key=args.manifest, max_connections=MAX_CONNECTIONS
        )
    except (ConfigError, ManifestError) as e:
        logger.error("compaction job cannot start: %s", e)
        return EXIT_CANNOT_START
    with lake:
        result = _compact(lake, manifest)
    for line in result_lines(result):
        print(line, flush=True)
    return EXIT_OK


def _compact(lake: Lake, manifest: CompactionManifest) -> CompactionResult:
    logger.info(
        "compaction job %s: %d partitions of %s",
        manifest.job_id,
        len(manifest.groups),
        manifest.table,
    )
    return _run(lake.runtime, manifest)


def _run(runtime: Runtime, manifest: CompactionManifest) -> CompactionResult:
    from pyspark.sql import SparkSession

    # No master: spark-submit on EMR (or a local spark-submit) decides where the job runs.
    spark: Any = SparkSession.builder.appName(
        f"icefloe {manifest.table} {manifest.job_id}"
    ).getOrCreate()
    try:
        return compact_with_spark(
            spark,
            meta=runtime.meta,
            objects=runtime.objects,
            location=runtime.settings.warehouse,
            manifest=manifest,
            endpoint_url=runtime.settings.s3_endpoint_url,
            region=runtime.settings.aws_region,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
