"""An inserter keeps each table's spec between calls (a small insert saves a round trip), and the
commit names the spec version its rows were converted under: a spec changed by anyone since is
never written through. The batch is converted again under the current spec, or refused by it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.datafiles import new_data_key
from icefloe.errors import BatchRejectedError, SpecChangedError, TableNotFoundError
from icefloe.ingest import Inserter, InsertLimits
from icefloe.lifecycle import alter_table
from icefloe.lifecycle.alter import add_column, rename_column
from icefloe.metastore.models import NewFile, TableInfo
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore

pytestmark = pytest.mark.integration

SCHEMA = "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, n BIGINT"


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def inserter(meta: MetaStore, objects: LocalObjectStore) -> Iterator[Inserter]:
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA, partition_by="day(ts)"))
    ins = Inserter(meta=meta, objects=objects)
    # The first insert reads the spec (version 1), which the inserter keeps
    ins.insert_rows("t", [{"ts": "2026-03-01T00:00:00", "event": "first", "n": 1}])
    yield ins
    ins.close()


def stored_keys(objects: LocalObjectStore) -> set[str]:
    return {o.key for o in objects.list_prefix("t/")}


def committed_keys(meta: MetaStore) -> set[str]:
    return {f.path for f in meta.files("t")}


def test_rows_converted_under_a_kept_spec_that_changed_are_converted_again(
    meta: MetaStore, inserter: Inserter, objects: LocalObjectStore
) -> None:
    # Given a column added after the inserter kept the spec
    alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])

    # When rows valid under both versions are inserted
    result = inserter.insert_rows("t", [{"ts": "2026-03-01T01:00:00", "event": "second"}])

    # Then the file committed was written under the current spec (it holds the new column),
    # and the file first written under the kept one is gone
    assert result.committed
    newest = max(meta.files("t"), key=lambda f: f.file_id)
    assert newest.spec_version == 2
    table = pq.read_table(pa.BufferReader(objects.get(newest.path)))
    assert "note" in table.column_names
    assert stored_keys(objects) == committed_keys(meta)


def test_rows_using_a_name_the_current_spec_renamed_are_refused(
    meta: MetaStore, inserter: Inserter, objects: LocalObjectStore
) -> None:
    # Given n renamed to amount after the inserter kept the spec
    alter_table(meta=meta, table="t", changes=[rename_column("n=amount")])
    head = meta.get_table("t").head_snapshot_id

    # When rows still name n, then amount
    with pytest.raises(BatchRejectedError, match="'n'"):
        inserter.insert_rows("t", [{"ts": "2026-03-01T01:00:00", "event": "old", "n": 2}])
    result = inserter.insert_rows("t", [{"ts": "2026-03-01T02:00:00", "event": "e", "amount": 3}])

    # Then the old name is refused without a commit or a leftover object, the new one lands
    assert meta.get_table("t").head_snapshot_id == head + 1 == result.snapshot_id
    assert stored_keys(objects) == committed_keys(meta)


def test_a_batch_refused_under_a_kept_spec_is_tried_under_the_current_one(
    meta: MetaStore, inserter: Inserter
) -> None:
    # Given a column added after the inserter kept the spec
    alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])

    # When a row holds the new column (unknown to the kept spec)
    result = inserter.insert_rows(
        "t", [{"ts": "2026-03-01T01:00:00", "event": "e", "note": "hello"}]
    )

    # Then it is committed under the current spec
    assert result.committed and result.rows == 1
    assert max(f.spec_version for f in meta.files("t")) == 2


def test_bytes_for_a_blob_column_the_kept_spec_does_not_know_are_taken(
    meta: MetaStore, inserter: Inserter, objects: LocalObjectStore
) -> None:
    # Given a BLOB column added after the inserter kept the spec (bytes are refused before
    # conversion for a column that is not a BLOB: under the kept spec, this one is unknown)
    alter_table(meta=meta, table="t", changes=[add_column("payload BLOB")])

    # When a row holds bytes for it
    result = inserter.insert_rows(
        "t", [{"ts": "2026-03-01T01:00:00", "event": "e", "payload": b"\x00\xff"}]
    )

    # Then it is committed under the current spec, the bytes as they were
    assert result.committed and result.rows == 1
    newest = max(meta.files("t"), key=lambda f: f.file_id)
    assert newest.spec_version == 2
    table = pq.read_table(pa.BufferReader(objects.get(newest.path)))
    assert table.column("payload").to_pylist() == [b"\x00\xff"]


def test_a_stream_refused_under_a_kept_spec_is_not_read_again(
    meta: MetaStore, objects: LocalObjectStore
) -> None:
    # Given an inserter that kept the spec, whose batches may hold 2 KB, and a column added
    # since (so the current spec differs)
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA, partition_by="day(ts)"))
    inserter = Inserter(meta=meta, objects=objects, limits=InsertLimits(max_batch_bytes=2048))
    try:
        inserter.insert_rows("t", [{"ts": "2026-03-01T00:00:00", "event": "first", "n": 1}])
        alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])
        head = meta.get_table("t").head_snapshot_id

        # When a stream of 4 KB of whole lines is inserted
        line = b'{"ts": "2026-03-01T01:00:00", "event": "e"}\n'
        stream = io.BytesIO(line * (4096 // len(line) + 1))
        with pytest.raises(BatchRejectedError, match="over the limit of 2,048 bytes"):
            inserter.insert_stream("t", stream, fmt="ndjson")
    finally:
        inserter.close()

    # Then it is refused as too big, and the rest of the stream is not taken for a batch
    assert meta.get_table("t").head_snapshot_id == head
    assert stored_keys(objects) == committed_keys(meta)


def test_a_table_dropped_and_created_again_is_inserted_into_as_it_is_now(
    meta: MetaStore, inserter: Inserter
) -> None:
    # Given the kept table dropped, and another of the same name created
    meta.drop_table("t")
    meta.create_table(TableSpec.create(name="t", schema="ts TIMESTAMP NOT NULL, kind VARCHAR"))

    # When rows of the new table's shape are inserted
    result = inserter.insert_rows("t", [{"ts": "2026-03-01T00:00:00", "kind": "x"}])

    # Then they land in the new table (its first snapshot)
    assert result.committed and result.snapshot_id == 1
    assert [f.row_count for f in meta.files("t")] == [1]

    # And once it is dropped too, an insert says the table is gone
    meta.drop_table("t")
    with pytest.raises(TableNotFoundError):
        inserter.insert_rows("t", [{"ts": "2026-03-01T00:00:00", "kind": "x"}])


@pytest.mark.parametrize("with_key", [False, True])
def test_a_commit_under_an_older_spec_version_is_refused(meta: MetaStore, with_key: bool) -> None:
    # Given a table whose spec moved to version 2
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA))
    alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])
    file = NewFile(
        path=new_data_key(table="t", partition_path=""),
        partition_path="",
        size_bytes=10,
        row_count=1,
    )

    # When files converted under version 1 are committed, then under version 2
    with pytest.raises(SpecChangedError, match="version 1 to 2"):
        meta.commit_append(
            "t", files=[file], spec_version=1, idempotency_key="k" if with_key else None
        )
    result = meta.commit_append(
        "t", files=[file], spec_version=2, idempotency_key="k" if with_key else None
    )

    # Then only the second is committed
    assert result.committed and result.snapshot_id == 2  # the alter is snapshot 1
    assert [f.path for f in meta.files("t")] == [file.path]


class TableReadsCounted(MetaStore):
    """The real meta store, counting reads of a table (what an inserter keeps between calls)."""

    def __init__(self, dsn: str, *, schema: str) -> None:
        super().__init__(dsn, schema=schema)
        self.table_reads = 0

    def get_table(self, name: str) -> TableInfo:
        self.table_reads += 1
        return super().get_table(name)


def test_the_table_is_read_again_only_when_it_may_have_changed(
    meta: MetaStore, postgres_dsn: str, objects: LocalObjectStore
) -> None:
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA, partition_by="day(ts)"))
    row = {"ts": "2026-03-01T00:00:00", "event": "e"}
    with TableReadsCounted(postgres_dsn, schema=meta.schema) as counted:
        ins = Inserter(meta=counted, objects=objects)
        # A batch refused under the spec just read leaves it kept: good batches read nothing
        with pytest.raises(BatchRejectedError):
            ins.insert_rows("t", [{**row, "n": "not a number"}])
        for _ in range(3):
            ins.insert_rows("t", [row])
        assert counted.table_reads == 1
        # A batch refused under the kept spec reads the table again (it may have changed)
        with pytest.raises(BatchRejectedError):
            ins.insert_rows("t", [{**row, "n": "not a number"}])
        assert counted.table_reads == 2
        # A spec changed elsewhere is read once, at the commit that finds it changed
        alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])
        for _ in range(2):
            ins.insert_rows("t", [row])
        assert counted.table_reads == 3
        ins.close()


def test_a_key_retried_after_a_schema_change_answers_its_earlier_snapshot(
    meta: MetaStore,
) -> None:
    # Given a batch committed under a key, then a schema change
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA))
    first = meta.commit_append(
        "t", files=[_file()], idempotency_key="k", batch_digest="d", spec_version=1
    )
    alter_table(meta=meta, table="t", changes=[add_column("note VARCHAR")])

    # When a retry of it (converted under the old spec) commits
    again = meta.commit_append(
        "t", files=[_file()], idempotency_key="k", batch_digest="d", spec_version=1
    )

    # Then it is told its batch is committed, not that the spec changed
    assert not again.committed and again.snapshot_id == first.snapshot_id


def test_an_aware_partition_start_is_stored_as_its_utc_instant(meta: MetaStore) -> None:
    # Given a file whose partition starts at midnight two hours east of UTC
    meta.create_table(TableSpec.create(name="t", schema=SCHEMA))
    east = timezone(timedelta(hours=2))

    # When it is committed
    meta.commit_append("t", files=[_file(partition_start=datetime(2026, 3, 1, tzinfo=east))])

    # Then its start is that instant in UTC
    assert meta.files("t")[0].partition_start == datetime(2026, 2, 28, 22, 0)


def _file(**fields: Any) -> NewFile:
    key = new_data_key(table="t", partition_path="")
    return NewFile(path=key, partition_path="", size_bytes=10, row_count=1, **fields)
