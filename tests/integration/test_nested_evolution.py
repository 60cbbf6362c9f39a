"""Schema changes inside a struct, by field id (the issue's four alters): a field added, one
renamed, one dropped and then added again under its old name with another type, a leaf
widened. Files of every version are read as the current schema by DuckDB, by pruning, by the
Spark reader and by Iceberg readers; a pinned snapshot keeps its schema; a merge rewrites old
files into the current layout."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from icefloe.errors import SpecError
from icefloe.iceberg import local_catalog
from icefloe.lake import Lake
from icefloe.spark import read_table
from icefloe.spec import SizeTargets
from support.engines import duckdb_with_iceberg, spark_compact

SCHEMA = (
    "ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR),"
    " screen STRUCT(width INTEGER), campaign STRUCT(source VARCHAR))"
)
START = datetime(2026, 3, 1)


@pytest.fixture
def lake(connected_lake: Lake) -> Lake:
    return connected_lake


def _ts(n: int) -> str:
    return (START + timedelta(minutes=n)).isoformat()


def first(n: int) -> dict[str, Any]:
    """An event of version 1."""
    return {
        "ts": _ts(n),
        "context": None
        if n % 7 == 0
        else {
            "ip": f"10.0.0.{n % 4}",
            "page": None if n % 5 == 0 else {"url": f"/p{n % 3}"},
            "screen": {"width": 300 + n},
            "campaign": {"source": f"s{n % 2}"},
        },
    }


def second(n: int) -> dict[str, Any]:
    """An event of version 2: client_ip, page.title, a wide width, no campaign."""
    return {
        "ts": _ts(n),
        "context": {
            "client_ip": f"10.0.1.{n % 4}",
            "page": {"url": f"/p{n % 3}", "title": f"T{n % 2}"},
            "screen": {"width": 2**40 + n},
        },
    }


def third(n: int) -> dict[str, Any]:
    """An event of version 4: campaign is back, as a VARCHAR."""
    return {"ts": _ts(n), "context": {"client_ip": "10.0.2.1", "campaign": f"c{n % 3}"}}


def as_current(event: dict[str, Any], version: int) -> tuple[str, Any]:
    """What the current schema (version 4) shows of an event inserted at ``version``: page.title
    was added at 2, dropped at 3 and added again at 4, so the titles of version 2 are gone."""
    old = event["context"]
    if old is None:
        return event["ts"], None
    page = old.get("page")
    return event["ts"], {
        "client_ip": old.get("ip") if version == 1 else old.get("client_ip"),
        "page": None if page is None else {"url": page.get("url"), "title": None},
        "screen": None if "screen" not in old else {"width": old["screen"]["width"]},
        "campaign": old.get("campaign") if version == 4 else None,
    }


def rows(table: Any) -> list[str]:
    return sorted(repr((r["ts"].isoformat(), r["context"])) for r in table.to_pylist())


def expected(events: list[tuple[dict[str, Any], int]]) -> list[str]:
    return sorted(repr(as_current(e, v)) for e, v in events)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_the_issue_s_alters_inside_a_struct_read_by_id_everywhere(
    lake: Lake, spark: Any, tmp_path: Path, engine: str
) -> None:
    lake.create_table(
        "ev",
        schema=SCHEMA,
        partition_by="day(ts)",
        sort_by="context.ip",
        publish="iceberg",
        sizes=SizeTargets(min_files_to_merge=2),
    )
    v1 = [first(n) for n in range(40)]
    lake.insert("ev", v1)
    before_alter = lake.table("ev").head_snapshot_id
    lake.alter_table(
        "ev",
        add_columns=["context.page.title VARCHAR"],
        rename_columns={"context.ip": "context.client_ip"},
        drop_columns=["context.campaign"],
        widen=["context.screen.width BIGINT"],
    )
    spec = lake.table("ev").spec
    assert spec.sort_by == ("context.client_ip",)
    assert spec.columns[1].type == (
        "STRUCT(client_ip VARCHAR, page STRUCT(url VARCHAR, title VARCHAR),"
        " screen STRUCT(width BIGINT))"
    )
    v2 = [second(n) for n in range(40, 70)]
    lake.insert("ev", v2)
    lake.alter_table(
        "ev", add_columns=["context.campaign VARCHAR"], drop_columns=["context.page.title"]
    )
    lake.alter_table("ev", add_columns=["context.page.title VARCHAR"])
    v4 = [third(n) for n in range(70, 90)]
    lake.insert("ev", v4)
    events = [(e, 1) for e in v1] + [(e, 2) for e in v2] + [(e, 4) for e in v4]
    want = expected(events)

    def check_all() -> None:
        assert rows(lake.query("SELECT ts, context FROM ev")) == want
        # pruning reads a renamed leaf's statistics under its old path, and none for a field
        # dropped and added again (old files hold another field of that name)
        for where, keep in [
            ("context.client_ip = '10.0.0.1'", lambda c: c and c["client_ip"] == "10.0.0.1"),
            ("context.campaign IS NULL", lambda c: c is None or c["campaign"] is None),
            ("context.campaign = 's1'", lambda c: c and c["campaign"] == "s1"),
            ("context.screen.width > 1000", lambda c: c and c["screen"] and c["screen"]["width"] > 1000),
            ("context.page.title IS NULL", lambda c: c is None or c["page"] is None or c["page"]["title"] is None),
            ("context.page.url = '/p1'", lambda c: c and c["page"] and c["page"]["url"] == "/p1"),
        ]:  # fmt: skip
            got = rows(lake.query(f"SELECT ts, context FROM ev WHERE {where}"))
            assert got == sorted(
                repr(as_current(e, v)) for e, v in events if keep(as_current(e, v)[1])
            ), where

    check_all()
    # The notebook client's own DuckDB reads the same views
    assert rows(lake.duckdb().sql("SELECT ts, context FROM ev").to_arrow_table()) == want
    assert rows(lake.relation("ev").select("ts, context").to_arrow_table()) == want
    # A snapshot pinned before the alter keeps its schema
    then = lake.query("SELECT ts, context FROM ev", snapshot_id=before_alter).to_pylist()
    assert sorted(repr((r["ts"].isoformat(), r["context"])) for r in then) == sorted(
        repr((e["ts"], e["context"])) for e in v1
    )
    # The Spark reader reads each version's files by id
    frame = read_table(spark, "ev", runtime=lake.runtime)
    via_spark = sorted(
        repr((r["ts"].isoformat(), None if r["context"] is None else r["context"].asDict(True)))
        for r in frame.collect()
    )
    assert via_spark == want
    # Iceberg readers follow the field ids in the files
    published = lake.publish_iceberg("ev", catalog=local_catalog(tmp_path / "iceberg"))
    table = local_catalog(tmp_path / "iceberg").load_table(("icefloe", "ev"))
    assert rows(table.scan().to_arrow()) == want
    con = duckdb_with_iceberg()
    scanned = con.execute(
        f"SELECT ts, context FROM iceberg_scan('{published.metadata_location}')"
    ).to_arrow_table()
    assert rows(scanned) == want
    # A merge (or a Spark compaction) rewrites every file at the current version, and
    # nothing changes
    if engine == "duckdb":
        assert lake.merge("ev").count("committed") > 0
    else:
        spark_compact(lake, spark, "ev")
    assert {f.spec_version for f in lake.meta.files("ev")} == {4}
    check_all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop_columns": ["context.page.url"]}, "its struct's only field"),
        ({"rename_columns": {"context.ip": "context.page"}}, "has a field 'page' already"),
        ({"rename_columns": {"context.ip": "context.page.ip"}}, "renamed within its struct"),
        ({"widen": ["context.ip BIGINT"]}, "VARCHAR to BIGINT is not a widening"),
        ({"add_columns": ["context.ip VARCHAR"]}, "has a field 'ip' already"),
        ({"drop_columns": ["context.nope"]}, "no field 'nope'"),
        ({"add_columns": ["tags.element.x INTEGER"]}, "inside a list or a map cannot be changed"),
        ({"widen": ["ts.x BIGINT"]}, "'ts' is TIMESTAMP, which has no fields"),
    ],
)
def test_a_change_inside_a_struct_that_cannot_be_made_is_refused_naming_it(
    lake: Lake, change: dict[str, Any], message: str
) -> None:
    lake.create_table(
        "ev",
        schema="ts TIMESTAMP NOT NULL, context STRUCT(ip VARCHAR, page STRUCT(url VARCHAR)),"
        " tags STRUCT(k VARCHAR)[]",
    )
    with pytest.raises(SpecError, match=message):
        lake.alter_table("ev", **change)
    assert lake.table("ev").spec.version == 1
