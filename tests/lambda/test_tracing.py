"""Tracing as deployed: the other Lambda tests run with ``POWERTOOLS_TRACE_DISABLED``; this one
runs the insert function with Powertools' Tracer on, in a Lambda-shaped X-Ray context, in a
process of its own (the X-Ray SDK patches psycopg and botocore for the whole process).

An insert is the function that touches the most patched code at once: psycopg through the pool
(the commit) and botocore from its upload threads (S3 puts, moto in-process). The X-Ray SDK
sends its subsegments over UDP to ``AWS_XRAY_DAEMON_ADDRESS``: the test listens there.
``AWS_XRAY_CONTEXT_MISSING=RUNTIME_ERROR`` turns a call traced outside any segment (such as
from a thread that lost the trace context) into a failure instead of a log line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.aws import FAKE_AWS_ENVIRONMENT
from support.lambda_stack import TEMPLATE, Deployment
from support.template import REPO_ROOT

pytestmark = pytest.mark.e2e

INSERT = TEMPLATE.functions()["InsertFunction"]
BUCKET = "icefloe-tracing-warehouse"
TRACE_ID = "Root=1-6742a000-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"

SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{function_dir!r}, {tests_dir!r}]
    import boto3
    from moto import mock_aws
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket={bucket!r})
        import app  # Powertools' Tracer patches psycopg and botocore on the first invocation
        from support.aws import FakeLambdaContext
        rows = [
            {{"ts": f"2026-11-0{{day}}T10:00:00Z", "event": "signup", "user_id": f"u{{day}}"}}
            for day in range(1, 4)
        ]
        response = app.lambda_handler({{"table": "events", "rows": rows}}, FakeLambdaContext())
    print(json.dumps(response))
""")


def _segments(listener: socket.socket) -> list[dict[str, object]]:
    """Every document the X-Ray SDK sent (a JSON header line, then the (sub)segment)."""
    documents = []
    listener.settimeout(0.5)
    while True:
        try:
            datagram = listener.recv(65536)
        except TimeoutError:
            return documents
        _header, _, body = datagram.decode().partition("\n")
        documents.append(json.loads(body))


def _walk(document: dict[str, object]) -> list[dict[str, object]]:
    found = [document]
    for child in document.get("subsegments", []) or []:  # type: ignore[union-attr]
        found += _walk(child)  # type: ignore[arg-type]
    return found


def test_an_insert_with_tracing_on_commits_and_traces_its_sql_and_s3_calls(
    deployment: Deployment, meta: MetaStore, events_spec: TableSpec
) -> None:
    meta.create_table(events_spec)
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    environment = deployment.environment(INSERT, resources={"DataBucket": BUCKET})
    del environment["POWERTOOLS_TRACE_DISABLED"]
    environment.update(FAKE_AWS_ENVIRONMENT)
    environment.update(
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
        LAMBDA_TASK_ROOT=str(REPO_ROOT / INSERT.code_uri),
        AWS_LAMBDA_FUNCTION_NAME="icefloe-insert",
        _X_AMZN_TRACE_ID=TRACE_ID,
        AWS_XRAY_DAEMON_ADDRESS=f"127.0.0.1:{port}",
        AWS_XRAY_CONTEXT_MISSING="RUNTIME_ERROR",
    )
    script = SCRIPT.format(
        function_dir=str(REPO_ROOT / INSERT.code_uri),
        tests_dir=str(REPO_ROOT / "tests"),
        bucket=BUCKET,
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            cwd=Path(deployment.home).parent,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        documents = _segments(listener)
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr[-4000:]
    response = json.loads(result.stdout.strip().splitlines()[-1])
    assert response["rows"] == 3 and response["files"] == 3, response
    assert meta.get_table("events").head_snapshot_id == response["snapshot_id"]

    traced = [d for document in documents for d in _walk(document)]
    assert any(d.get("name") == "## lambda_handler" for d in traced), [
        d.get("name") for d in traced
    ]
    s3_puts = [
        d
        for d in traced
        if d.get("namespace") == "aws" and (d.get("aws") or {}).get("operation") == "PutObject"  # type: ignore[union-attr]
    ]
    assert len(s3_puts) == 3, traced  # one per file, put from the upload threads
    sql = [d for d in traced if (d.get("sql") or {}).get("database_type") == "PostgreSQL"]  # type: ignore[union-attr]
    assert sql, traced  # psycopg's statements, through the pool's connections
    # And the core's phases are subsegments of their own, the commit's SQL inside the commit's
    names = [d.get("name") for d in traced]
    for phase in ("icefloe.insert.load", "icefloe.insert.write", "icefloe.commit"):
        assert names.count(phase) == 1, names
    (commit,) = [d for d in traced if d.get("name") == "icefloe.commit"]
    # (the SDK streams subsegments on their own, each naming its parent)
    inside = [d for d in sql if d.get("parent_id") == commit["id"]] + [
        d for d in _walk(commit) if d in sql
    ]
    assert inside, (commit, sql)
