"""Iceberg publication: after inserts, merges, a delete, a schema change and garbage collection,
the published table read through pyiceberg and through DuckDB's ``iceberg_scan`` holds exactly
the rows icefloe answers at the same snapshot."""

from __future__ import annotations

import logging
import random
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.iceberg import (
    NAMESPACE,
    IcebergPublishError,
    PublishResult,
    local_catalog,
    publish_iceberg,
)
from icefloe.ingest import Inserter
from icefloe.janitor import Janitor
from icefloe.lifecycle import alter_table, delete_rows
from icefloe.lifecycle.alter import add_column, drop_column, rename_column, widen_column
from icefloe.metastore.store import MetaStore
from icefloe.spec import SizeTargets, TableSpec
from icefloe.storage import LocalObjectStore
from support.engines import duckdb_with_iceberg
from support.merge_lake import START, Lake

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, user_id VARCHAR, amount DOUBLE"
COLUMNS = "ts, event, user_id, amount"


def insert_batches(lake: Lake, *, batches: int, rows: int, days: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for _ in range(batches):
        lake.inserter.insert_rows(
            "events",
            [
                {
                    "ts": (START + timedelta(minutes=rng.randrange(days * 1440))).isoformat(),
                    "event": rng.choice(["view", "click", "buy"]),
                    "user_id": rng.choice([None, *(f"u{n}" for n in range(8))]),
                    "amount": rng.choice([None, 0.5, 12.25, -3.0]),
                }
                for _ in range(rows)
            ],
        )


def rows(values: list[tuple[Any, ...]]) -> Counter[tuple[str, ...]]:
    return Counter(tuple("" if v is None else str(v) for v in row) for row in values)


def check_same_rows(
    lake: Lake, tmp_path: Path, result: PublishResult, columns: str, *, pyiceberg: bool = True
) -> None:
    """pyiceberg and iceberg_scan both read exactly icefloe's rows at the published snapshot
    (pyiceberg 0.12 cannot read a column Parquet marks as JSON: ``pyiceberg=False`` then)."""
    expected = rows(
        [
            tuple(r.values())
            for r in lake.engine.query(
                f"SELECT {columns} FROM events", snapshot_id=result.snapshot_id
            ).rows.to_pylist()
        ]
    )
    table = local_catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert table.properties["icefloe.snapshot-id"] == str(result.snapshot_id)
    names = [c.strip().split(" AS ")[-1].strip() for c in columns.split(",")]
    if pyiceberg:
        via_pyiceberg = table.scan().to_arrow()
        got = [tuple(row[n] for n in names) for row in via_pyiceberg.to_pylist()]
        assert rows(got) == expected
    con = duckdb_with_iceberg()
    select = ", ".join(f"CAST({n} AS VARCHAR) AS {n}" if n == "properties" else n for n in names)
    scanned = con.execute(
        f"SELECT {select} FROM iceberg_scan('{result.metadata_location}')"
    ).fetchall()
    assert rows(scanned) == expected and expected


def publish(lake: Lake, tmp_path: Path) -> PublishResult:
    return publish_iceberg(
        meta=lake.meta, objects=lake.objects, table="events", catalog=local_catalog(tmp_path)
    )


def test_publications_follow_inserts_merges_deletes_schema_changes_and_gc(
    lake: Lake, tmp_path: Path
) -> None:
    # Inserts
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=6, rows=40, days=3)
    first = publish(lake, tmp_path)
    assert (first.files_added, first.files_removed) == (first.files_live, 0)
    check_same_rows(lake, tmp_path, first, COLUMNS)
    # Asked again with nothing new: nothing is committed
    again = publish(lake, tmp_path)
    assert again.iceberg_snapshot_id is None and again.metadata_location == first.metadata_location

    # Merges replace files
    lake.merge("events")
    merged = publish(lake, tmp_path)
    assert merged.files_removed > 0 and merged.files_added > 0
    check_same_rows(lake, tmp_path, merged, COLUMNS)

    # A delete rewrites some
    delete_rows(meta=lake.meta, objects=lake.objects, table="events", where="user_id = 'u3'")
    deleted = publish(lake, tmp_path)
    assert deleted.files_removed > 0
    check_same_rows(lake, tmp_path, deleted, COLUMNS)

    # A schema change: old files read through the name mapping
    alter_table(
        meta=lake.meta,
        table="events",
        changes=[rename_column("event=name"), add_column("n BIGINT")],
    )
    lake.inserter.insert_rows(
        "events", [{"ts": "2026-03-01T05:00:00", "name": "e", "user_id": "u1", "n": 2**40}]
    )
    evolved = publish(lake, tmp_path)
    renamed = "ts, name, user_id, amount, n"
    check_same_rows(lake, tmp_path, evolved, renamed)

    # Garbage collection removes only files no longer published at the head
    Janitor(meta=lake.meta, objects=lake.objects).run(table="events", retention=timedelta(0))
    check_same_rows(lake, tmp_path, publish(lake, tmp_path), renamed)


def test_a_json_column_is_published_as_a_string(
    lake: Lake, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # (the sample events' properties: DuckDB's iceberg_scan reads it; pyiceberg 0.12 cannot)
    lake.create()
    lake.insert_batches("events", batches=3, rows=20, days=2)
    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        result = publish(lake, tmp_path)
    columns = "ts, event, user_id, CAST(properties AS VARCHAR) AS properties"
    check_same_rows(lake, tmp_path, result, columns, pyiceberg=False)
    # Its bounds are left out on purpose: no warning per file about them
    assert result.files_added > 1
    assert not [r for r in caplog.records if "statistics missing" in r.getMessage()]


def test_a_name_two_columns_held_in_live_files_is_refused_until_rewritten(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create()
    lake.insert_batches("events", batches=2, rows=10, days=1)
    alter_table(
        meta=lake.meta,
        table="events",
        changes=[drop_column("properties"), add_column("properties VARCHAR")],
    )
    with pytest.raises(IcebergPublishError, match="hold two different columns named 'properties'"):
        publish(lake, tmp_path)


def test_a_type_iceberg_has_not_is_refused_by_name(lake: Lake, tmp_path: Path) -> None:
    lake.create()
    alter_table(meta=lake.meta, table="events", changes=[add_column("u UBIGINT")])
    with pytest.raises(IcebergPublishError, match="column 'u': type UBIGINT"):
        publish(lake, tmp_path)


def test_a_widened_column_is_published_with_its_old_files(lake: Lake, tmp_path: Path) -> None:
    lake.create(schema="ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR, n INTEGER")
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01T00:00:00", "event": "a", "n": 7}])
    alter_table(meta=lake.meta, table="events", changes=[widen_column("n BIGINT")])
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01T01:00:00", "event": "b", "n": 2**40}])
    result = publish(lake, tmp_path)
    check_same_rows(lake, tmp_path, result, "ts, event, user_id, n")


def test_a_name_reused_after_a_publication_is_refused_even_once_compacted(
    lake: Lake, tmp_path: Path
) -> None:
    # (the first Iceberg snapshot still names the old files, read through the one name mapping)
    lake.create(schema=SCHEMA, sort_by="event, ts", sizes=SizeTargets(min_files_to_merge=2))
    insert_batches(lake, batches=3, rows=10, days=1)
    publish(lake, tmp_path)
    alter_table(
        meta=lake.meta,
        table="events",
        changes=[drop_column("amount"), add_column("amount BIGINT")],
    )
    lake.merge("events")
    assert {f.spec_version for f in lake.meta.files("events")} == {2}
    with pytest.raises(IcebergPublishError, match="published before"):
        publish(lake, tmp_path)


def test_identity_partitions_of_dates_and_a_widened_decimal_are_published(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create(
        schema="ts TIMESTAMP NOT NULL, d DATE, event VARCHAR, price DECIMAL(9,2)",
        partition_by="d",
        sort_by="",
    )
    rows = [
        {"ts": f"2026-03-0{n}T00:00:00", "d": f"2026-03-0{n}", "event": "e", "price": n * 1.5}
        for n in (1, 2)
    ]
    lake.inserter.insert_rows("events", rows)
    alter_table(meta=lake.meta, table="events", changes=[widen_column("price DECIMAL(20,2)")])
    lake.inserter.insert_rows(
        "events",
        [{"ts": "2026-03-01T01:00:00", "d": "2026-03-01", "event": "f", "price": 1e15}],
    )
    result = publish(lake, tmp_path)
    check_same_rows(lake, tmp_path, result, "ts, d, event, price")
    table = local_catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert table.scan(row_filter="d == '2026-03-02'").to_arrow().num_rows == 1


def test_a_table_dropped_and_created_again_is_published_afresh(lake: Lake, tmp_path: Path) -> None:
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=2, rows=10, days=1)
    publish(lake, tmp_path)
    lake.meta.drop_table("events")
    lake.create(schema=SCHEMA, sort_by="event, ts")
    insert_batches(lake, batches=1, rows=5, days=1, seed=9)

    result = publish(lake, tmp_path)

    # The old table's files are not carried over: the Iceberg table starts over
    assert (result.files_added, result.files_removed, result.files_live) == (1, 0, 1)
    check_same_rows(lake, tmp_path, result, COLUMNS)


def test_a_table_of_the_same_name_from_another_meta_store_is_refused_not_mixed(
    lake: Lake, tmp_path: Path, postgres_dsn: str, schema_name: str
) -> None:
    # Given events published from this meta store (partitioned by day)
    lake.create(schema=SCHEMA)
    insert_batches(lake, batches=1, rows=10, days=1)
    catalog = local_catalog(tmp_path)
    publish_iceberg(meta=lake.meta, objects=lake.objects, table="events", catalog=catalog)

    # When another meta store (its table ids start at 1 too) publishes its own, unpartitioned
    # events to the same namespace
    other = MetaStore(postgres_dsn, schema=f"{schema_name}_other")
    try:
        other.migrate()
        other.create_table(TableSpec.create(name="events", schema=SCHEMA))
        objects = LocalObjectStore(tmp_path / "other")
        inserter = Inserter(meta=other, objects=objects)
        inserter.insert_rows("events", [{"ts": "2026-03-01T10:00:00Z", "event": "view"}])
        inserter.close()
        assert other.get_table("events").table_id == lake.meta.get_table("events").table_id

        # Then it is refused by name, and the published table is left as it was
        before = catalog.load_table((NAMESPACE, "events")).metadata_location
        with pytest.raises(IcebergPublishError, match="from another meta store"):
            publish_iceberg(meta=other, objects=objects, table="events", catalog=catalog)
        assert catalog.load_table((NAMESPACE, "events")).metadata_location == before
    finally:
        other.close()


def test_list_columns_are_published_with_element_ids_and_old_files_read_by_name(
    lake: Lake, tmp_path: Path
) -> None:
    lake.create(schema="ts TIMESTAMP NOT NULL, event VARCHAR, tags VARCHAR[], scores DOUBLE[]")
    rng = random.Random(4)
    for _ in range(3):
        lake.inserter.insert_rows(
            "events",
            [
                {
                    "ts": (START + timedelta(minutes=rng.randrange(2880))).isoformat(),
                    "event": rng.choice(["view", "buy"]),
                    "tags": rng.choice([None, [], ["a"], ["b", None, "c"]]),
                    "scores": rng.choice([None, [1.5, -2.0], [0.0]]),
                }
                for _ in range(15)
            ],
        )
    # One file as icefloe wrote them before field ids: the same rows, no ids in the file
    legacy = lake.meta.files("events")[0]
    path = lake.objects.root / legacy.path
    table = pq.read_table(path)
    bare = pa.schema(
        [
            pa.field(f.name, pa.list_(f.type.value_type) if pa.types.is_list(f.type) else f.type)
            for f in table.schema
        ]
    )
    pq.write_table(table.cast(bare), path)
    ids = duckdb.execute("SELECT field_id FROM parquet_schema($p)", {"p": str(path)}).fetchall()
    assert {i for (i,) in ids} == {None}

    result = publish(lake, tmp_path)
    check_same_rows(lake, tmp_path, result, "ts, event, tags, scores")


def test_uuid_columns_are_published_as_strings_with_identity_partitions(
    lake: Lake, tmp_path: Path
) -> None:
    # Given a table partitioned by a UUID column (the files hold UUIDs as their text)
    lake.create(schema="ts TIMESTAMP NOT NULL, u UUID, v UUID", partition_by="u", sort_by="v")
    ids = [f"00000000-0000-0000-0000-00000000000{n}" for n in range(3)]
    lake.inserter.insert_rows(
        "events",
        [{"ts": f"2026-03-01T0{n}:00:00", "u": ids[n % 2], "v": ids[n]} for n in range(3)],
    )
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01T05:00:00", "u": None, "v": None}])

    # When it is published, pyiceberg and iceberg_scan read its rows, the UUIDs as text
    result = publish(lake, tmp_path)
    check_same_rows(lake, tmp_path, result, "ts, u, v")
    table = local_catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert str(table.schema().find_field("u").field_type) == "string"
    # And a filter on the partition column reads that partition's rows only
    scanned = table.scan(row_filter=f"u == '{ids[1]}'").to_arrow()
    assert sorted(scanned["v"].to_pylist()) == [ids[1]]


def test_a_truncated_integer_partition_past_icebergs_int_is_refused_naming_it(
    lake: Lake, tmp_path: Path
) -> None:
    # Given truncate[3] of an INTEGER's minimum: -2147483649, which Iceberg's int cannot hold
    lake.create(
        schema="ts TIMESTAMP NOT NULL, i INTEGER", partition_by="truncate[3](i)", sort_by=""
    )
    lake.inserter.insert_rows("events", [{"ts": "2026-03-01T00:00:00", "i": -(2**31)}])

    # Then publishing it is refused naming the partition and the value
    with pytest.raises(IcebergPublishError, match=r"partition 'i_trunc' holds -2147483649"):
        publish(lake, tmp_path)
