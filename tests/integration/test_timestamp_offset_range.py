"""A timestamp's UTC offset must be one a clock can show: from -18:00 to +18:00, minutes and
seconds 00 to 59. DuckDB's cast reads any two digits (``+25:00``, ``+23:99``, ``-99:00``) and
pyarrow's up to ``+23:59``, and both move the instant by them; such a value is refused, naming
its row and field, through every input that turns text into a timestamp, and nothing is
written. Offsets in range keep their instant on every path."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest import Inserter
from icefloe.ingest.json_input import timestamps_from_text
from icefloe.ingest.queue import QueueMessage, insert_queue_messages
from icefloe.metastore.store import MetaStore
from icefloe.spec import TableSpec
from icefloe.storage import LocalObjectStore, ObjectStore

pytestmark = pytest.mark.integration

SCHEMA = (
    "ts TIMESTAMP NOT NULL, tz TIMESTAMPTZ, tl TIMESTAMP[], tzl TIMESTAMPTZ[],"
    " st STRUCT(a TIMESTAMP), m MAP(VARCHAR, TIMESTAMPTZ), event VARCHAR"
)
GOOD = "2026-05-01T00:00:00Z"
BAD_OFFSETS = ["+25:00", "+23:99", "-99:00", "+19:00", "+18:01", "+2359", "+19", "+05:60"]
VALID_OFFSETS = ["Z", "+00:00", "+05:30", "-0800", "+14:00", "-12:00", "+18:00", "-18", "+0545"]


def offset_message(path: str, kind: str, row: int = 1) -> str:
    return (
        f"batch refused: row {row}, field {path!r}: UTC offset out of range: expected one from"
        f" -18:00 to +18:00, minutes 00 to 59 ({kind})"
    )


def instant(text: str) -> datetime:
    """The instant Python reads (naive, in UTC)."""
    return datetime.fromisoformat(text).astimezone(UTC).replace(tzinfo=None)


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "warehouse")


@pytest.fixture
def zoned(meta: MetaStore) -> TableSpec:
    spec = TableSpec.create(name="zoned", schema=SCHEMA)
    meta.create_table(spec)
    return spec


@pytest.fixture
def inserter(meta: MetaStore, objects: ObjectStore) -> Iterator[Inserter]:
    ins = Inserter(meta=meta, objects=objects)
    yield ins
    ins.close()


def stored(meta: MetaStore, objects: ObjectStore) -> list[dict[str, object]]:
    paths = [objects.uri(f.path) for f in meta.files("zoned")]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return (
        con.sql(f"SELECT * EXCLUDE (_row_id) FROM read_parquet({paths!r}) ORDER BY event")
        .to_arrow_table()
        .to_pylist()
    )


def assert_refused(
    meta: MetaStore, objects: ObjectStore, error: pytest.ExceptionInfo[BatchRejectedError]
) -> str:
    assert meta.snapshots("zoned") == []
    assert [o.key for o in objects.list_prefix("")] == []
    return str(error.value)


def insert_json(inserter: Inserter, rows: list[dict[str, object]], via: str) -> None:
    if via == "rows":
        inserter.insert_rows("zoned", rows)
    else:
        data = "\n".join(json.dumps(row) for row in rows).encode()
        inserter.insert_bytes("zoned", data, fmt="ndjson")


# (fields of the bad row, the path named, the type named); the good row's ``ts`` is GOOD.
JSON_FIELDS: list[tuple[str, object, str, str]] = [
    ("ts", "{}", "ts", "TIMESTAMP"),
    ("tz", "{}", "tz", "TIMESTAMPTZ"),
    ("tl", ["{}"], "tl[0]", "TIMESTAMP"),
    ("tzl", [GOOD, "{}"], "tzl[1]", "TIMESTAMPTZ"),
    ("st", {"a": "{}"}, "st.a", "TIMESTAMP"),
    ("m", {"k": "{}"}, "m['k']", "TIMESTAMPTZ"),
]


def _filled(template: object, text: str) -> object:
    if isinstance(template, str):
        return template.format(text) if template == "{}" else template
    if isinstance(template, list):
        return [_filled(t, text) for t in template]
    assert isinstance(template, dict)
    return {k: _filled(v, text) for k, v in template.items()}


@pytest.mark.parametrize("via", ["rows", "ndjson"])
@pytest.mark.parametrize(("column", "template", "path", "kind"), JSON_FIELDS)
def test_a_json_timestamp_with_an_offset_out_of_range_is_refused(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    zoned: TableSpec,
    via: str,
    column: str,
    template: object,
    path: str,
    kind: str,
) -> None:
    for offset in BAD_OFFSETS:
        text = f"2026-05-01T00:00:00{offset}"
        bad: dict[str, object] = {"ts": GOOD, column: _filled(template, text)}
        with pytest.raises(BatchRejectedError) as error:
            insert_json(inserter, [{"ts": GOOD}, bad], via)
        assert assert_refused(meta, objects, error) == offset_message(path, kind), offset


@pytest.mark.parametrize("via", ["rows", "ndjson"])
@pytest.mark.parametrize(
    "others",
    [
        ["2026-05-01T00:00:00+01:00"] * 3,  # values of one shape: offsets read as numbers
        ["2026-05-01T00:00:00.5+01:00", "2026-05-01T00:00:00Z"],  # each value searched
    ],
)
def test_an_offset_out_of_range_among_good_ones_is_refused_by_row(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    zoned: TableSpec,
    via: str,
    others: list[str],
) -> None:
    for offset in ["+25:00", "+19:00", "+18:30", "-2359", "+05:99"]:
        rows: list[dict[str, object]] = [{"ts": ts} for ts in others]
        rows.append({"ts": f"2026-05-01T00:00:00{offset}"})
        with pytest.raises(BatchRejectedError) as error:
            insert_json(inserter, rows, via)
        refusal = assert_refused(meta, objects, error)
        assert refusal == offset_message("ts", "TIMESTAMP", row=len(others)), offset


CSV_BAD: list[tuple[str, str, str, str]] = [
    ("ts", "{}", "ts", "TIMESTAMP"),
    ("tz", "{}", "tz", "TIMESTAMPTZ"),
    ("tl", '"[2026-05-01T00:00:00Z, {}]"', "tl", "TIMESTAMP[]"),
    ("tzl", '"[{}]"', "tzl", "TIMESTAMPTZ[]"),
]


@pytest.mark.parametrize(("column", "cell", "path", "kind"), CSV_BAD)
def test_csv_text_with_an_offset_out_of_range_is_refused(
    meta: MetaStore,
    objects: ObjectStore,
    inserter: Inserter,
    zoned: TableSpec,
    column: str,
    cell: str,
    path: str,
    kind: str,
) -> None:
    for offset in [*BAD_OFFSETS, "+05:30:60", "+25:00 "]:
        text = cell.replace("{}", f"2026-05-01T00:00:00{offset}")
        header = "ts" if column == "ts" else f"ts,{column}"
        first = GOOD if column == "ts" else f"{GOOD},"
        second = text if column == "ts" else f"{GOOD},{text}"
        data = f"{header}\n{first}\n{second}\n".encode()
        with pytest.raises(BatchRejectedError) as error:
            inserter.insert_bytes("zoned", data, fmt="csv")
        assert assert_refused(meta, objects, error) == offset_message(path, kind), offset


def _arrow_tables(text: str) -> list[tuple[pa.Table, str, str]]:
    """Arrow tables holding ``text`` as a string where a timestamp goes, with the path and
    type a refusal names."""
    ts = pa.array([datetime(2026, 5, 1), datetime(2026, 5, 1)], pa.timestamp("us"))
    return [
        (pa.table({"ts": pa.array([GOOD, text])}), "ts", "TIMESTAMP"),
        (pa.table({"ts": ts, "tz": pa.array([None, text])}), "tz", "TIMESTAMPTZ"),
        (pa.table({"ts": ts, "tl": pa.array([[], [GOOD, text]])}), "tl[1]", "TIMESTAMP"),
        (pa.table({"ts": ts, "st": pa.array([None, {"a": text}])}), "st.a", "TIMESTAMP"),
    ]


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_arrow_and_parquet_strings_with_an_offset_out_of_range_are_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, zoned: TableSpec, fmt: str
) -> None:
    for offset in ["+25:00", "+23:99", "-99:00", "+18:30"]:
        for table, path, kind in _arrow_tables(f"2026-05-01T00:00:00{offset}"):
            with pytest.raises(BatchRejectedError) as error:
                if fmt == "arrow":
                    inserter.insert_arrow("zoned", table)
                else:
                    sink = io.BytesIO()
                    pq.write_table(table, sink)
                    inserter.insert_bytes("zoned", sink.getvalue(), fmt="parquet")
            refusal = assert_refused(meta, objects, error)
            assert refusal == offset_message(path, kind), (offset, path)


def test_a_queue_message_with_an_offset_out_of_range_fails_alone(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, zoned: TableSpec
) -> None:
    batch = [
        QueueMessage("good", json.dumps({"ts": "2026-05-01T00:00:00+05:30", "event": "good"})),
        QueueMessage("bad", json.dumps({"ts": "2026-05-01T00:00:00+25:00", "event": "bad"})),
        QueueMessage("nested", json.dumps({"ts": GOOD, "st": {"a": "2026-05-01T00:00:00-99:00"}})),
    ]
    outcome = insert_queue_messages(inserter, batch, default_table="zoned")
    assert sorted(outcome.failed_message_ids) == ["bad", "nested"]
    assert outcome.failed["bad"] == (
        "row 0 of the message, field 'ts': UTC offset out of range: expected one from -18:00"
        " to +18:00, minutes 00 to 59 (TIMESTAMP)"
    )
    assert "field 'st.a': UTC offset out of range" in outcome.failed["nested"]
    assert [(r["event"], r["ts"]) for r in stored(meta, objects)] == [
        ("good", datetime(2026, 4, 30, 18, 30))
    ]


def test_valid_offsets_keep_their_instant_on_every_path(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, zoned: TableSpec
) -> None:
    texts = [f"2026-05-01T00:00:00{offset}" for offset in VALID_OFFSETS]
    texts.append("2026-05-01T00:00:00.25+05:30")
    expected = [instant(t) for t in texts]
    # JSON rows (one shape per batch, and all mixed in one), NDJSON, CSV, Arrow strings
    for n, text in enumerate(texts):
        inserter.insert_rows("zoned", [{"ts": text, "tz": text, "event": f"rows{n:02}"}])
        line = json.dumps({"ts": text, "tl": [text], "st": {"a": text}, "event": f"nd{n:02}"})
        inserter.insert_bytes("zoned", line.encode(), fmt="ndjson")
        csv = f'ts,tz,tl,tzl,event\n{text},{text},"[{text}]","[{text}]",csv{n:02}\n'
        inserter.insert_bytes("zoned", csv.encode(), fmt="csv")
    inserter.insert_rows("zoned", [{"ts": t, "event": f"mixed{n:02}"} for n, t in enumerate(texts)])
    inserter.insert_arrow(
        "zoned",
        pa.table(
            {
                "ts": pa.array(texts),
                "tl": pa.array([[t] for t in texts]),
                "event": pa.array([f"arrow{n:02}" for n in range(len(texts))]),
            }
        ),
    )
    rows = {str(r["event"]): r for r in stored(meta, objects)}
    for n, want in enumerate(expected):
        zoned_want = want.replace(tzinfo=UTC)
        assert rows[f"rows{n:02}"]["ts"] == want
        assert rows[f"rows{n:02}"]["tz"] == zoned_want
        assert rows[f"nd{n:02}"]["ts"] == want
        assert rows[f"nd{n:02}"]["tl"] == [want]
        assert rows[f"nd{n:02}"]["st"] == {"a": want}
        assert rows[f"csv{n:02}"]["ts"] == want
        assert rows[f"csv{n:02}"]["tz"] == zoned_want
        assert rows[f"csv{n:02}"]["tzl"] == [zoned_want]
        # A TIMESTAMP[] from CSV text once dropped the offset (the cast to TIMESTAMP[] does)
        assert rows[f"csv{n:02}"]["tl"] == [want]
        assert rows[f"mixed{n:02}"]["ts"] == want
        assert rows[f"arrow{n:02}"]["ts"] == want
        assert rows[f"arrow{n:02}"]["tl"] == [want]


def test_an_offset_with_seconds_in_range_is_kept_and_past_59_refused(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, zoned: TableSpec
) -> None:
    with pytest.raises(BatchRejectedError) as error:
        inserter.insert_rows("zoned", [{"ts": GOOD}, {"ts": "2026-05-01T00:00:00+05:30:99"}])
    assert assert_refused(meta, objects, error) == offset_message("ts", "TIMESTAMP")
    inserter.insert_rows("zoned", [{"ts": "2026-05-01T00:00:00+05:30:15", "event": "s"}])
    assert [r["ts"] for r in stored(meta, objects)] == [datetime(2026, 4, 30, 18, 29, 45)]


def test_a_date_alone_and_local_times_are_no_offset(
    meta: MetaStore, objects: ObjectStore, inserter: Inserter, zoned: TableSpec
) -> None:
    # The day of a date alone (-31) and a local time's last digits are not read as offsets
    texts = ["2026-05-31", "2026-12-31 23:59:59", "2026-12-31T23:59:59.999999"]
    for n, text in enumerate(texts):
        inserter.insert_bytes("zoned", f"ts,event\n{text},c{n}\n".encode(), fmt="csv")
        inserter.insert_rows("zoned", [{"ts": text, "event": f"r{n}"}])
    rows = {str(r["event"]): r["ts"] for r in stored(meta, objects)}
    for n, text in enumerate(texts):
        assert rows[f"c{n}"] == rows[f"r{n}"] == datetime.fromisoformat(text)


@pytest.mark.parametrize(
    "values",
    [
        ["2026-05-01T00:00:00+19:00"],
        ["2026-05-01T00:00:00+18:30"] * 2,
        ["2026-05-01T00:00:00+2359"],
        ["2026-05-01T00:00:00-19"],
        ["2026-05-01T00:00:00.5Z", "2026-05-01T00:00:00+19:00"],
    ],
)
def test_the_one_parse_path_leaves_an_offset_pyarrow_reads_out_of_range_to_the_conversion(
    values: list[str],
) -> None:
    # pyarrow's cast reads offsets up to 23:59: the fast path must not take them
    assert timestamps_from_text(pa.chunked_array([pa.array(values)])) is None
    good = [v[: v.index(":00:00") + 6] + "+18:00" for v in values]
    converted = timestamps_from_text(pa.chunked_array([pa.array(good)]))
    assert converted is not None
    assert converted.to_pylist() == [instant(v) for v in good]
