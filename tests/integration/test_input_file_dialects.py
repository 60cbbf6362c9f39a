"""Input read as its form says, never guessed, and refused naming what is at fault, with
nothing written: CSV as RFC 4180 (the header its first line, no dialect sniffed: a single
quote, ';' or '#' is text), a fault of a CSV or Parquet file named by file, line, row or
column; an input file's format by its suffix (an unknown suffix refused, naming it); a
pandas index as pandas writes it to Parquet (unnamed: left out; named: a column); and Arrow
times in nanoseconds that are whole microseconds (polars' ``Time``) in a TIME column."""

from __future__ import annotations

import io
from datetime import time
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icefloe.cli import main
from icefloe.errors import BatchRejectedError, InvalidInputError
from icefloe.lake import Lake

pytestmark = pytest.mark.integration

SCHEMA = "id BIGINT, s VARCHAR"


def _create(lake: Lake, schema: str = SCHEMA) -> None:
    lake.create_table("t", schema=schema)


def _file(tmp_path: Path, data: bytes, name: str = "in.csv") -> Path:
    folder = tmp_path / "input"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def _rows(lake: Lake) -> list[dict[str, object]]:
    """The table's rows in the order they were inserted (the row id sorts so)."""
    return lake.query("SELECT * EXCLUDE (_row_id) FROM t ORDER BY _row_id").to_pylist()


def _nothing_written(lake: Lake) -> None:
    assert lake.snapshots("t") == []
    assert sorted(Path(lake.objects.root_uri).rglob("*.parquet")) == []


def _refused(lake: Lake, source: object, message: str) -> None:
    with pytest.raises(BatchRejectedError) as refusal:
        lake.insert("t", source)
    assert str(refusal.value) == message
    _nothing_written(lake)


# --- CSV: one dialect, nothing sniffed ---------------------------------------------------------

# Per case: the table's schema, the file, the rows stored (DuckDB's sniffer read each otherwise).
CSV_AS_WRITTEN: dict[str, tuple[str, bytes, list[dict[str, object]]]] = {
    # sniffed: single quotes stripped ('x' stored as x)
    "single quotes are text": (
        SCHEMA,
        b"id,s\n1,'x'\n2,it's\n",
        [{"id": 1, "s": "'x'"}, {"id": 2, "s": "it's"}],
    ),
    # sniffed: ';' taken for the delimiter, and the values for unknown fields
    "semicolons in a file of one column": (
        "s VARCHAR",
        b"s\na;b\nc;d\n",
        [{"s": "a;b"}, {"s": "c;d"}],
    ),
    # sniffed: a tab taken for the delimiter
    "tabs in a file of one column": (
        "s VARCHAR",
        b"s\na\tb\nc\td\n",
        [{"s": "a\tb"}, {"s": "c\td"}],
    ),
    # (read so before too: kept)
    "a quote inside a value not quoted is text": (
        SCHEMA,
        b'id,s\n1,5" disk\n2,x\n',
        [{"id": 1, "s": '5" disk'}, {"id": 2, "s": "x"}],
    ),
}


@pytest.mark.parametrize("case", sorted(CSV_AS_WRITTEN))
def test_csv_values_are_stored_as_written(connected_lake: Lake, tmp_path: Path, case: str) -> None:
    schema, data, expected = CSV_AS_WRITTEN[case]
    _create(connected_lake, schema)

    connected_lake.insert("t", _file(tmp_path, data))

    assert _rows(connected_lake) == expected


@pytest.mark.parametrize(("first_line", "field"), [("#c", "#c"), ("My export", "My export")])
def test_the_first_line_is_the_header_and_is_never_skipped(
    connected_lake: Lake, tmp_path: Path, first_line: str, field: str
) -> None:
    # The sniffer took the first line for a title or a comment and dropped it without a word.
    _create(connected_lake)
    path = _file(tmp_path, f"{first_line}\nid,s\n27,x\n".encode())

    _refused(
        connected_lake,
        path,
        f"batch refused: field '{field}': unknown field (the table has no such column)",
    )


def test_documented_csv_forms_are_kept(connected_lake: Lake, tmp_path: Path) -> None:
    # A BOM, CRLF, a quoted separator, "" for a quote, a line break inside a quoted value, an
    # empty field quoted or not (NULL, see docs/decisions.md), a blank line, no final newline.
    _create(connected_lake)
    data = (
        b'\xef\xbb\xbfid,s\r\n1,"a,b"\r\n2,"say ""hi"""\r\n3,"two\r\nlines"\r\n4,""\r\n5,\r\n'
        b"\r\n6,x"
    )

    connected_lake.insert("t", _file(tmp_path, data))

    assert _rows(connected_lake) == [
        {"id": 1, "s": "a,b"},
        {"id": 2, "s": 'say "hi"'},
        {"id": 3, "s": "two\r\nlines"},
        {"id": 4, "s": None},
        {"id": 5, "s": None},
        {"id": 6, "s": "x"},
    ]


@pytest.mark.parametrize(
    ("schema", "data", "expected"),
    [
        (SCHEMA, b"id,s\r1,x\r2,y\r", [{"id": 1, "s": "x"}, {"id": 2, "s": "y"}]),
        # a blank line of a file of one column is a NULL (icefloe's CSV output writes one so)
        ("s VARCHAR", b"s\nx\n\ny\n", [{"s": "x"}, {"s": None}, {"s": "y"}]),
        (SCHEMA, b'"id","s"\n"1","x"\n', [{"id": 1, "s": "x"}]),
    ],
    ids=["CR line endings", "a blank line in one column", "quoted header and values"],
)
def test_more_csv_forms_are_kept(
    connected_lake: Lake,
    tmp_path: Path,
    schema: str,
    data: bytes,
    expected: list[dict[str, object]],
) -> None:
    _create(connected_lake, schema)

    connected_lake.insert("t", _file(tmp_path, data))

    assert _rows(connected_lake) == expected


# Per case: the file, the refusal ({path} is the file's). Each was stored altered, or refused
# naming a field the file does not have ('column0', '24', 'id,s,x', 'id_1').
CSV_REFUSED: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "{path} is empty: no header (a CSV input starts with its header line)"),
    "a BOM alone": (
        b"\xef\xbb\xbf",
        "{path} is empty: no header (a CSV input starts with its header line)",
    ),
    "a blank first line": (
        b"\nid,s\n1,x\n",
        "line 1 of {path} is blank: the header must be the first line",
    ),
    "a row longer than the header": (
        b"id,s\n24,x,extra\n",
        "row 0: line 2 of {path} has 3 fields, the header 2",
    ),
    "a row shorter than the header": (
        b"id,s\n1,x\n25\n",
        "row 1: line 3 of {path} has 1 field, the header 2",
    ),
    "a long row after a line break in a value and a blank line": (
        b'id,s\n1,"a\nb"\n\n2,y,z\n',
        "row 1: line 5 of {path} has 3 fields, the header 2",
    ),
    "a name twice": (
        b"id,id\n3,4\n",
        "field 'id': the header of {path} names it more than once (columns 1 and 2)",
    ),
    "a name twice in two cases": (
        b"id,s,ID\n3,x,4\n",
        "field 'id': the header of {path} names it more than once"
        " (columns 1 and 3: 'id', 'ID', which case does not tell apart)",
    ),
    "a column without a name": (b"id,s,\n1,x,\n", "column 3 of the header of {path} has no name"),
    "a quote left open": (
        b'id,s\n1,"ab\n2,x\n',
        "row 0: the quoted value opened on line 2 of {path} is never closed",
    ),
    "text after a closing quote": (
        b'id,s\n1,"ab"cd\n',
        "row 0: text follows a quoted value's closing quote on line 2 of {path}"
        ' (a quote inside a quoted value is written twice: "")',
    ),
    "bytes that are not UTF-8": (
        b"id,s\n1,ok\n2,caf\xe9\n",
        "row 1, field 's': bytes that are not UTF-8 (0xE9 at line 3, column 6 of {path})",
    ),
    "a header that is not UTF-8": (
        b"id,\xffs\n1,x\n",
        "the header of {path} holds bytes that are not UTF-8 (0xFF at line 1, column 4)",
    ),
    "line endings of two kinds": (
        b"id,s\r\n1,x\n2,y\r\n",
        "row 0: line 2 of {path} ends in LF where line 1 ends in CRLF"
        " (one file, one kind of line ending)",
    ),
}


@pytest.mark.parametrize("case", sorted(CSV_REFUSED))
def test_a_csv_fault_is_named_by_file_and_line_and_nothing_is_written(
    connected_lake: Lake, tmp_path: Path, case: str
) -> None:
    data, message = CSV_REFUSED[case]
    _create(connected_lake)
    path = _file(tmp_path, data)

    _refused(connected_lake, path, "batch refused: " + message.format(path=path))


def test_bytes_and_stdin_are_named_as_the_input_and_stdin(connected_lake: Lake) -> None:
    _create(connected_lake)
    inserter = connected_lake.inserter()
    with pytest.raises(BatchRejectedError) as refusal:
        inserter.insert_bytes("t", b"id,s\n24,x,extra\n", fmt="csv")
    assert (
        str(refusal.value) == "batch refused: row 0: line 2 of the input has 3 fields, the header 2"
    )
    with pytest.raises(BatchRejectedError) as refusal:
        inserter.insert_stream("t", io.BytesIO(b"id,id\n1,2\n"), fmt="csv")
    assert str(refusal.value) == (
        "batch refused: field 'id': the header of stdin names it more than once (columns 1 and 2)"
    )
    _nothing_written(connected_lake)


# A value as long as the limit (4 MiB), and one line longer than DuckDB's buffers (~32 MB) in
# each place of a file: DuckDB refused a line over 2,000,000 bytes, dropped a last line longer
# than its buffer (the other rows committed), called a file of that line alone empty, and
# failed the read with a raw NotImplementedException when rows followed it.
_LIMIT = 4 * 2**20
_LONG = b"y" * (40 * 2**20)


def test_a_csv_value_as_long_as_the_value_limit_is_taken(
    connected_lake: Lake, tmp_path: Path
) -> None:
    # given: a CSV file whose values are 3 MB and the limit's 4 MiB, the second quoted
    # with a comma and a doubled quote in it (5 bytes of the line are not of the value)
    _create(connected_lake)
    quoted = "z" * (_LIMIT - 2) + ',"'
    path = _file(
        tmp_path, b"id,s\n1," + b"y" * (3 * 10**6) + b'\n2,"' + b"z" * (_LIMIT - 2) + b',"""\n'
    )

    # when: it is inserted
    result = connected_lake.insert("t", path)

    # then: both rows are stored whole, as JSON or Arrow rows of those values would be
    assert result.rows == 2
    assert _rows(connected_lake) == [{"id": 1, "s": "y" * (3 * 10**6)}, {"id": 2, "s": quoted}]


def test_a_csv_value_a_byte_over_the_limit_is_refused_by_row_and_field(
    connected_lake: Lake, tmp_path: Path
) -> None:
    # given: a CSV file whose second row holds a value one byte over the 4 MiB limit
    _create(connected_lake)
    path = _file(tmp_path, b"id,s\n1,a\n2," + b"y" * (_LIMIT + 1) + b"\n")

    # when/then: the batch is refused naming that row and field, as for rows or JSON
    _refused(
        connected_lake,
        path,
        "batch refused: row 1, field 's': value is over the limit of 4,194,304 bytes",
    )


@pytest.mark.parametrize(
    ("body", "row"),
    [
        pytest.param(b"1,a\n2,b\n3," + _LONG + b"\n", 2, id="last"),
        pytest.param(b"1,a\n2,b\n3," + _LONG, 2, id="last-without-line-break"),
        pytest.param(b"1," + _LONG + b"\n2,c\n", 0, id="rows-after"),
        pytest.param(b"1," + _LONG + b"\n", 0, id="alone"),
    ],
)
def test_a_csv_line_longer_than_duckdbs_buffer_refuses_the_batch_naming_its_value(
    connected_lake: Lake, tmp_path: Path, body: bytes, row: int
) -> None:
    # given: a CSV file with a 40 MB value, its line longer than DuckDB's default buffer
    _create(connected_lake)
    path = _file(tmp_path, b"id,s\n" + body)

    # when/then: the whole batch is refused naming the row and field of the value over the
    # limit (not a row dropped and the others committed, not "no rows", not DuckDB's error)
    _refused(
        connected_lake,
        path,
        f"batch refused: row {row}, field 's': value is over the limit of 4,194,304 bytes",
    )


# --- Parquet: columns named ------------------------------------------------------------------


def test_a_parquet_file_with_a_column_name_twice_is_refused_naming_it(
    connected_lake: Lake, tmp_path: Path
) -> None:
    _create(connected_lake)
    twice = _file(tmp_path, b"", "twice.parquet")
    pq.write_table(pa.Table.from_arrays([pa.array([1]), pa.array([2])], ["id", "id"]), twice)
    cased = _file(tmp_path, b"", "cased.parquet")
    pq.write_table(
        pa.Table.from_arrays([pa.array([1]), pa.array(["x"]), pa.array([2])], ["id", "s", "ID"]),
        cased,
    )

    # DuckDB reads the second as 'id_1', which the file does not name
    _refused(
        connected_lake,
        twice,
        f"batch refused: field 'id': {twice} has more than one column of this name"
        " (columns 1 and 2; which one is meant cannot be told)",
    )
    _refused(
        connected_lake,
        cased,
        f"batch refused: field 'id': {cased} has more than one column of this name"
        " (columns 1 and 3: 'id', 'ID', which case does not tell apart; which one is meant"
        " cannot be told)",
    )


def test_a_parquet_file_of_no_column_is_refused_in_one_line(
    connected_lake: Lake, tmp_path: Path
) -> None:
    _create(connected_lake)
    path = _file(tmp_path, b"", "none.parquet")
    pq.write_table(pa.table({}), path)

    # (was DuckDB's message, quoting its own SQL: "LINE 1: DESCRIBE SELECT * FROM read_parquet")
    _refused(connected_lake, path, f"batch refused: {path} has no columns")


# --- the format of an input file --------------------------------------------------------------


@pytest.mark.parametrize("name", ["events.arrow", "events.csv.gz", "events.txt", "events.Parquet2"])
def test_an_unknown_suffix_is_refused_naming_it(
    connected_lake: Lake, tmp_path: Path, name: str
) -> None:
    # It was read as NDJSON: "row 0: bytes that are not UTF-8" for an Arrow or gzip file.
    _create(connected_lake)
    path = _file(tmp_path, b'{"id": 1}\n', name)
    suffix = path.suffix

    with pytest.raises(InvalidInputError) as refusal:
        connected_lake.insert("t", path)

    assert str(refusal.value) == (
        f"cannot tell the format of input file '{path}' from its suffix '{suffix}': the formats"
        " taken are .json, .ndjson, .jsonl, .csv, .parquet (name the format with"
        " --input-format, or Inserter.insert_file's fmt)"
    )
    _nothing_written(connected_lake)


def test_known_suffixes_in_any_case_and_no_suffix_are_read(
    connected_lake: Lake, tmp_path: Path
) -> None:
    _create(connected_lake)
    connected_lake.insert("t", _file(tmp_path, b'{"id": 1}\n', "a.JSONL"))
    connected_lake.insert("t", _file(tmp_path, b"id,s\n2,x\n", "b.CSV"))
    connected_lake.insert("t", _file(tmp_path, b'{"id": 3}\n', "c"))  # as stdin: NDJSON

    assert _rows(connected_lake) == [
        {"id": 1, "s": None},
        {"id": 2, "s": "x"},
        {"id": 3, "s": None},
    ]


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        code = main(list(argv), out=out)
    except SystemExit as e:
        code = int(e.code or 0)
    return code, out.getvalue()


def test_the_cli_refuses_an_unknown_suffix_unless_the_format_is_named(
    cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("init")[0] == 0
    assert _run("table", "create", "t", "--schema", SCHEMA)[0] == 0
    path = _file(tmp_path, b'{"id": 7, "s": "x"}\n', "events.log")
    capsys.readouterr()

    code, out = _run("insert", "t", str(path))
    err = capsys.readouterr().err
    assert (code, out) == (1, "")
    assert err == (
        f"icefloe: error: cannot tell the format of input file '{path}' from its suffix '.log':"
        " the formats taken are .json, .ndjson, .jsonl, .csv, .parquet (name the format with"
        " --input-format, or Inserter.insert_file's fmt)\n"
    )
    code, out = _run("query", "SELECT count(*) AS n FROM t", "--format", "json")
    assert (code, out.strip()) == (0, '[{"n": 0}]')

    assert _run("insert", "t", str(path), "--input-format", "ndjson")[0] == 0
    code, out = _run("query", "SELECT id, s FROM t", "--format", "json")
    assert (code, out.strip()) == (0, '[{"id": 7, "s": "x"}]')


# --- pandas: the index as pandas writes it to Parquet -----------------------------------------

FRAME = pd.DataFrame({"id": [1, 2, 3], "s": ["x", "y", "z"]})


@pytest.mark.parametrize(
    "frame",
    [
        pd.concat([FRAME.iloc[:2], FRAME.iloc[2:]]).set_axis([0, 1, 0]),
        FRAME.set_axis([10, 20, 30]),
        FRAME[FRAME.id != 0].set_axis(["a", "b", "c"]),
        pd.concat([FRAME.iloc[:1], FRAME.iloc[1:]], keys=["k1", "k2"]),
    ],
    ids=["concat", "explicit index", "labels", "unnamed multi-index"],
)
def test_an_unnamed_pandas_index_is_left_out(connected_lake: Lake, frame: pd.DataFrame) -> None:
    # It was refused: "field '__index_level_0__': unknown field".
    _create(connected_lake)

    connected_lake.insert("t", frame)

    assert _rows(connected_lake) == [{"id": 1, "s": "x"}, {"id": 2, "s": "y"}, {"id": 3, "s": "z"}]


@pytest.mark.parametrize(
    ("ids", "expected"),
    [([1, 2, 3], [1, 2, 3]), ([30, 10, 20], [30, 10, 20])],
    ids=["ids that are a range", "ids that are not"],
)
def test_a_named_pandas_index_is_a_column_whatever_its_values(
    connected_lake: Lake, ids: list[int], expected: list[int]
) -> None:
    # pandas exports a range index as metadata alone: it was dropped, and id stored NULL.
    _create(connected_lake)
    frame = pd.DataFrame({"id": ids, "s": ["x", "y", "z"]}).set_index("id")

    connected_lake.insert("t", frame)

    assert [row["id"] for row in _rows(connected_lake)] == expected


@pytest.mark.parametrize("ids", [[1, 2, 3], [30, 10, 20]], ids=["a range", "not a range"])
def test_a_named_index_that_is_also_a_column_is_inserted_once(
    connected_lake: Lake, ids: list[int]
) -> None:
    # pandas exports it as '__index_level_0__' (named 'id' in its metadata): it was refused.
    _create(connected_lake)
    frame = pd.DataFrame({"id": ids, "s": ["x", "y", "z"]}).set_index("id", drop=False)

    connected_lake.insert("t", frame)

    assert _rows(connected_lake) == [{"id": i, "s": s} for i, s in zip(ids, "xyz", strict=True)]


def test_a_named_range_index_is_numbered_across_a_streams_batches(connected_lake: Lake) -> None:
    _create(connected_lake)
    frame = pd.DataFrame({"s": list("abcde")}, index=pd.RangeIndex(100, 110, 2, name="id"))
    table = pa.Table.from_pandas(frame)
    assert table.column_names == ["s"]  # the index is in the metadata alone
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))

    connected_lake.insert("t", reader)

    assert _rows(connected_lake) == [
        {"id": 100, "s": "a"},
        {"id": 102, "s": "b"},
        {"id": 104, "s": "c"},
        {"id": 106, "s": "d"},
        {"id": 108, "s": "e"},
    ]


# --- times in nanoseconds --------------------------------------------------------------------


def test_polars_and_duckdb_nanosecond_times_fill_a_time_column(connected_lake: Lake) -> None:
    # They were refused: "expected an ISO-8601 time of day before 24:00:00 (TIME)".
    _create(connected_lake, "t TIME, ts TIME[]")
    frame = pl.DataFrame({"t": [time(1, 2, 3), time(23, 59, 59, 999999), None]})
    assert frame.to_arrow().schema.field("t").type == pa.time64("ns")
    relation = duckdb.sql("SELECT '10:11:12.345678'::TIME_NS AS t")
    nested = pa.table({"ts": pa.array([[3_600_000_001_000, None]], pa.list_(pa.time64("ns")))})

    connected_lake.insert("t", frame)
    connected_lake.insert("t", relation)
    connected_lake.insert("t", nested)

    assert _rows(connected_lake) == [
        {"t": time(1, 2, 3), "ts": None},
        {"t": time(23, 59, 59, 999999), "ts": None},
        {"t": None, "ts": None},
        {"t": time(10, 11, 12, 345678), "ts": None},
        {"t": None, "ts": [time(1, 0, 0, 1), None]},
    ]
