"""Insert against a real Postgres, DuckDB and a local warehouse: round trips, atomicity, idempotency."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icefloe.datafiles as datafiles_module
import icefloe.ingest.load as load_module
import icefloe.ingest.partition_files as partition_files_module
from icefloe import duck
from icefloe.errors import (
    BatchRejectedError,
    CommitOutcomeUnknownError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    TableNotFoundError,
)
from icefloe.ingest import Inserter, InsertLimits
from icefloe.ingest.sources import ArrowBatch
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore, ObjectStore
from support.pg_fault_proxy import PgFaultProxy
from support.stores import FailingAfterPuts, InjectedFault

pytestmark = pytest.mark.integration

WIDE_SCHEMA = (
    "ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, n BIGINT, price DECIMAL(10, 2), ok BOOLEAN,"
    " d DATE, props JSON, tags VARCHAR[], score DOUBLE"
)


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def wide(meta: MetaStore) -> TableSpec:
    spec = TableSpec.create(
        name="wide", schema=WIDE_SCHEMA, partition_by="day(ts)", sort_by="event, ts"
    )
    meta.create_table(spec)
    return spec


@pytest.fixture
def inserter(meta: MetaStore, objects: ObjectStore) -> Iterator[Inserter]:
    ins = Inserter(meta=meta, objects=objects, limits=InsertLimits(max_value_bytes=64 * 1024))
    yield ins
    ins.close()


def stored_keys(objects: ObjectStore) -> list[str]:
    return [o.key for o in objects.list_prefix("")]


def read_back(meta: MetaStore, objects: ObjectStore, table: str) -> list[tuple[object, ...]]:
    paths = [objects.uri(f.path) for f in meta.files(table)]
    rel = duckdb.sql(
        f"SELECT * EXCLUDE (_row_id) FROM read_parquet({paths!r}, hive_partitioning = false)"
    )
    return rel.fetchall()


def test_rows_read_back_from_committed_files_equal_the_input_with_types(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    # Given rows over three days, timestamps as ISO strings with offsets and as epoch millis
    base = datetime(2026, 2, 3, 22, 30)
    rows = []
    expected = []
    for i in range(300):
        ts = base + timedelta(hours=i)
        as_input: object = (
            int(ts.replace(tzinfo=UTC).timestamp() * 1000)
            if i % 3 == 0
            else (ts + timedelta(hours=2)).isoformat() + "+02:00"
            if i % 3 == 1
            else ts.isoformat() + "Z"
        )
        props = {"numtime": i, "path": f"/p/{i % 7}", "nested": {"x": [1, None, "y"]}}
        row = {
            "ts": as_input,
            "event": ["page_load", "click"][i % 2],
            "n": i * 1_000_000_007 if i % 5 else None,
            "price": 12.5 + i,
            "ok": i % 2 == 0,
            "d": (date(2026, 1, 1) + timedelta(days=i)).isoformat(),
            "props": props,
            "tags": ["a", None, str(i)],
            "score": i / 3,
        }
        rows.append(row)
        expected.append(
            (
                ts,
                row["event"],
                row["n"],
                Decimal(f"{12.5 + i:.2f}"),
                row["ok"],
                date(2026, 1, 1) + timedelta(days=i),
                props,
                ["a", None, str(i)],
                i / 3,
            )
        )

    # When they are inserted as one batch
    result = inserter.insert_rows("wide", rows)

    # Then one append snapshot holds one file per day, and the rows read back equal the input
    assert result.committed and result.rows == 300
    days = {(base + timedelta(hours=i)).date() for i in range(300)}
    assert result.partitions == len(days) == len(result.files)
    got = [(*r[:6], json.loads(r[6]), *r[7:]) for r in read_back(meta, objects, "wide")]
    assert Counter(map(repr, got)) == Counter(map(repr, expected))
    assert [s.operation for s in meta.snapshots("wide")] == ["append"]


def test_each_file_holds_one_partition_sorted_with_stats_from_its_footer(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    rows = [
        {"ts": f"2026-03-0{1 + i % 3}T{i % 24:02d}:00:00Z", "event": f"e{i % 4}", "n": i}
        for i in range(120)
    ]
    inserter.insert_rows("wide", rows)
    for f in meta.files("wide"):
        table = pq.read_table(io.BytesIO(objects.get(f.path)))
        day = f.partition_values["day"]
        assert f.partition_path == f"day={day}" and f.path.startswith(f"wide/data/day={day}/")
        assert {t.date().isoformat() for t in table.column("ts").to_pylist()} == {day}
        keys = list(
            zip(table.column("event").to_pylist(), table.column("ts").to_pylist(), strict=True)
        )
        assert keys == sorted(keys)
        assert f.row_count == table.num_rows
        assert f.column_stats["n"].min == min(table.column("n").to_pylist())
        assert f.column_stats["n"].max == max(table.column("n").to_pylist())
        assert f.column_stats["price"].null_count == table.num_rows
        assert f.size_bytes == len(objects.get(f.path))
        assert f.partition_start == datetime.fromisoformat(day)


def test_every_row_gets_a_unique_row_id_increasing_in_insert_order(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    first = inserter.insert_rows("wide", [{"ts": "2026-03-01", "event": "a"}] * 50)
    second = inserter.insert_rows("wide", [{"ts": "2026-03-01", "event": "a"}] * 50)
    ids = [
        pq.read_table(io.BytesIO(objects.get(path))).column("_row_id").to_pylist()
        for path in (*first.files, *second.files)
    ]
    assert len({i for batch in ids for i in batch}) == 100
    assert all(len(i) == 16 for batch in ids for i in batch)
    assert max(ids[0]) < min(ids[1])


def test_a_big_batch_gets_row_ids_in_input_order_and_files_sorted_by_keys_then_row_id(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    # Given a batch big enough that its row ids are made beside its partition split, with
    # few distinct keys (ties everywhere) and each row's input position in n
    rows = 300_000
    assert rows >= partition_files_module._ROW_IDS_BESIDE_FROM_ROWS
    batch = pa.table(
        {
            "ts": pa.array([datetime(2026, 3, 1 + i % 3, i % 2) for i in range(rows)]),
            "event": pa.array([("b", "a", "c")[i % 5 % 3] for i in range(rows)]),
            "n": pa.array(range(rows), pa.int32()),
        }
    )

    # When it is inserted
    result = inserter.insert_arrow("wide", batch)

    # Then each file is sorted by its keys, ties by row id, which follows the input order;
    # and every row is there once
    seen: list[int] = []
    for path in result.files:
        table = pq.read_table(io.BytesIO(objects.get(path)))
        ids = table.column("_row_id").to_pylist()
        order = list(
            zip(table.column("event").to_pylist(), table.column("ts").to_pylist(), ids, strict=True)
        )
        assert order == sorted(order)
        by_id = sorted(zip(ids, table.column("n").to_pylist(), strict=True))
        assert [n for _, n in by_id] == sorted(n for _, n in by_id)
        seen += table.column("n").to_pylist()
    assert sorted(seen) == list(range(rows)) and len(result.files) == 3


# Shallow, but with more brackets than the depth limit (64) and longer than it: the check
# measures its depth (it used to doubt it, and leave it to the conversion) and passes it.
LONG_SHALLOW = "[" + ", ".join(["[]"] * 70) + "]"
TOO_DEEP = "[" * 65 + "]" * 65


@pytest.mark.parametrize(
    ("good", "bad_row", "bad", "passes", "words"),
    [
        (['{"a": 1}', "[2]"], None, None, True, None),
        (['{"a": "nan"}', '"info, ]"'], None, None, True, None),  # suspects, all standard
        (['{"a": 1}'], 10_000, LONG_SHALLOW, True, None),
        (['{"a": 1}'], 20_000, TOO_DEEP, False, "row 20000, field 'props': JSON is nested more"),
        (['{"a": 1}', "[2]"], 69_999, "[1,]", False, "row 69999, field 'props': expected standard"),
        (
            ['{"a": "nan"}'],
            40_000,
            '{"x": NaN}',
            False,
            "row 40000, field 'props': expected standard",
        ),
        (['{"a": 1}'], 0, "{nope", False, "row 0, field 'props': expected any JSON value"),
        (
            ['{"a": 1}'],
            30_000,
            '"' + "x" * 70_000 + '"',
            False,
            "row 30000, field 'props': value is over",
        ),
    ],
    ids=[
        "clean",
        "suspect-strings",
        "long-but-shallow",
        "too-deep",
        "trailing-comma-last",
        "nan",
        "invalid-first",
        "too-big",
    ],
)
def test_a_big_arrow_batch_is_written_while_its_json_text_is_checked_and_uploaded_only_after(
    meta: MetaStore,
    objects: ObjectStore,
    good: list[str],
    bad_row: int | None,
    bad: str | None,
    passes: bool,
    words: str | None,
) -> None:
    # Given a typed batch that Arrow's checks prove clean, big enough that its JSON text is
    # checked while its 7 day partitions are sorted and encoded, holding one value that does
    # not pass the check unless bad is None (refused when words say why)
    meta.create_table(
        TableSpec.create(
            name="typed",
            schema="ts TIMESTAMP NOT NULL, event VARCHAR NOT NULL, props JSON",
            partition_by="day(ts)",
            sort_by="event, ts",
        )
    )
    rows = 70_000
    assert rows >= load_module._JSON_CHECK_BESIDE_FROM_ROWS
    texts = [good[i % len(good)] for i in range(rows)]
    if bad_row is not None:
        texts[bad_row] = bad
    batch = pa.table(
        {
            "ts": pa.array([datetime(2026, 3, 1 + i % 7) for i in range(rows)]),
            "event": pa.array(["e"] * rows),
            "props": pa.array(texts),
        }
    )

    limits = InsertLimits(max_value_bytes=64 * 1024)
    con = duck.connect(threads=1)
    try:  # (the batch does take that path, and the check's verdict is the answer)
        spec = meta.get_table("typed").spec
        _, check = load_module.load_batch_checking_json_beside(
            con, spec, ArrowBatch(batch), limits=limits
        )
        assert check is not None and check.result() is passes
    finally:
        con.close()

    # When it is inserted (a refused batch through a store that fails any upload at all)
    store = FailingAfterPuts(objects, allowed=0 if words else 1_000)
    ins = Inserter(meta=meta, objects=store, limits=limits)
    try:
        if words is None:
            result = ins.insert_arrow("typed", batch)
            # Then it is committed once (a doubted batch converted first, nothing uploaded
            # before), the text stored as it came
            assert result.committed and result.rows == rows and len(store.puts) == 7
            assert Counter(r[2] for r in read_back(meta, objects, "typed")) == Counter(texts)
        else:
            # Then it is refused naming the row and field, and no upload was even tried
            with pytest.raises(BatchRejectedError) as refused:
                ins.insert_arrow("typed", batch)
            assert words in str(refused.value)
            assert meta.snapshots("typed") == [] and store.puts == [] == stored_keys(objects)
    finally:
        ins.close()


def test_a_big_arrow_batch_still_inserts_when_no_thread_can_be_started(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the pools that check JSON text, make row ids and build membership filters beside
    # other work refusing new work (as they do while the interpreter shuts down, under a
    # non-daemon thread)
    for module, name in (
        (load_module, "_json_checkers"),
        (partition_files_module, "_row_id_thread"),
        (datafiles_module, "_filter_threads"),
    ):
        stopped = ThreadPoolExecutor(max_workers=1)
        stopped.shutdown()
        monkeypatch.setattr(module, name, lambda stopped=stopped: stopped)
    meta.create_table(
        TableSpec.create(
            name="typed",
            schema="ts TIMESTAMP NOT NULL, k VARCHAR, props JSON",
            partition_by="",
            row_group_by="k",
        )
    )
    rows = max(
        load_module._JSON_CHECK_BESIDE_FROM_ROWS, partition_files_module._ROW_IDS_BESIDE_FROM_ROWS
    )
    batch = pa.table(
        {
            "ts": pa.array([datetime(2026, 3, 1)] * rows),
            "k": [f"k{i % 3}" for i in range(rows)],
            "props": ["[1]"] * rows,
        }
    )

    # When a batch big enough for all of them is inserted, then it is, the work done in line
    result = inserter.insert_arrow("typed", batch)
    assert result.committed and result.rows == rows
    # And its file has its membership filter
    (written,) = meta.files("typed")
    assert written.column_stats["k"].membership is not None


def test_ndjson_csv_and_parquet_inputs_give_the_same_rows(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, tmp_path: Path
) -> None:
    spec = TableSpec.create(
        name="small",
        schema="ts TIMESTAMP NOT NULL, event VARCHAR, n INTEGER",
        partition_by="day(ts)",
    )
    meta.create_table(spec)
    rows = [{"ts": f"2026-04-0{1 + i % 2}T01:02:03Z", "event": f"e{i}", "n": i} for i in range(10)]
    ndjson = "\n".join(json.dumps(r) for r in rows).encode()
    csv = ("ts,event,n\n" + "\n".join(f"{r['ts']},{r['event']},{r['n']}" for r in rows)).encode()
    parquet_path = tmp_path / "in.parquet"
    pq.write_table(
        pa.table(
            {
                "ts": [datetime.fromisoformat(str(r["ts"]).replace("Z", "+00:00")) for r in rows],
                "event": [r["event"] for r in rows],
                "n": pa.array([r["n"] for r in rows], pa.int64()),
            }
        ),
        parquet_path,
    )
    inserter.insert_bytes("small", ndjson, fmt="ndjson")
    inserter.insert_bytes("small", csv, fmt="csv")
    inserter.insert_file("small", parquet_path, fmt="parquet")
    with io.BytesIO(ndjson) as stream:
        inserter.insert_stream("small", stream, fmt="ndjson")
    arrow = pq.read_table(parquet_path)
    inserter.insert_arrow("small", arrow)
    # pandas' shapes: nanosecond timestamps with a zone, large and dictionary-encoded strings
    inserter.insert_arrow(
        "small",
        pa.table(
            {
                "ts": arrow.column("ts").cast(pa.timestamp("ns", tz="Europe/Paris")),
                "event": arrow.column("event").cast(pa.large_string()).dictionary_encode(),
                "n": arrow.column("n").cast(pa.int16()),
            }
        ).to_batches()[0],
    )
    got = Counter(read_back(meta, objects, "small"))
    assert len(got) == 10 and set(got.values()) == {6}


ARROW_INPUT = {"ts": pa.array([datetime(2026, 3, 1), datetime(2026, 3, 2)]), "event": ["a", "b"]}
BAD_ARROW: list[tuple[str, object, str]] = [
    (
        "an integer for a string",
        pa.table({**ARROW_INPUT, "event": pa.array([1, 2], pa.int32())}),
        "row 0, field 'event': expected a string",
    ),
    (
        "NaN",
        pa.table({**ARROW_INPUT, "score": [1.0, float("nan")]}),
        "row 1, field 'score': expected a finite number",
    ),
    (
        "a timestamp in year 10000",
        pa.table({**ARROW_INPUT, "ts": pa.array([0, 253402300800 * 10**6], pa.timestamp("us"))}),
        "row 1, field 'ts'",
    ),
    (
        "a null in a NOT NULL column",
        pa.table({**ARROW_INPUT, "ts": pa.array([datetime(2026, 3, 1), None])}),
        "row 1, field 'ts'",
    ),
    (
        "JSON text with a trailing comma",
        pa.table({**ARROW_INPUT, "props": ['{"a": "1,}"}', '{"a": [1, 2,]}']}),
        "row 1, field 'props': expected standard JSON",
    ),
    ("an unknown column", pa.table({**ARROW_INPUT, "color": ["r", "g"]}), "field 'color'"),
    ("not a table", [{"ts": "2026-03-01"}], "expected a pyarrow Table or RecordBatch, got list"),
]


@pytest.mark.parametrize(("case", "data", "message"), BAD_ARROW, ids=[c[0] for c in BAD_ARROW])
def test_bad_arrow_tables_are_refused_clearly_and_nothing_is_written(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    wide: TableSpec,
    case: str,
    data: pa.Table,
    message: str,
) -> None:
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_arrow("wide", data)
    assert message in str(refused.value), case
    assert meta.snapshots("wide") == [] and stored_keys(objects) == []


def test_an_arrow_batch_retried_under_its_key_commits_once_and_other_content_is_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    batch = pa.table(ARROW_INPUT)
    first = inserter.insert_arrow("wide", batch, idempotency_key="k1")
    again = inserter.insert_arrow("wide", batch, idempotency_key="k1")
    assert first.committed and not again.committed
    assert again.snapshot_id == first.snapshot_id and len(meta.snapshots("wide")) == 1
    with pytest.raises(IdempotencyKeyReusedError):
        inserter.insert_arrow("wide", batch.slice(0, 1), idempotency_key="k1")
    assert meta.status("wide").rows == 2


def test_the_same_batch_sent_twice_with_one_key_is_committed_once(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    rows = [
        {"ts": "2026-03-01T00:00:00Z", "event": "a"},
        {"ts": "2026-03-02T00:00:00Z", "event": "b"},
    ]
    first = inserter.insert_rows("wide", rows, idempotency_key="batch-1")
    again = inserter.insert_rows("wide", rows, idempotency_key="batch-1")
    assert first.committed and not again.committed
    assert again.snapshot_id == first.snapshot_id and again.files == ()
    assert len(meta.snapshots("wide")) == 1
    assert sorted(stored_keys(objects)) == sorted(first.files)


def test_a_key_retried_with_other_rows_is_refused_and_writes_nothing(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    first = inserter.insert_rows(
        "wide", [{"ts": "2026-03-01T00:00:00Z", "event": "a"}], idempotency_key="batch-1"
    )
    before = sorted(stored_keys(objects))
    other = [{"ts": "2026-03-01T00:00:00Z", "event": "b"}]
    with pytest.raises(IdempotencyKeyReusedError, match=r"'batch-1'.*snapshot 1.*same rows"):
        inserter.insert_rows("wide", other, idempotency_key="batch-1")
    with pytest.raises(IdempotencyKeyReusedError):
        inserter.insert_bytes(
            "wide", json.dumps(other).encode(), fmt="json", idempotency_key="batch-1"
        )
    assert first.committed and len(meta.snapshots("wide")) == 1
    assert sorted(stored_keys(objects)) == before
    # The same rows again are still "already committed"
    again = inserter.insert_rows(
        "wide", [{"ts": "2026-03-01T00:00:00Z", "event": "a"}], idempotency_key="batch-1"
    )
    assert not again.committed and again.snapshot_id == first.snapshot_id


def test_a_nul_character_is_stored_and_read_back_but_never_a_partition_value(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    rows = [{"ts": "2026-03-01T00:00:00Z", "event": "a\x00b"}]
    result = inserter.insert_rows("wide", rows)
    assert result.committed
    (stored,) = read_back(meta, objects, "wide")
    assert stored[1] == "a\x00b"
    (f,) = meta.files("wide")
    # The meta store cannot hold NUL: the minimum keeps the prefix, the maximum is unknown
    assert (f.column_stats["event"].min, f.column_stats["event"].max) == ("a", None)
    # A partition value is kept in the meta store as it is: refused, naming the row and field
    spec = TableSpec.create(name="by_event", schema="event VARCHAR NOT NULL", partition_by="event")
    meta.create_table(spec)
    with pytest.raises(BatchRejectedError, match="row 0, field 'event': a partition value"):
        inserter.insert_rows("by_event", [{"event": "x\x00"}])
    assert meta.snapshots("by_event") == []
    # And an idempotency key cannot hold one either
    with pytest.raises(InvalidInputError, match="without NUL"):
        inserter.insert_rows("wide", rows, idempotency_key="k\x00")


def test_a_key_used_between_the_precheck_and_the_commit_returns_the_winner_and_cleans_up(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec
) -> None:
    # Given a key that another writer commits after our pre-check (simulated by committing it
    # from inside the object store's first put of our attempt)
    rows = [{"ts": "2026-03-01T00:00:00Z", "event": "a"}]

    class RacingStore(FailingAfterPuts):
        def put(self, key: str, data: bytes) -> None:
            if not self.puts:
                other = Inserter(meta=meta, objects=self.inner)
                other.insert_rows("wide", rows, idempotency_key="k")
                other.close()
            super().put(key, data)

    racing = Inserter(meta=meta, objects=RacingStore(objects, allowed=10))
    result = racing.insert_rows("wide", rows, idempotency_key="k")
    racing.close()
    assert not result.committed and result.snapshot_id == 1
    assert len(meta.snapshots("wide")) == 1
    assert sorted(stored_keys(objects)) == sorted(f.path for f in meta.files("wide"))


def test_a_crash_after_some_partitions_are_written_commits_nothing_and_removes_them(
    meta: MetaStore, objects: ObjectStore, wide: TableSpec
) -> None:
    # Given a writer whose store fails after two of three partitions' files are written
    failing = FailingAfterPuts(objects, allowed=2)
    ins = Inserter(meta=meta, objects=failing)
    rows = [{"ts": f"2026-03-0{d}T00:00:00Z", "event": "a"} for d in (1, 2, 3)]
    with pytest.raises(InjectedFault):
        ins.insert_rows("wide", rows)
    ins.close()
    # Then two objects had been written, nothing is committed, and both are gone
    assert len(failing.puts) == 2
    assert meta.snapshots("wide") == [] and meta.files("wide") == []
    assert stored_keys(objects) == []


def test_an_insert_whose_commit_answer_is_lost_is_committed_once(
    meta: MetaStore, objects: ObjectStore, wide: TableSpec, postgres_dsn: str
) -> None:
    # Given an insert whose commit reaches the meta store and commits, its answer lost
    proxy = PgFaultProxy(postgres_dsn)
    try:
        with MetaStore(proxy.dsn, schema=meta.schema) as proxied:
            ins = Inserter(meta=proxied, objects=objects)
            fault = proxy.arm(b"INSERT INTO snapshots", "drop_after")
            result = ins.insert_rows("wide", [{"ts": "2026-03-01", "event": "a"}])
            ins.close()
    finally:
        proxy.close()
    # Then the insert says it committed, once, and its object is the committed file
    assert fault.fired.is_set()
    assert result.committed and result.rows == 1
    assert len(meta.snapshots("wide")) == 1
    assert stored_keys(objects) == [f.path for f in meta.files("wide")]


def test_a_commit_whose_outcome_is_unknown_leaves_its_objects_for_the_orphan_sweep(
    meta: MetaStore,
    objects: ObjectStore,
    wide: TableSpec,
    postgres_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an insert whose commit is cut off on its way, after which the meta store cannot be
    # reached at all (so that no attempt can find out whether it committed)
    proxy = PgFaultProxy(postgres_dsn)
    monkeypatch.setattr(MetaStore, "_pause_before_retry", lambda *_: proxy.close())
    try:
        with MetaStore(
            proxy.dsn, schema=meta.schema, max_connections=1, connect_timeout_s=0.5
        ) as proxied:
            ins = Inserter(meta=proxied, objects=objects)
            proxy.arm(b"INSERT INTO snapshots", "drop_before")
            with pytest.raises(CommitOutcomeUnknownError):
                ins.insert_rows("wide", [{"ts": "2026-03-01", "event": "a"}], idempotency_key="k")
            ins.close()
    finally:
        proxy.close()
    # Nothing committed, but the object stays: only the orphan sweep may judge it.
    assert meta.files("wide") == []
    assert len(stored_keys(objects)) == 1


def test_an_insert_interrupted_while_its_commit_is_in_flight_leaves_its_objects(
    meta: MetaStore, objects: ObjectStore, wide: TableSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an insert interrupted (Ctrl-C) just after its commit statement ran on the server
    real_execute = psycopg.Cursor.execute

    def interrupted_after(
        self: psycopg.Cursor, query: object, *args: object, **kw: object
    ) -> object:
        result = real_execute(self, query, *args, **kw)  # type: ignore[arg-type]
        if "INSERT INTO snapshots" in str(query):
            raise KeyboardInterrupt
        return result

    ins = Inserter(meta=meta, objects=objects)
    monkeypatch.setattr(psycopg.Cursor, "execute", interrupted_after)
    with pytest.raises(KeyboardInterrupt):
        ins.insert_rows("wide", [{"ts": "2026-03-01", "event": "a"}])
    monkeypatch.undo()
    ins.close()
    # Then its object stays: the statement committed it, and it is the table's file
    assert len(meta.files("wide")) == 1
    assert stored_keys(objects) == [f.path for f in meta.files("wide")]


DEEP = {"a": 1}
for _ in range(100):
    DEEP = {"a": DEEP}

BAD_ROWS: list[tuple[str, object, str]] = [
    ("wrong type: number for a string", [{"ts": "2026-03-01", "event": 5}], "row 0, field 'event'"),
    (
        "wrong type: string for an integer",
        [{"ts": "2026-03-01", "event": "a", "n": "5"}],
        "field 'n'",
    ),
    ("integer out of range", [{"ts": "2026-03-01", "event": "a", "n": 2**70}], "field 'n'"),
    ("float for an integer", [{"ts": "2026-03-01", "event": "a", "n": 1.5}], "field 'n'"),
    ("string for a boolean", [{"ts": "2026-03-01", "event": "a", "ok": "yes"}], "field 'ok'"),
    ("decimal overflow", [{"ts": "2026-03-01", "event": "a", "price": 1e12}], "field 'price'"),
    ("bad date", [{"ts": "2026-03-01", "event": "a", "d": "2026-02-30"}], "field 'd'"),
    (
        "bad list element",
        [{"ts": "2026-03-01", "event": "a", "tags": ["x", 1]}],
        "row 0, field 'tags[1]': expected a string (VARCHAR)",
    ),
    ("object for a list", [{"ts": "2026-03-01", "event": "a", "tags": {"x": 1}}], "field 'tags'"),
    ("null in required column", [{"ts": "2026-03-01", "event": None}], "required"),
    ("missing required column", [{"ts": "2026-03-01"}], "row 0, field 'event': required"),
    ("missing required timestamp", [{"event": "a"}], "field 'ts': required"),
    (
        "unparsable timestamp",
        [{"ts": "yesterday", "event": "a"}],
        "field 'ts': expected an ISO-8601",
    ),
    ("impossible timestamp", [{"ts": "2026-13-45T99:00:00", "event": "a"}], "field 'ts'"),
    ("boolean timestamp", [{"ts": True, "event": "a"}], "field 'ts'"),
    ("epoch beyond range", [{"ts": 2**62, "event": "a"}], "field 'ts'"),
    ("deeply nested JSON", [{"ts": "2026-03-01", "event": "a", "props": DEEP}], "nested more than"),
    (
        "huge string",
        [{"ts": "2026-03-01", "event": "x" * 70_000}],
        "over the limit of 65,536 bytes",
    ),
    (
        "unknown field",
        [{"ts": "2026-03-01", "event": "a", "evnt": "typo"}],
        "field 'evnt': unknown",
    ),
    (
        "not an object",
        [{"ts": "2026-03-01", "event": "a"}, ["ts", "event"]],
        "row 1: not a JSON object",
    ),
    ("empty batch", [], "holds no rows"),
    (
        "bad row among good ones",
        [{"ts": "2026-03-01", "event": "a"}] * 7 + [{"ts": "2026-03-01", "event": 7}],
        "row 7, field 'event'",
    ),
    ("unserializable value", [{"ts": "2026-03-01", "event": "a", "props": {1, 2}}], "row 0"),
    (
        "year 10000",
        [{"ts": "10000-01-01T00:00:00", "event": "a"}],
        "row 0, field 'ts': expected a timestamp from year 1 to 9999",
    ),
    ("infinite timestamp", [{"ts": "infinity", "event": "a"}], "field 'ts': expected a timestamp"),
    (
        "infinite date",
        [{"ts": "2026-03-01", "event": "a", "d": "infinity"}],
        "field 'd': expected a date",
    ),
    ("year 0", [{"ts": "0000-12-31T00:00:00", "event": "a"}], "field 'ts'"),
    (
        "NaN double",
        [{"ts": "2026-03-01", "event": "a", "score": float("nan")}],
        "row 0, field 'score': NaN and infinities are refused",
    ),
    (
        "infinite double",
        [{"ts": "2026-03-01", "event": "a", "score": float("inf")}],
        "field 'score'",
    ),
    (
        "NaN inside JSON",
        [{"ts": "2026-03-01", "event": "a", "props": {"x": [float("nan")]}}],
        "field 'props'",
    ),
]


@pytest.mark.parametrize(("case", "rows", "message"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_bad_rows_are_refused_clearly_and_nothing_is_written(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    wide: TableSpec,
    case: str,
    rows: list[dict[str, object]],
    message: str,
) -> None:
    with pytest.raises(BatchRejectedError, match="batch refused") as refused:
        inserter.insert_rows("wide", rows)
    assert message in str(refused.value), case
    assert meta.snapshots("wide") == []
    assert stored_keys(objects) == []


def _parquet(columns: dict[str, pa.Array]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


BAD_BYTES: list[tuple[str, bytes, str, str]] = [
    ("non-JSON body", b"this is not json", "json", "invalid JSON"),
    (
        "truncated NDJSON line",
        b'{"ts": "2026-03-01", "event": "a"}\n{"ts": ',
        "ndjson",
        "row 1: invalid JSON",
    ),
    ("CSV with an unknown column", b"ts,event,color\n2026-03-01,a,red\n", "csv", "field 'color'"),
    ("CSV with a bad integer", b"ts,event,n\n2026-03-01,a,five\n", "csv", "row 0, field 'n'"),
    ("not a Parquet file", b"PAR1 nope", "parquet", "not a readable parquet file"),
    (
        "JSON array missing its closing bracket",
        b'[{"ts": "2026-03-01", "event": "a"}',
        "json",
        "invalid JSON",
    ),
    (
        "NaN in NDJSON",
        b'{"ts": "2026-03-01", "event": "a", "score": NaN}',
        "ndjson",
        "row 0, field 'score': expected a finite number",
    ),
    (
        "NaN inside a JSON value",
        b'{"ts": "2026-03-01", "event": "a", "props": {"x": NaN, "note": "nan is fine here"}}',
        "ndjson",
        "row 0, field 'props': expected standard JSON",
    ),
    (
        "a trailing comma in an NDJSON record",
        b'{"ts": "2026-03-01", "event": "a"}\n{"ts": "2026-03-01", "event": "b",}\n',
        "ndjson",
        "row 1: invalid JSON: a trailing comma before a closing bracket (line 2, column 34)",
    ),
    (
        "a trailing comma inside a JSON value (NDJSON)",
        '{"ts": "2026-03-01", "event": "a", "props": {"nöte": "a,]", "x": [1, 2 ,\t]}}'.encode(),
        "ndjson",
        "invalid JSON: a trailing comma before a closing bracket (line 1, column 72)",  # chars
    ),
    (
        "a trailing comma in a JSON array's record",
        b'[{"ts": "2026-03-01", "event": "a", "props": {"s": "x,}", "n": 1,}}]',
        "json",
        "invalid JSON: a trailing comma before a closing bracket (line 1, column 65)",
    ),
    (
        "a JSON value with a trailing comma (CSV)",
        b'ts,event,props\n2026-03-01,a,"{""k"": ""v,]""}"\n2026-03-01,b,"[1,2,]"\n',
        "csv",
        "row 1, field 'props': expected standard JSON",
    ),
    (
        "Infinity in CSV",
        b"ts,event,score\n2026-03-01,a,inf\n",
        "csv",
        "row 0, field 'score': expected a finite number",
    ),
    ("year 10000 in CSV", b"ts,event\n10000-01-01,a\n", "csv", "row 0, field 'ts'"),
    (
        "an integer for a string (Parquet)",
        _parquet({"ts": pa.array([datetime(2026, 3, 1)]), "event": pa.array([5], pa.int32())}),
        "parquet",
        "row 0, field 'event': expected a string",
    ),
    (
        "a double for an integer (Parquet)",
        _parquet(
            {"ts": pa.array([datetime(2026, 3, 1)]), "event": pa.array(["a"]), "n": pa.array([2.5])}
        ),
        "parquet",
        "row 0, field 'n': expected an integer",
    ),
    (
        "NaN (Parquet)",
        _parquet(
            {
                "ts": pa.array([datetime(2026, 3, 1)]),
                "event": pa.array(["a"]),
                "score": pa.array([float("nan")]),
            }
        ),
        "parquet",
        "row 0, field 'score': expected a finite number",
    ),
]


@pytest.mark.parametrize(
    ("case", "data", "fmt", "message"), BAD_BYTES, ids=[c[0] for c in BAD_BYTES]
)
def test_bad_bodies_are_refused_clearly_and_nothing_is_written(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    wide: TableSpec,
    case: str,
    data: bytes,
    fmt: str,
    message: str,
) -> None:
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_bytes("wide", data, fmt=fmt)  # type: ignore[arg-type]
    assert message in str(refused.value), case
    assert meta.snapshots("wide") == [] and stored_keys(objects) == []


@pytest.mark.parametrize("name", ["nope", "events; DROP TABLE x", "../../etc", 'a"b'])
def test_unknown_or_malformed_table_names_are_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, wide: TableSpec, name: str
) -> None:
    with pytest.raises((TableNotFoundError, ValueError)) as refused:
        inserter.insert_rows(name, [{"ts": "2026-03-01", "event": "a"}])
    assert repr(name)[1:-1] in str(refused.value) or name in str(refused.value)
    assert stored_keys(objects) == [] and meta.snapshots("wide") == []


def test_a_batch_over_the_size_limit_is_refused_before_anything_is_read(
    meta: MetaStore, objects: ObjectStore, wide: TableSpec
) -> None:
    ins = Inserter(meta=meta, objects=objects, limits=InsertLimits(max_batch_bytes=1000))
    rows = [{"ts": "2026-03-01", "event": "a" * 50}] * 50
    with pytest.raises(BatchRejectedError, match="over the limit of 1,000 bytes"):
        ins.insert_rows("wide", rows)
    with pytest.raises(BatchRejectedError, match="over the limit"):
        ins.insert_stream("wide", io.BytesIO(b"x" * 5000), fmt="ndjson")
    ins.close()
    assert stored_keys(objects) == []


def test_rows_land_in_the_partition_their_values_map_to_for_every_transform(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter
) -> None:
    # Given a table partitioned by identity (with nulls), bucket, truncate and hour
    spec = TableSpec.create(
        name="multi",
        schema="ts TIMESTAMPTZ NOT NULL, tenant VARCHAR, user_id VARCHAR, n BIGINT",
        partition_by="tenant, bucket[4](user_id), truncate[10](n), hour(ts)",
        sort_by="ts",
    )
    meta.create_table(spec)
    rows = [
        {
            "ts": f"2026-07-01T0{i % 3}:15:00+02:00",
            "tenant": [None, "acme", "a/b c"][i % 3],
            "user_id": f"user-{i % 11}",
            "n": i * 7 - 100,
        }
        for i in range(200)
    ]
    # When inserted
    result = inserter.insert_rows("multi", rows)
    # Then every row of every file maps to that file's partition, and partitions are distinct
    seen: set[str] = set()
    total = 0
    for f in meta.files("multi"):
        assert f.partition_path not in seen
        seen.add(f.partition_path)
        values = spec.parse_partition_path(f.partition_path)
        for row in pq.read_table(io.BytesIO(objects.get(f.path))).to_pylist():
            assert spec.partition_values(row) == values
            total += 1
    expected = {spec.partition_path(spec.partition_values(_typed(r))) for r in rows}
    assert seen == expected and result.partitions == len(expected) and total == 200


@pytest.mark.parametrize(
    ("kind", "low", "high"),
    [
        ("SMALLINT", -(2**15), 2**15 - 1),
        ("INTEGER", -(2**31), 2**31 - 1),
        ("UBIGINT", 0, 2**64 - 1),
        ("HUGEINT", -(2**63), 2**63 - 1),  # Python rows carry 64 bits
    ],
)
def test_truncate_partitions_values_at_their_types_limits(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, kind: str, low: int, high: int
) -> None:
    # Given a column truncated by a width that does not divide its type's least value
    spec = TableSpec.create(name="lim", schema=f"n {kind}", partition_by="truncate[3](n)")
    meta.create_table(spec)
    rows = [{"n": low}, {"n": high}, {"n": -7 if low < 0 else 7}]
    # When rows at the limits are inserted
    inserter.insert_rows("lim", rows)
    # Then each lands in the partition of its floor to a multiple of 3 (below the type's least
    # value for the least value itself), as the spec computes it
    landed = {
        f.partition_path: [
            r["n"] for r in pq.read_table(io.BytesIO(objects.get(f.path))).to_pylist()
        ]
        for f in meta.files("lim")
    }
    assert landed == {spec.partition_path(spec.partition_values(r)): [r["n"]] for r in rows}
    assert spec.partition_values({"n": -(2**31)}) == (-(2**31) - 1,)


def test_a_bigint_whose_truncate_partition_leaves_bigint_is_refused_naming_row_and_column(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter
) -> None:
    meta.create_table(
        TableSpec.create(
            name="lim", schema="m BIGINT, n BIGINT", partition_by="truncate[10](m), truncate[3](n)"
        )
    )
    with pytest.raises(BatchRejectedError) as refused:
        inserter.insert_rows(
            "lim", [{"m": 1, "n": 5}, {"m": 2, "n": None}, {"m": 3, "n": -(2**63)}, {"m": 4}]
        )
    (problem,) = refused.value.problems
    assert (problem.row, problem.field) == (2, "n") and "truncate partition" in problem.message
    assert meta.files("lim") == [] and stored_keys(objects) == []


def _typed(row: dict[str, object]) -> dict[str, object]:
    return {**row, "ts": datetime.fromisoformat(str(row["ts"]))}


def test_an_unpartitioned_table_gets_one_file_per_batch(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter
) -> None:
    meta.create_table(TableSpec.create(name="flat", schema="k VARCHAR, v INTEGER", sort_by="k"))
    result = inserter.insert_rows("flat", [{"k": str(9 - i), "v": i} for i in range(10)])
    (path,) = result.files
    assert path.startswith("flat/data/") and path.count("/") == 2
    table = pq.read_table(io.BytesIO(objects.get(path)))
    assert table.column("k").to_pylist() == [str(i) for i in range(10)]


@pytest.mark.parametrize("fmt", ["rows", "json", "ndjson", "csv"])
def test_a_column_name_of_the_longest_length_allowed_is_inserted_by_every_path(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, fmt: str
) -> None:
    # Given a column named with 63 characters, the longest a name may have (its presence flag,
    # "__present_" and the name, is longer: it was refused as an identifier)
    long = "c" * 63
    meta.create_table(TableSpec.create(name="t", schema=f"ts TIMESTAMP, {long} VARCHAR"))
    rows = [{"ts": "2026-02-03T10:00:00", long: "x"}, {"ts": "2026-02-03T11:00:00", long: None}]

    # When rows holding it are inserted
    if fmt == "rows":
        inserter.insert_rows("t", rows)
    elif fmt == "csv":
        inserter.insert_bytes(
            "t", f"ts,{long}\n2026-02-03T10:00:00,x\n2026-02-03T11:00:00,\n".encode(), fmt="csv"
        )
    else:
        text = json.dumps(rows) if fmt == "json" else "\n".join(map(json.dumps, rows))
        inserter.insert_bytes("t", text.encode(), fmt=fmt)  # type: ignore[arg-type]

    # Then they are stored with their values
    assert sorted(read_back(meta, objects, "t"), key=str) == sorted(
        [(datetime(2026, 2, 3, 10), "x"), (datetime(2026, 2, 3, 11), None)], key=str
    )


def test_a_partition_value_too_long_to_store_refuses_the_batch_naming_its_row(
    meta: MetaStore, tmp_path: Path
) -> None:
    meta.create_table(
        TableSpec.create(
            name="tenants",
            schema="ts TIMESTAMP NOT NULL, tenant VARCHAR",
            partition_by="day(ts), truncate[400](tenant)",
        )
    )
    objects = LocalObjectStore(tmp_path / "warehouse")
    inserter = Inserter(meta=meta, objects=objects)
    rows = [{"ts": f"2026-05-0{1 + i % 2}", "tenant": f"t{i}"} for i in range(6)]
    rows[3]["tenant"] = "ü" * 300  # 600 bytes, 1,800 escaped: truncated to 400 characters
    try:
        with pytest.raises(BatchRejectedError) as refused:
            inserter.insert_rows("tenants", rows)
    finally:
        inserter.close()
    (problem,) = refused.value.problems
    assert (problem.row, problem.field) == (3, "tenant")
    assert "truncate[400](tenant)" in problem.message and "255" in problem.message
    assert meta.status("tenants").rows == 0 and not list(
        (tmp_path / "warehouse").rglob("*.parquet")
    )
