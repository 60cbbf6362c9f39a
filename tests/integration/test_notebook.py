"""The lake's notebook views give the same snapshot-pinned tables to a local DuckDB and to
pandas."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from icefloe.ingest import Inserter
from icefloe.lake import Lake
from icefloe.settings import load_settings
from icefloe.spec import TableSpec

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(postgres_dsn: str, schema_name: str, tmp_path: Path) -> Iterator[tuple[Lake, Inserter]]:
    settings = load_settings(
        {
            "ICEFLOE_HOME": str(tmp_path),
            "ICEFLOE_DATABASE_URL": postgres_dsn,
            "ICEFLOE_DATABASE_SCHEMA": schema_name,
        }
    )
    opened = Lake.open(settings)
    opened.meta.migrate()
    opened.meta.create_table(
        TableSpec.create(
            name="events", schema="ts TIMESTAMP NOT NULL, event VARCHAR", partition_by="day(ts)"
        )
    )
    yield opened, opened.inserter()
    opened.close()


def test_views_macro_relations_and_file_urls_agree(lake: tuple[Lake, Inserter]) -> None:
    client, inserter = lake
    inserter.insert_rows(
        "events", [{"ts": f"2026-02-{d:02d}T12:00:00", "event": "e"} for d in range(1, 11)]
    )
    con = client.duckdb()
    assert con.sql("SELECT count(*) FROM events").fetchone() == (10,)
    between = con.sql("SELECT count(*) FROM events_between('2026-02-03', '2026-02-05')")
    assert between.fetchone() == (2,)

    relation = client.relation("events", start=datetime(2026, 2, 3), end=datetime(2026, 2, 5))
    assert relation.aggregate("count(*)").fetchone() == (2,)

    urls = client.file_urls("events", start=datetime(2026, 2, 3), end=datetime(2026, 2, 5))
    assert len(urls) == 2 and all(Path(u).is_absolute() for u in urls)
    assert sum(pq.read_metadata(u).num_rows for u in urls) == 2


def test_connect_pins_each_table_at_its_snapshot(lake: tuple[Lake, Inserter]) -> None:
    client, inserter = lake
    inserter.insert_rows("events", [{"ts": "2026-02-01", "event": "a"}])
    inserter.insert_rows("events", [{"ts": "2026-02-01", "event": "b"}])
    pinned = client.duckdb(snapshots={"events": 1})
    assert pinned.sql("SELECT list(event) FROM events").fetchone() == (["a"],)
    assert client.duckdb().sql("SELECT count(*) FROM events").fetchone() == (2,)
