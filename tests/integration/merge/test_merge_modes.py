"""Merge modes applied by the worker: replace, aggregate, a custom query, and their failures."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pytest

from icefloe.merge import MergeFailedError
from support.merge_lake import Lake

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, id VARCHAR NOT NULL, version BIGINT, amount BIGINT, note VARCHAR"


def insert_versions(lake: Lake, *, batches: int) -> list[dict[str, object]]:
    """Each batch updates ids id0..id19; versions are not in insert order."""
    inserted = []
    for n in range(batches):
        rows = [
            {
                "ts": f"2026-03-01T{(i % 24):02d}:00:00",
                "id": f"id{i}",
                "version": (n * 7 + i) % batches,
                "amount": n * 100 + i,
                "note": f"batch {n}",
            }
            for i in range(20)
        ]
        lake.inserter.insert_rows("t", rows)
        inserted.extend(rows)
    return inserted


def test_replace_keeps_the_newest_version_per_key(lake: Lake) -> None:
    lake.create(name="t", schema=SCHEMA, sort_by="id", merge="replace(id; version=version)")
    inserted = insert_versions(lake, batches=6)
    report = lake.merge("t")
    assert report.count("committed") == 1
    rows = lake.rows("SELECT id, version, amount FROM t ORDER BY id")
    newest: dict[str, dict[str, object]] = {}
    for row in inserted:  # the highest version wins; ties go to the later insert
        current = newest.get(str(row["id"]))
        if current is None or int(row["version"]) >= int(current["version"]):  # type: ignore[call-overload]
            newest[str(row["id"])] = row
    assert rows == [
        {"id": k, "version": v["version"], "amount": v["amount"]} for k, v in sorted(newest.items())
    ]


def test_replace_without_a_version_keeps_the_last_inserted_row(lake: Lake) -> None:
    lake.create(name="t", schema=SCHEMA, sort_by="id", merge="replace(id)")
    insert_versions(lake, batches=5)
    lake.merge("t")
    notes = {r["note"] for r in lake.rows("SELECT note FROM t")}
    assert notes == {"batch 4"}
    assert lake.rows("SELECT count(*) AS n FROM t")[0]["n"] == 20


def test_segment_preset_deduplicates_redelivered_messages(lake: Lake) -> None:
    from icefloe.spec.presets import segment

    lake.meta.create_table(segment("seg"))
    message = {
        "messageId": "m-1",
        "timestamp": "2026-03-01T10:00:00Z",
        "type": "track",
        "event": "Signed Up",
        "userId": "u1",
    }
    for n in range(4):  # Segment retried the same message into four batches
        lake.inserter.insert_rows("seg", [message, {**message, "messageId": f"m-other-{n}"}])
    lake.merge("seg")
    ids = sorted(r["messageId"] for r in lake.rows("SELECT messageId FROM seg"))
    assert ids == ["m-1", "m-other-0", "m-other-1", "m-other-2", "m-other-3"]


def test_aggregate_sums_equal_the_raw_sums(lake: Lake) -> None:
    lake.create(
        name="t",
        schema=SCHEMA,
        sort_by="id",
        merge="aggregate(id; ts:min, version:max, amount:sum, note:any)",
    )
    inserted = insert_versions(lake, batches=6)
    lake.merge("t")
    raw: dict[str, int] = defaultdict(int)
    for row in inserted:
        raw[str(row["id"])] += int(row["amount"])  # type: ignore[call-overload]
    rows = lake.rows("SELECT id, amount, version FROM t ORDER BY id")
    assert {r["id"]: r["amount"] for r in rows} == raw
    assert all(r["version"] == 5 for r in rows)
    assert len(lake.meta.files("t")) == 1 and lake.meta.files("t")[0].row_count == 20


def test_aggregate_count_columns_add_up(lake: Lake) -> None:
    lake.create(
        name="t",
        schema="ts TIMESTAMP NOT NULL, id VARCHAR NOT NULL, n BIGINT",
        sort_by="id",
        merge="aggregate(id; ts:max, n:count)",
    )
    for _ in range(4):
        lake.inserter.insert_rows("t", [{"ts": "2026-03-01T00:00:00", "id": "a", "n": 3}])
    lake.merge("t")
    assert lake.rows("SELECT id, n FROM t") == [{"id": "a", "n": 12}]


def test_a_custom_query_is_applied(lake: Lake) -> None:
    # Given a custom merge that keeps only rows with an amount and upper-cases the note
    lake.create(
        name="t",
        schema=SCHEMA,
        sort_by="id",
        merge="sql:SELECT ts, id, version, amount, upper(note) AS note, _row_id FROM t "
        "WHERE amount % 2 = 0",
    )
    inserted = insert_versions(lake, batches=4)
    lake.merge("t")
    rows = lake.rows("SELECT amount, note FROM t ORDER BY amount")
    assert rows == sorted(
        (
            {"amount": r["amount"], "note": str(r["note"]).upper()}
            for r in inserted
            if int(r["amount"]) % 2 == 0  # type: ignore[call-overload]
        ),
        key=lambda r: int(r["amount"]),  # type: ignore[call-overload]
    )


def test_a_custom_query_that_moves_rows_out_of_the_partition_fails_and_changes_nothing(
    lake: Lake,
) -> None:
    lake.create(
        name="t",
        schema=SCHEMA,
        sort_by="id",
        merge="sql:SELECT ts + INTERVAL 2 DAY AS ts, id, version, amount, note, _row_id FROM t",
    )
    insert_versions(lake, batches=4)
    before = lake.meta.files("t")
    report = lake.merge("t", until_quiet=False)
    # The message failed on every delivery and ended with the dead letters
    assert report.outcomes == () and len(report.dead_letters) == 1
    # The inputs are still live (and stay claimed until their lease ends, which throttles
    # retries of a query that fails every time to one per lease)
    assert [f.path for f in lake.meta.files("t")] == [f.path for f in before]
    # And no object was left behind besides the inputs
    objects = {o.key for o in lake.objects.list_prefix("t/")}
    assert objects == {f.path for f in before}


def test_a_custom_query_missing_a_column_fails_naming_it(lake: Lake) -> None:
    lake.create(name="t", schema=SCHEMA, sort_by="id", merge="sql:SELECT ts, id, _row_id FROM t")
    insert_versions(lake, batches=4)
    from icefloe.merge import InProcessQueue, MergeOrchestrator, MergeTask

    queue = InProcessQueue()
    MergeOrchestrator(meta=lake.meta, sender=queue).run(table="t")
    captured: list[str] = []
    queue.drain(
        lambda event: captured.append(event["Records"][0]["body"]) or {"batchItemFailures": []}
    )
    with pytest.raises(MergeFailedError, match="version"):
        lake.worker.run(MergeTask.from_json(captured[0]))


@pytest.mark.parametrize(
    ("column_type", "big", "small"),
    [
        ("INTEGER", "2147483647", "7"),
        ("BIGINT", "9223372036854775807", "7"),
        ("UBIGINT", "18446744073709551615", "7"),
        ("HUGEINT", "-170141183460469231731687303715884105728", "-7"),
        ("FLOAT", "3e38", "0.5"),
        ("DOUBLE", "1.7e308", "0.5"),
        ("DECIMAL(5,2)", "999.99", "0.25"),
        ("DECIMAL(38,0)", "99999999999999999999999999999999999999", "7"),
    ],
)
def test_an_aggregate_sum_that_leaves_its_type_keeps_that_groups_rows(
    lake: Lake, column_type: str, big: str, small: str
) -> None:
    # Given groups whose sum fits and one whose sum passes the column type's largest value
    lake.create(
        name="t",
        schema=f"ts TIMESTAMP NOT NULL, id VARCHAR, n {column_type}, c BIGINT",
        sort_by="id",
        merge="aggregate(id; ts:max, n:sum, c:count)",
    )
    rows = "\n".join(
        f'{{"ts": "2026-03-01T00:00:00", "id": {key}, "n": {value}, "c": 1}}'
        for key, value in (('"big"', big), ('"small"', small), ("null", small))
    )
    for _ in range(4):  # NDJSON: the 128-bit integers are written as they are
        lake.inserter.insert_bytes("t", rows.encode(), fmt="ndjson")

    def totals() -> dict[object, tuple[Decimal, int]]:  # summed here: DuckDB's sum overflows
        sums: dict[object, tuple[Decimal, int]] = {}
        for row in lake.rows("SELECT id, n::VARCHAR AS n, c FROM t"):
            n, c = sums.get(row["id"], (Decimal(0), 0))
            sums[row["id"]] = (n + Decimal(str(row["n"])), c + int(str(row["c"])))
        return sums

    before = totals()
    assert before["small"] == (4 * Decimal(small), 4)

    # When the table is merged
    report = lake.merge("t")

    # Then the merge commits: the fitting groups are one row each, the other keeps its rows
    assert report.count("committed") == 1
    assert totals() == before
    counts = lake.rows("SELECT id, count(*) AS rows FROM t GROUP BY id ORDER BY id")
    assert counts == [
        {"id": "big", "rows": 4},
        {"id": "small", "rows": 1},
        {"id": None, "rows": 1},
    ]


def test_replace_keeps_every_row_whose_key_is_null(lake: Lake) -> None:
    # Given a replace table keyed by (id, region) where some rows lack a part of the key
    lake.create(
        name="t",
        schema="ts TIMESTAMP NOT NULL, id VARCHAR, region VARCHAR, n BIGINT",
        sort_by="id",
        merge="replace(id, region)",
    )
    for n in range(4):
        lake.inserter.insert_rows(
            "t",
            [
                {"ts": "2026-03-01T00:00:00", "id": "a", "region": "eu", "n": n},
                {"ts": "2026-03-01T00:00:00", "id": None, "region": "eu", "n": 10 + n},
                {"ts": "2026-03-01T00:00:00", "id": "b", "region": None, "n": 20 + n},
            ],
        )

    # When it is merged
    assert lake.merge("t").count("committed") == 1

    # Then the keyed rows are one, the newest, and no row without a whole key is lost
    rows = lake.rows("SELECT n FROM t ORDER BY n")
    assert [r["n"] for r in rows] == [3, 10, 11, 12, 13, 20, 21, 22, 23]
