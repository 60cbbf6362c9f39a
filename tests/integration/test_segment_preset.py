"""The Segment preset takes a Segment Spec corpus by each JSON input path (dicts, a JSON array,
NDJSON), and questions on its typed context's nested leaves, its JSON fields and the overflow
column answer what plain DuckDB answers reading the same events with read_json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from icefloe.ingest import Inserter
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.spec.presets import preset
from icefloe.spec.table_spec import TableSpec
from icefloe.storage import LocalObjectStore
from support.segment_corpus import segment_events

CART = "https://shop.example/cart"
# (question to the preset table, the same question to plain DuckDB over the raw events, where
# ``context`` is the raw JSON object).
QUESTIONS = [
    (
        "SELECT context.page.url AS url, count(*) AS n FROM seg GROUP BY 1",
        "SELECT context->>'$.page.url' AS url, count(*) AS n FROM raw GROUP BY 1",
    ),
    (
        "SELECT type, event, context.os.name, context.device.type, count(*) FROM seg GROUP BY ALL",
        "SELECT type, event, context->>'$.os.name', context->>'$.device.type', count(*)"
        " FROM raw GROUP BY ALL",
    ),
    (
        "SELECT context.campaign.source, context.campaign.medium, context.campaign.term,"
        " count(*) FROM seg GROUP BY ALL",
        "SELECT context->>'$.campaign.source', context->>'$.campaign.medium',"
        " context->>'$.campaign.term', count(*) FROM raw GROUP BY ALL",
    ),
    (
        f"SELECT messageId, context.page.path FROM seg WHERE context.page.url = '{CART}'",
        f"SELECT messageId, context->>'$.page.path' FROM raw WHERE context->>'$.page.url' = '{CART}'",
    ),
    (
        "SELECT context.screen.width, round(sum(context.screen.density), 6),"
        " round(avg(context.location.longitude), 6),"
        " count(context.network.wifi) FILTER (WHERE context.network.wifi) FROM seg GROUP BY 1",
        "SELECT CAST(context->'$.screen.width' AS INTEGER),"
        " round(sum(CAST(context->'$.screen.density' AS DOUBLE)), 6),"
        " round(avg(CAST(context->'$.location.longitude' AS DOUBLE)), 6),"
        " count(*) FILTER (WHERE CAST(context->'$.network.wifi' AS BOOLEAN)) FROM raw GROUP BY 1",
    ),
    (
        "SELECT context.app.build->>'$', context.device.adTrackingEnabled, context.active,"
        " count(*) FROM seg GROUP BY ALL",
        "SELECT context->>'$.app.build', CAST(context->'$.device.adTrackingEnabled' AS BOOLEAN),"
        " CAST(context->'$.active' AS BOOLEAN), count(*) FROM raw GROUP BY ALL",
    ),
    (
        "SELECT context.traits->>'$.email', count(*) FROM seg GROUP BY 1",
        "SELECT context->>'$.traits.email', count(*) FROM raw GROUP BY 1",
    ),
    (
        "SELECT event, CAST(sum(json_array_length(properties->'$.products')) AS BIGINT),"
        " list_sort(list(properties->>'$.products[0].product_id')) FROM seg GROUP BY 1",
        "SELECT event, CAST(sum(json_array_length(properties->'$.products')) AS BIGINT),"
        " list_sort(list(properties->>'$.products[0].product_id')) FROM raw GROUP BY 1",
    ),
    (
        # Keys the Spec does not define are kept in extra at their path.
        "SELECT messageId, extra->>'$.context.instance.id', extra->>'$.context.page.scrollDepth',"
        " extra->>'$.traits.email', extra->>'$.name' FROM seg",
        "SELECT messageId, context->>'$.instance.id', context->>'$.page.scrollDepth',"
        " traits->>'$.email', name FROM raw",
    ),
    (
        "SELECT date_trunc('day', timestamp), count(*), count(userId), count(context)"
        " FROM seg GROUP BY 1",
        "SELECT date_trunc('day', timestamp), count(*), count(userId),"
        " count(*) FILTER (WHERE context IS NOT NULL AND json_type(context) <> 'NULL')"
        " FROM raw GROUP BY 1",
    ),
]


def _canonical(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(row) for row in rows)


@pytest.fixture
def corpus() -> list[dict[str, Any]]:
    return segment_events(7, 900)


def _plain(events: list[dict[str, Any]], tmp_path: Path) -> duckdb.DuckDBPyConnection:
    path = tmp_path / "raw.ndjson"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE raw AS SELECT * FROM read_json(?, format='newline_delimited', columns={"
        "messageId: 'VARCHAR', timestamp: 'TIMESTAMP', type: 'VARCHAR', event: 'VARCHAR',"
        " userId: 'VARCHAR', anonymousId: 'VARCHAR', properties: 'JSON', context: 'JSON',"
        " traits: 'JSON', name: 'VARCHAR'})",
        [str(path)],
    )
    return con


def test_corpus_goes_in_by_each_json_path_and_answers_as_plain_duckdb(
    meta: MetaStore, tmp_path: Path, corpus: list[dict[str, Any]]
) -> None:
    objects = LocalObjectStore(tmp_path / "warehouse")
    meta.create_table(preset("segment", name="seg"))
    inserter = Inserter(meta=meta, objects=objects)
    third = len(corpus) // 3
    inserter.insert_rows("seg", corpus[:third])
    inserter.insert_bytes("seg", json.dumps(corpus[third : 2 * third]).encode(), fmt="json")
    ndjson = "".join(json.dumps(event) + "\n" for event in corpus[2 * third :])
    inserter.insert_bytes("seg", ndjson.encode(), fmt="ndjson")
    inserter.close()
    engine = QueryEngine(meta=meta, objects=objects)
    plain = _plain(corpus, tmp_path)
    try:
        for ours, theirs in QUESTIONS:
            rows = engine.query(ours).rows
            got = list(zip(*(column.to_pylist() for column in rows.columns), strict=True))
            want = plain.execute(theirs).fetchall()
            assert _canonical(got) == _canonical(want), ours
            assert len(want) > 1 or want[0][-1], ours  # each question has something to say
    finally:
        engine.close()
        plain.close()


def test_corpus_has_the_parts_real_payloads_vary_in(corpus: list[dict[str, Any]]) -> None:
    contexts = [e["context"] for e in corpus if e.get("context")]
    assert any("context" in e and e["context"] is None for e in corpus)
    assert {type(c["app"]["build"]) for c in contexts if "app" in c} == {int, str}
    assert any("instance" in c for c in contexts)
    assert any("scrollDepth" in c.get("page", {}) for c in contexts)
    assert any(e.get("properties", {}).get("products") for e in corpus)
    assert {e["type"] for e in corpus} == {"track", "page", "identify", "screen"}
    assert segment_events(7, 900) == corpus  # deterministic per seed


def test_a_preset_is_applied_at_create_only(meta: MetaStore) -> None:
    """A table created from the earlier form of the preset (``context JSON``) keeps its spec: the
    meta store holds each table's own spec, and nothing reads the preset after create."""
    earlier = TableSpec.create(
        name="old",
        schema="messageId VARCHAR NOT NULL, timestamp TIMESTAMP NOT NULL, type VARCHAR NOT NULL,"
        " event VARCHAR, userId VARCHAR, anonymousId VARCHAR, properties JSON, context JSON,"
        " extra JSON",
        partition_by="day(timestamp)",
        sort_by="event, timestamp",
        merge="replace(messageId)",
        extra_fields="keep",
        overflow_column="extra",
    )
    meta.create_table(earlier)
    meta.create_table(preset("segment", name="new"))
    assert meta.get_table("old").spec.source_types["context"] == "JSON"
    assert meta.get_table("new").spec.source_types["context"].startswith("STRUCT(")
