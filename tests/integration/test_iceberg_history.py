"""Issue 35's acceptance: random histories of inserts, merges, Spark compactions, deletes, schema
changes, rollbacks and garbage collections with no retention, on a table opted in to Iceberg
publication, with the publication pass run after every operation (as the publisher does after
every commit). After each one:

- pyiceberg reads the current Iceberg snapshot and every retained one in full (no missing
  file), and each retained one holds as many rows as the icefloe snapshot it shows;
- the current Iceberg snapshot names exactly the head's files (so exactly its rows and row
  ids), and pyiceberg and DuckDB's ``iceberg_scan`` both read exactly icefloe's head rows.

Run against the local SQL catalog (local warehouse, compaction on the session's local Spark) and
against Glue under moto (warehouse and Iceberg metadata on moto's S3; local Spark has no S3
connector, so compaction there runs the same claim, manifest and job path on the DuckDB
engine). A dropped table's Iceberg table is dropped by the pass once the drop's retention has
passed, and the janitor holds its purge until then.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from test_iceberg_publish import rows

from icefloe.compaction.local import compact_locally
from icefloe.config import CoreSettings
from icefloe.errors import SnapshotNotFoundError
from icefloe.iceberg import local_catalog, publish_due
from icefloe.iceberg.glue import glue_catalog
from icefloe.iceberg.publish import SNAPSHOT_PROPERTY
from icefloe.ingest import Inserter
from icefloe.janitor import Janitor, JanitorReport
from icefloe.lifecycle import alter_table, delete_rows, rollback_table
from icefloe.lifecycle.alter import add_column, rename_column, widen_column
from icefloe.merge import MergeWorker, merge_locally
from icefloe.metastore.store import MetaStore
from icefloe.query import QueryEngine
from icefloe.query.s3_access import configure_s3
from icefloe.settings import load_settings
from icefloe.spec import Retention, SizeTargets, TableSpec
from icefloe.spec.evolution import SchemaChange
from icefloe.storage import ObjectStore, object_store_from_settings
from support.aws import FAKE_AWS_ENVIRONMENT, REGION, UNSET_AWS_VARIABLES
from support.engines import duckdb_with_iceberg

pytestmark = pytest.mark.integration

SEED = 35_2026
STEPS = 18  # after two first inserts
SPARK_COMPACTIONS = 2  # per history: local Spark is the costly part
SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, user_id VARCHAR, amount DOUBLE, n INTEGER"
START = datetime(2026, 3, 1)
NONE = timedelta(0)
BUCKET = "history-lake"


@dataclass
class World:
    """One lake and the catalog its opted-in tables are published to."""

    kind: str
    meta: MetaStore
    objects: ObjectStore
    settings: CoreSettings
    catalog: Catalog
    namespace: str
    inserter: Inserter
    worker: MergeWorker
    engine: QueryEngine
    configure: Callable[[Any], None] | None  # DuckDB's S3 set-up (None: a local warehouse)
    compact: Callable[[str], Any]
    con: Any = None  # one DuckDB connection with the iceberg extension, for every check

    def publish(self, *, retention: timedelta | None = None) -> Any:
        """The publication pass, as the publisher runs it after a commit; it fails nothing."""
        done = publish_due(
            meta=self.meta,
            objects=self.objects,
            catalog=self.catalog,
            namespace=self.namespace,
            retention=retention,
        )
        assert not done.failed, done.failed
        return done

    def janitor(self) -> Janitor:
        return Janitor(meta=self.meta, objects=self.objects)

    def duckdb(self) -> Any:
        if self.con is None:
            self.con = duckdb_with_iceberg()
            if self.configure is not None:
                self.configure(self.con)
        return self.con


@pytest.fixture(params=["sql", "glue"])
def world(
    request: pytest.FixtureRequest, meta: MetaStore, tmp_path: Path, schema_name: str
) -> Iterator[World]:
    if request.param == "sql":
        spark = request.getfixturevalue("spark")
        settings = load_settings({"ICEFLOE_WAREHOUSE": str(tmp_path / "warehouse")}).core
        objects = object_store_from_settings(settings)
        worker = MergeWorker(meta=meta, objects=objects)

        def compact_with_spark(table: str) -> Any:
            return compact_locally(
                meta=meta,
                objects=objects,
                settings=settings,
                table=table,
                engine="spark",
                spark=spark,
            )

        built = World(
            kind="sql",
            meta=meta,
            objects=objects,
            settings=settings,
            catalog=local_catalog(tmp_path),
            namespace="icefloe",
            inserter=Inserter(meta=meta, objects=objects),
            worker=worker,
            engine=QueryEngine(meta=meta, objects=objects),
            configure=None,
            compact=compact_with_spark,
        )
    else:
        moto_endpoint: str = request.getfixturevalue("moto_endpoint")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        for name, value in FAKE_AWS_ENVIRONMENT.items():
            monkeypatch.setenv(name, value)
        for name in UNSET_AWS_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION)
        if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=BUCKET)
        prefix = uuid.uuid4().hex[:8]  # the moto server lives for the whole run
        settings = load_settings(
            {
                "ICEFLOE_WAREHOUSE": f"s3://{BUCKET}/{prefix}/wh",
                "ICEFLOE_S3_ENDPOINT_URL": moto_endpoint,
                "ICEFLOE_HOME": str(tmp_path),
            }
        ).core
        objects = object_store_from_settings(settings)

        def configure(con: Any) -> None:
            configure_s3(con, region=REGION, endpoint_url=moto_endpoint)

        worker = MergeWorker(meta=meta, objects=objects, configure=configure)

        def compact_with_duckdb(table: str) -> Any:
            return compact_locally(
                meta=meta,
                objects=objects,
                settings=settings,
                table=table,
                engine="duckdb",
                worker=worker,
            )

        built = World(
            kind="glue",
            meta=meta,
            objects=objects,
            settings=settings,
            catalog=glue_catalog(
                warehouse=f"s3://{BUCKET}/{prefix}/iceberg",
                region=REGION,
                glue_endpoint_url=moto_endpoint,
                s3_endpoint_url=moto_endpoint,
            ),
            namespace=f"history_{schema_name}",  # a Glue database of this test's own
            inserter=Inserter(meta=meta, objects=objects),
            worker=worker,
            engine=QueryEngine(meta=meta, objects=objects, configure=configure),
            configure=configure,
            compact=compact_with_duckdb,
        )
    yield built
    built.inserter.close()
    built.engine.close()
    if built.con is not None:
        built.con.close()


@dataclass
class Columns:
    """The history's table's column names as schema changes go."""

    amount: str = "amount"
    n_widened: bool = False
    added: list[str] = field(default_factory=list)
    renames: int = 0

    def names(self) -> list[str]:
        return ["ts", "event", "user_id", self.amount, "n", *self.added]


def new_rows(rng: random.Random, columns: Columns, count: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        row: dict[str, Any] = {
            "ts": (START + timedelta(minutes=rng.randrange(2 * 1440))).isoformat(),
            "event": rng.choice(["view", "click", "buy"]),
            "user_id": rng.choice([None, *(f"u{k}" for k in range(6))]),
            columns.amount: rng.choice([None, 0.5, 12.25, -3.0]),
            "n": rng.choice([None, 7, -1, 2**40 if columns.n_widened else 2**30]),
        }
        for name in columns.added:
            row[name] = rng.choice([None, rng.randrange(-(2**40), 2**40)])
        out.append(row)
    return out


def icefloe_rows(world: World, table: str, columns: list[str]) -> Counter[tuple[str, ...]]:
    answer = world.engine.query(f"SELECT {', '.join(columns)} FROM {table}").rows
    return rows([tuple(r.values()) for r in answer.to_pylist()])


def icefloe_count(world: World, table: str, snapshot_id: int) -> int:
    answer = world.engine.query(f"SELECT count(*) AS c FROM {table}", snapshot_id=snapshot_id)
    return int(answer.rows.to_pylist()[0]["c"])


def check_published(world: World, table: str, columns: list[str], *, where: str) -> None:
    """The Iceberg table shows the head; every retained Iceberg snapshot reads in full and
    holds its icefloe snapshot's row count; the current one holds exactly the head's files and
    rows, through pyiceberg and through DuckDB's iceberg_scan."""
    head = world.meta.get_table(table).head_snapshot_id
    iceberg = world.catalog.load_table((world.namespace, table))
    assert iceberg.properties[SNAPSHOT_PROPERTY] == str(head), where
    current = iceberg.current_snapshot()
    assert current is not None, where
    for snapshot in iceberg.metadata.snapshots:
        if snapshot.snapshot_id == current.snapshot_id:
            continue  # read in full below
        read = iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()  # a missing file raises
        shows = snapshot.summary.get(SNAPSHOT_PROPERTY) if snapshot.summary else None
        assert shows is not None, (where, snapshot)
        assert read.num_rows == icefloe_count(world, table, int(shows)), (where, snapshot)
    # Exactly the head's files: its rows, row ids included, and nothing collected
    files = {task.file.file_path for task in iceberg.scan().plan_files()}
    assert files == {world.objects.uri(f.path) for f in world.meta.files(table)}, where
    expected = icefloe_rows(world, table, columns)
    assert expected, where
    via_pyiceberg = iceberg.scan(selected_fields=tuple(columns)).to_arrow().to_pylist()
    assert rows([tuple(r[c] for c in columns) for r in via_pyiceberg]) == expected, where
    scanned = (
        world.duckdb()
        .execute(f"SELECT {', '.join(columns)} FROM iceberg_scan('{iceberg.metadata_location}')")
        .fetchall()
    )
    assert rows(scanned) == expected, where


# Each kind at least once per history; compaction and the widening only as often as listed.
EVERY_ONCE = (
    "insert",
    "merge",
    "compact",
    "delete",
    "alter add",
    "alter rename",
    "alter widen",
    "rollback",
    "gc alone",
    "gc after a pass",
)
# The rest of a history drawn from these, by weight.
DRAWN = {
    "insert": 5,
    "merge": 2,
    "delete": 2,
    "alter add": 1,
    "alter rename": 1,
    "rollback": 2,
    "gc alone": 2,
    "gc after a pass": 1,
}


def history(rng: random.Random, *, compactions: int) -> list[str]:
    """Every kind of operation (compaction ``compactions`` times), the rest drawn at random,
    in a random order."""
    steps = [*EVERY_ONCE, *["compact"] * (compactions - 1)]
    steps += rng.choices(list(DRAWN), weights=list(DRAWN.values()), k=STEPS - len(steps))
    rng.shuffle(steps)
    return steps


def test_random_histories_keep_every_published_snapshot_readable_and_the_current_one_exact(
    world: World,
) -> None:
    rng = random.Random(f"{SEED}-{world.kind}")
    world.meta.create_table(
        TableSpec.create(
            name="events",
            schema=SCHEMA,
            partition_by="day(ts)",
            sort_by="event, ts",
            sizes=SizeTargets(min_files_to_merge=2),
            publish="iceberg",
        )
    )
    columns = Columns()
    for _ in range(2):
        world.inserter.insert_rows("events", new_rows(rng, columns, 12))
    world.publish()
    check_published(world, "events", columns.names(), where="after the first inserts")
    done: list[str] = []
    collected = rolled_back = 0
    for step, operation in enumerate(history(rng, compactions=SPARK_COMPACTIONS)):
        detail = operation
        if operation == "insert":
            world.inserter.insert_rows("events", new_rows(rng, columns, rng.randrange(4, 16)))
        elif operation == "merge":
            merge_locally(meta=world.meta, worker=world.worker, table="events", until_quiet=True)
        elif operation == "compact":
            result = world.compact("events")
            detail += " (nothing to claim)" if result is None else " (committed)"
        elif operation == "delete":
            user = f"u{rng.randrange(6)}"
            detail += f" user_id = '{user}'"
            delete_rows(
                meta=world.meta,
                objects=world.objects,
                table="events",
                where=f"user_id = '{user}'",
                configure=world.configure,
            )
        elif operation.startswith("alter"):
            if operation == "alter widen":
                change: SchemaChange = widen_column("n BIGINT")
                columns.n_widened = True
            elif operation == "alter rename":
                columns.renames += 1
                new = f"amount_{columns.renames}"
                change = rename_column(f"{columns.amount}={new}")
                columns.amount = new
            else:
                columns.added.append(f"c{step}")
                change = add_column(f"c{step} BIGINT")
            alter_table(meta=world.meta, table="events", changes=[change])
        elif operation == "rollback":
            head = world.meta.get_table("events").head_snapshot_id
            to = rng.randrange(max(1, head - 4), head)
            detail += f" to {to} from {head}"
            try:
                rollback_table(
                    meta=world.meta, objects=world.objects, table="events", to_snapshot=to
                )
                rolled_back += 1
            except SnapshotNotFoundError:
                detail += " (expired: refused)"
        else:
            # As `icefloe gc --retention 0s` runs it (the pass first, at that retention: old
            # Iceberg snapshots expire), or the janitor alone (say, the stack's janitor before
            # the publisher's next run): the files retained Iceberg snapshots name stay either way
            if operation == "gc after a pass":
                world.publish(retention=NONE)
            report = world.janitor().run(table="events", retention=NONE)
            collected += report.total("files_deleted")
        done.append(detail)
        world.publish()
        check_published(
            world, "events", columns.names(), where=f"seed {SEED}-{world.kind}, step {step}: {done}"
        )
    # The history did what it is meant to: files were collected, a rollback and a compaction
    # committed
    assert collected > 0 and rolled_back > 0 and "compact (committed)" in done, done


def test_a_dropped_table_is_dropped_from_the_catalog_then_purged(world: World) -> None:
    # Given an opted-in table whose drop is due for purge at once (no retention of its own),
    # published
    world.meta.create_table(
        TableSpec.create(
            name="gone",
            schema=SCHEMA,
            partition_by="day(ts)",
            retention=Retention(snapshot_retention_seconds=0),
            publish="iceberg",
        )
    )
    # and one kept for the default three days after its drop
    world.meta.create_table(
        TableSpec.create(name="kept", schema=SCHEMA, partition_by="day(ts)", publish="iceberg")
    )
    rng = random.Random(SEED)
    for table in ("gone", "kept"):
        world.inserter.insert_rows(table, new_rows(rng, Columns(), 10))
    assert sorted(r.table for r in world.publish().published) == ["gone", "kept"]
    iceberg = world.catalog.load_table((world.namespace, "gone"))
    published_files = {task.file.file_path for task in iceberg.scan().plan_files()}
    objects = {o.key for o in world.objects.list_prefix("gone/")}
    assert published_files and objects

    # When it is dropped, the janitor holds its purge while its Iceberg table is there
    world.meta.drop_table("gone")
    world.meta.drop_table("kept")
    held: JanitorReport = world.janitor().run()
    assert held.purges_held == ("gone",) and held.tables_purged == ()
    assert held.purged_objects == 0
    assert {o.key for o in world.objects.list_prefix("gone/")} == objects
    assert iceberg.scan().to_arrow().num_rows == 10  # still reads in full

    # Then the pass drops its Iceberg table (not the one still within its retention), and the
    # janitor purges it
    done = world.publish()
    assert done.dropped == ("gone",) and done.published == ()
    with pytest.raises(NoSuchTableError):
        world.catalog.load_table((world.namespace, "gone"))
    purged = world.janitor().run()
    assert purged.tables_purged == ("gone",) and purged.purges_held == ()
    assert not list(world.objects.list_prefix("gone/"))
    kept = world.catalog.load_table((world.namespace, "kept"))
    assert kept.scan().to_arrow().num_rows == 10
    assert list(world.objects.list_prefix("kept/"))
