"""The front door (icefloe.connect): every kind of insert, and the table lifecycle, on a lake
of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import icefloe
from icefloe.client import IcefloeLake
from icefloe.errors import TableExistsError, TableNotFoundError

pytestmark = pytest.mark.integration


@pytest.fixture
def lake(tmp_path: Path, postgres_dsn: str, schema_name: str) -> Iterator[IcefloeLake]:
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as opened:
        yield opened


def test_rows_arrow_and_files_go_in_and_the_lifecycle_works(
    lake: IcefloeLake, tmp_path: Path
) -> None:
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
