"""EMR Serverless entry point of a big-scan query job.

    python query_job.py --request <key relative to the warehouse>

``icefloe query --engine emr`` starts it (``icefloe.emr_query``) with the key of the request
it wrote, e.g. ``events/jobs/query-0123abcd.json``: the SELECT, the snapshot it pinned for
each table, and where to write the result. Settings come from the driver's environment, as
for the compaction job (``compact_job.py``, beside this file).

The job reads each table at its pinned snapshot, runs the SELECT and writes the result as
Parquet at the request's result URI, then prints one JSON line (job id, result URI, rows).
Exit status: 0 when the result is written; 1 when the query failed (an error in the SQL, a
result already there, ...: the traceback is in the driver's log); 2 when the job could not
start (bad arguments, no meta store, the request missing or invalid).

It holds no rule of the system, only the wiring.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from icefloe.emr_job import (
    EXIT_CANNOT_START,
    EXIT_FAILED,
    EXIT_OK,
    JobDocumentError,
    JobDocumentKind,
    document_key,
    open_job,
    start_job_logging,
)
from icefloe.emr_query import SparkQueryRequest
from icefloe.errors import ConfigError
from icefloe.runtime import Runtime

logger = logging.getLogger("icefloe.query_job")

# The driver runs one query: one connection is enough, two leave room.
MAX_CONNECTIONS = 2


class RequestError(JobDocumentError):
    """The job's request cannot be used: missing, not a request, or not where it says."""


REQUEST = JobDocumentKind(
    name="query request", parse=SparkQueryRequest.from_json, error=RequestError
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="query_job.py", description="Run one icefloe big-scan query job (PySpark)."
    )
    parser.add_argument(
        "--request",
        required=True,
        type=_request_key,
        help="key of the job's request relative to the warehouse, e.g. events/jobs/<id>.json",
    )
    return parser.parse_args(argv)


def _request_key(value: str) -> str:
    return document_key(value, document="request")


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parse_args(argv)
    start_job_logging()
    try:
        request, lake = open_job(
            environ, REQUEST, key=args.request, max_connections=MAX_CONNECTIONS
        )
    except (ConfigError, RequestError) as e:
        logger.error("query job cannot start: %s", e)
        return EXIT_CANNOT_START
    with lake:
        try:
            rows = _run(lake.runtime, request)
        except Exception:
            logger.exception("query job %s failed", request.job_id)
            return EXIT_FAILED
    print(json.dumps({"job_id": request.job_id, "result_uri": request.result_uri, "rows": rows}))
    return EXIT_OK


def _run(runtime: Runtime, request: SparkQueryRequest) -> int:
    from pyspark.sql import SparkSession

    from icefloe.spark import run_query_request

    # No master: spark-submit on EMR (or a local spark-submit) decides where the job runs.
    spark: Any = SparkSession.builder.appName(f"icefloe {request.job_id}").getOrCreate()
    return run_query_request(spark, request, runtime=runtime)


if __name__ == "__main__":
    sys.exit(main())
