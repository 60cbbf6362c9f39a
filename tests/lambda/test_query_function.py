"""The query function end to end: real Postgres and DuckDB (httpfs over HTTP to moto's server),
the function's environment and bucket as template.yaml declares them."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from types import ModuleType

import boto3
import pytest

from icefloe.aws.observability import LambdaHandler
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from support.aws import REGION, create_bucket
from support.lambda_stack import (
    TEMPLATE,
    Deployment,
    fresh_container,
    handler_module_fixture,
    invoke,
    set_environment,
    use_fake_aws,
)

pytestmark = pytest.mark.e2e

QUERY = TEMPLATE.functions()["QueryFunction"]
BUCKET = "icefloe-e2e-query"

app_module = handler_module_fixture(QUERY, name="app_module")


@pytest.fixture
def app(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    app_module: ModuleType,
) -> Iterator[LambdaHandler]:
    """The query function's handler, over a container of its own, and a table of 3,000 rows
    in its bucket."""
    use_fake_aws(monkeypatch, session_token=False)
    environment = deployment.environment(
        QUERY, resources={"DataBucket": BUCKET}, s3_endpoint=moto_endpoint
    )
    assert environment["ICEFLOE_RESULTS"] == f"s3://{BUCKET}/results"
    set_environment(monkeypatch, environment)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION)
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        create_bucket(s3, TEMPLATE, BUCKET)
    meta.create_table(
        TableSpec.create(
            name="events",
            schema="ts TIMESTAMP NOT NULL, event VARCHAR, n BIGINT",
            partition_by="day(ts)",
        )
    )
    with fresh_container(app_module) as function:
        runtime = function.container.runtime
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows(
            "events",
            [
                {"ts": f"2026-05-0{1 + i % 3}T10:00:00Z", "event": f"e{i % 4}", "n": i}
                for i in range(3000)
            ],
        )
        inserter.close()
        yield function.handler


def test_a_small_result_comes_back_inline(app: LambdaHandler) -> None:
    response = invoke(
        app,
        {
            "sql": "SELECT event, count(*) AS n FROM events WHERE ts < '2026-05-02' GROUP BY event ORDER BY event"
        },
    )
    assert response["columns"] == ["event", "n"]
    assert response["rows"] == [["e0", 250], ["e1", 250], ["e2", 250], ["e3", 250]]
    assert response["row_count"] == 4 and response["snapshots"] == {"events": 1}
    assert response["files_scanned"] == 1 and "url" not in response


def test_a_large_result_is_written_under_results_and_linked(app: LambdaHandler) -> None:
    response = invoke(app, {"sql": "SELECT ts, event, n FROM events ORDER BY n", "max_rows": 100})
    assert response["row_count"] == 3000 and "rows" not in response
    assert "/results/" in response["url"] and response["result_bytes"] > 0
    with urllib.request.urlopen(response["url"]) as fetched:
        rows = json.loads(fetched.read())
    assert len(rows) == 3000 and rows[0] == {"ts": "2026-05-01T10:00:00", "event": "e0", "n": 0}

    parquet = invoke(app, {"sql": "SELECT n FROM events", "format": "parquet"})
    assert re.search(
        r"/results/\d{4}/\d\d/\d\d/[0-9a-f]{32}/result\.parquet$", parquet["url"].split("?")[0]
    )


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"sql": "SELEC 1"}, "syntax error"),
        ({"sql": "SELECT nope FROM events"}, "nope"),
        ({"sql": "SELECT * FROM read_csv('/etc/passwd')"}, "read_csv() is not allowed"),
        ({"sql": "COPY events TO 's3://x/y'"}, "COPY statements are not allowed"),
        ({"sql": "SELECT 1", "format": "xml"}, "'format'"),
        ({"sql": "SELECT * FROM events", "snapshot_id": 99}, "snapshot 99"),
        (
            {"sql": "SELECT * FROM events", "snapshot_id": 1, "as_of": "2026-05-01T00:00:00Z"},
            "request: give 'snapshot_id' or 'as_of', not both",
        ),
        ({"query": "SELECT 1"}, "unknown request keys"),
        ([1, 2], "must be an object"),
    ],
)
def test_bad_requests_get_an_error_payload_not_a_stack_trace(
    app: LambdaHandler, event: object, message: str
) -> None:
    response = invoke(app, event)
    assert set(response) == {"error"} and message in response["error"]["message"]
    assert "Traceback" not in response["error"]["message"]
