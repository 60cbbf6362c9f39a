"""Tables opted in to Iceberg publication stay current: `icefloe merge --wait`, `icefloe gc` and
`icefloe publish iceberg --all` (and the Python API's merge, gc and publish_all) publish every
opted-in table whose head moved; `status` shows how far behind a publication is; a dropped
table's Iceberg table is dropped before the table is purged, and never after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from test_cli import cli_env, run  # noqa: F401  (cli_env is a fixture)

import icefloe
from icefloe.iceberg import NAMESPACE, local_catalog
from icefloe.iceberg.publish import SNAPSHOT_PROPERTY
from icefloe.metastore.publications import PublicationStore
from icefloe.metastore.store import MetaStore
from icefloe.spec import Retention

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR, user_id VARCHAR"


@pytest.fixture
def cli(cli_env: str) -> str:  # noqa: F811  (the fixture imported above)
    """A meta store schema, initialized, that the CLI's commands run against."""
    assert run("init")[0] == 0
    return cli_env


def catalog(tmp_path: Path) -> Catalog:
    return local_catalog(tmp_path / "home")


def insert(tmp_path: Path, n: int, *, table: str = "events") -> None:
    source = tmp_path / f"batch{n}.ndjson"
    source.write_text(
        "\n".join(
            json.dumps(
                {"ts": f"2026-03-0{1 + i % 2}T0{n % 10}:00:00", "event": "e", "user_id": f"u{i}"}
            )
            for i in range(3)
        )
    )
    code, text = run("insert", table, str(source))
    assert code == 0, text


def head(table: str = "events") -> int:
    code, text = run("table", "show", table, "--format", "json")
    assert code == 0, text
    return int(json.loads(text)["head_snapshot_id"])


def published_snapshot(tmp_path: Path, table: str = "events", namespace: str = NAMESPACE) -> int:
    """The icefloe snapshot the Iceberg table shows, after checking that its current snapshot
    reads in full and holds that snapshot's rows."""
    iceberg = catalog(tmp_path).load_table((namespace, table))
    rows = iceberg.scan().to_arrow().num_rows
    code, text = run(
        "query", f"SELECT count(*) AS n FROM {table}", "--format", "json",
        "--snapshot", iceberg.properties[SNAPSHOT_PROPERTY],
    )  # fmt: skip
    assert code == 0, text
    assert rows == json.loads(text)[0]["n"]
    return int(iceberg.properties[SNAPSHOT_PROPERTY])


def as_json(*argv: str) -> Any:
    code, text = run(*argv, "--format", "json")
    assert code == 0, text
    return json.loads(text)


def test_an_opted_in_table_is_kept_current_by_merge_gc_and_publish_all(
    cli: str, tmp_path: Path
) -> None:
    # Given a table created with --publish iceberg, and one inserted
    assert run("table", "create", "events", "--schema", SCHEMA, "--partition-by", "day(ts)",
               "--publish", "iceberg")[0] == 0  # fmt: skip
    assert as_json("table", "show", "events")["spec"]["publish"] == "iceberg"
    insert(tmp_path, 0)

    # When every opted-in table is published, then it shows the head
    done = as_json("publish", "iceberg", "--all")
    assert [r["table"] for r in done["published"]] == ["events"] and done["failed"] == []
    assert published_snapshot(tmp_path) == head()
    # ... and a second pass finds it current
    again = as_json("publish", "iceberg", "--all")
    assert again["published"] == [] and again["current"] == ["events"]

    # When more is inserted and merged, then merge --wait publishes the merged head
    for n in range(1, 6):
        insert(tmp_path, n)
    merged = as_json("merge", "--wait")
    assert merged["merges"] >= 1
    assert [r["table"] for r in merged["published"]["published"]] == ["events"]
    assert published_snapshot(tmp_path) == head()

    # When one more is inserted and garbage collected with no retention, then gc publishes
    # first: the Iceberg table shows the head, its older snapshots expired, every file there
    insert(tmp_path, 6)
    collected = as_json("gc", "--retention", "0s")
    assert collected["files_deleted"] > 0
    (result,) = collected["published"]["published"]
    assert result["snapshot_id"] == head() and result["iceberg_snapshots_expired"] >= 1
    assert published_snapshot(tmp_path) == head()
    iceberg = catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert len(iceberg.metadata.snapshots) == 1

    # Then status says the publication is current, and behind after one more insert
    (status,) = as_json("status", "events")
    (state,) = status["published"]
    assert state["snapshot_id"] == head() and state["snapshots_behind"] == 0
    assert state["lag_seconds"] == 0
    insert(tmp_path, 7)
    (status,) = as_json("status", "events")
    (state,) = status["published"]
    assert state["snapshots_behind"] == 1 and state["lag_seconds"] > 0
    code, text = run("status", "events")
    assert code == 0 and "published to icefloe/icefloe at snapshot" in text
    assert "1 snapshot behind, lag" in text


def test_a_table_not_opted_in_is_never_published_by_the_pass(cli: str, tmp_path: Path) -> None:
    # Given a table created without --publish
    assert run("table", "create", "events", "--schema", SCHEMA)[0] == 0
    for n in range(5):
        insert(tmp_path, n)

    # When merged, collected and every opted-in table published
    assert as_json("merge", "--wait")["published"] is None
    assert as_json("gc", "--retention", "0s")["published"] is None
    done = as_json("publish", "iceberg", "--all")

    # Then nothing was published
    assert done["published"] == [] and done["current"] == []
    with pytest.raises(NoSuchTableError):
        catalog(tmp_path).load_table((NAMESPACE, "events"))


def test_alter_turns_publication_on_and_off_and_unpublish_releases_the_files(
    cli: str, postgres_dsn: str, tmp_path: Path
) -> None:
    # Given a table of small files, then opted in by alter (not a schema change: no snapshot)
    assert run("table", "create", "events", "--schema", SCHEMA)[0] == 0
    for n in range(5):
        insert(tmp_path, n)
    before = head()
    altered = as_json("table", "alter", "events", "--publish", "iceberg")
    assert altered["spec"]["publish"] == "iceberg" and head() == before
    assert as_json("table", "show", "events")["spec"]["version"] == 1
    assert [r["table"] for r in as_json("publish", "iceberg", "--all")["published"]] == ["events"]
    small_files = {f["path"] for f in as_json("files", "events")}

    # When it is opted out, then merged and collected: the Iceberg table stays as it was, and
    # so do the files it reads
    assert as_json("table", "alter", "events", "--publish", "none")["spec"]["publish"] == "none"
    assert as_json("merge", "--wait")["merges"] >= 1
    assert as_json("gc", "--retention", "0s")["published"] is None
    assert published_snapshot(tmp_path) == before < head()

    # When it is unpublished, then its Iceberg table is gone, no publication is retained, and
    # gc deletes the files only the publication kept
    assert as_json("publish", "iceberg", "events", "--unpublish")["dropped"] is True
    with pytest.raises(NoSuchTableError):
        catalog(tmp_path).load_table((NAMESPACE, "events"))
    with MetaStore(postgres_dsn, schema=cli) as meta:
        assert PublicationStore(meta).retained("events") == []
    deleted = as_json("gc", "--retention", "0s")["tables"][0]["dead_paths"]
    assert {p.rsplit("/", 1)[-1] for p in small_files} <= {p.rsplit("/", 1)[-1] for p in deleted}


def test_a_dropped_table_is_purged_only_after_its_iceberg_table_is_dropped(
    cli: str, tmp_path: Path
) -> None:
    # Given an opted-in table published to the default namespace and, by hand, to another
    assert run("table", "create", "events", "--schema", SCHEMA, "--publish", "iceberg")[0] == 0
    insert(tmp_path, 0)
    assert as_json("publish", "iceberg", "--all")["published"]
    assert as_json("publish", "iceberg", "events", "--namespace", "other")["files_live"] == 1

    # When it is dropped and collected with no retention: the pass drops its Iceberg table in
    # the namespace it keeps, but the other namespace's still holds the purge back
    assert run("table", "drop", "events")[0] == 0
    held = as_json("gc", "--retention", "0s")
    assert held["published"]["dropped"] == ["events"]
    assert held["purges_held"] == ["events"] and held["tables_purged"] == []
    with pytest.raises(NoSuchTableError):
        catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert published_files_exist(catalog(tmp_path).load_table(("other", "events")))

    # When a pass over the other namespace runs (the drop is past the table's retention only
    # with gc's override, so that pass waits), then once due it drops it and gc purges
    waiting = as_json("publish", "iceberg", "--all", "--namespace", "other")
    assert waiting["dropped"] == []
    purged = as_json_env({"ICEFLOE_ICEBERG_NAMESPACE": "other"}, "gc", "--retention", "0s")
    assert purged["published"]["dropped"] == ["events"]
    assert purged["tables_purged"] == ["events"] and purged["purges_held"] == []
    with pytest.raises(NoSuchTableError):
        catalog(tmp_path).load_table(("other", "events"))


def published_files_exist(table: Any) -> bool:
    files = [task.file.file_path for task in table.scan().plan_files()]
    return bool(files) and all(Path(f.removeprefix("file://")).is_file() for f in files)


def as_json_env(environ: dict[str, str], *argv: str) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        return as_json(*argv)


def test_the_python_api_keeps_opted_in_tables_current(
    postgres_dsn: str, schema_name: str, tmp_path: Path
) -> None:
    with icefloe.connect(
        home=tmp_path / "home", database_url=postgres_dsn, database_schema=schema_name
    ) as lake:
        # Given a table created with publish="iceberg" and a short retention, and one without
        lake.create_table(
            "kept",
            schema=SCHEMA,
            publish="iceberg",
            retention=Retention(snapshot_retention_seconds=0),
        )
        lake.create_table("plain", schema=SCHEMA)
        for n in range(5):
            for name in ("kept", "plain"):
                lake.insert(name, [{"ts": f"2026-03-01T0{n}:00:00", "event": "e", "user_id": "u"}])

        # When merged, then the opted-in table is published at its head, and only it
        lake.merge()
        iceberg = catalog(tmp_path).load_table((NAMESPACE, "kept"))
        assert iceberg.properties[SNAPSHOT_PROPERTY] == str(lake.table("kept").head_snapshot_id)
        assert iceberg.scan().to_arrow().num_rows == 5
        with pytest.raises(NoSuchTableError):
            catalog(tmp_path).load_table((NAMESPACE, "plain"))

        # When opted out by alter, then publish_all leaves it as it is
        lake.alter_table("kept", publish="none")
        lake.insert("kept", [{"ts": "2026-03-02T00:00:00", "event": "e", "user_id": "u"}])
        assert lake.publish_all().published == ()

        # When opted in again, then gc publishes it first, and its old Iceberg snapshots
        # expire with the table's retention of zero
        lake.alter_table("kept", publish="iceberg")
        lake.gc()
        iceberg = catalog(tmp_path).load_table((NAMESPACE, "kept"))
        assert iceberg.scan().to_arrow().num_rows == 6
        assert len(iceberg.metadata.snapshots) == 1


def test_a_table_iceberg_cannot_hold_is_refused_publication_by_column(
    cli: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a table with a HUGEINT column
    assert run("table", "create", "events", "--schema", "ts TIMESTAMP, big HUGEINT")[0] == 0

    # When it is opted in, then that is refused naming the column, and nothing changes
    assert run("table", "alter", "events", "--publish", "iceberg")[0] == 1
    assert "column 'big' is HUGEINT, which has no Iceberg type" in capsys.readouterr().err
    assert as_json("table", "show", "events")["spec"]["publish"] == "none"

    # When an opted-in table gains such a column, then that is refused too
    assert (
        run("table", "create", "kept", "--schema", "ts TIMESTAMP", "--publish", "iceberg")[0] == 0
    )
    assert run("table", "alter", "kept", "--add-column", "n UBIGINT")[0] == 1
    assert "column 'n' is UBIGINT" in capsys.readouterr().err


def test_an_erasure_reaches_the_kept_iceberg_table_in_the_gc_that_erases_it(
    cli: str, tmp_path: Path
) -> None:
    # Given an opted-in table of several files holding u1's rows, published
    assert run("table", "create", "events", "--schema", SCHEMA, "--publish", "iceberg")[0] == 0
    for n in range(3):
        insert(tmp_path, n)
    assert as_json("publish", "iceberg", "--all")["published"]
    holding = {f["path"] for f in as_json("files", "events")}
    warehouse = tmp_path / "home" / "warehouse"
    assert holding and all((warehouse / p).is_file() for p in holding)

    # When u1 is deleted, and garbage collected with no retention
    assert run("delete", "events", "--where", "user_id = 'u1'")[0] == 0
    as_json("gc", "--retention", "0s")

    # Then the Iceberg table keeps one snapshot, at the head, with no row of u1; and no file
    # that held u1's rows is left in the warehouse
    iceberg = catalog(tmp_path).load_table((NAMESPACE, "events"))
    assert len(iceberg.metadata.snapshots) == 1
    assert published_snapshot(tmp_path) == head()
    users = iceberg.scan().to_arrow().column("user_id").to_pylist()
    assert users and "u1" not in users
    assert not [p for p in holding if (warehouse / p).exists()]
