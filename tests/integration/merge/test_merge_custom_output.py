"""A custom merge query's output is checked before anything is written: no NULL in a NOT NULL
column, a 16-byte ``_row_id`` on every row, every row in the partition being merged (whatever
the partition column's type). Refused output commits nothing."""

from __future__ import annotations

import pytest

from icefloe.merge import InProcessQueue, MergeFailedError, MergeOrchestrator, MergeTask
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, k VARCHAR NOT NULL, v BIGINT"


def insert_batches(lake: Lake, *, batches: int = 4) -> None:
    for b in range(batches):
        lake.inserter.insert_rows(
            "t", [{"ts": "2026-01-01T00:00:00", "k": f"k{i}", "v": b} for i in range(3)]
        )


def planned_task(lake: Lake) -> MergeTask:
    """The one merge task the orchestrator plans for table ``t``, not yet run."""
    queue = InProcessQueue()
    MergeOrchestrator(meta=lake.meta, sender=queue).run(table="t")
    bodies: list[str] = []
    queue.drain(lambda event: bodies.extend(r["body"] for r in event["Records"]) or {})
    assert len(bodies) == 1
    return MergeTask.from_json(bodies[0])


REFUSED = [
    pytest.param(
        "SELECT * REPLACE (CASE WHEN v = 0 THEN NULL ELSE k END AS k) FROM t",
        r"NULL in NOT NULL column 'k' \(3 rows .*_row_id [0-9a-f]{32}\)",
        id="null-in-not-null-column",
    ),
    pytest.param(
        "SELECT * REPLACE (CASE WHEN v = 0 THEN NULL ELSE _row_id END AS _row_id) FROM t",
        r"NULL _row_id",
        id="null-row-id",
    ),
    pytest.param(
        "SELECT * REPLACE ('\\x00'::BLOB AS _row_id) FROM t",
        r"_row_id of 1 byte, not 16",
        id="short-row-id",
    ),
    pytest.param(
        "SELECT * REPLACE (_row_id || _row_id AS _row_id) FROM t",
        r"_row_id of 32 bytes, not 16",
        id="long-row-id",
    ),
]


@pytest.mark.parametrize(("query", "problem"), REFUSED)
def test_a_custom_query_with_invalid_output_is_refused_naming_the_query_and_column(
    lake: Lake, query: str, problem: str
) -> None:
    lake.create(name="t", schema=SCHEMA, sort_by="k", merge=f"sql:{query}")
    insert_batches(lake)
    task = planned_task(lake)
    with pytest.raises(MergeFailedError) as raised:
        lake.worker.run(task)
    message = str(raised.value)
    assert "custom merge query of 't'" in message
    assert query in message
    assert raised.match(problem)


@pytest.mark.parametrize(("query", "problem"), REFUSED)
def test_a_custom_query_with_invalid_output_commits_nothing(
    lake: Lake, query: str, problem: str
) -> None:
    lake.create(name="t", schema=SCHEMA, sort_by="k", merge=f"sql:{query}")
    insert_batches(lake)
    before = lake.meta.files("t")
    head = lake.head("t")
    report = lake.merge("t", until_quiet=False)
    # The task fails on every delivery, as a query moving rows out of its partition does
    assert report.outcomes == () and len(report.dead_letters) == 1
    assert lake.head("t") == head
    assert [f.path for f in lake.meta.files("t")] == [f.path for f in before]
    assert {o.key for o in lake.objects.list_prefix("t/")} == {f.path for f in before}
    assert lake.rows("SELECT count(*) AS n, count(k) AS k, count(_row_id) AS r FROM t") == [
        {"n": 12, "k": 12, "r": 12}
    ]


def test_a_custom_query_may_null_a_nullable_column_and_repeat_rows(lake: Lake) -> None:
    # Duplicated rows (and so repeated _row_ids) are a custom merge's own business: the change
    # feed compares such tables' rows by value
    lake.create(
        name="t",
        schema=SCHEMA,
        sort_by="k",
        merge="sql:SELECT * REPLACE (CASE WHEN v = 0 THEN NULL ELSE v END AS v) FROM t"
        " UNION ALL SELECT * FROM t WHERE v = 1",
    )
    insert_batches(lake)
    report = lake.merge("t")
    assert [o.status for o in report.outcomes] == ["committed"]
    assert lake.rows(
        "SELECT count(*) AS n, count(v) AS v, count(DISTINCT _row_id) AS r FROM t"
    ) == [{"n": 15, "v": 12, "r": 12}]


PARTITION_VALUES = [
    pytest.param("UUID", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", id="uuid"),
    pytest.param("VARCHAR", "a/b", id="varchar"),
    pytest.param("INTEGER", -7, id="integer"),
    pytest.param("BOOLEAN", True, id="boolean"),
    pytest.param("DATE", "2026-01-01", id="date"),
    pytest.param("TIMESTAMPTZ", "2026-01-01T23:30:00-05:00", id="timestamptz"),
    pytest.param("DECIMAL(9,2)", 12.5, id="decimal"),
]


@pytest.mark.parametrize(("column_type", "value"), PARTITION_VALUES)
def test_a_custom_query_keeping_rows_in_their_identity_partition_merges(
    lake: Lake, column_type: str, value: object
) -> None:
    # Given a table identity-partitioned by a column of each type, merged by a custom query
    # that keeps every row where it is
    lake.create(
        name="t",
        schema=f"ts TIMESTAMP NOT NULL, p {column_type}, v BIGINT",
        partition_by="p",
        sort_by="ts",
        merge="sql:SELECT * FROM t",
    )
    for b in range(4):
        lake.inserter.insert_rows("t", [{"ts": "2026-01-01T00:00:00", "p": value, "v": b}])

    # When it merges, Then the partition check lets its rows through and the merge commits
    report = lake.merge("t")
    assert [o.status for o in report.outcomes] == ["committed"], report.outcomes
    assert lake.rows("SELECT count(*) AS n, count(DISTINCT p) AS p FROM t") == [{"n": 4, "p": 1}]


def test_a_custom_query_moving_a_row_to_another_partition_is_refused(lake: Lake) -> None:
    # Given a UUID-partitioned table whose custom query rewrites the partition column
    lake.create(
        name="t",
        schema="ts TIMESTAMP NOT NULL, p UUID, v BIGINT",
        partition_by="p",
        sort_by="ts",
        merge="sql:SELECT * REPLACE (CASE WHEN v = 2 THEN 'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID ELSE p END AS p) FROM t",
    )
    for b in range(4):
        lake.inserter.insert_rows(
            "t",
            [{"ts": "2026-01-01T00:00:00", "p": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "v": b}],
        )

    # When its task runs, Then it is refused naming the partition, and nothing is committed
    head = lake.head("t")
    with pytest.raises(MergeFailedError, match="moved a row out of partition 'p=a0eebc99"):
        lake.worker.run(planned_task(lake))
    assert lake.head("t") == head
