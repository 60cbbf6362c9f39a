"""Limits that hold: result caps, and a child process whose memory and time are watched."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from icefloe.errors import ConfigError
from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine, QueryLimitError, QueryLimits, QueryTimeoutError
from icefloe.query.isolation import DEFAULT_MARGIN_BYTES, ChildProcessExecutor
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration

# How far past its ceiling the child may get between two samples of its memory.
SAMPLING_SLACK_BYTES = 128 * 2**20


@pytest.fixture
def objects(tmp_path: Path, meta: MetaStore) -> LocalObjectStore:
    objects = LocalObjectStore(tmp_path / "warehouse")
    meta.create_table(TableSpec.create(name="t", schema="k VARCHAR, v INTEGER"))
    inserter = Inserter(meta=meta, objects=objects)
    inserter.insert_rows("t", [{"k": f"k{i % 3}", "v": i} for i in range(100)])
    inserter.close()
    return objects


@pytest.fixture
def child_engine(meta: MetaStore, objects: LocalObjectStore) -> Iterator[QueryEngine]:
    engine = QueryEngine(
        meta=meta,
        objects=objects,
        limits=QueryLimits(memory_limit="1GB", timeout_s=2),
        isolation="child_process",
    )
    yield engine
    engine.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT list(range(0, 40000000)) AS l",
        "SELECT repeat('x', 100000000) AS s FROM range(12)",
    ],
)
def test_a_query_past_duckdbs_own_limits_is_stopped_near_the_memory_limit(
    child_engine: QueryEngine, sql: str
) -> None:
    # Given 1 GB and 2 s: in-process, these peaked at 4.6 and 2.7 GB (DuckDB's memory limit
    # does not count such values)
    with pytest.raises((QueryLimitError, QueryTimeoutError)) as stopped:
        child_engine.query(sql)
    # Then the error names the limit, and the child's peak stayed near it
    assert "limit" in str(stopped.value) and "ICEFLOE_QUERY_" in str(stopped.value)
    executor = child_engine.executor
    assert isinstance(executor, ChildProcessExecutor) and executor.last_stats is not None
    ceiling = QueryLimits(memory_limit="1GB").memory_bytes + DEFAULT_MARGIN_BYTES
    assert 0 < executor.last_stats.peak_rss_bytes <= ceiling + SAMPLING_SLACK_BYTES
    # And the next query gets a new child and its answer
    assert child_engine.query("SELECT count(*) AS n FROM t").rows.to_pylist() == [{"n": 100}]


def test_the_child_answers_as_the_in_process_engine_does(
    meta: MetaStore, objects: LocalObjectStore, child_engine: QueryEngine
) -> None:
    sql = "SELECT k, count(*) AS n, sum(v) AS s FROM t WHERE v >= 10 GROUP BY k ORDER BY k"
    in_process = QueryEngine(meta=meta, objects=objects).query(sql)
    child = child_engine.query(sql)
    assert child.rows.equals(in_process.rows)
    assert child.plans == in_process.plans
    # A refusal and a failure cross the process boundary with their types and messages.
    with pytest.raises(Exception, match="nope") as failed:
        child_engine.query("SELECT nope FROM t")
    assert type(failed.value).__name__ == "QueryFailedError"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (QueryLimits(max_result_rows=10), "more than 10 rows (the result row limit"),
        (QueryLimits(max_result_bytes=1000), "larger than 1,000 bytes (the result size limit"),
    ],
)
@pytest.mark.parametrize("isolation", ["in_process", "child_process"])
def test_a_result_past_its_cap_is_refused_naming_the_cap(
    meta: MetaStore, objects: LocalObjectStore, limits: QueryLimits, message: str, isolation: str
) -> None:
    engine = QueryEngine(meta=meta, objects=objects, limits=limits, isolation=isolation)  # type: ignore[arg-type]
    try:
        with pytest.raises(QueryLimitError, match=re.escape(message)):
            engine.query("SELECT * FROM t")
        # Under the cap, the same engine answers.
        assert engine.query("SELECT count(*) AS n FROM t").rows.to_pylist() == [{"n": 100}]
    finally:
        engine.close()


def test_a_warm_engine_sees_each_new_snapshot_and_keeps_queries_apart(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    engine = QueryEngine(meta=meta, objects=objects)
    first = engine.query("SELECT count(*) AS n FROM t")
    inserter = Inserter(meta=meta, objects=objects)
    inserter.insert_rows("t", [{"k": "new", "v": 1000}])
    inserter.close()
    assert engine.query("SELECT count(*) AS n FROM t").rows.to_pylist() == [{"n": 101}]
    pinned = engine.query(
        "SELECT count(*) AS n FROM t", snapshot_id=first.plan("t").snapshot_id
    ).rows.to_pylist()
    assert pinned == [{"n": 100}]


def test_a_child_that_outruns_its_time_limit_is_stopped_by_the_parent(tmp_path: Path) -> None:
    # Given a query DuckDB's own interrupt reaches late (it ran 8 s under a 2 s limit), and
    # memory to spare, so that only the clock can stop it
    executor = ChildProcessExecutor(
        root_uri=str(tmp_path),
        limits=QueryLimits(memory_limit="8GB", timeout_s=0.2),
        timeout_grace_s=0.3,
    )
    try:
        with pytest.raises(QueryTimeoutError, match=r"stopped after 0.2 s \(the time limit"):
            executor.execute(
                "SELECT list(range(0, 40000000)) AS l", [], without_filter_pushdown=False
            )
        assert executor.last_stats is not None
        killed = executor.last_stats.pid
        # Then the next query runs in a new child
        answer = executor.execute("SELECT 42 AS n", [], without_filter_pushdown=False)
        assert answer.to_pylist() == [{"n": 42}]
        assert executor.last_stats.pid != killed
    finally:
        executor.close()


def test_a_child_process_engine_takes_its_s3_setup_as_data(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    with pytest.raises(ConfigError, match="takes s3=, not configure="):
        QueryEngine(
            meta=meta, objects=objects, isolation="child_process", configure=lambda con: None
        )
