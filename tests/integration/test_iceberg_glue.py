"""Iceberg publication to AWS Glue (moto's server standing in for Glue and S3): an icefloe table
on S3 is published into a Glue database, and pyiceberg, through the Glue catalog, reads
exactly icefloe's rows; a later publication after more inserts and a merge commits the files
added and removed."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

from icefloe.cli import main
from icefloe.config import CoreSettings
from icefloe.iceberg import publish_iceberg
from icefloe.iceberg.glue import glue_catalog
from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.query import QueryEngine
from icefloe.query.s3_access import configure_s3_from_settings
from icefloe.runtime import Runtime
from icefloe.settings import load_settings
from icefloe.spec import SizeTargets, TableSpec
from support.aws import FAKE_AWS_ENVIRONMENT, UNSET_AWS_VARIABLES

pytestmark = pytest.mark.integration

BUCKET = "glue-lake"
DATABASE = "analytics"


@pytest.fixture
def s3_settings(
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    postgres_dsn: str,
    schema_name: str,
    tmp_path: Path,
) -> CoreSettings:
    for name, value in FAKE_AWS_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    for name in UNSET_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    env = {
        "ICEFLOE_WAREHOUSE": f"s3://{BUCKET}/wh",
        "ICEFLOE_S3_ENDPOINT_URL": moto_endpoint,
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
        "ICEFLOE_HOME": str(tmp_path),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    return load_settings().core


def insert(inserter: Inserter, batches: int, first_day: int) -> None:
    for n in range(batches):
        inserter.insert_rows(
            "events",
            [
                {"ts": f"2026-05-0{first_day + d}T1{n}:00:00Z", "event": e, "n": n}
                for d in (0, 1)
                for e in ("view", "buy")
            ],
        )


def icefloe_rows(runtime: Runtime, settings: CoreSettings, snapshot_id: int) -> Counter[str]:
    engine = QueryEngine(
        meta=runtime.meta,
        objects=runtime.objects,
        configure=lambda con: configure_s3_from_settings(con, settings),
    )
    try:
        table = engine.query("SELECT ts, event, n FROM events", snapshot_id=snapshot_id).rows
    finally:
        engine.close()
    return Counter(json.dumps(r, default=str) for r in table.to_pylist())


def iceberg_rows(catalog: Any) -> Counter[str]:
    table = catalog.load_table((DATABASE, "events")).scan(selected_fields=("ts", "event", "n"))
    return Counter(json.dumps(r, default=str) for r in table.to_arrow().to_pylist())


def test_a_table_published_to_glue_reads_the_same_rows_through_the_glue_catalog(
    s3_settings: CoreSettings, moto_endpoint: str
) -> None:
    with Runtime.open(s3_settings) as runtime:
        runtime.meta.migrate()
        runtime.meta.create_table(
            TableSpec.create(
                name="events",
                schema="ts TIMESTAMP NOT NULL, event VARCHAR, n BIGINT",
                partition_by="day(ts)",
                sizes=SizeTargets(min_files_to_merge=2),
            )
        )
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        insert(inserter, batches=3, first_day=1)
        catalog = glue_catalog(
            warehouse=f"s3://{BUCKET}/iceberg",
            region="us-east-1",
            glue_endpoint_url=moto_endpoint,
            s3_endpoint_url=moto_endpoint,
        )

        # When the table is published to a Glue database
        first = publish_iceberg(
            meta=runtime.meta,
            objects=runtime.objects,
            table="events",
            catalog=catalog,
            namespace=DATABASE,
        )

        # Then Glue points at the metadata written to S3, and pyiceberg reads icefloe's rows
        glue = boto3.client("glue", endpoint_url=moto_endpoint, region_name="us-east-1")
        entry = glue.get_table(DatabaseName=DATABASE, Name="events")["Table"]
        assert entry["Parameters"]["metadata_location"] == first.metadata_location
        assert first.metadata_location.startswith(f"s3://{BUCKET}/iceberg/")
        assert first.files_added == first.files_live > 0
        assert iceberg_rows(catalog) == icefloe_rows(runtime, s3_settings, first.snapshot_id)

        # When more rows come, the files are merged, and it is published again
        insert(inserter, batches=3, first_day=2)
        worker = MergeWorker(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, s3_settings),
        )
        merge_locally(meta=runtime.meta, worker=worker, table="events", until_quiet=True)
        second = publish_iceberg(
            meta=runtime.meta,
            objects=runtime.objects,
            table="events",
            catalog=catalog,
            namespace=DATABASE,
        )
        inserter.close()

        # Then files were both added and removed, and the rows are icefloe's at the new head
        assert second.files_added > 0 and second.files_removed > 0
        assert iceberg_rows(catalog) == icefloe_rows(runtime, s3_settings, second.snapshot_id)
        assert (
            glue.get_table(DatabaseName=DATABASE, Name="events")["Table"]["Parameters"][
                "metadata_location"
            ]
            == second.metadata_location
        )


def test_the_cli_publishes_to_glue_and_refuses_a_local_warehouse(
    s3_settings: CoreSettings, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_GLUE", moto_endpoint)
    out = io.StringIO()
    assert main(["init"], out=out) == 0
    assert main(["table", "create", "events", "--schema", "ts TIMESTAMP, n BIGINT"], out=out) == 0
    rows = tmp_path / "rows.ndjson"
    rows.write_text('{"ts": "2026-05-01T10:00:00Z", "n": 1}\n')
    assert main(["insert", "events", str(rows)], out=out) == 0
    out = io.StringIO()
    code = main(
        ["publish", "iceberg", "events", "--catalog", "glue", "--namespace", "cli_db",
         "--format", "json"],
        out=out,
    )  # fmt: skip
    assert code == 0
    published = json.loads(out.getvalue())
    assert published["metadata_location"].startswith(f"s3://{BUCKET}/wh/iceberg/")
    glue = boto3.client("glue", endpoint_url=moto_endpoint, region_name="us-east-1")
    assert glue.get_table(DatabaseName="cli_db", Name="events")["Table"]["Name"] == "events"
    # A local warehouse has nowhere Glue's readers could reach
    monkeypatch.setenv("ICEFLOE_WAREHOUSE", str(tmp_path / "local"))
    assert main(["publish", "iceberg", "events", "--catalog", "glue"], out=io.StringIO()) == 1
