"""The front door (icefloe.connect): every kind of insert, and the table lifecycle, on a lake
of its own."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import boto3
import pyarrow as pa
import pytest

import icefloe
from icefloe.errors import ConfigError, TableExistsError, TableNotFoundError
from icefloe.lake import Lake
from icefloe.query import QueryLimits, QueryTimeoutError, ScanStats
from icefloe.query.isolation import DEFAULT_MARGIN_BYTES, TIMEOUT_GRACE_S
from icefloe.spec import SizeTargets

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def test_rows_arrow_and_files_go_in_and_the_lifecycle_works(lake: Lake, tmp_path: Path) -> None:
    info = lake.create_table("t", schema="ts TIMESTAMP NOT NULL, n BIGINT", partition_by="day(ts)")
    assert lake.create_table("t", schema="x INTEGER", if_not_exists=True) == info
    with pytest.raises(TableExistsError):
        lake.create_table("t", schema="x INTEGER")
    assert [t.name for t in lake.tables()] == ["t"]

    lake.insert("t", [{"ts": "2026-11-01T00:00:00", "n": 1}])
    lake.insert(
        "t", pa.table({"ts": pa.array([datetime(2026, 11, 2)], pa.timestamp("us")), "n": [2]})
    )
    source = tmp_path / "more.ndjson"
    source.write_text(json.dumps({"ts": "2026-11-03T00:00:00", "n": 3}) + "\n")
    lake.insert("t", source, idempotency_key="more")
    assert not lake.insert("t", source, idempotency_key="more").committed
    assert lake.query("SELECT sum(n) AS s FROM t").to_pylist() == [{"s": 6}]
    assert lake.status("t").rows == 3

    deleted = lake.delete("t", "n = 2")
    assert deleted.rows_deleted == 1 and lake.query("SELECT count(*) AS c FROM t").to_pylist() == [
        {"c": 2}
    ]
    back = lake.rollback("t", to_snapshot=3)
    assert back.snapshot_id == 5 and lake.query("SELECT sum(n) AS s FROM t").to_pylist() == [
        {"s": 6}
    ]
    assert lake.query("SELECT sum(n) AS s FROM t", snapshot_id=4).to_pylist() == [{"s": 4}]

    report = lake.gc("t", retention=timedelta(0))
    assert report.total("snapshots_expired") > 0
    altered = lake.alter_table("t", add_columns=["note VARCHAR"], rename_columns={"n": "amount"})
    assert altered.spec_version == 2
    assert lake.query("SELECT sum(amount) AS s, count(note) AS c FROM t").to_pylist() == [
        {"s": 6, "c": 0}
    ]
    published = lake.publish_iceberg("t")
    live = lake.runtime.meta.files("t")
    assert published.files_live == published.files_added == len(live) > 0
    assert published.metadata_location.startswith((tmp_path / "home" / "iceberg").as_uri())
    lake.drop_table("t")
    with pytest.raises(TableNotFoundError):
        lake.table("t")


# How far past its ceiling the query process may get between two samples of its memory.
SAMPLING_SLACK_BYTES = 128 * 2**20


@pytest.fixture
def limited_lake(
    tmp_path: Path, postgres_dsn: str, schema_name: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Lake]:
    """A lake opened under the environment's query limits: 256 MB and 2 s."""
    monkeypatch.setenv("ICEFLOE_QUERY_MEMORY_LIMIT", "256MB")
    monkeypatch.setenv("ICEFLOE_QUERY_TIMEOUT_S", "2")
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as opened:
        opened.create_table("t", schema="k VARCHAR, v INTEGER")
        opened.insert("t", [{"k": f"k{i % 3}", "v": i} for i in range(100)])
        assert opened.query("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 100}]
        yield opened


# A script that opens the environment's lake and runs one query far past the memory limit:
# in one process, DuckDB's own limit missed it (4.6 GB under a 1 GB limit, for 18 s).
PAST_THE_MEMORY_LIMIT = """
import json, resource, icefloe
from icefloe.query import QueryLimitError
with icefloe.connect() as lake:
    lake.query("SELECT count(*) FROM t")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        lake.query("SELECT list(range(0, 40000000)) AS l")
        error = None
    except QueryLimitError as e:
        error = str(e)
    after = lake.query("SELECT CAST(sum(v) AS BIGINT) AS s FROM t").to_pylist()
peaks = {w: resource.getrusage(getattr(resource, w)).ru_maxrss * 1024 for w in ("RUSAGE_SELF", "RUSAGE_CHILDREN")}
print(json.dumps({"error": error, "after": after, "SELF_BEFORE": before, **peaks}))
"""


def test_lake_query_stops_a_query_near_the_memory_limit_of_the_settings(
    limited_lake: Lake, tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    # Given ICEFLOE_QUERY_MEMORY_LIMIT=256MB, and a Python process of its own (so that its
    # peaks, and its children's, are the query's alone)
    env = {
        **os.environ,
        "ICEFLOE_HOME": str(tmp_path / "home"),
        "ICEFLOE_DATABASE_URL": postgres_dsn,
        "ICEFLOE_DATABASE_SCHEMA": schema_name,
    }
    env.pop("ICEFLOE_WAREHOUSE", None)
    assert env["ICEFLOE_QUERY_MEMORY_LIMIT"] == "256MB"
    ran = subprocess.run(
        [sys.executable, "-c", PAST_THE_MEMORY_LIMIT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    # Then the query was stopped with the error naming the limit and its variable
    assert "more than 256MB (the memory limit, ICEFLOE_QUERY_MEMORY_LIMIT)" in seen["error"]
    # And the query's process was stopped near the limit's ceiling, while the caller's
    # process never held the query's memory (the list alone is 320 MB)
    ceiling = QueryLimits(memory_limit="256MB").memory_bytes + DEFAULT_MARGIN_BYTES
    assert seen["RUSAGE_CHILDREN"] <= ceiling + SAMPLING_SLACK_BYTES
    assert seen["RUSAGE_SELF"] - seen["SELF_BEFORE"] < 64 * 2**20
    # And the next query answered
    assert seen["after"] == [{"s": 4950}]


@pytest.mark.parametrize("isolation", ["child_process", "in_process"])
def test_lake_query_stops_a_query_at_the_time_limit_of_the_settings(
    tmp_path: Path,
    postgres_dsn: str,
    schema_name: str,
    monkeypatch: pytest.MonkeyPatch,
    isolation: Literal["child_process", "in_process"],
) -> None:
    # Given ICEFLOE_QUERY_TIMEOUT_S=2, and a query of little memory that runs far longer
    monkeypatch.setenv("ICEFLOE_QUERY_TIMEOUT_S", "2")
    with icefloe.connect(
        home=tmp_path / "home",
        database_url=postgres_dsn,
        database_schema=schema_name,
        query_isolation=isolation,
    ) as lake:
        assert lake.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]  # warm
        started = time.monotonic()
        with pytest.raises(QueryTimeoutError) as stopped:
            lake.query("SELECT count(*) FROM range(10000000000) t WHERE hash(t.range) % 7 = 3")
        elapsed = time.monotonic() - started
        # Then it was stopped at the limit (past it by at most the watch's grace), naming it
        assert "after 2 s (the time limit, ICEFLOE_QUERY_TIMEOUT_S)" in str(stopped.value)
        assert 2 <= elapsed < 2 + TIMEOUT_GRACE_S + 1
        assert lake.query("SELECT 2 AS two").to_pylist() == [{"two": 2}]


def test_an_unknown_query_isolation_is_refused_by_name(
    tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    with pytest.raises(ConfigError, match="query_isolation must be one of in_process,"):
        icefloe.connect(
            home=tmp_path / "home",
            database_url=postgres_dsn,
            database_schema=schema_name,
            query_isolation="child",
        )


def test_lake_query_runs_pivot_over_a_table(lake: Lake) -> None:
    lake.create_table("clicks", schema="user_id VARCHAR, page VARCHAR")
    lake.insert(
        "clicks",
        [{"user_id": u, "page": p} for u, p in [("u1", "/"), ("u1", "/docs"), ("u2", "/")]],
    )
    pivoted = lake.query(
        "SELECT * FROM (PIVOT clicks ON page USING count(*) GROUP BY user_id) ORDER BY user_id"
    )
    assert pivoted.to_pylist() == [
        {"user_id": "u1", "/": 1, "/docs": 1},
        {"user_id": "u2", "/": 1, "/docs": 0},
    ]


def test_lake_query_reads_an_s3_warehouse_from_its_query_process(
    tmp_path: Path,
    postgres_dsn: str,
    schema_name: str,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a lake on S3 (moto over HTTP): the query process reads it with its own secret
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "ICEFLOE_S3_ENDPOINT_URL": moto_endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(
        Bucket="client-lake"
    )
    with icefloe.connect(
        home=tmp_path / "home",
        warehouse="s3://client-lake/wh",
        database_url=postgres_dsn,
        database_schema=schema_name,
    ) as lake:
        lake.create_table("t", schema="k VARCHAR, v INTEGER")
        lake.insert("t", [{"k": "a", "v": 1}, {"k": "b", "v": 2}])
        assert lake.query("SELECT sum(v) AS s FROM t").to_pylist() == [{"s": 3}]


def test_lake_query_result_says_what_pruning_read_of_each_table(lake: Lake) -> None:
    lake.create_table("t", schema="ts TIMESTAMP NOT NULL, n BIGINT", partition_by="day(ts)")
    for day in (1, 2, 3):
        lake.insert("t", [{"ts": f"2026-11-0{day}T00:00:00", "n": day}])
    files = {f.partition_path: f for f in lake.meta.files("t")}

    result = lake.query_result("SELECT sum(n) AS s FROM t WHERE n = 2")

    # The same rows as lake.query, and one ScanStats for the one table read
    assert result.rows == lake.query("SELECT sum(n) AS s FROM t WHERE n = 2")
    (stats,) = result.stats
    assert stats == ScanStats(
        table="t",
        snapshot_id=lake.meta.get_table("t").head_snapshot_id,
        files_considered=3,
        files_scanned=1,
        bytes_scanned=files["day=2026-11-02"].size_bytes,
    )
    assert stats.to_dict() == {
        "table": "t",
        "snapshot_id": stats.snapshot_id,
        "files_considered": 3,
        "files_scanned": 1,
        "bytes_scanned": stats.bytes_scanned,
    }
    # Pinned to an earlier snapshot, it reports that snapshot and its files
    (first,) = lake.query_result("SELECT count(*) FROM t", snapshot_id=1).stats
    assert (first.snapshot_id, first.files_considered, first.files_scanned) == (1, 1, 1)


def test_lake_merge_runs_as_many_merges_at_once_as_the_settings_say(
    tmp_path: Path,
    postgres_dsn: str,
    schema_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a lake whose settings allow three merges at once, and a table with six groups of
    # four small files to merge
    monkeypatch.setenv("ICEFLOE_MERGE_LOCAL_WORKERS", "3")
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as lake:
        lake.create_table(
            "t",
            schema="ts TIMESTAMP, v INTEGER",
            partition_by="day(ts)",
            sizes=SizeTargets(min_files_to_merge=2, max_files_per_merge=4),
        )
        for n in range(24):
            lake.insert("t", [{"ts": f"2026-03-01T00:00:{n:02d}Z", "v": n}])

        # When it merges
        caplog.set_level(logging.INFO, logger="icefloe")
        report = lake.merge("t")

    # Then the merges ran on worker threads, several of them, and every row is kept
    threads = {r.threadName for r in caplog.records if r.getMessage().startswith("merge committed")}
    assert report.count("committed") >= 6 and not report.dead_letters
    assert len(threads) >= 2 and all(t.startswith("merge-worker") for t in threads), threads


def test_merges_and_deletes_rewrite_files_in_one_warm_database(
    tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    # Given a table with four days of small files
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as lake:
        lake.create_table(
            "t",
            schema="ts TIMESTAMP, v INTEGER",
            partition_by="day(ts)",
            sizes=SizeTargets(min_files_to_merge=2),
        )
        for n in range(12):
            lake.insert("t", [{"ts": f"2026-03-0{1 + n % 4}T00:00:{n:02d}Z", "v": n}])

        # When it merges every day and deletes rows of two of them
        report = lake.merge("t")
        deleted = lake.delete("t", "v IN (0, 5)")

        # Then four merges and a delete rewrote files, all in one database opened once
        assert report.count("committed") == 4
        assert deleted.rows_deleted == 2 and deleted.files_rewritten == 2
        assert lake.work_database().opened == 1
        assert lake.query("SELECT sum(v) AS s FROM t").to_pylist() == [{"s": sum(range(12)) - 5}]
