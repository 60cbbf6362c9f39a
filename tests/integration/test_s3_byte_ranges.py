"""DuckDB fetches only the byte ranges it needs from S3: a selective query on a sorted file reads
a small part of it (bytes counted on the wire by a proxy in front of moto's server)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import boto3
import duckdb
import pyarrow as pa
import pytest

from icefloe.datafiles import encode_parquet
from icefloe.ingest import Inserter
from icefloe.query import QueryEngine
from icefloe.query.s3_access import S3Credentials, configure_s3, configure_s3_from_settings
from icefloe.runtime import Runtime
from icefloe.sample_events import EVENTS_SCHEMA, sample_events
from icefloe.settings import load_settings
from icefloe.spec import SizeTargets, TableSpec
from support.byte_counter import CountingProxy

pytestmark = pytest.mark.integration
ROWS = 400_000


@pytest.fixture
def counted(moto_endpoint: str) -> Iterator[tuple[CountingProxy, int]]:
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if "ranges" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="ranges")
    table = pa.table(
        {
            "user_id": pa.array([f"u{i // 1000:05d}" for i in range(ROWS)]),
            "payload": pa.array(
                [f"some longer payload text {i * 7919 % 100003}" for i in range(ROWS)]
            ),
            "n": pa.array(range(ROWS), pa.int64()),
        }
    )
    encoded = encode_parquet(
        table,
        spec=TableSpec.create(name="ranges", schema="user_id VARCHAR, payload VARCHAR, n BIGINT"),
        row_group_sizes=[50_000] * (ROWS // 50_000),
    )
    s3.put_object(Bucket="ranges", Key="f.parquet", Body=encoded.data)
    parsed = urlparse(moto_endpoint)
    proxy = CountingProxy(host=str(parsed.hostname), port=int(parsed.port or 80))
    yield proxy, len(encoded.data)
    proxy.close()


def fetched(proxy: CountingProxy, sql: str) -> tuple[object, int]:
    """Run ``sql`` on a fresh connection (DuckDB caches remote blocks per database) and count
    the bytes S3 sent for it, footer reads included."""
    con = duckdb.connect()
    configure_s3(
        con,
        region="us-east-1",
        endpoint_url=proxy.endpoint,
        credentials=S3Credentials("testing", "testing"),
    )
    proxy.reset()
    row = con.execute(sql).fetchone()
    con.close()
    return row, proxy.bytes_down


def test_a_point_query_fetches_a_small_part_of_the_file(counted: tuple[CountingProxy, int]) -> None:
    proxy, size = counted
    source = "read_parquet('s3://ranges/f.parquet')"
    full, full_bytes = fetched(proxy, f"SELECT sum(n), max(payload) FROM {source}")
    point, point_bytes = fetched(proxy, f"SELECT sum(n) FROM {source} WHERE user_id = 'u00123'")

    assert full is not None and point == (sum(range(123_000, 124_000)),)
    assert full_bytes > 0.8 * size
    # One row group of two small columns out of eight row groups of three columns.
    assert point_bytes < full_bytes / 5, (point_bytes, full_bytes, size)
    print(f"file {size:,} B, full scan fetched {full_bytes:,} B, point query {point_bytes:,} B")


def test_through_the_engine_a_point_query_on_the_leading_sort_key_reads_fewer_bytes(
    moto_endpoint: str,
    postgres_dsn: str,
    schema_name: str,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a table sorted by event, with small row groups, in an S3 warehouse behind the proxy
    parsed = urlparse(moto_endpoint)
    proxy = CountingProxy(host=str(parsed.hostname), port=int(parsed.port or 80))
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    settings = load_settings(
        {
            "ICEFLOE_HOME": str(tmp_path),
            "ICEFLOE_WAREHOUSE": "s3://ranges/engine",
            "ICEFLOE_S3_ENDPOINT_URL": proxy.endpoint,
            "ICEFLOE_DATABASE_URL": postgres_dsn,
            "ICEFLOE_DATABASE_SCHEMA": schema_name,
        }
    ).core
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    if "ranges" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="ranges")
    with Runtime.open(settings) as runtime:
        runtime.meta.migrate()
        runtime.meta.create_table(
            TableSpec.create(
                name="events",
                schema=EVENTS_SCHEMA,
                partition_by="day(ts)",
                sort_by="event, ts",
                sizes=SizeTargets(row_group_max_rows=5_000),
            )
        )
        inserter = Inserter(meta=runtime.meta, objects=runtime.objects)
        inserter.insert_rows("events", sample_events(60_000, days=1))
        inserter.close()
        engine = QueryEngine(
            meta=runtime.meta,
            objects=runtime.objects,
            configure=lambda con: configure_s3_from_settings(con, settings),
        )
        # When a full scan and a point query on the leading sort key run
        proxy.reset()
        engine.query("SELECT count(*), sum(CAST(properties->>'numtime' AS BIGINT)) FROM events")
        full_bytes = proxy.bytes_down
        proxy.reset()
        point = engine.query(
            "SELECT count(*) AS n, sum(CAST(properties->>'numtime' AS BIGINT)) FROM events"
            " WHERE event = 'signup'"
        )
        point_bytes = proxy.bytes_down
    proxy.close()
    # Then the point query reads a fraction of the bytes (the row groups holding 'signup')
    assert point.rows.column("n").to_pylist()[0] > 0
    assert point.plan("events").files_scanned == 1
    assert point_bytes < full_bytes / 3, (point_bytes, full_bytes)
