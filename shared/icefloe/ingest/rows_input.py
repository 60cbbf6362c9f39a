"""Rows from Python converted straight to typed Arrow, or left to the JSON paths.

Rows (dicts: a Lambda event's records, a client's batch) are staged as NDJSON, and that text
is what the JSON paths parse. Most small batches hold only plain values of the columns' own
kinds, and for those the dicts already say what the parse would find: a ``str`` is a JSON
string, an ``int`` a JSON integer, and so on. This path builds each column from the values
directly, with no parse, and then proves the batch clean with the same checks the one-parse
NDJSON path runs (:func:`~icefloe.ingest.arrow_input.proven_clean` and
:func:`~icefloe.ingest.json_input.json_text_clean`).

It answers only when the conversion would give the same table:

- every row is a dict whose keys are all columns (an unknown field is the conversion's to name);
- each value is None or of its column's kind: ``str`` for VARCHAR, DATE and TIMESTAMP (in the
  forms both parsers read, all zoned or all local), ``bool`` for BOOLEAN, ``int`` in range for
  integers, ``float`` (or an ``int`` a double holds exactly) for DOUBLE;
- a JSON column's text is orjson's, the text the staged line holds. DuckDB stores JSON text as
  its own writer prints it back, which differs from orjson's in two places: numbers in exponent
  form (``1e+16`` is printed ``10000000000000000.0``) and the hex case of ``\\u00XX`` escapes.
  A column whose text holds either goes to the JSON paths.

Otherwise (a table keeping unknown fields, a column type this path does not build, FLOAT
among them as in the one-parse path) it returns None. The rows have passed the staging checks
already: they serialize, and fit the size limit. NaN and infinities, which orjson writes as
null, are looked for here when the batch's text holds a null: staging leaves that walk over
every value, the slow part of a batch, to whichever path stages the file. A differential
test (``tests/unit/core/test_rows_differential.py``) holds this path to the conversion's
answer over random rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from icefloe.ingest import native_values
from icefloe.ingest.arrow_input import ARROW_TYPES, proven_clean
from icefloe.ingest.json_input import dates_from_text, json_text_clean, timestamps_from_text
from icefloe.ingest.sources import InsertLimits, value_problem
from icefloe.ingest.strict_json import matches_anywhere, value_bytes
from icefloe.spec import Column, TableSpec

_INTEGERS = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
)
# A double holds every integer up to 2^53 exactly; past it, which neighbour a conversion picks
# is left to the conversion.
_EXACT_IN_DOUBLE = 1 << 53
# Where orjson's JSON text and DuckDB's stored text may differ: a number in exponent form, and
# an escape of a control character (DuckDB prints its hex digits upper case).
_PRINTED_OTHERWISE = r"[0-9][eE]|\\u00"


def load_rows_fast(
    rows: Sequence[Mapping[str, object]],
    spec: TableSpec,
    *,
    limits: InsertLimits,
    partition_sources: frozenset[str],
    values_unchecked: bool = False,
) -> pa.Table | None:
    """The rows as the conversion would load them, or None when it must decide.

    ``values_unchecked``: the batch's text holds a null, and staging has not looked for NaN
    and infinities (which orjson writes as null). The columns prove it here: a DOUBLE's
    values are checked finite, the other typed columns take no float, and each JSON value
    whose text holds a null is looked at."""
    if spec.extra_fields == "keep" or not rows:
        return None
    if not all(type(row) is dict for row in rows):
        return None
    if not set().union(*rows) <= set(spec.column_names):
        return None
    columns: dict[str, pa.ChunkedArray] = {}
    json_columns: list[Column] = []
    json_values: dict[str, list[object]] = {}
    for col in spec.columns:
        build = _BUILDERS.get(col.type)
        if build is None:
            return None
        values = [row.get(col.name) for row in rows]
        built = build(values)
        if built is None:
            return None
        columns[col.name] = built
        if col.type == "JSON":
            json_columns.append(col)
            json_values[col.name] = values
    table = pa.table(columns)
    for col in json_columns:
        text = table.column(col.name)
        if not json_text_clean(text, col, limits=limits, written_by_orjson=True):
            return None
        if values_unchecked and not _finite(json_values[col.name], text, limits=limits):
            return None
    return proven_clean(spec, table, limits=limits, partition_sources=partition_sources)


def _finite(values: list[object], text: pa.ChunkedArray, *, limits: InsertLimits) -> bool:
    """Whether no JSON value holds a NaN or an infinity: only one whose text has a null can."""
    suspects = pc.indices_nonzero(pc.match_substring(text, "null")).to_pylist()
    return all(value_problem(values[i], max_depth=limits.max_json_depth) is None for i in suspects)


def _strings(values: list[object]) -> pa.ChunkedArray | None:
    # pyarrow refuses anything but text here (bytes too would pass, but bytes are staged only
    # in a BLOB column, which has no builder here).
    try:
        return pa.chunked_array([pa.array(values, pa.string())])
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return None


def _booleans(values: list[object]) -> pa.ChunkedArray | None:
    if not all(type(v) is bool or v is None for v in values):
        return None
    return pa.chunked_array([pa.array(values, pa.bool_())])


def _integers(arrow_type: pa.DataType) -> Callable[[list[object]], pa.ChunkedArray | None]:
    def build(values: list[object]) -> pa.ChunkedArray | None:
        if not all(type(v) is int or v is None for v in values):
            return None
        try:
            return pa.chunked_array([pa.array(values, arrow_type)])
        except (pa.ArrowInvalid, OverflowError):
            return None  # out of the type's range: the conversion names it

    return build


def _doubles(values: list[object]) -> pa.ChunkedArray | None:
    for v in values:
        kind = type(v)
        if kind is float or v is None:
            continue
        if kind is int and -_EXACT_IN_DOUBLE <= v <= _EXACT_IN_DOUBLE:  # type: ignore[operator]
            continue
        return None
    return pa.chunked_array([pa.array(values, pa.float64())])


def _text_then(
    convert: Callable[[pa.ChunkedArray], pa.ChunkedArray | None],
) -> Callable[[list[object]], pa.ChunkedArray | None]:
    def build(values: list[object]) -> pa.ChunkedArray | None:
        text = _strings(values)
        return None if text is None else convert(text)

    return build


def _json_text(values: list[object]) -> pa.ChunkedArray | None:
    # Decoded at once: a list of orjson's bytes objects costs ten times as much to build
    # (each keeps the capacity it was written into).
    texts = pa.array(
        [None if v is None else native_values.dumps(v).decode() for v in values], pa.string()
    )
    # Searched as one value (a match across two values, or in a null's bytes, which a fresh
    # array has none of, only sends the batch to the JSON paths): a third of a search of each.
    data = value_bytes(texts)
    if data is not None and data.size and matches_anywhere(data, _PRINTED_OTHERWISE):
        return None
    return pa.chunked_array([texts])


_BUILDERS: dict[str, Callable[[list[object]], pa.ChunkedArray | None]] = {
    "VARCHAR": _strings,
    "BOOLEAN": _booleans,
    **{kind: _integers(ARROW_TYPES[kind]) for kind in _INTEGERS},
    "DOUBLE": _doubles,
    "TIMESTAMP": _text_then(timestamps_from_text),
    "DATE": _text_then(dates_from_text),
    "JSON": _json_text,
}
