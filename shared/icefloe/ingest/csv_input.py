"""CSV input as RFC 4180, nothing sniffed: the header read here, the values by DuckDB with
every option of its reader set, and a file DuckDB refuses for its form scanned again here to
name the row, line and file at fault."""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import duckdb

from icefloe.errors import BatchRejectedError, RowProblem
from icefloe.ingest.conversion import refuse
from icefloe.ingest.sources import repeated_names
from icefloe.spec import TableSpec

# RFC 4180, and nothing sniffed. DuckDB's sniffer guessed each file's dialect: it took ';' for
# the delimiter of a one-column file whose values hold one, a single quote for the quote
# (stripping it from values), a first line for a title to skip, a data row for the header
# when a row was ragged, and a quote left open for no quoting at all. Here the header is read
# first (its names go to DuckDB as written: none renamed, none trimmed) and DuckDB reads the
# rest: every value text, an empty field (quoted or not) NULL, a blank line skipped (NULL in a
# file of one column), and a row of another width or a quote left open refused.
CSV_OPTIONS = (
    "header=true, auto_detect=false, delim=',', quote='\"', escape='\"', comment='', skip=0,"
    " strict_mode=true, null_padding=false, allow_quoted_nulls=true, encoding='utf-8'"
)
# DuckDB's reader takes a line no longer than max_line_size (2,000,000 bytes unless set:
# a value of 3 MB, under the 4 MiB value limit, was refused) and reads the file in buffers of
# buffer_size: a line longer than a buffer was dropped without a word when last (the other
# rows committed), refused as "holds no rows" when alone, and failed the read with a
# NotImplementedException when more followed. No line is longer than its file, so both are
# sized from the file's length and DuckDB takes every line whole; a value over the limit is
# then refused by icefloe's own check, naming its row and field, as on every other input.
# (The margin as for read_json's maximum_object_size, json_records.py.)
_LINE_MARGIN = 64 << 10


def csv_reader_options(size_bytes: int) -> str:
    """The options of DuckDB's read_csv for a CSV file of ``size_bytes`` bytes: RFC 4180,
    nothing sniffed, and no line of it too long to be read whole."""
    longest = max(size_bytes, 0) + _LINE_MARGIN
    return f"{CSV_OPTIONS}, max_line_size={longest}, buffer_size={longest + _LINE_MARGIN}"


_BOM = "\xef\xbb\xbf"  # (read as latin-1, a byte a character)
_LINE_ENDINGS = {"\n": "LF", "\r\n": "CRLF", "\r": "CR"}


_DUCKDB_CSV_LINE = re.compile(r"CSV Error on Line: (\d+)")


def duckdb_csv_reason(error: duckdb.Error, name: str) -> str:
    """DuckDB's reason to refuse a CSV file, in one line (its message quotes the line and
    lists options to set, which icefloe does not take)."""
    text = str(error)
    at = _DUCKDB_CSV_LINE.search(text)
    skipped = ("Invalid Input Error", "Original Line", "Possible", "*", " ")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(skipped)]
    reason = lines[0] if lines else " ".join(text.split())
    where = f" at its line {at.group(1)}" if at else ""
    return f"DuckDB's CSV reader refuses {name}{where}: {reason}"


def csv_header(path: Path, name: str) -> list[str]:
    """The names of a CSV file's first record, its header; refused when it has none, or when
    it is not RFC 4180 or not UTF-8."""
    records = _csv_records(path)
    try:
        first = next(records, None)
    finally:
        records.close()
    if first is None or (not first.fields and not first.ending):  # (a BOM alone, say)
        raise _csv_refusal(f"{name} is empty: no header (a CSV input starts with its header line)")
    if not first.fields:
        raise _csv_refusal(f"line 1 of {name} is blank: the header must be the first line")
    if first.fault is not None:
        raise _csv_refusal(f"the header of {name}: {_csv_fault_message(first, name)}")
    if first.not_utf8 is not None:
        line, column, byte = first.not_utf8
        raise _csv_refusal(
            f"the header of {name} holds bytes that are not UTF-8"
            f" (0x{byte:02X} at line {line}, column {column})"
        )
    return [field.encode("latin-1").decode("utf-8") for field in first.fields]


def check_csv_header(spec: TableSpec, header: list[str], name: str) -> None:
    """Refuse a header naming no column in a place, or a column twice (in any case), or a
    column the table does not have."""
    problems = [
        RowProblem(row=None, field=None, message=f"column {i} of the header of {name} has no name")
        for i, column in enumerate(header, 1)
        if not column
    ]
    problems += [
        RowProblem(
            row=None,
            field=twice.name,
            message=f"the header of {name} names it more than once ({twice.where()})",
        )
        for twice in repeated_names(header)
        if twice.name  # (columns without a name: above)
    ]
    if not problems:
        problems = [
            RowProblem(
                row=None, field=column, message="unknown field (the table has no such column)"
            )
            for column in header
            if column not in spec.column_names
        ]
    if problems:
        raise refuse(problems)


def _csv_refusal(message: str) -> BatchRejectedError:
    return refuse([RowProblem(row=None, field=None, message=message)])


def csv_fault(path: Path, header: list[str], name: str) -> RowProblem | None:
    """The first row of a CSV file (after its header) that DuckDB's reader would refuse for
    its form, by row, line and file: a width other than the header's, a quote left open or
    followed by text, bytes that are not UTF-8, or a line ending other than the first line's
    (a file has one kind). None when none of them is found."""
    width = len(header)
    records = _csv_records(path)
    try:
        first = next(records)
        row = -1
        for record in records:
            blank = not record.fields
            # DuckDB skips a blank line, but in a file of one column it is a row (a NULL)
            counted = not blank or width == 1
            if counted:
                row += 1
            at = row if counted else None
            where = f"line {record.line} of {name}"
            if record.not_utf8 is not None:
                line, column, byte = record.not_utf8
                index = record.not_utf8_field
                return RowProblem(
                    row=at,
                    field=header[index] if index is not None and index < width else None,
                    message=f"bytes that are not UTF-8 (0x{byte:02X} at line {line},"
                    f" column {column} of {name})",
                )
            if record.fault is not None:
                return RowProblem(row=at, field=None, message=_csv_fault_message(record, name))
            fields = len(record.fields) if not blank else 1
            if counted and fields != width:
                plural = "field" if fields == 1 else "fields"
                return RowProblem(
                    row=at,
                    field=None,
                    message=f"{where} has {fields} {plural}, the header {width}",
                )
            if record.ending and record.ending != first.ending:
                return RowProblem(
                    row=at,
                    field=None,
                    message=f"line {record.end} of {name} ends in {_LINE_ENDINGS[record.ending]}"
                    f" where line 1 ends in {_LINE_ENDINGS.get(first.ending, 'nothing')}"
                    " (one file, one kind of line ending)",
                )
    finally:
        records.close()
    return None


@dataclass(slots=True)
class _CsvRecord:
    """One record of a CSV file as RFC 4180 reads it, its text latin-1 (a byte a character)."""

    line: int  # the line it starts on (1-based)
    end: int = 0  # the line it ends on
    fields: list[str] = field(default_factory=list)  # none: a blank line
    ending: str = ""  # its line ending: "\n", "\r\n", "\r", or "" at the end of the file
    # How it breaks RFC 4180, and on which line: "open", a quoted value the file ends in;
    # "after", text after a quoted value's closing quote.
    fault: tuple[Literal["open", "after"], int] | None = None
    not_utf8: tuple[int, int, int] | None = None  # (line, column, byte) of a byte not UTF-8
    not_utf8_field: int | None = None  # the field holding it


def _csv_records(path: Path) -> Generator[_CsvRecord, None, None]:
    """The records of a CSV file (RFC 4180: ',' between values, '"' around one that holds
    either or a line break, '""' for a quote inside it; a quote inside a value not quoted is
    text, as DuckDB reads it). Lines end in LF, CRLF or CR; a BOM before the first is skipped."""
    with path.open(encoding="latin-1", newline="") as f:
        record: _CsvRecord | None = None  # a record whose quoted value goes on past a line
        parts: list[str] = []  # that value's text so far
        opened = number = 0  # the line its quote opened on; this line
        carried = ""  # the line break inside it
        for text in f:
            number += 1
            body = text.rstrip("\r\n")
            ending = text[len(body) :]
            if number == 1 and body.startswith(_BOM):
                body = body[len(_BOM) :]
            bad = None if text.isascii() else _first_not_utf8(body + ending, number)
            if record is None:
                record = _CsvRecord(number, not_utf8=bad)
                if not body:
                    record.end, record.ending = number, ending
                    yield record
                    record = None
                    continue
                pos, quoted = 0, False
            else:
                parts.append(carried)
                pos, quoted = 0, True
                if record.not_utf8 is None:
                    record.not_utf8 = bad
            done = False
            while True:
                if quoted:
                    close = body.find('"', pos)
                    if close < 0:
                        parts.append(body[pos:])
                        break  # the value goes on: its line break is part of it
                    if body.startswith('"', close + 1):  # a quote, written twice
                        parts.append(body[pos : close + 1])
                        pos = close + 2
                        continue
                    parts.append(body[pos:close])
                    record.fields.append("".join(parts))
                    parts, quoted, pos = [], False, close + 1
                    if pos == len(body):
                        done = True
                        break
                    if body[pos] != ",":
                        record.fault = ("after", number)
                        done = True
                        break
                    pos += 1
                    continue
                if body.startswith('"', pos):
                    quoted, opened, pos = True, number, pos + 1
                    continue
                comma = body.find(",", pos)
                if comma < 0:
                    record.fields.append(body[pos:])
                    done = True
                    break
                record.fields.append(body[pos:comma])
                pos = comma + 1
            if done:
                record.end, record.ending = number, ending
                _locate_not_utf8(record)
                yield record
                record = None
            else:
                carried = ending
        if record is not None:  # the file ends inside a quoted value
            record.fields.append("".join(parts))
            record.end = number
            record.fault = ("open", opened)
            _locate_not_utf8(record)
            yield record


def _csv_fault_message(record: _CsvRecord, name: str) -> str:
    assert record.fault is not None
    kind, line = record.fault
    if kind == "open":
        return f"the quoted value opened on line {line} of {name} is never closed"
    return (
        f"text follows a quoted value's closing quote on line {line} of {name}"
        ' (a quote inside a quoted value is written twice: "")'
    )


def _first_not_utf8(text: str, line: int) -> tuple[int, int, int] | None:
    """(line, column in characters, byte) of the first byte of a line (latin-1 text) that is
    not UTF-8, or None."""
    raw = text.encode("latin-1")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(raw[: e.start].decode("utf-8", errors="replace")) + 1
        return line, column, raw[e.start]
    return None


def _locate_not_utf8(record: _CsvRecord) -> None:
    """Which field of the record holds its first byte that is not UTF-8."""
    if record.not_utf8 is None:
        return
    for i, value in enumerate(record.fields):
        try:
            value.encode("latin-1").decode("utf-8")
        except UnicodeDecodeError:
            record.not_utf8_field = i
            return
