"""Query results out: JSON-safe rows, CSV, Parquet or a text table."""

from __future__ import annotations

import base64
import bisect
import errno
import io
import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, TextIO
from uuid import UUID

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from icefloe.duck import ident
from icefloe.errors import InvalidArgumentError, InvalidInputError

MAX_TEXT_ROWS = 1000


def json_safe(value: Any) -> Any:
    """A value as JSON can carry it: times as ISO-8601, decimals as strings, bytes as hex, NaN
    and the infinities as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (JSON has
    no literal for them; Postgres and BigQuery write them so), never as null."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        # A MAP's keys are its keys' values as JSON writes them, as text (a BLOB key as hex).
        return {map_key(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


def map_key(key: Any) -> str:
    """A MAP's key as the text an object keys it by: its JSON-safe value (:func:`json_safe`: a
    BLOB as hex, as a BLOB value is written), as text."""
    return str(json_safe(key))


def json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """One object per row, keyed by column name (a MAP value is an object keyed by its keys'
    text, as DuckDB writes a MAP as JSON). A name the result repeats (``SELECT a.id, b.id``
    over a join) is keyed as DuckDB names it when the query is read as a subquery: ``id``,
    ``id_1``, ``id_2``, so that no column is lost."""
    keys = unique_names(table.column_names)
    return [{k: json_safe(v) for k, v in zip(keys, row, strict=True)} for row in python_rows(table)]


def json_values(table: pa.Table) -> list[list[Any]]:
    """Each row as a list of JSON-safe values, in column order (every column, whatever its
    name)."""
    return [[json_safe(v) for v in row] for row in python_rows(table)]


def unique_names(names: Sequence[str]) -> list[str]:
    """``names`` with each repeat renamed as DuckDB renames it in a subquery (``a``, ``a_1``,
    ``a_2``; a name already taken gets a suffix of its own, ``a_1_1``)."""
    taken: set[str] = set()
    unique: list[str] = []
    for name in names:
        candidate, n = name, 0
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        unique.append(candidate)
    return unique


def python_rows(table: pa.Table) -> list[list[Any]]:
    """Each row as a list of Python values, in column order (a MAP value is a dict). A value
    Python cannot hold as it is (see :func:`python_columns`) is DuckDB's text of it."""
    columns = python_columns(table)
    if not columns:
        return [[] for _ in range(table.num_rows)]
    return [list(row) for row in zip(*columns, strict=True)]


def python_columns(table: pa.Table) -> list[list[Any]]:
    """Each column's values as Python values, in column order. Where Python cannot hold a
    value as DuckDB means it (a DATE or TIMESTAMP past year 9999 or infinite, ``TIME
    '24:00:00'``), the value is DuckDB's text of it; a column of a type Python has no faithful
    value for (INTERVAL, VARINT, a MAP keyed by lists or structs, a struct with unnamed
    fields, and anything holding one) is DuckDB's text throughout."""
    with _DuckText(table) as text:
        return [_column_values(table.column(i), i, text) for i in range(table.num_columns)]


_CONVERSION_ERRORS = (OverflowError, ValueError, TypeError, ArithmeticError, pa.ArrowException)


def _column_values(column: pa.ChunkedArray, position: int, text: _DuckText) -> list[Any]:
    if needs_text(column.type):
        return text(position)
    try:
        values: list[Any] = column.to_pylist(maps_as_pydicts="strict")
    except _CONVERSION_ERRORS:
        # Only the values that do not convert are DuckDB's: as text, or inside a list, struct
        # or map as the JSON DuckDB writes of the value (an infinite date in a struct is
        # ``{"d": "infinity"}``).
        texts = text(position, as_json=pa.types.is_nested(column.type))
        values = []
        for i, scalar in enumerate(column):
            try:
                values.append(scalar.as_py(maps_as_pydicts="strict"))
            except _CONVERSION_ERRORS:
                values.append(texts[i])
        return values
    if any(pa.types.is_time(t) for t in _types_within(column.type)):
        # Python's time stops at 23:59:59.999999: DuckDB's TIME '24:00:00' comes out as 00:00.
        # Those values are DuckDB's text (inside a list, struct or map, its JSON of the row).
        late = sorted(_rows_with_midnight_ending(column.combine_chunks()))
        if late:
            texts = text(position, as_json=pa.types.is_nested(column.type))
            for i in late:
                values[i] = texts[i]
    return values


def _rows_with_midnight_ending(array: pa.Array) -> set[int]:
    """The rows of ``array`` holding a TIME of 24:00:00 (a whole day), at any depth."""
    kind = array.type
    if pa.types.is_time(kind):
        day = 86_400 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[kind.unit]
        ticks = array.cast(pa.int64())
        return set(pc.indices_nonzero(pc.fill_null(pc.equal(ticks, day), False)).to_pylist())
    if isinstance(array, pa.DictionaryArray):
        inner = _rows_with_midnight_ending(array.dictionary)
        if not inner:
            return set()
        hits = pc.is_in(array.indices, pa.array(sorted(inner), array.indices.type))
        return set(pc.indices_nonzero(pc.fill_null(hits, False)).to_pylist())
    if pa.types.is_struct(kind):
        return set().union(*(_rows_with_midnight_ending(f) for f in array.flatten()))
    if pa.types.is_fixed_size_list(kind):
        inner = _rows_with_midnight_ending(array.flatten())
        return {i // kind.list_size for i in inner}
    if pa.types.is_map(kind):
        children = [array.keys, array.items]
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        children = [array.flatten()]
    else:
        return set()
    inner = set().union(*(_rows_with_midnight_ending(c) for c in children))
    if not inner:
        return set()
    # The row whose entries hold each, by the offsets (pyarrow's list_parent_indices aborts
    # the process on a map).
    offsets = array.offsets.to_pylist()
    return {bisect.bisect_right(offsets, i + offsets[0]) - 1 for i in inner}


def needs_text(data_type: pa.DataType) -> bool:
    """Whether values of ``data_type`` have no faithful Python (or CSV) form, so that output
    writes DuckDB's text of them."""
    return any(_no_python_form(t) for t in _types_within(data_type))


def _no_python_form(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` itself (whatever it holds) has no faithful Python form."""
    if pa.types.is_interval(data_type) or isinstance(data_type, pa.BaseExtensionType):
        return True
    if pa.types.is_map(data_type):
        return bool(pa.types.is_nested(data_type.key_type))
    if pa.types.is_struct(data_type):
        names = [data_type.field(i).name for i in range(data_type.num_fields)]
        return "" in names or len(set(names)) < len(names)
    return False


def parquet_needs_text(data_type: pa.DataType) -> bool:
    """Whether Parquet (as pyarrow writes it) has no form for ``data_type``: an INTERVAL or a
    UNION, at any depth, so that Parquet output writes DuckDB's text of the column."""
    return any(pa.types.is_interval(t) or pa.types.is_union(t) for t in _types_within(data_type))


def _types_within(data_type: pa.DataType) -> Iterator[pa.DataType]:
    """``data_type`` and every type its values hold, at any depth (a dictionary's values, a
    map's keys and items, a struct's or union's fields, a list's elements)."""
    yield data_type
    if pa.types.is_dictionary(data_type):
        yield from _types_within(data_type.value_type)
    elif pa.types.is_map(data_type):
        yield from _types_within(data_type.key_type)
        yield from _types_within(data_type.item_type)
    elif pa.types.is_struct(data_type) or pa.types.is_union(data_type):
        for i in range(data_type.num_fields):
            yield from _types_within(data_type.field(i).type)
    elif (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
        or pa.types.is_list_view(data_type)
        or pa.types.is_large_list_view(data_type)
    ):
        yield from _types_within(data_type.value_type)


class _DuckText:
    """DuckDB's text (``CAST(... AS VARCHAR)``) of a column of ``table``, by position; opens
    one DuckDB (in UTC, as the query's) only when a column needs it."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._con: duckdb.DuckDBPyConnection | None = None

    def __enter__(self) -> _DuckText:
        return self

    def __exit__(self, *_: object) -> None:
        if self._con is not None:
            self._con.close()

    def __call__(self, position: int, *, as_json: bool = False) -> list[Any]:
        if self._con is None:
            # One thread keeps the rows in order.
            self._con = duckdb.connect(config={"threads": 1})
            self._con.execute("SET TimeZone = 'UTC'")
        one = pa.table([self._table.column(position)], names=["v"])
        cast = "json(to_json(v))" if as_json else "CAST(v AS VARCHAR)"
        self._con.register("answer_column", one)
        try:
            texts = [
                v for (v,) in self._con.execute(f"SELECT {cast} FROM answer_column").fetchall()
            ]
        finally:
            self._con.unregister("answer_column")
        if as_json:
            return [None if v is None else json.loads(v) for v in texts]
        return texts


def write_result(table: pa.Table, *, fmt: str, out: TextIO, output: str | None = None) -> None:
    """Write ``table`` as ``fmt`` to ``output`` (a file) or ``out``. A file is written whole or
    not at all (see :func:`_write_output`)."""
    if fmt == "parquet":
        if output is None:
            raise InvalidArgumentError("parquet output needs a file")
        # Converted before the file is opened: a failure leaves nothing written.
        safe = parquet_safe(table)
        _write_output(output, lambda f: pq.write_table(safe, f, compression="zstd"))
        return
    if fmt == "json":
        text = json.dumps(json_rows(table), indent=None) + "\n"
    elif fmt == "csv":
        buffer = io.BytesIO()
        pa_csv.write_csv(csv_safe(table), buffer)
        text = buffer.getvalue().decode()
    else:
        text = text_table(table) + "\n"
    if output is not None:
        data = text.encode("utf-8")
        _write_output(output, lambda f: f.write(data))
    else:
        out.write(text)


def check_output_path(output: str | None) -> None:
    """Refuse, before any work, an ``--output`` that :func:`write_result` could not write: an
    empty name, a directory, or a file in a directory that does not exist (a query or feed
    read first, then lost, cost its whole run)."""
    if output is None:
        return
    if not output:
        raise InvalidInputError("cannot write --output '': the path is empty")
    target = Path(os.path.realpath(output))
    if os.path.isdir(output):
        raise InvalidInputError(f"cannot write --output {output!r}: it is a directory")
    if not target.parent.exists():
        raise InvalidInputError(
            f"cannot write --output {output!r}: no directory {str(target.parent)!r}"
        )


def _write_output(output: str, write: Callable[[BinaryIO], object]) -> None:
    """Write a file named by ``--output`` with ``write``: into a new file beside it, then renamed
    over it, so that a failure partway leaves no partial file (and an existing one as it was);
    the file keeps an existing file's mode. What is no regular file, or is one only through a
    descriptor (a pipe, a device, ``/dev/stdout``, ``/dev/fd/3``), is written in place,
    appended to.
    Refused as :class:`InvalidInputError` naming the path: an empty name, a directory, a
    directory that does not exist, a file it may not write."""
    if not output:
        raise InvalidInputError("cannot write --output '': the path is empty")
    # Through a symlink: its target is the file to replace (a loop: stat below says so).
    target = Path(os.path.realpath(output))
    try:
        try:
            status: os.stat_result | None = os.stat(output)
        except FileNotFoundError:
            status = None
        if status is not None and stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), output)
        if status is not None and (not stat.S_ISREG(status.st_mode) or _names_a_descriptor(output)):
            # As given: /dev/stdout resolves to no path, or to the file the shell redirected
            # stdout to, which must be written through its descriptor, never replaced.
            with open(output, "ab") as f:
                write(f)
            return
        temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        # Created as open() creates a file (0666 less the umask); an existing file's mode kept.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if status is not None:
                os.chmod(temp, stat.S_IMODE(status.st_mode))
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as e:
        reason = e.strerror or str(e)
        if isinstance(e, FileNotFoundError) and not target.parent.is_dir():
            reason = f"no directory {str(target.parent)!r}"
        elif isinstance(e, IsADirectoryError):
            reason = "it is a directory"
        raise InvalidInputError(f"cannot write --output {output!r}: {reason}") from e


def _names_a_descriptor(output: str) -> bool:
    """Whether ``output`` names an open descriptor: ``/dev/stdout``, ``/dev/fd/3``,
    ``/proc/self/fd/1`` (not any file under /dev: /dev/shm holds plain files)."""
    parts = Path(output).absolute().parts
    if parts[1:2] == ("dev",):
        return parts[2:3] in (("fd",), ("stdin",), ("stdout",), ("stderr",))
    return parts[1:2] == ("proc",) and parts[3:4] == ("fd",)


def csv_safe(table: pa.Table) -> pa.Table:
    """CSV cannot hold nested or binary values: write those as JSON or hex text; values CSV
    has no form for (an INTERVAL, a VARINT, an infinite or year-10000 date) as DuckDB's
    text."""
    with _DuckText(table) as text:
        for position, field in enumerate(table.schema):
            column = table.column(position)
            if needs_text(field.type) or not _fits_python(column):
                values: list[Any] = text(position)
            elif (
                pa.types.is_nested(field.type)
                or pa.types.is_binary(field.type)
                or pa.types.is_fixed_size_binary(field.type)
            ):
                values = [
                    None
                    if v is None
                    else (v.hex() if isinstance(v, bytes) else json.dumps(json_safe(v)))
                    for v in _column_values(column, position, text)
                ]
            else:
                continue
            table = table.set_column(position, field.name, pa.array(values, pa.string()))
    return table


def parquet_safe(table: pa.Table) -> pa.Table:
    """Parquet cannot hold an INTERVAL or a UNION (see :func:`parquet_needs_text`): write such
    a column as DuckDB's text of it (``01:00:00``, ``{'a': 1 day}``), as CSV and JSON do; every
    other column as it is."""
    with _DuckText(table) as text:
        for position, field in enumerate(table.schema):
            if parquet_needs_text(field.type):
                values = pa.array(text(position), pa.string())
                table = table.set_column(position, field.name, values)
    return table


def _fits_python(column: pa.ChunkedArray) -> bool:
    """Whether a date, time or timestamp column holds only values Python can (no infinity, no
    year past 9999, no ``24:00:00``); other columns are taken to."""
    data_type = column.type
    if not (
        pa.types.is_date(data_type)
        or pa.types.is_timestamp(data_type)
        or pa.types.is_time(data_type)
    ):
        return True
    try:
        values = column.to_pylist()
    except _CONVERSION_ERRORS:
        return False
    if pa.types.is_time(data_type):
        ticks = column.cast(pa.int64()).to_pylist()
        return not any(v == time() and t for v, t in zip(values, ticks, strict=True))
    return True


def text_table(table: pa.Table) -> str:
    headers = table.column_names
    rows = [[_cell(v) for v in row] for row in python_rows(table.slice(0, MAX_TEXT_ROWS))]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    more = table.num_rows - len(rows)
    lines.append(f"({table.num_rows:,} rows" + (f", first {len(rows):,} shown)" if more else ")"))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 32 else base64.b64encode(value[:24]).decode() + "..."
    if isinstance(value, float | dict | list | tuple):
        return _cell_text(value)
    safe = json_safe(value)
    return safe if isinstance(safe, str) else json.dumps(safe)


def _cell_text(value: Any) -> str:
    """A float, or a nested value as JSON, but NaN and the infinities spelled as DuckDB spells
    them (``nan``, ``inf``, ``-inf``, Python's spelling too) at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        items = (f"{json.dumps(map_key(k))}: {_cell_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_cell_text(v) for v in value) + "]"
    return json.dumps(json_safe(value))


def columns_as_text(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """``table`` with the columns ``names`` as DuckDB's text of their values (a TIME as
    ``05:30:00``, a UUID in its dashed form), for readers that hold them as text."""
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")  # a TIMESTAMPTZ inside prints in UTC
        con.register("answer", table)
        cast = ", ".join(f"CAST({ident(n)} AS VARCHAR) AS {ident(n)}" for n in names)
        return con.execute(f"SELECT * REPLACE ({cast}) FROM answer").to_arrow_table()
