"""Nested events end to end: STRUCT, MAP and lists of structs go in by every input path, and
every reader answers what plain DuckDB answers over the same events, after each step: inserts,
a merge, Spark compaction, deletes on a struct leaf and a map value, a rollback, time travel, the
Spark reader, and Iceberg publication read by pyiceberg and DuckDB's iceberg_scan."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.iceberg import local_catalog
from icefloe.lake import Lake
from icefloe.spark import read_table
from icefloe.spec import TableSpec
from support.engines import duckdb_with_iceberg, spark_compact
from support.nested_answers import canonical, plain_value, spark_value

SCHEMA = (
    "ts TIMESTAMP NOT NULL, event VARCHAR,"
    ' context STRUCT(ip VARCHAR, "order" INTEGER, page STRUCT(url VARCHAR, title VARCHAR),'
    " screen STRUCT(width INTEGER, density DOUBLE)),"
    " tags VARCHAR[], items STRUCT(sku VARCHAR, qty INTEGER)[], attrs MAP(VARCHAR, BIGINT)"
)
COLUMNS = ("ts", "event", "context", "tags", "items", "attrs")
START = datetime(2026, 3, 1)
# Questions asked of icefloe and of plain DuckDB after every step: whole rows, and each way of
# reaching inside a nested value (the ones DuckDB pushes into a scan, and the ones it cannot).
QUESTIONS = [
    "SELECT ts, event, context, tags, items, attrs FROM ev",
    "SELECT event, context.page.url AS url, count(*) AS n FROM ev GROUP BY ALL",
    "SELECT ts, context['page']['title'] FROM ev WHERE context.page.url = '/p3'",
    "SELECT ts FROM ev WHERE struct_extract(struct_extract(context, 'screen'), 'width') > 900",
    'SELECT ts, context."order" FROM ev WHERE context."order" BETWEEN 3 AND 7',
    "SELECT ts FROM ev WHERE context.page IS NULL OR context IS NULL",
    "SELECT ts, attrs['k1'] FROM ev WHERE attrs['k1'] IS NOT NULL",
    "SELECT ts, items[1].sku, len(items) FROM ev WHERE len(items) > 1",
    "SELECT ts FROM ev WHERE list_contains(tags, 'b')",
]


def _maybe(rng: random.Random, value: Any, none: float = 0.15) -> Any:
    return None if rng.random() < none else value


def events(seed: int, count: int) -> list[dict[str, Any]]:
    """Events as a client sends them: nested parts absent, null, empty or full."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        context: dict[str, Any] = {}
        if rng.random() < 0.8:
            context["ip"] = _maybe(rng, f"10.0.0.{rng.randrange(9)}")
            context["order"] = _maybe(rng, rng.randrange(12))
            if rng.random() < 0.8:
                context["page"] = _maybe(
                    rng,
                    {"url": _maybe(rng, f"/p{rng.randrange(6)}"), "title": f"T{rng.randrange(3)}"},
                )
            if rng.random() < 0.5:
                context["screen"] = {"width": rng.choice([320, 1024, 1920]), "density": 2.0}
        event: dict[str, Any] = {
            "ts": (START + timedelta(minutes=rng.randrange(3 * 1440))).isoformat(),
            "event": rng.choice(["view", "click", "buy"]),
        }
        if context or rng.random() < 0.5:
            event["context"] = context or None
        event["tags"] = rng.choice([None, [], ["a"], ["b", None, "c"]])
        event["items"] = rng.choice(
            [None, [], [{"sku": "s1", "qty": 1}], [{"sku": "s2"}, {"sku": None, "qty": 3}, None]]
        )
        event["attrs"] = rng.choice([None, {}, {"k1": rng.randrange(10)}, {"k1": 1, "k2": -4}])
        out.append({k: v for k, v in event.items() if v is not None or rng.random() < 0.5})
    return out


def _arrow_schema() -> pa.Schema:
    spec = TableSpec.create(name="ev", schema=SCHEMA)
    items = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in spec.columns)
    return duckdb.sql(f"SELECT {items}").to_arrow_table().schema


def as_arrow(rows: list[dict[str, Any]]) -> pa.Table:
    typed = [{**r, "ts": datetime.fromisoformat(r["ts"])} for r in rows]
    return pa.Table.from_pylist(typed, schema=_arrow_schema())


class Oracle:
    """Plain DuckDB over the events: what every answer must be."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def answer(self, sql: str, rows: list[dict[str, Any]] | None = None) -> list[str]:
        con = duckdb.connect()
        con.register("ev", as_arrow(self.rows if rows is None else rows))
        return canonical(con.execute(sql).to_arrow_table())


def check(lake: Lake, oracle: Oracle, *, snapshot_id: int | None = None) -> None:
    for sql in QUESTIONS:
        got = canonical(lake.query(sql, snapshot_id=snapshot_id))
        assert got == oracle.answer(sql), sql
    assert len(oracle.rows) > 0


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def test_nested_events_round_trip_through_every_path_and_reader(
    lake: Lake, spark: Any, tmp_path: Path
) -> None:
    lake.create_table(
        "ev", schema=SCHEMA, partition_by="day(ts)", sort_by="event, ts", publish="iceberg"
    )
    oracle = Oracle()

    # Insert by each input path: Python rows, NDJSON, a JSON array, Arrow, Parquet
    batches = [events(seed, 40) for seed in range(6)]
    lake.insert("ev", batches[0])
    ndjson = tmp_path / "b1.ndjson"
    ndjson.write_text("".join(json.dumps(e) + "\n" for e in batches[1]))
    lake.insert("ev", ndjson)
    array = tmp_path / "b2.json"
    array.write_text(json.dumps(batches[2]))
    lake.insert("ev", array)
    lake.insert("ev", as_arrow(batches[3]))
    parquet = tmp_path / "b4.parquet"
    pq.write_table(as_arrow(batches[4]), parquet)
    lake.insert("ev", parquet)
    for batch in batches[:5]:
        oracle.rows += batch
    check(lake, oracle)
    after_inserts = lake.table("ev").head_snapshot_id
    rows_after_inserts = list(oracle.rows)

    # A merge
    files_before = len(lake.meta.files("ev"))
    assert lake.merge("ev").count("committed") > 0
    assert len(lake.meta.files("ev")) < files_before
    check(lake, oracle)

    # Spark compaction of what came after the merge
    lake.insert("ev", batches[5])
    lake.insert("ev", events(99, 30))
    oracle.rows += batches[5] + events(99, 30)
    result = spark_compact(lake, spark, "ev")
    assert result.count("committed") > 0
    check(lake, oracle)

    # Deletes naming a struct leaf and a map value
    before_deletes = lake.table("ev").head_snapshot_id
    rows_before_deletes = list(oracle.rows)
    deleted = lake.delete("ev", "context.page.url = '/p1'")
    kept = [
        r for r in oracle.rows if ((r.get("context") or {}).get("page") or {}).get("url") != "/p1"
    ]
    assert deleted.rows_deleted == len(oracle.rows) - len(kept) > 0
    oracle.rows = kept
    check(lake, oracle)
    lake.delete("ev", "attrs['k2'] = -4")
    oracle.rows = [r for r in oracle.rows if (r.get("attrs") or {}).get("k2") != -4]
    check(lake, oracle)

    # A rollback to before the deletes, and time travel to after the inserts
    lake.rollback("ev", to_snapshot=before_deletes)
    oracle.rows = rows_before_deletes
    check(lake, oracle)
    for sql in QUESTIONS:
        then = canonical(lake.query(sql, snapshot_id=after_inserts))
        assert then == oracle.answer(sql, rows_after_inserts), sql

    # The Spark reader
    frame = read_table(spark, "ev", runtime=lake.runtime)
    spark_rows = [tuple(spark_value(row[c]) for c in COLUMNS) for row in frame.collect()]
    assert sorted(map(repr, spark_rows)) == oracle.answer(f"SELECT {', '.join(COLUMNS)} FROM ev")

    # Iceberg: pyiceberg and iceberg_scan read the published head
    published = lake.publish_iceberg("ev", catalog=local_catalog(tmp_path / "iceberg"))
    table = local_catalog(tmp_path / "iceberg").load_table(("icefloe", "ev"))
    expected = oracle.answer(f"SELECT {', '.join(COLUMNS)} FROM ev")
    via_pyiceberg = canonical(table.scan().to_arrow().select(list(COLUMNS)))
    # pyiceberg 0.12 reads a NULL list of structs as [] (apache/iceberg-python#3833): the
    # answer is exact, or differs by exactly that
    null_items_as_empty = oracle.answer(
        f"SELECT {', '.join(c if c != 'items' else 'coalesce(items, []) AS items' for c in COLUMNS)}"
        " FROM ev"
    )
    assert via_pyiceberg in (expected, null_items_as_empty)
    con = duckdb_with_iceberg()
    scanned = con.execute(
        f"SELECT {', '.join(COLUMNS)} FROM iceberg_scan('{published.metadata_location}')"
    ).to_arrow_table()
    assert canonical(scanned) == expected


def _versions(seed: int, keys: int, start_minute: int) -> list[dict[str, Any]]:
    """One event per key, each at a distinct minute after ``start_minute``."""
    rows = events(seed, keys)
    for n, row in enumerate(rows):
        row["event"] = f"k{n}"
        row["ts"] = (START + timedelta(minutes=start_minute + n)).isoformat()
    return rows


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_replace_and_aggregate_merges_keep_nested_values_whole(
    lake: Lake, spark: Any, engine: str
) -> None:
    lake.create_table(
        "ev", schema=SCHEMA, partition_by="day(ts)", merge="replace(event; version=ts)"
    )
    lake.create_table(
        "agg",
        schema=SCHEMA,
        partition_by="day(ts)",
        merge="aggregate(event; ts:max, context:any, tags:any, items:any, attrs:any)",
    )
    inserted: list[dict[str, Any]] = []
    for batch in range(4):
        rows = _versions(seed=batch, keys=12, start_minute=batch * 20)
        inserted += rows
        lake.insert("ev", rows)
        lake.insert("agg", rows)
    if engine == "duckdb":
        lake.merge()
    else:
        for table in ("ev", "agg"):
            spark_compact(lake, spark, table)
    assert all(len(lake.meta.files(t)) == 1 for t in ("ev", "agg"))
    oracle = Oracle()
    oracle.rows = inserted
    whole = f"SELECT {', '.join(COLUMNS)} FROM ev"
    newest = whole + " QUALIFY row_number() OVER (PARTITION BY event ORDER BY ts DESC) = 1"
    assert canonical(lake.query(whole)) == oracle.answer(newest)
    # an aggregate keeps, per key, one whole nested value of that key's rows
    kept = lake.query(f"SELECT {', '.join(COLUMNS)} FROM agg").to_pylist(maps_as_pydicts="strict")
    assert len(kept) == 12
    for row in kept:
        theirs = [as_arrow([r]).to_pylist(maps_as_pydicts="strict")[0] for r in inserted
                  if r["event"] == row["event"]]  # fmt: skip
        assert row["ts"] == max(r["ts"] for r in theirs)
        for column in ("context", "tags", "items", "attrs"):
            assert row[column] in [r[column] for r in theirs], column


def test_nested_columns_renamed_added_and_dropped_read_by_id_in_duckdb_and_spark(
    lake: Lake, spark: Any
) -> None:
    lake.create_table("ev", schema=SCHEMA, partition_by="day(ts)")
    before = events(1, 60)
    lake.insert("ev", before)
    lake.alter_table(
        "ev",
        rename_columns={"context": "ctx"},
        add_columns=["extra STRUCT(a INTEGER, b VARCHAR[])"],
        drop_columns=["items"],
    )
    after = events(2, 40)
    lake.insert(
        "ev",
        [
            {"ts": e["ts"], "ctx": e.get("context"), "extra": {"a": n, "b": ["x"]}}
            for n, e in enumerate(after)
        ],
    )
    # Old files read the renamed column by id and the added one as NULL
    contexts = [r["context"] for r in as_arrow([*before, *after]).to_pylist()]
    extras = [None] * len(before) + [{"a": n, "b": ["x"]} for n in range(len(after))]
    expected = sorted(repr(pair) for pair in zip(contexts, extras, strict=True))
    duck = lake.query("SELECT ctx, extra FROM ev").to_pylist()
    assert sorted(repr((r["ctx"], r["extra"])) for r in duck) == expected
    (count,) = lake.query("SELECT count(*) AS n FROM ev WHERE ctx.page.url = '/p2'").to_pylist()
    assert count["n"] == sum(1 for c in contexts if c and c["page"] and c["page"]["url"] == "/p2")
    # Spark reads the same, layout group by layout group
    frame = read_table(spark, "ev", runtime=lake.runtime)
    via_spark = sorted(
        repr((spark_value(r["ctx"]), spark_value(r["extra"]))) for r in frame.collect()
    )
    assert via_spark == sorted(repr((plain_value(r["ctx"]), plain_value(r["extra"]))) for r in duck)
