"""The publisher function end to end: tables opted in to Iceberg publication are published into
the stack's Glue database, with the function's environment as deployed (template.yaml, the
``IcebergGlueDatabase`` parameter given). moto's server stands in for Glue and S3 (pyarrow
reads the metadata and footers over HTTP); real Postgres and DuckDB.

The last test runs one pass in a process of its own where nothing the publisher's layers leave
out can be imported (infra/lambda/build_layer.py: DuckDB's httpfs, pyiceberg's CLI, fsspec and
REST dependencies, its vendored Hive catalog): the pruned layers serve the whole pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import boto3
import jsonschema
import pytest

from icefloe.aws.events import load_schema
from icefloe.aws.lambda_runtime import Container
from icefloe.iceberg.glue import glue_catalog
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.spec import TableSpec
from support.aws import REGION
from support.infra_scripts import load_script
from support.lambda_stack import (
    PREFIX,
    TEMPLATE,
    Deployment,
    FunctionUnderTest,
    MotoWorld,
    emitted_metrics,
    fresh_container,
    handler_module_fixture,
    insert_small_batches,
    invoke,
    lambda_context,
    merge_until_quiet,
    object_keys,
    schedule_event,
    set_environment,
    use_fake_aws,
)
from support.template import REPO_ROOT

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.e2e

PUBLISHER = TEMPLATE.functions()["PublisherFunction"]
GLUE_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_GLUE"  # boto3's own: pyiceberg's Glue client reads it
ERROR_SCHEMA = jsonschema.Draft202012Validator(load_schema("error"))
COLUMNS = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR"
build_layer = load_script("build_layer", "lambda")


@dataclass
class Stack:
    s3: S3Client
    glue: Any
    bucket: str
    database: str
    moto_endpoint: str
    environment: dict[str, str]
    function: FunctionUnderTest

    def invoke(self, event: object) -> dict[str, Any]:
        return invoke(self.function.handler, event, lambda_context(PUBLISHER))

    def glue_tables(self) -> dict[str, dict[str, Any]]:
        tables = self.glue.get_tables(DatabaseName=self.database)["TableList"]
        return {t["Name"]: t for t in tables}

    def metadata_location(self, table: str) -> str:
        location: str = self.glue_tables()[table]["Parameters"]["metadata_location"]
        return location

    def iceberg_keys(self) -> set[str]:
        return {k for k in object_keys(self.s3, self.bucket) if k.startswith(f"{PREFIX}/iceberg/")}

    def iceberg_rows(self, table: str) -> Counter[str]:
        """The rows pyiceberg reads through the Glue catalog, as a reader of the stack would."""
        catalog = glue_catalog(
            warehouse=f"s3://{self.bucket}/{PREFIX}/iceberg",
            region=REGION,
            glue_endpoint_url=self.moto_endpoint,
            s3_endpoint_url=self.moto_endpoint,
        )
        scan = catalog.load_table((self.database, table)).scan(
            selected_fields=("ts", "event", "user_id")
        )
        return Counter(json.dumps(r, default=str) for r in scan.to_arrow().to_pylist())


app = handler_module_fixture(PUBLISHER, name="app")


def spec(name: str, *, publish: str) -> TableSpec:
    return TableSpec.create(
        name=name,
        schema=COLUMNS,
        partition_by="day(ts)",
        publish=publish,  # type: ignore[arg-type]
    )


@pytest.fixture
def stack(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    deployment: Deployment,
    meta: MetaStore,
    app: ModuleType,
) -> Iterator[Stack]:
    """The publisher's world as the template declares it, with the Glue database parameter
    given: a fresh bucket and Glue database on the shared moto server, an opted-in table
    ``events`` and a table ``other`` that is not."""
    use_fake_aws(monkeypatch, session_token=False)
    world = MotoWorld.create(moto_endpoint, "publisher", queues=False)
    database = f"icefloe_{world.unique}"
    glue = boto3.client("glue", endpoint_url=moto_endpoint, region_name=REGION)
    declared = TEMPLATE.resources["IcebergDatabase"]["Properties"]["DatabaseInput"]
    assert declared["LocationUri"] == {"Fn::Sub": "s3://${DataBucket}/${WarehousePrefix}/iceberg"}
    glue.create_database(
        DatabaseInput={"Name": database, "LocationUri": f"s3://{world.bucket}/{PREFIX}/iceberg"}
    )
    environment = deployment.environment(
        PUBLISHER,
        resources={"DataBucket": world.bucket, "IcebergGlueDatabase": database},
        s3_endpoint=moto_endpoint,
        memory_size=True,
    )
    assert environment["ICEFLOE_ICEBERG_CATALOG"] == "glue"
    assert environment["ICEFLOE_ICEBERG_NAMESPACE"] == database
    environment[GLUE_ENDPOINT_VARIABLE] = moto_endpoint
    set_environment(monkeypatch, environment)
    meta.create_table(spec("events", publish="iceberg"))
    meta.create_table(spec("other", publish="none"))
    with fresh_container(app) as function:
        yield Stack(
            s3=world.s3,
            glue=glue,
            bucket=world.bucket,
            database=database,
            moto_endpoint=moto_endpoint,
            environment=environment,
            function=function,
        )


def head_rows(table: str) -> tuple[int, Counter[str]]:
    """The table's head snapshot and its rows, as icefloe's query engine reads them."""
    with Container() as container:
        runtime = container.runtime
        settings = runtime.settings
        head = runtime.meta.get_table(table).head_snapshot_id
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, settings),
        )
        try:
            rows = engine.query(f"SELECT ts, event, user_id FROM {table}", snapshot_id=head).rows
        finally:
            engine.close()
    return head, Counter(json.dumps(r, default=str) for r in rows.to_pylist())


def metric_values(output: str) -> dict[str, float]:
    (document,) = emitted_metrics(output)
    names = document["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    values = {m["Name"]: document[m["Name"]] for m in names}
    return {name: sum(v) if isinstance(v, list) else v for name, v in values.items()}


def test_an_opted_in_table_is_published_to_glue_with_exactly_its_head_rows(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given inserts into both tables, only `events` opted in
    insert_small_batches("events", batches=3)
    insert_small_batches("other", batches=2)
    head, rows = head_rows("events")
    capsys.readouterr()

    # When the schedule invokes the publisher
    answer = stack.invoke(schedule_event(PUBLISHER))

    # Then `events` is published at its head, and only it: `other` is not in Glue
    (published,) = answer["published"]
    assert published["table"] == "events" and published["snapshot_id"] == head
    assert published["files_added"] == published["files_live"] == 9  # 3 inserts x 3 days
    assert (answer["current"], answer["dropped"], answer["failed"]) == ([], [], [])
    assert answer["catalog"] == f"icefloe/{stack.database}"
    assert set(stack.glue_tables()) == {"events"}
    # ... Glue points at metadata under the warehouse's iceberg/ prefix (the policy's scope)
    location = stack.metadata_location("events")
    assert location == published["metadata_location"]
    assert location.startswith(f"s3://{stack.bucket}/{PREFIX}/iceberg/")
    # ... and pyiceberg, through Glue, reads exactly icefloe's head rows
    assert sum(rows.values()) == 180
    assert stack.iceberg_rows("events") == rows
    metrics = metric_values(capsys.readouterr().out)
    assert (metrics["TablesPublished"], metrics["FilesAdded"], metrics["TablesFailed"]) == (1, 9, 0)


def test_a_pass_with_nothing_new_publishes_nothing_and_a_moved_head_is_published_again(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    insert_small_batches("events", batches=2)
    first = stack.invoke({})
    location = stack.metadata_location("events")
    keys = stack.iceberg_keys()
    capsys.readouterr()

    # When it runs again with no commit in between
    again = stack.invoke({})

    # Then nothing is published: no Iceberg commit, no metadata object written
    assert (again["published"], again["current"], again["failed"]) == ([], ["events"], [])
    assert stack.metadata_location("events") == location
    assert stack.iceberg_keys() == keys
    assert metric_values(capsys.readouterr().out)["TablesPublished"] == 0

    # When the head moves (more inserts, then a merge that ends the small files) and the
    # publisher is asked for that table by name
    insert_small_batches("events", batches=2)
    merge_until_quiet("events")
    head, rows = head_rows("events")
    moved = stack.invoke({"tables": ["events"]})

    # Then the new head is published: the merged files added, the merged-away ones removed
    (published,) = moved["published"]
    assert published["snapshot_id"] == head > first["published"][0]["snapshot_id"]
    assert published["files_added"] > 0 and published["files_removed"] > 0
    assert stack.iceberg_rows("events") == rows
    assert set(stack.glue_tables()) == {"events"}


def test_a_table_that_fails_is_reported_and_the_others_are_published(
    stack: Stack,
    meta: MetaStore,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a second opted-in table whose name a table of someone else's holds in the Glue
    # database (not an Iceberg table: publication cannot take it over)
    meta.create_table(spec("clicks", publish="iceberg"))
    stack.glue.create_table(
        DatabaseName=stack.database,
        TableInput={"Name": "clicks", "TableType": "EXTERNAL_TABLE", "Parameters": {}},
    )
    insert_small_batches("events", batches=1)
    insert_small_batches("clicks", batches=1)
    capsys.readouterr()
    caplog.clear()

    # When the publisher runs, it does not raise
    answer = stack.invoke({})

    # Then `clicks` is named with its error, counted and logged, and `events` was published
    assert [p["table"] for p in answer["published"]] == ["events"]
    (failure,) = answer["failed"]
    assert failure["table"] == "clicks" and failure["error"]
    assert metric_values(capsys.readouterr().out)["TablesFailed"] == 1
    logged = [r for r in caplog.records if r.getMessage() == "table not published"]
    assert [(r.table, r.levelname) for r in logged] == [("clicks", "WARNING")]  # type: ignore[attr-defined]
    assert "Parameters" in stack.glue_tables()["clicks"]  # someone else's table is untouched
    assert "metadata_location" not in stack.glue_tables()["clicks"]["Parameters"]
    # ... and the next pass tries it again (it is not taken for current)
    assert [f["table"] for f in stack.invoke({})["failed"]] == ["clicks"]


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ([{"tables": ["events"]}], "event must be an object"),
        ("events", "event must be an object"),
        ({"tables": "events"}, "event 'tables' must be an array or null"),
        ({"table": "events"}, "unknown event keys ['table']; expected ['tables']"),
        ({"tables": []}, "event 'tables'"),
        ({"tables": [7]}, "event 'tables.0' must be a string"),
        ({"tables": ["Events!"]}, "event 'tables.0'"),
        ({"tables": ["events", "events"]}, "event 'tables'"),
        ({"tables": ["nosuch"]}, "event 'tables': no table 'nosuch'"),
        ({"tables": ["other"]}, "event 'tables': table 'other' is not published as Iceberg"),
    ],
    ids=[
        "a-list",
        "a-string",
        "tables-not-an-array",
        "misspelt-key",
        "no-tables",
        "a-name-not-a-string",
        "not-a-table-name",
        "a-name-twice",
        "an-unknown-table",
        "a-table-not-opted-in",
    ],
)
def test_a_malformed_event_is_refused_naming_the_field_and_publishes_nothing(
    stack: Stack, event: object, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    insert_small_batches("events", batches=1)
    capsys.readouterr()

    answer = stack.invoke(event)

    ERROR_SCHEMA.validate(answer)
    assert words in answer["error"]["message"], answer
    assert stack.glue_tables() == {} and stack.iceberg_keys() == set()
    assert metric_values(capsys.readouterr().out)["PublisherRunsRefused"] == 1


# Top-level modules (and submodules) the publisher's layers do not hold.
LEFT_OUT = (
    "duckdb_extension_httpfs",
    "duckdb.experimental",
    "aws_lambda_powertools.event_handler",
    "hive_metastore",
    "fb303",
    "pyiceberg.cli",
    "zstandard._cffi",
    *sorted(name.replace("-", "_") for name in build_layer.ICEBERG_PRUNED_DISTRIBUTIONS),
)
PASS_IN_A_PROCESS = textwrap.dedent("""
    import json, sys
    left_out = json.loads(sys.argv[1])
    for name in left_out:
        sys.modules[name] = None  # importing it raises ImportError, as in the layers
    sys.modules["markdown_it"] = None  # markdown-it-py's module
    sys.path.insert(0, sys.argv[2])
    import app
    from support.aws import FakeLambdaContext
    answer = app.lambda_handler({}, FakeLambdaContext(function_name="PublisherFunction"))
    loaded = sorted(n for n in left_out if sys.modules.get(n) is not None)
    # The peak of this process's own memory: VmHWM starts again at exec, while getrusage's
    # ru_maxrss keeps the forking parent's peak (a whole test run's pytest process).
    with open("/proc/self/status") as status:
        rss = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM:"))
    print(json.dumps({"answer": answer, "loaded": loaded, "max_rss": rss}))
""")


def test_a_pass_needs_nothing_the_publishers_layers_leave_out(stack: Stack) -> None:
    # Given a table published once, then grown and merged (so that the pass adds and removes)
    insert_small_batches("events", batches=2)
    stack.invoke({})
    insert_small_batches("events", batches=2)
    merge_until_quiet("events")
    head, rows = head_rows("events")

    # When a fresh process, unable to import anything the layers leave out, runs the pass
    env = {**os.environ, **stack.environment, "PYTHONPATH": str(REPO_ROOT / "tests")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            PASS_IN_A_PROCESS,
            json.dumps(LEFT_OUT),
            str(REPO_ROOT / PUBLISHER.code_uri),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )

    # Then it published the new head, and pyiceberg reads exactly its rows
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    (published,) = report["answer"]["published"]
    assert published["snapshot_id"] == head and published["files_removed"] > 0
    assert report["answer"]["failed"] == [] and report["loaded"] == []
    assert stack.iceberg_rows("events") == rows
    # The memory a pass took (the template's MemorySize is chosen against it)
    print(f"publisher pass: max RSS {report['max_rss'] / 2**20:.0f} MiB")
    assert PUBLISHER.memory_size is not None
    assert report["max_rss"] < PUBLISHER.memory_size * 2**20 / 2
