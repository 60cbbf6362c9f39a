"""Nested columns (STRUCT, MAP, lists of them) from JSON, NDJSON and rows, through load_batch:
typed per leaf with the checks a top-level column of the leaf's type gets, NULL kept apart from
empty at every level, and each bad part of a value named by its path."""

from __future__ import annotations

import json
import random
import uuid
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.errors import BatchRejectedError
from icefloe.ingest.load import load_batch
from icefloe.ingest.rows_input import load_rows_fast
from icefloe.ingest.sources import InsertLimits, arrow_batch, rows_batch, stage_bytes, stage_file
from icefloe.spec import TableSpec
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode, is_nested_text
from icefloe.spec.types import normalize_type, type_tree
from support.type_trees import random_type

LIMITS = InsertLimits(max_value_bytes=40)
CONTEXT = "STRUCT(ip VARCHAR, page STRUCT(url VARCHAR, n INTEGER), campaign STRUCT(name VARCHAR))"
SPEC = TableSpec.create(
    name="events",
    schema=(
        f"id INTEGER, context {CONTEXT}, tags STRUCT(k VARCHAR, v BIGINT)[],"
        " m MAP(VARCHAR, INTEGER), codes MAP(INTEGER, STRUCT(seen TIMESTAMP, ok BOOLEAN)),"
        " deep STRUCT(b STRUCT(c MAP(VARCHAR, STRUCT(d DATE)))[])"
    ),
)
FORMATS = ("ndjson", "json", "rows")
N = normalize_type  # type texts in messages are canonical


def load(
    con: duckdb.DuckDBPyConnection,
    rows: list[dict[str, object]],
    fmt: str,
    *,
    spec: TableSpec = SPEC,
    limits: InsertLimits = LIMITS,
) -> pa.Table:
    """The rows loaded as NDJSON text, as one JSON array, or as Python rows."""
    if fmt == "rows":
        batch = rows_batch(rows, limits=limits)
        try:
            return load_batch(con, spec, batch, limits=limits)
        finally:
            batch.discard()
    if fmt == "ndjson":
        data = "\n".join(json.dumps(row) for row in rows).encode()
    else:
        data = json.dumps(rows, indent=1).encode()
    staged = stage_bytes(data, fmt="ndjson" if fmt == "ndjson" else "json", limits=limits)
    try:
        return load_batch(con, spec, staged, limits=limits)
    finally:
        staged.discard()


def refusal(
    con: duckdb.DuckDBPyConnection,
    rows: list[dict[str, object]],
    fmt: str,
    *,
    spec: TableSpec = SPEC,
    limits: InsertLimits = LIMITS,
) -> str:
    with pytest.raises(BatchRejectedError) as caught:
        load(con, rows, fmt, spec=spec, limits=limits)
    return str(caught.value)


def duckdb_cast(
    con: duckdb.DuckDBPyConnection, values: list[object], type_text: str
) -> list[object]:
    """What DuckDB's own reading of each JSON value as ``type_text`` gives (None: absent).
    ``json_transform`` to the type, not CAST: DuckDB's CAST of JSON to a STRUCT refuses an
    object lacking a field, where an absent key is NULL (on clean values the two agree
    otherwise)."""
    texts = [None if v is None else json.dumps(v) for v in values]
    shape = json.dumps(type_text)  # the type as a JSON string (quoted names escaped)
    table = con.execute(
        f"SELECT json_transform(CAST(v AS JSON), '{shape}') AS c FROM"
        " (SELECT unnest($texts) AS v, generate_subscripts($texts, 1) AS i) ORDER BY i",
        {"texts": texts},
    ).to_arrow_table()
    read: list[object] = table.column("c").to_pylist()
    return read


CLEAN: list[dict[str, object]] = [
    {
        "id": 1,
        "context": {"ip": "10.0.0.1", "page": {"url": "/a", "n": 3}, "campaign": {"name": "x"}},
        "tags": [{"k": "a", "v": 1}, None, {"k": "b"}],
        "m": {"a": 1, "b": None},
        "codes": {"7": {"seen": "2026-01-02 03:04:05", "ok": True}, "-1": None},
        "deep": {"b": [{"c": {"k": {"d": "2026-05-06"}}}, None, {"c": None}]},
    },
    {"id": 2, "context": None, "tags": [], "m": {}, "codes": {}, "deep": {"b": []}},
    {"id": 3, "context": {}, "tags": None, "m": None, "deep": {}},
    {"id": 4, "context": {"page": None, "campaign": {}}},
    {"id": 5, "context": {"page": {"n": -2147483648}}, "codes": {"3": {"seen": 1767322800000}}},
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_clean_values_are_typed_per_leaf(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    table = load(con, CLEAN, fmt)
    rows = table.to_pylist()
    # A NULL struct is NULL; {} is a struct of NULLs; a NULL list stays NULL and [] stays [].
    assert [r["context"] for r in rows] == [
        {"ip": "10.0.0.1", "page": {"url": "/a", "n": 3}, "campaign": {"name": "x"}},
        None,
        {"ip": None, "page": None, "campaign": None},
        {"ip": None, "page": None, "campaign": {"name": None}},
        {"ip": None, "page": {"url": None, "n": -2147483648}, "campaign": None},
    ]
    assert [r["tags"] for r in rows] == [
        [{"k": "a", "v": 1}, None, {"k": "b", "v": None}],
        [],
        None,
        None,
        None,
    ]
    assert [r["m"] for r in rows] == [[("a", 1), ("b", None)], [], None, None, None]
    assert rows[0]["codes"] == [
        (7, {"seen": datetime(2026, 1, 2, 3, 4, 5), "ok": True}),
        (-1, None),
    ]
    assert rows[4]["codes"] == [(3, {"seen": datetime(2026, 1, 2, 3, 0), "ok": None})]  # epoch ms
    assert [r["deep"] for r in rows] == [
        {"b": [{"c": [("k", {"d": date(2026, 5, 6)})]}, None, {"c": None}]},
        {"b": []},
        {"b": None},
        None,
        None,
    ]
    # The types are the spec's, and every clean value is what DuckDB's own CAST gives.
    for col in SPEC.columns:
        assert table.schema.field(col.name).type == duckdb_arrow_type(con, col.type)
        if col.name == "codes":
            continue  # epoch milliseconds: not a form CAST reads
        values = [r.get(col.name) for r in CLEAN]
        assert table.column(col.name).to_pylist() == duckdb_cast(con, values, col.type), col.name


@pytest.mark.parametrize("fmt", FORMATS)
def test_nested_columns_whose_root_is_a_list_or_a_map(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given a table whose nested columns are a list of structs and a map: no part of them is
    # met once per row but the root (the conversion takes no node out of a struct)
    spec = TableSpec.create(
        name="t", schema="id INTEGER, tags STRUCT(k VARCHAR, v BIGINT)[], m MAP(VARCHAR, INTEGER)"
    )
    rows: list[dict[str, object]] = [
        {"id": 1, "tags": [{"k": "a", "v": 1}, None], "m": {"x": 2}},
        {"id": 2, "tags": [], "m": {}},
        {"id": 3},
    ]
    # When clean values are loaded, then they are typed
    table = load(con, rows, fmt, spec=spec)
    assert table.column("tags").to_pylist() == [[{"k": "a", "v": 1}, None], [], None]
    assert table.column("m").to_pylist() == [[("x", 2)], [], None]
    # When a batch holds a bad part, then it is refused naming its path
    bad = [*rows, {"id": 4, "tags": [{"k": "b", "v": "2"}]}]
    assert refusal(con, bad, fmt, spec=spec) == (
        "batch refused: row 3, field 'tags[0].v': expected an integer that fits BIGINT (BIGINT)"
    )


def duckdb_arrow_type(con: duckdb.DuckDBPyConnection, type_text: str) -> pa.DataType:
    return con.execute(f"SELECT CAST(NULL AS {type_text}) AS c").to_arrow_table().schema[0].type


def test_rows_of_nested_columns_are_left_to_the_json_conversion() -> None:
    # The rows path builds no nested column: it steps aside, and the staged JSON is converted.
    assert load_rows_fast(CLEAN, SPEC, limits=LIMITS, partition_sources=frozenset()) is None


BAD_LEAVES = [
    # (row's fields, the field named, the message)
    ({"context": {"page": {"n": "7"}}}, "context.page.n", "expected an integer that fits INTEGER (INTEGER)"),
    ({"context": {"page": {"n": 3.7}}}, "context.page.n", "expected an integer that fits INTEGER (INTEGER)"),
    ({"context": {"page": {"n": 2**31}}}, "context.page.n", "expected an integer that fits INTEGER (INTEGER)"),
    ({"context": {"page": {"url": 5}}}, "context.page.url", "expected a string (VARCHAR)"),
    ({"context": {"ip": "x" * 41}}, "context.ip", "value is over the limit of 40 bytes"),
    ({"context": {"page": "/home"}}, "context.page", f"expected a JSON object ({N('STRUCT(url VARCHAR, n INTEGER)')})"),
    ({"context": [1]}, "context", f"expected a JSON object ({N(CONTEXT)})"),
    ({"context": {"campaign": {"term": "t"}}}, "context.campaign.term", "unknown field (the struct has no such field)"),
    ({"tags": {"k": "a"}}, "tags", f"expected a JSON array of {N('STRUCT(k VARCHAR, v BIGINT)')} values ({N('STRUCT(k VARCHAR, v BIGINT)[]')})"),
    ({"tags": [{}, {}, {"v": "2"}]}, "tags[2].v", "expected an integer that fits BIGINT (BIGINT)"),
    ({"tags": [{}, {}, 7]}, "tags[2]", f"expected a JSON object ({N('STRUCT(k VARCHAR, v BIGINT)')})"),
    ({"m": [1, 2]}, "m", "expected a JSON object (a map) (MAP(VARCHAR, INTEGER))"),
    ({"m": {"a": "1"}}, "m['a']", "expected an integer that fits INTEGER (INTEGER)"),
    ({"codes": {"01": None}}, "codes['01']", "map key: expected an integer that fits INTEGER (INTEGER)"),
    ({"codes": {"x": None}}, "codes['x']", "map key: expected an integer that fits INTEGER (INTEGER)"),
    ({"codes": {"4294967296": None}}, "codes['4294967296']", "map key: expected an integer that fits INTEGER (INTEGER)"),
    ({"codes": {"1": {"seen": "yesterday"}}}, "codes['1'].seen", "expected an ISO-8601 timestamp string or epoch milliseconds (TIMESTAMP)"),
    ({"codes": {"1": {"ok": "true"}}}, "codes['1'].ok", "expected true or false (BOOLEAN)"),
    ({"deep": {"b": [None, {"c": {"k": {"d": "2026-13-01"}}}]}}, "deep.b[1].c['k'].d", "expected an ISO-8601 date string (DATE)"),
    ({"deep": {"b": [{"c": {"k": {"d": "0000-01-01"}}}]}}, "deep.b[0].c['k'].d", "expected a date from year 1 to 9999 (DATE); infinities are refused"),
    ({"deep": {"b": [{"c": {"k": {"e": 1}}}]}}, "deep.b[0].c['k'].e", "unknown field (the struct has no such field)"),
    ({"deep": {"b": [{"c": "k"}]}}, "deep.b[0].c", f"expected a JSON object (a map) ({N('MAP(VARCHAR, STRUCT(d DATE))')})"),
]  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("fields", "field", "message"), BAD_LEAVES)
def test_a_bad_part_refuses_the_batch_naming_its_path(
    con: duckdb.DuckDBPyConnection, fmt: str, fields: dict[str, object], field: str, message: str
) -> None:
    # Given a batch whose row 3 holds one bad part, the others clean
    rows = [dict(row) for row in CLEAN[:3]] + [{"id": 9, **fields}] + [dict(CLEAN[3])]
    # Then the batch is refused, naming the row and the path
    expected = f"batch refused: row 3, field {field!r}: {message}"
    assert refusal(con, rows, fmt) == expected


def test_timestamps_out_of_range_and_non_finite_numbers_are_checked_at_a_leaf(
    con: duckdb.DuckDBPyConnection,
) -> None:
    spec = TableSpec.create(name="t", schema="s STRUCT(seen TIMESTAMPTZ, x DOUBLE, j JSON)")
    assert refusal(con, [{"s": {"seen": "0000-06-01 00:00:00+00"}}], "ndjson", spec=spec) == (
        "batch refused: row 0, field 's.seen': expected a timestamp from year 1 to 9999"
        " (TIMESTAMPTZ); infinities are refused"
    )
    staged = stage_bytes(
        b'{"s": {"x": NaN}}\n{"s": {"j": [1, NaN]}}\n', fmt="ndjson", limits=LIMITS
    )
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, spec, staged, limits=LIMITS)
    staged.discard()
    assert str(caught.value) == (
        "batch refused: row 0, field 's.x': expected a finite number (DOUBLE): NaN and"
        " infinities are refused (send null for a missing value); row 1, field 's.j':"
        " expected standard JSON (no NaN, no Infinity, no comma before a closing bracket)"
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (b'{"id": 1, "m": {"a": 1, "b": 2, "a": 2}}', "m['a']"),
        (b'{"id": 1, "context": {"page": {"url": "/a", "url": "/b"}}}', "context.page.url"),
        (b'{"id": 1, "tags": [{}, {"k": "a", "k": "a"}]}', "tags[1].k"),
        (b'{"id": 1, "deep": {"b": [{"c": {"x": {"d": null, "d": null}}}]}}', "deep.b[0].c['x'].d"),
    ],
)
def test_a_key_given_twice_is_refused_at_its_path(
    con: duckdb.DuckDBPyConnection, text: bytes, field: str
) -> None:
    # (DuckDB's reader takes the first of two keys inside a value; a record's own are refused)
    staged = stage_bytes(b'{"id": 0}\n' + text + b"\n", fmt="ndjson", limits=LIMITS)
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, SPEC, staged, limits=LIMITS)
    staged.discard()
    assert (
        str(caught.value)
        == f"batch refused: row 1, field {field!r}: given more than once in its object"
    )


@pytest.mark.parametrize(
    ("fmt", "text", "row"),
    [
        ("ndjson", b'{"id": 0}\n\n{"id": 1}\n{"id": 2, "m": {}, "id": 3}\n', 2),
        ("json", b'[{"id": 0},\n {"id": 1, "id": 1}]', 1),
        ("json", b'{"id": 0}\n{"id": 1, "id": 1}\n', 1),
    ],
)
def test_a_records_own_key_given_twice_is_refused_naming_its_row(
    con: duckdb.DuckDBPyConnection, fmt: str, text: bytes, row: int
) -> None:
    # (DuckDB's reader refuses it, naming the file and line, before icefloe's checks run)
    staged = stage_bytes(text, fmt=fmt, limits=LIMITS)  # type: ignore[arg-type]
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, SPEC, staged, limits=LIMITS)
    staged.discard()
    assert (
        str(caught.value)
        == f"batch refused: row {row}, field 'id': given more than once in its object"
    )


def test_a_missing_required_struct(con: duckdb.DuckDBPyConnection) -> None:
    required = TableSpec.create(name="t", schema="id INTEGER, s STRUCT(a INTEGER) NOT NULL")
    assert refusal(con, [{"id": 1, "s": {}}, {"id": 2, "s": None}], "ndjson", spec=required) == (
        "batch refused: row 1, field 's': required, but missing or null"
    )


def test_many_bad_parts_show_five_and_count_the_rest(con: duckdb.DuckDBPyConnection) -> None:
    rows: list[dict[str, object]] = [
        {"context": {"ip": 1, "page": {"n": "1"}}, "tags": [{"v": "x"}, {"v": 1.5}]},
        {"m": {"a": True}},
    ]
    assert refusal(con, rows, "rows") == (
        "batch refused: row 0, field 'context.ip': expected a string (VARCHAR);"
        " row 0, field 'context.page.n': expected an integer that fits INTEGER (INTEGER);"
        " row 0, field 'tags[0].v': expected an integer that fits BIGINT (BIGINT);"
        " row 0, field 'tags[1].v': expected an integer that fits BIGINT (BIGINT);"
        " row 1, field \"m['a']\": expected an integer that fits INTEGER (INTEGER)"
    )
    rows.append({"tags": [{"k": 1}]})
    assert refusal(con, rows, "rows").endswith(
        "row 1, field \"m['a']\": expected an integer that fits INTEGER (INTEGER) (and 1 more)"
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_table_keeping_unknown_fields_keeps_them_at_their_path(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    spec = TableSpec.create(
        name="t",
        schema=(
            "context STRUCT(ip VARCHAR, campaign STRUCT(name VARCHAR), tags STRUCT(k VARCHAR)[]),"
            " extra JSON"
        ),
        extra_fields="keep",
        overflow_column="extra",
    )
    rows: list[dict[str, object]] = [
        {"context": {"ip": "a", "os": {"name": "x"}, "campaign": {"name": "c", "term": None}},
         "other": 1},
        {"context": {"campaign": {"term": "t"}}},
        {"context": {"ip": "b"}},
        {"context": None, "other": [1]},
        {"context": {"campaign": "not an object"}},
    ]  # fmt: skip
    # Then each unknown key is kept at its path, beside the unknown top-level fields
    wide = InsertLimits()
    table = load(con, rows[:4], fmt, spec=spec, limits=wide)
    assert [json.loads(v) if v else v for v in table.column("extra").to_pylist()] == [
        {"other": 1, "context": {"os": {"name": "x"}, "campaign": {"term": None}}},
        {"context": {"campaign": {"term": "t"}}},
        None,
        {"other": [1]},
    ]
    assert table.column("context").to_pylist()[:2] == [
        {"ip": "a", "campaign": {"name": "c"}, "tags": None},
        {"ip": None, "campaign": {"name": None}, "tags": None},
    ]
    # A struct that is not an object is refused still; and unknown keys under a list are
    # refused (a kept key would have no row of its own to go to)
    # The kept fields, nested ones included, are bounded as one value
    assert refusal(con, rows[:1], fmt, spec=spec) == (
        "batch refused: row 0, field 'extra': unknown fields are over the limit of 40 bytes"
    )
    assert refusal(con, rows[4:], fmt, spec=spec) == (
        "batch refused: row 0, field 'context.campaign': expected a JSON object"
        f" ({N('STRUCT(name VARCHAR)')})"
    )
    twice = stage_bytes(b'{"context": {"os": 1, "os": 2}}', fmt="ndjson", limits=LIMITS)
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, spec, twice, limits=LIMITS)
    twice.discard()
    assert str(caught.value) == (
        "batch refused: row 0, field 'context.os': given more than once in its object"
    )
    assert refusal(con, [{"context": {"tags": [{"k": "a"}, {"q": 1}]}}], fmt, spec=spec) == (
        "batch refused: row 0, field 'context.tags[1].q': unknown field (the struct has no such"
        " field; unknown fields under a list or a map are not kept)"
    )


# Keys a ``$."..."`` JSON path cannot name as written: the empty key, and keys holding a
# backslash, a quote, a slash or a tilde.
AWKWARD_KEYS = ("", "a\\", 'q"', "x/y", "~0", "~/")


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_fields_with_any_key_are_kept(con: duckdb.DuckDBPyConnection, fmt: str) -> None:
    # Given a table keeping unknown fields, and records whose unknown keys, at the top and
    # inside a struct at two depths, are every awkward key
    spec = TableSpec.create(
        name="t",
        schema="id INTEGER, c STRUCT(a INTEGER, s STRUCT(b VARCHAR)), extra JSON",
        extra_fields="keep",
        overflow_column="extra",
    )
    rows: list[dict[str, object]] = [
        {"id": n, key: n, "c": {"a": 1, key: [n], "s": {"b": "x", key: {"k": n}}}}
        for n, key in enumerate(AWKWARD_KEYS)
    ]
    # Then each is kept under its own key, at its path
    table = load(con, rows, fmt, spec=spec, limits=InsertLimits())
    assert [json.loads(v) for v in table.column("extra").to_pylist()] == [
        {key: n, "c": {key: [n], "s": {key: {"k": n}}}} for n, key in enumerate(AWKWARD_KEYS)
    ]
    assert table.column("c").to_pylist() == [{"a": 1, "s": {"b": "x"}}] * len(AWKWARD_KEYS)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_a_bad_map_value_under_any_key_is_named_by_its_key(
    con: duckdb.DuckDBPyConnection, fmt: str, key: str
) -> None:
    # Given a map whose entry under an awkward key is not of the value type
    spec = TableSpec.create(name="t", schema="id INTEGER, m MAP(VARCHAR, INTEGER)")
    rows: list[dict[str, object]] = [{"id": 1, "m": {"ok": 1}}, {"id": 2, "m": {key: "x"}}]
    # Then the batch is refused naming the entry (a clean one with that key loads)
    field = "m['" + key + "']"
    assert refusal(con, rows, fmt, spec=spec) == (
        f"batch refused: row 1, field {field!r}: expected an integer that fits INTEGER (INTEGER)"
    )
    loaded = load(con, [{"id": 1, "m": {key: 7, "ok": 1}}], fmt, spec=spec)
    assert loaded.column("m").to_pylist() == [[(key, 7), ("ok", 1)]]


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_a_table_keeping_unknown_fields_names_every_bad_record_by_row(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given a table keeping unknown fields, and a batch of good records among a non-object, a
    # record using the overflow column's name, and one whose unknown fields are too big
    spec = TableSpec.create(
        name="t",
        schema="id INTEGER, context STRUCT(ip VARCHAR), extra JSON",
        extra_fields="keep",
        overflow_column="extra",
    )
    big = "x" * 60
    lines = [
        b'{"id": 0, "context": {"ip": "a", "more": 1}}',
        b"[1, 2]",
        b'{"id": 2, "extra": {"a": 1}}',
        b'{"id": 3, "other": 1}',
        b'{"id": 4, "context": {"note": "' + big.encode() + b'"}}',
        b'{"id": 5, "wide": "' + big.encode() + b'"}',
    ]
    data = b"\n".join(lines) if fmt == "ndjson" else b"[" + b",\n".join(lines) + b"]"
    staged = stage_bytes(data, fmt=fmt, limits=LIMITS)

    # When it is loaded
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, spec, staged, limits=LIMITS)
    staged.discard()

    # Then each bad record is named by its row, in order, and the good ones are not
    assert [(p.row, p.field, p.message) for p in caught.value.problems] == [
        (1, None, "not a JSON object"),
        (2, "extra", "reserved for the fields the table does not know"),
        (4, "extra", "unknown fields are over the limit of 40 bytes"),
        (5, "extra", "unknown fields are over the limit of 40 bytes"),
    ]
    assert caught.value.total == 4


def test_decimal_and_uuid_leaves(con: duckdb.DuckDBPyConnection) -> None:
    spec = TableSpec.create(name="t", schema="s STRUCT(d DECIMAL(10,2), u UUID)[]")
    rows: list[dict[str, object]] = [
        {"s": [{"d": 12.34, "u": "9b2d3c1e-0f4a-4b8e-9c55-0d8e8d7a1f00"}]}
    ]
    assert load(con, rows, "ndjson", spec=spec).column("s").to_pylist() == duckdb_cast(
        con, [r["s"] for r in rows], "STRUCT(d DECIMAL(10,2), u UUID)[]"
    )
    assert load(con, rows, "ndjson", spec=spec).to_pylist()[0]["s"][0]["d"] == Decimal("12.34")
    assert refusal(con, [{"s": [{"d": "12.34"}]}], "ndjson", spec=spec) == (
        "batch refused: row 0, field 's[0].d': expected a number that fits DECIMAL(10,2),"
        " with at most 2 digits after the point (DECIMAL(10,2))"
    )


def random_leaf(kind: str, rng: random.Random) -> object:
    """A clean JSON value of a leaf type, in a form DuckDB's own JSON reading reads the same."""
    if kind == "INTEGER":
        return rng.choice((0, -(2**31), 2**31 - 1, rng.randint(-1000, 1000)))
    if kind == "BIGINT":
        return rng.choice((-(2**63), 2**63 - 1, rng.randint(-(10**12), 10**12)))
    if kind == "VARCHAR":
        return rng.choice(("", "a", "é日本😀", 'q"uote', "back\\slash", "x" * 40, "7", "null"))
    if kind == "DOUBLE":
        return rng.choice((0.0, -1.5, 1e-300, 2.5e300, rng.uniform(-1e6, 1e6), 3))
    if kind == "BOOLEAN":
        return rng.random() < 0.5
    if kind == "DATE":
        return rng.choice(("0001-01-01", "9999-12-31", "2026-02-28"))
    if kind == "TIMESTAMP":
        return rng.choice(
            ("0001-01-01 00:00:00", "2026-02-28T10:11:12.123456", "9999-12-31 23:59:59")
        )
    if kind == "TIMESTAMPTZ":
        return rng.choice(("2026-02-28 10:11:12+00:00", "1970-01-01T00:00:00Z"))
    if kind == "DECIMAL(10,2)":
        return rng.choice((0, 12.34, -99999999.99, 5))
    if kind == "UUID":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    assert kind == "JSON"
    return rng.choice(({"a": [1, 2.5, None]}, [], "s", 12, None, {"é": {"b": True}}))


def random_value(node: TypeNode, rng: random.Random) -> object:
    """A clean JSON value of a type; None (JSON null) at any level now and then."""
    if rng.random() < 0.1:
        return None
    if isinstance(node, Leaf):
        return random_leaf(node.name, rng)
    if isinstance(node, ListOf):
        return [random_value(node.element, rng) for _ in range(rng.choice((0, 1, 2, 3)))]
    if isinstance(node, MapOf):
        keys = rng.sample(["a", "b", "é", "k k"], 2) if node.key == Leaf("VARCHAR") else None
        if keys is None:
            keys = [str(k) for k in rng.sample([0, 1, -7, 2**40, -(2**63)], 2)]
        return {k: random_value(node.value, rng) for k in keys[: rng.randint(0, 2)]}
    fields = {name: random_value(child, rng) for name, child in node.fields}
    return {name: v for name, v in fields.items() if rng.random() < 0.8}  # some absent


def test_random_clean_values_are_what_duckdb_reads(con: duckdb.DuckDBPyConnection) -> None:
    rng = random.Random(20261128)
    types: list[str] = []
    while len(types) < 12:
        text = random_type(rng)
        if is_nested_text(text) and "BLOB" not in text:  # BLOB: base64 here, raw text in DuckDB
            types.append(normalize_type(text))
    spec = TableSpec.create(name="t", schema=", ".join(f"c{n} {t}" for n, t in enumerate(types)))
    rows: list[dict[str, object]] = []
    for _ in range(300):
        row: dict[str, object] = {}
        for n, t in enumerate(types):
            if rng.random() < 0.9:
                row[f"c{n}"] = random_value(type_tree(t), rng)
        rows.append(row)
    limits = InsertLimits()
    for fmt in FORMATS:
        table = load(con, rows, fmt, spec=spec, limits=limits)
        for n, t in enumerate(types):
            values = [row.get(f"c{n}") for row in rows]
            assert table.column(f"c{n}").to_pylist() == duckdb_cast(con, values, t), (fmt, t)
            assert table.schema.field(f"c{n}").type == duckdb_arrow_type(con, t), t


WRONG_LEAVES: dict[str, tuple[object, ...]] = {
    "INTEGER": ("7", 3.7, 2**31, True),
    "BIGINT": (2**63, "1", 1.5),
    "VARCHAR": (5, {"a": 1}, ["s"], False),
    "DOUBLE": ("1.0", True),
    "BOOLEAN": (1, "true"),
    "DATE": ("2026-13-01", 20260101, "10000-01-01"),
    "TIMESTAMP": ("noon", True, "2026-01-01 25:00:00"),
    "TIMESTAMPTZ": ("x", 1.5),
    "DECIMAL(10,2)": ("1", 1e12),
    "UUID": ("nope", 7),
}


def poisoned(node: TypeNode, rng: random.Random, path: str) -> tuple[object, str] | None:
    """A value of the type with exactly one bad part, and that part's path; None when the
    type has no part that can be bad (a JSON leaf takes any value)."""
    if isinstance(node, Leaf):
        wrong = WRONG_LEAVES.get(node.name)
        return None if wrong is None else (rng.choice(wrong), path)
    roll = rng.random()
    if isinstance(node, Struct):
        if roll < 0.2:
            return rng.choice(("s", [1], 3)), path
        if roll < 0.35:
            return {"zz": 1}, f"{path}.zz"
        name, child = rng.choice(node.fields)
        inner = poisoned(child, rng, f"{path}.{name}")
        return None if inner is None else ({name: inner[0]}, inner[1])
    if isinstance(node, ListOf):
        if roll < 0.25:
            return rng.choice(({}, "s", 1)), path
        at = rng.randint(0, 2)
        inner = poisoned(node.element, rng, f"{path}[{at}]")
        if inner is None:
            return None
        return [None] * at + [inner[0]], inner[1]
    assert isinstance(node, MapOf)
    if roll < 0.2:
        return rng.choice(([], "s", 1.5)), path
    key = "a" if node.key == Leaf("VARCHAR") else "12"
    if roll < 0.35 and node.key != Leaf("VARCHAR"):
        bad_key = rng.choice(("x", "01", "+1", "1.0", str(2**63)))
        return {bad_key: None}, f"{path}['{bad_key}']"
    inner = poisoned(node.value, rng, f"{path}['{key}']")
    return None if inner is None else ({key: inner[0]}, inner[1])


def test_one_random_bad_part_is_named_by_its_path(con: duckdb.DuckDBPyConnection) -> None:
    rng = random.Random(20261129)
    checked = 0
    while checked < 60:
        text = random_type(rng)
        if not is_nested_text(text) or "BLOB" in text:
            continue
        type_text = normalize_type(text)
        found = poisoned(type_tree(type_text), rng, "c")
        if found is None:
            continue
        value, path = found
        spec = TableSpec.create(name="t", schema=f"id INTEGER, c {type_text}")
        clean = [{"id": n, "c": random_value(type_tree(type_text), rng)} for n in range(4)]
        at = rng.randrange(5)
        rows = [*clean[:at], {"id": 9, "c": value}, *clean[at:]]
        fmt = FORMATS[checked % len(FORMATS)]
        message = refusal(con, rows, fmt, spec=spec, limits=InsertLimits())
        assert message.startswith(f"batch refused: row {at}, field {path!r}: "), (
            type_text,
            value,
            message,
        )
        assert "; row " not in message and "more)" not in message, message  # that part alone
        checked += 1


def test_random_values_read_back_from_arrow_and_parquet_are_the_same(
    con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    # Given random clean nested values loaded from JSON (fields matched by name in each struct)
    rng = random.Random(20261130)
    types: list[str] = []
    while len(types) < 10:
        text = random_type(rng)
        if is_nested_text(text) and "BLOB" not in text:
            types.append(normalize_type(text))
    spec = TableSpec.create(name="t", schema=", ".join(f"c{n} {t}" for n, t in enumerate(types)))
    rows = [
        {f"c{n}": random_value(type_tree(t), rng) for n, t in enumerate(types)} for _ in range(200)
    ]
    limits = InsertLimits()
    loaded = load(con, rows, "ndjson", spec=spec, limits=limits)
    # When that table is loaded again as Arrow input, and as a Parquet file, its structs'
    # fields in reverse order
    reordered = pa.table(
        {name: reverse_struct_fields(loaded.column(name)) for name in loaded.column_names}
    )
    assert reordered.schema != loaded.schema
    again = load_batch(con, spec, arrow_batch(reordered, limits=limits), limits=limits)
    path = tmp_path / "again.parquet"
    pq.write_table(reordered, path)
    from_file = load_batch(con, spec, stage_file(path, fmt="parquet", limits=limits), limits=limits)
    # Then both give the same table
    assert again.to_pylist() == loaded.to_pylist()
    assert from_file.to_pylist() == loaded.to_pylist()
    assert again.schema == loaded.schema


def reverse_struct_fields(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """The same values with every struct's fields in reverse order (at any depth)."""
    target = _reversed_type(values.type)
    return pa.chunked_array(
        [pa.array(chunk.to_pylist(), target) for chunk in values.chunks], target
    )


def _reversed_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)][::-1]
        return pa.struct([f.with_type(_reversed_type(f.type)) for f in fields])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _reversed_type(t.item_type))
    if pa.types.is_list(t):
        return pa.list_(_reversed_type(t.value_type))
    return t


MANY = 20_000  # keys in one object: the checks' work once grew with their square (minutes)
MANY_KEYS = TableSpec.create(
    name="t", schema="id INTEGER, m MAP(VARCHAR, BIGINT), s STRUCT(a INTEGER)"
)


def _many_entries() -> str:
    return ", ".join(f'"k{i}": {i}' for i in range(MANY))


@pytest.mark.timeout(60)  # ~1 s now; each case took minutes when the work was quadratic
@pytest.mark.parametrize("fmt", ["rows", "ndjson"])
def test_a_map_with_many_keys_converts_keeping_every_entry(
    con: duckdb.DuckDBPyConnection, fmt: str
) -> None:
    # Given one row whose map holds 20,000 entries
    entries = {f"k{i}": i for i in range(MANY)}
    # When it is loaded
    loaded = load(con, [{"id": 1, "m": entries}], fmt, spec=MANY_KEYS, limits=InsertLimits())
    # Then every entry is kept, in order
    assert loaded.column("m").to_pylist() == [list(entries.items())]


@pytest.mark.timeout(60)  # ~1 s now; each case took minutes when the work was quadratic
@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"id": 1, "m": {' + _many_entries() + ', "k5": 1}}',
            "field \"m['k5']\": given more than once in its object",
        ),
        (
            '{"id": 1, "m": {' + _many_entries() + ', "bad": "x"}}',
            "field \"m['bad']\": expected an integer that fits BIGINT (BIGINT)",
        ),
    ],
    ids=["repeated-map-key", "bad-map-value"],
)
def test_an_object_with_many_keys_is_refused_naming_the_fault(
    con: duckdb.DuckDBPyConnection, line: str, message: str
) -> None:
    # Given one NDJSON record whose map of 20,000 keys repeats one or holds a bad value
    staged = stage_bytes(line.encode() + b"\n", fmt="ndjson", limits=InsertLimits())
    # When it is loaded
    with pytest.raises(BatchRejectedError) as caught:
        load_batch(con, MANY_KEYS, staged, limits=InsertLimits())
    staged.discard()
    # Then the batch is refused naming the row and the key at fault
    assert str(caught.value).startswith(f"batch refused: row 0, {message}")
