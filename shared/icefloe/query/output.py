"""Query results out: JSON-safe rows, CSV, Parquet or a text table."""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO
from uuid import UUID

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from icefloe.duck import ident
from icefloe.errors import InvalidArgumentError

MAX_TEXT_ROWS = 1000


def json_safe(value: Any) -> Any:
    """A value as JSON can carry it: times as ISO-8601, decimals as strings, bytes as hex."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


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
    """Each row as a list of Python values, in column order (a MAP value is a dict)."""
    columns = [
        table.column(i).to_pylist(maps_as_pydicts="strict") for i in range(table.num_columns)
    ]
    if not columns:
        return [[] for _ in range(table.num_rows)]
    return [list(row) for row in zip(*columns, strict=True)]


def write_result(table: pa.Table, *, fmt: str, out: TextIO, output: str | None = None) -> None:
    """Write ``table`` as ``fmt`` to ``output`` (a file) or ``out``."""
    if fmt == "parquet":
        if output is None:
            raise InvalidArgumentError("parquet output needs a file")
        pq.write_table(table, output, compression="zstd")
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
        Path(output).write_text(text, encoding="utf-8")
    else:
        out.write(text)


def csv_safe(table: pa.Table) -> pa.Table:
    """CSV cannot hold nested or binary values: write those as JSON or hex text."""
    for position, field in enumerate(table.schema):
        if (
            pa.types.is_nested(field.type)
            or pa.types.is_binary(field.type)
            or pa.types.is_fixed_size_binary(field.type)
        ):
            values = [
                None
                if v is None
                else (v.hex() if isinstance(v, bytes) else json.dumps(json_safe(v)))
                for v in table.column(position).to_pylist(maps_as_pydicts="strict")
            ]
            table = table.set_column(position, field.name, pa.array(values, pa.string()))
    return table


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
    safe = json_safe(value)
    return safe if isinstance(safe, str) else json.dumps(safe)


def columns_as_text(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """``table`` with the columns ``names`` as DuckDB's text of their values (a TIME as
    ``05:30:00``, a UUID in its dashed form), for readers that hold them as text."""
    with duckdb.connect() as con:
        con.register("answer", table)
        cast = ", ".join(f"CAST({ident(n)} AS VARCHAR) AS {ident(n)}" for n in names)
        return con.execute(f"SELECT * REPLACE ({cast}) FROM answer").to_arrow_table()
