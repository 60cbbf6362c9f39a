"""Queries against a real Postgres and DuckDB: answers, snapshot pinning, pruning, the sandbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import duckdb
import orjson
import pytest

from icefloe.errors import InvalidInputError, SnapshotNotFoundError, TableNotFoundError
from icefloe.ingest import Inserter
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.query import (
    QueryEngine,
    QueryFailedError,
    QueryLimits,
    QueryRefusedError,
    QueryTimeoutError,
    TimeRange,
)
from icefloe.sample_events import sample_events
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, uid VARCHAR, properties JSON"
ICEDB_QUERY = """
    SELECT uid, sum(CAST(properties->>'numtime' AS BIGINT)) AS total_numtime
    FROM {table}
    WHERE event = 'page_load' AND ts >= '2026-02-01' AND ts < '2026-08-01'
    GROUP BY uid
    ORDER BY total_numtime DESC, uid
"""


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def lake(meta: MetaStore, objects: LocalObjectStore) -> Iterator[tuple[Inserter, QueryEngine]]:
    meta.create_table(
        TableSpec.create(name="events", schema=SCHEMA, partition_by="day(ts)", sort_by="event, ts")
    )
    inserter = Inserter(meta=meta, objects=objects)
    yield inserter, QueryEngine(meta=meta, objects=objects)
    inserter.close()


def events(count: int, *, days: int, start: datetime, seed: int = 7) -> list[dict[str, object]]:
    rows = sample_events(count, days=days, start=start, users=50, seed=seed)
    return [{**{k: v for k, v in r.items() if k != "user_id"}, "uid": r["user_id"]} for r in rows]


def test_the_icedb_example_equals_duckdb_run_directly_on_the_input(
    lake: tuple[Inserter, QueryEngine], tmp_path: Path
) -> None:
    inserter, engine = lake
    rows = events(6000, days=240, start=datetime(2026, 1, 1))
    for offset in range(0, len(rows), 1000):
        inserter.insert_rows("events", rows[offset : offset + 1000])

    result = engine.query(ICEDB_QUERY.format(table="events"))

    source = tmp_path / "input.json"
    source.write_bytes(orjson.dumps(rows))
    direct = duckdb.sql(
        ICEDB_QUERY.format(
            table=f"read_json('{source}', columns = {{'ts': 'TIMESTAMP', 'event': 'VARCHAR',"
            " 'uid': 'VARCHAR', 'properties': 'JSON'})"
        )
    ).fetchall()
    assert [tuple(r.values()) for r in result.rows.to_pylist()] == direct
    assert len(direct) > 10
    plan = result.plan("events")
    # Only February to July's days were listed: 181 of the 240 days' files.
    assert plan.files_considered == 6 * 181 // 6 or plan.files_considered < 240 * 6
    assert all(
        "day=2026-0" in p and not p.startswith("events/data/day=2026-01") for p in plan.paths
    )


def test_a_query_pinned_at_a_snapshot_gives_the_same_answer_after_later_inserts(
    lake: tuple[Inserter, QueryEngine], meta: MetaStore
) -> None:
    inserter, engine = lake
    inserter.insert_rows("events", events(500, days=3, start=datetime(2026, 3, 1)))
    pinned = meta.resolve_snapshot("events")
    sql = "SELECT event, count(*) AS n FROM events GROUP BY event ORDER BY event"
    before = engine.query(sql, snapshot_id=pinned).rows
    inserter.insert_rows("events", events(500, days=3, start=datetime(2026, 3, 1), seed=8))
    assert engine.query(sql, snapshot_id=pinned).rows == before
    assert engine.query(sql).rows != before
    as_of = meta.snapshots("events")[0].committed_at
    assert engine.query(sql, as_of=as_of).rows == before


def test_a_query_pinned_at_a_snapshot_gives_the_same_answer_after_later_merges(
    lake: tuple[Inserter, QueryEngine], meta: MetaStore, objects: LocalObjectStore
) -> None:
    # Given a pinned snapshot over many small files
    inserter, engine = lake
    for seed in range(5):
        inserter.insert_rows("events", events(200, days=2, start=datetime(2026, 3, 1), seed=seed))
    pinned = meta.resolve_snapshot("events")
    sql = "SELECT event, count(*) AS n, sum(length(uid)) AS l FROM events GROUP BY 1 ORDER BY 1"
    before = engine.query(sql, snapshot_id=pinned)

    # When merges replace those files, and more inserts and merges follow
    worker = MergeWorker(meta=meta, objects=objects)
    assert merge_locally(meta=meta, worker=worker, until_quiet=True).count("committed") == 2
    for seed in range(5, 10):
        inserter.insert_rows("events", events(200, days=2, start=datetime(2026, 3, 1), seed=seed))
    merge_locally(meta=meta, worker=worker, until_quiet=True)

    # Then the pinned snapshot still reads its own small files and answers the same
    after = engine.query(sql, snapshot_id=pinned)
    assert after.rows == before.rows
    assert after.plans[0].files_scanned == before.plans[0].files_scanned == 10
    assert engine.query(sql).plans[0].files_scanned < 10
    assert engine.query(sql).rows != before.rows


def test_a_one_day_query_on_a_30_day_table_considers_only_that_days_files(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    inserter, engine = lake
    rows = events(3000, days=30, start=datetime(2026, 4, 1))
    for offset in range(0, len(rows), 1000):
        inserter.insert_rows("events", rows[offset : offset + 1000])
    result = engine.query(
        "SELECT count(*) AS n FROM events WHERE ts >= '2026-04-10' AND ts < '2026-04-11'"
    )
    plan = result.plan("events")
    assert plan.files_considered == plan.files_scanned == 1
    assert plan.paths[0].startswith("events/data/day=2026-04-10/")
    expected = sum(1 for r in rows if str(r["ts"]).startswith("2026-04-10"))
    assert result.rows.to_pylist() == [{"n": expected}]
    # An inclusive BETWEEN on whole days lists both days; the statistics keep the second out.
    two = engine.query(
        "SELECT count(*) AS n FROM events WHERE ts BETWEEN '2026-04-10' AND '2026-04-10 23:59:59'"
    ).plan("events")
    assert two.files_considered == 1


def test_statistics_prune_files_whose_ranges_cannot_match(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    inserter, engine = lake
    for batch in range(4):  # four files in one day, each with its own uid range
        inserter.insert_rows(
            "events",
            [
                {"ts": "2026-05-01T12:00:00Z", "event": "click", "uid": f"u{batch}-{i:03d}"}
                for i in range(100)
            ],
        )
    result = engine.query("SELECT count(*) AS n FROM events WHERE uid = 'u2-050'")
    plan = result.plan("events")
    assert result.rows.to_pylist() == [{"n": 1}]
    assert (plan.files_considered, plan.files_scanned) == (4, 1)
    full = engine.query("SELECT count(*) AS n FROM events").plan("events")
    assert full.files_scanned == 4 and plan.bytes_scanned < full.bytes_scanned / 3


def test_table_and_cte_names_match_in_any_case_as_duckdb_matches_them(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    # Given four files in one day, each with its own uid range
    inserter, engine = lake
    for batch in range(4):
        inserter.insert_rows(
            "events",
            [
                {"ts": "2026-05-01T12:00:00Z", "event": "click", "uid": f"u{batch}-{i:03d}"}
                for i in range(100)
            ],
        )
    # When the table is named in upper case, quoted or not, it is the table (pruned as such)
    result = engine.query("SELECT count(*) AS n FROM EVENTS WHERE uid = 'u2-050'")
    assert result.rows.to_pylist() == [{"n": 1}]
    assert (result.plan("events").files_considered, result.plan("events").files_scanned) == (4, 1)
    quoted = engine.query('SELECT count(*) AS n FROM "Events" e JOIN events f USING (uid)')
    assert quoted.rows.to_pylist() == [{"n": 400}]
    # And a CTE named in another case is the CTE, not a table
    cte = engine.query("WITH Recent AS (SELECT 7 AS n) SELECT n FROM recent")
    assert cte.rows.to_pylist() == [{"n": 7}] and cte.plans == ()


def test_an_explicit_time_range_restricts_the_view(lake: tuple[Inserter, QueryEngine]) -> None:
    inserter, engine = lake
    rows = events(1000, days=10, start=datetime(2026, 6, 1))
    inserter.insert_rows("events", rows)
    window = TimeRange(start=datetime(2026, 6, 3), end=datetime(2026, 6, 5))
    result = engine.query("SELECT count(*) AS n FROM events", time_range={"events": window})
    expected = sum(1 for r in rows if "2026-06-03" <= str(r["ts"])[:10] < "2026-06-05")
    assert result.rows.to_pylist() == [{"n": expected}]
    assert result.plan("events").files_considered == 2


def test_an_empty_table_answers_with_no_rows(lake: tuple[Inserter, QueryEngine]) -> None:
    _, engine = lake
    result = engine.query("SELECT count(*) AS n, max(ts) AS last FROM events")
    assert result.rows.to_pylist() == [{"n": 0, "last": None}]
    assert result.plan("events").snapshot_id == 0


def test_json_columns_and_row_ids_are_queryable(lake: tuple[Inserter, QueryEngine]) -> None:
    inserter, engine = lake
    inserter.insert_rows(
        "events", [{"ts": "2026-05-01", "event": "e", "properties": {"a": {"b": [1, 2]}}}]
    )
    row = engine.query(
        "SELECT properties.a.b[0] AS first, octet_length(_row_id) AS id_bytes FROM events"
    ).rows.to_pylist()
    assert json.loads(row[0]["first"]) == 1 and row[0]["id_bytes"] == 16


ESCAPES = [
    ("SELECT * FROM read_csv('/etc/passwd')", "table function read_csv() is not allowed"),
    ("SELECT * FROM read_text('/etc/hostname')", "table function read_text() is not allowed"),
    ("SELECT * FROM read_parquet('s3://elsewhere/x.parquet')", "read_parquet() is not allowed"),
    ("SELECT * FROM read_parquet('https://example.com/x.parquet')", "is not allowed"),
    ("SELECT * FROM glob('/*')", "table function glob() is not allowed"),
    ("SELECT * FROM duckdb_secrets()", "table function duckdb_secrets() is not allowed"),
    ("SELECT * FROM duckdb_settings()", "table function duckdb_settings() is not allowed"),
    ("FROM duckdb_views", "no table named 'duckdb_views'"),
    ("SELECT * FROM information_schema.tables", "'information_schema.tables' is not a table"),
    ("SELECT * FROM query('SELECT 1')", "table function query() is not allowed"),
    ("SELECT current_setting('home_directory')", "function current_setting() is not allowed"),
    ("SELECT * FROM (DESCRIBE events)", "DESCRIBE, SHOW and SUMMARIZE are not allowed"),
    ("SELECT * FROM '/etc/passwd'", "'/etc/passwd'"),
    ("COPY (SELECT 1) TO '/tmp/icefloe-escape.csv'", "COPY statements are not allowed"),
    ("ATTACH '/tmp/icefloe-escape.db'", "ATTACH statements are not allowed"),
    ("INSTALL httpfs", "INSTALL/LOAD statements are not allowed"),
    ("LOAD httpfs", "INSTALL/LOAD statements are not allowed"),
    ("SET enable_external_access = true", "SET statements are not allowed"),
    ("RESET lock_configuration", "statements are not allowed"),
    ("PRAGMA database_list", "PRAGMA statements are not allowed"),
    ("CREATE TABLE t AS SELECT 1", "CREATE statements are not allowed"),
    ("DROP VIEW events", "DROP statements are not allowed"),
    ("SELECT 1; SELECT 2", "one statement per query"),
    ("SELECT 1; COPY (SELECT 1) TO '/tmp/x.csv'", "one statement per query"),
    ("CALL pragma_version()", "CALL statements are not allowed"),
    ("EXPORT DATABASE '/tmp/icefloe-export'", "statements are not allowed"),
    ("UPDATE events SET event = 'x'", "UPDATE statements are not allowed"),
    ("", "empty"),
    # A PIVOT's source, columns and values are checked as any query's are.
    ("PIVOT (FROM read_csv('/etc/passwd')) ON column0", "table function read_csv() is not allowed"),
    ("PIVOT events ON event || current_setting('home_directory')", "current_setting() is not"),
    ("PIVOT duckdb_settings() ON name", "table function duckdb_settings() is not allowed"),
    ("PIVOT '/etc/passwd' ON column0", "'/etc/passwd'"),
    ("WITH s AS (FROM duckdb_secrets()) PIVOT s ON name", "duckdb_secrets() is not allowed"),
    ("PIVOT information_schema.tables ON table_name", "is not a table of this lake"),
    ("PIVOT events ON event IN (SELECT 'x')", "a PIVOT's IN list may not be a subquery"),
    ("PIVOT events ON event IN ((FROM read_csv('/etc/passwd')))", "non-constant expression"),
    ("CREATE TYPE e AS ENUM ('a'); PIVOT events ON event", "one statement per query, found 2"),
    ("PIVOT events ON event; COPY (SELECT 1) TO '/tmp/icefloe-escape.csv'", "found 2"),
]


@pytest.mark.parametrize(("sql", "message"), ESCAPES, ids=[e[0][:40] for e in ESCAPES])
def test_sandbox_escapes_are_refused_with_a_clear_message(
    lake: tuple[Inserter, QueryEngine], sql: str, message: str
) -> None:
    inserter, engine = lake
    inserter.insert_rows("events", [{"ts": "2026-05-01", "event": "e"}])
    with pytest.raises((InvalidInputError, TableNotFoundError)) as refused:
        engine.query(sql)
    assert message in str(refused.value)
    assert not Path("/tmp/icefloe-escape.csv").exists()


def test_the_sandbox_refuses_other_files_even_next_to_a_lake_table(
    lake: tuple[Inserter, QueryEngine], objects: LocalObjectStore
) -> None:
    inserter, engine = lake
    first = inserter.insert_rows("events", [{"ts": "2026-05-01", "event": "a"}])
    inserter.insert_rows("events", [{"ts": "2026-05-02", "event": "b"}])
    # A file of the head snapshot that the one-day query pruned away is not readable either.
    other = objects.uri(next(p for p in inserter_files(engine) if p not in first.files))
    with pytest.raises(QueryRefusedError, match=r"read_parquet\(\) is not allowed"):
        engine.query(
            f"SELECT count(*) FROM events WHERE ts < '2026-05-02'"
            f" AND (SELECT count(*) FROM read_parquet('{other}')) > 0"
        )
    # Without the escape, the same query reads only its one pruned file.
    plan = engine.query("SELECT count(*) FROM events WHERE ts < '2026-05-02'").plan("events")
    assert plan.paths == first.files


def inserter_files(engine: QueryEngine) -> list[str]:
    return list(engine.query("SELECT 1 AS x FROM events LIMIT 0").plan("events").paths)


def test_bad_sql_and_unknown_tables_give_duckdbs_message(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    _, engine = lake
    with pytest.raises(QueryRefusedError, match="syntax error"):
        engine.query("SELEC 1")
    with pytest.raises(QueryFailedError, match="nope"):
        engine.query("SELECT nope FROM events")
    with pytest.raises(TableNotFoundError, match="missing"):
        engine.query("SELECT * FROM missing")
    with pytest.raises(SnapshotNotFoundError):
        engine.query("SELECT * FROM events", snapshot_id=42)
    assert engine.query("WITH q AS (SELECT 1 AS one) SELECT one FROM q").rows.to_pylist() == [
        {"one": 1}
    ]


def test_a_query_over_its_time_limit_is_interrupted(
    meta: MetaStore, objects: LocalObjectStore, lake: tuple[Inserter, QueryEngine]
) -> None:
    engine = QueryEngine(meta=meta, objects=objects, limits=QueryLimits(timeout_s=0.3))
    with pytest.raises(QueryTimeoutError, match="time limit"):
        engine.query("SELECT count(*) FROM range(10000000000) t WHERE hash(t.range) % 7 = 3")


def test_a_range_past_the_data_lists_no_files(lake: tuple[Inserter, QueryEngine]) -> None:
    inserter, engine = lake
    inserter.insert_rows("events", [{"ts": "2026-05-01", "event": "a"}])
    result = engine.query("SELECT count(*) AS n FROM events WHERE ts >= '2030-01-01'")
    assert result.rows.to_pylist() == [{"n": 0}]
    assert result.plan("events").files_considered == 0


@pytest.fixture
def tenants(meta: MetaStore, objects: LocalObjectStore) -> QueryEngine:
    meta.create_table(
        TableSpec.create(
            name="shared_events",
            schema="ts TIMESTAMP NOT NULL, tenant VARCHAR NOT NULL, secret VARCHAR",
            partition_by="tenant, day(ts)",
            tenant_column="tenant",
        )
    )
    inserter = Inserter(meta=meta, objects=objects)
    inserter.insert_rows(
        "shared_events",
        [
            {"ts": f"2026-05-0{1 + i % 3}", "tenant": tenant, "secret": f"{tenant}-{i}"}
            for tenant in ("a", "b", "o'brien")
            for i in range(10)
        ],
    )
    inserter.close()
    return QueryEngine(meta=meta, objects=objects)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT secret FROM shared_events",
        "SELECT secret FROM shared_events WHERE tenant = 'b' OR 1=1",
        "SELECT secret FROM shared_events WHERE tenant <> 'a'",
        "SELECT s.secret FROM shared_events s JOIN shared_events t ON true",
        "WITH x AS (SELECT * FROM shared_events) SELECT secret FROM x UNION ALL SELECT 'z'",
        'SELECT secret FROM SHARED_EVENTS UNION ALL SELECT secret FROM "Shared_Events"',
    ],
)
def test_a_tenant_never_sees_another_tenants_rows(tenants: QueryEngine, sql: str) -> None:
    for tenant in ("a", "o'brien"):
        result = tenants.query(sql, tenant=tenant)
        secrets = {s for s in result.rows.column(0).to_pylist() if s != "z"}
        assert secrets <= {f"{tenant}-{i}" for i in range(10)}
        plan = result.plan("shared_events")
        assert all(f"tenant={tenant.replace(chr(39), '%27')}/" in p for p in plan.paths)


def test_a_tenant_of_a_typed_column_is_the_value_the_column_compares_equal(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    # Given tenants 5 and 50 in an INTEGER tenant column
    meta.create_table(
        TableSpec.create(
            name="numbered",
            schema="ts TIMESTAMP NOT NULL, tenant INTEGER NOT NULL, secret VARCHAR",
            partition_by="tenant, day(ts)",
            tenant_column="tenant",
        )
    )
    inserter = Inserter(meta=meta, objects=objects)
    inserter.insert_rows(
        "numbered",
        [
            {"ts": "2026-05-01", "tenant": t, "secret": f"{t}-{i}"}
            for t in (5, 50)
            for i in range(3)
        ],
    )
    inserter.close()
    engine = QueryEngine(meta=meta, objects=objects)
    # When tenant 5 is named as the column's value would be written in SQL, any way
    for tenant in ("5", "05", " 5"):
        result = engine.query("SELECT secret FROM numbered ORDER BY 1", tenant=tenant)
        # Then it reads tenant 5's files and rows, as WHERE tenant = '05' would
        assert result.rows.column(0).to_pylist() == ["5-0", "5-1", "5-2"], tenant
        assert all("tenant=5/" in p for p in result.plan("numbered").paths)
    # And a tenant that is no INTEGER is refused, naming it
    with pytest.raises(QueryRefusedError, match=r"tenant 'five' is not a value of .* INTEGER"):
        engine.query("SELECT secret FROM numbered", tenant="five")


def test_a_tenant_query_cannot_read_a_table_without_a_tenant_column(
    tenants: QueryEngine, lake: tuple[Inserter, QueryEngine]
) -> None:
    with pytest.raises(QueryRefusedError, match="no tenant column"):
        tenants.query("SELECT * FROM shared_events, events", tenant="a")


PIVOTS = [
    "SELECT * FROM (PIVOT events ON event USING count(*) GROUP BY uid) ORDER BY uid",
    "PIVOT events ON event USING count(*), max(ts) GROUP BY uid ORDER BY uid",
    "PIVOT (SELECT event, uid FROM events) ON event, uid USING count(*)",
    "WITH e AS (FROM events WHERE ts < '2026-03-02') PIVOT e ON uid USING count(*) GROUP BY event"
    " ORDER BY event",
    "SELECT * FROM (PIVOT events ON event USING count(*) GROUP BY uid) WHERE uid = 'u1'",
    "PIVOT events ON event IN ('page_load', 'nope') USING count(*) GROUP BY uid ORDER BY uid",
    "SELECT * FROM events PIVOT (count(*) FOR event IN ('page_load') GROUP BY uid) ORDER BY uid",
    "SELECT * FROM (UNPIVOT (SELECT uid, event FROM events) ON uid, event INTO NAME k VALUE v)"
    " ORDER BY ALL",
]


@pytest.mark.parametrize("sql", PIVOTS)
@pytest.mark.parametrize("isolation", ["in_process", "child_process"])
def test_pivot_and_unpivot_answer_as_duckdb_does_over_the_same_rows(
    meta: MetaStore,
    objects: LocalObjectStore,
    lake: tuple[Inserter, QueryEngine],
    tmp_path: Path,
    sql: str,
    isolation: str,
) -> None:
    # Given a table's rows, in two files, and the same rows in DuckDB
    inserter, _ = lake
    rows = events(300, days=3, start=datetime(2026, 3, 1))
    inserter.insert_rows("events", rows[:150])
    inserter.insert_rows("events", rows[150:])
    source = tmp_path / "input.json"
    source.write_bytes(orjson.dumps(rows))
    direct = duckdb.connect()
    direct.execute(
        "CREATE TABLE events AS SELECT * FROM read_json(?, columns = {'ts': 'TIMESTAMP',"
        " 'event': 'VARCHAR', 'uid': 'VARCHAR', 'properties': 'JSON'})",
        [str(source)],
    )
    expected = direct.execute(sql).to_arrow_table()
    engine = QueryEngine(meta=meta, objects=objects, isolation=isolation)  # type: ignore[arg-type]
    try:
        # When the lake answers it, twice (the second time on the kept database)
        for _ in range(2):
            result = engine.query(sql)
            # Then the answer is DuckDB's, columns and rows
            assert result.rows.column_names == expected.column_names
            assert result.rows.to_pylist() == expected.to_pylist()
        assert len(expected) > 0 and expected.num_columns > 1
        assert engine.query("SELECT count(*) AS n FROM events").rows.to_pylist() == [{"n": 300}]
    finally:
        engine.close()


def test_a_pivot_over_values_from_the_data_reads_every_file_it_needs(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    # Given one file per day
    inserter, engine = lake
    inserter.insert_rows("events", events(300, days=3, start=datetime(2026, 3, 1)))
    # When a filter outside the PIVOT names one user: the PIVOT's columns are every event of
    # the table, so the files that user has no row in are read too
    sql = "SELECT * FROM (PIVOT events ON event USING count(*) GROUP BY uid) WHERE uid = 'u1'"
    result = engine.query(sql)
    assert result.plan("events").files_scanned == result.plan("events").files_considered == 3
    # And a PIVOT that lists its values is pruned as any query
    listed = sql.replace("ON event", "ON event IN ('page_load')").replace("uid)", "uid, ts)")
    day = engine.query(listed + " AND ts < '2026-03-02'").plan("events")
    assert day.files_scanned == 1


def test_a_tenants_pivot_takes_its_columns_from_its_own_rows(tenants: QueryEngine) -> None:
    # The columns of a PIVOT over values from the data are those values: only the tenant's
    for tenant in ("a", "o'brien"):
        result = tenants.query(
            "PIVOT (SELECT secret FROM shared_events) ON secret USING count(*)", tenant=tenant
        )
        assert set(result.rows.column_names) == {f"{tenant}-{i}" for i in range(10)}
        assert result.rows.to_pylist() == [{f"{tenant}-{i}": 1 for i in range(10)}]


def test_a_bare_pivot_groups_by_every_other_column_of_the_view(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    inserter, engine = lake
    rows = events(300, days=3, start=datetime(2026, 3, 1))
    inserter.insert_rows("events", rows)
    result = engine.query("PIVOT events ON event USING count(*)").rows
    # One group per row (the view's columns include each row's _row_id), one column per event
    kinds = sorted({str(r["event"]) for r in rows})
    assert result.column_names == ["ts", "uid", "properties", "_row_id", *kinds]
    counts = [[row[k] for k in kinds] for row in result.to_pylist()]
    assert len(counts) == 300 and all(sorted(c) == [0] * (len(kinds) - 1) + [1] for c in counts)


def test_values_arrow_cannot_hold_are_answered_as_duckdbs_text(
    lake: tuple[Inserter, QueryEngine],
) -> None:
    # (DuckDB's Arrow export drops a TIMETZ's offset, gives BIT and BIGNUM as internal bytes
    # and a UHUGEINT past 2^127 as a negative decimal)
    _, engine = lake
    result = engine.query(
        "SELECT t, [t] AS l, {'BIT': b, 'u': u} AS s, MAP {b: 1} AS m, 7 AS n FROM (VALUES"
        " ('10:00:00+02'::TIMETZ, '101'::BIT, 340282366920938463463374607431768211455::UHUGEINT),"
        " ('23:30:00-05:30'::TIMETZ, '0'::BIT, 1::UHUGEINT)) v(t, b, u) ORDER BY n, t DESC"
    ).rows
    assert result.column_names == ["t", "l", "s", "m", "n"]
    assert result.to_pylist() == [
        {
            "t": "23:30:00-05:30",
            "l": ["23:30:00-05:30"],
            "s": {"BIT": "0", "u": "1"},
            "m": [("0", 1)],
            "n": 7,
        },
        {
            "t": "10:00:00+02",
            "l": ["10:00:00+02"],
            "s": {"BIT": "101", "u": "340282366920938463463374607431768211455"},
            "m": [("101", 1)],
            "n": 7,
        },
    ]
