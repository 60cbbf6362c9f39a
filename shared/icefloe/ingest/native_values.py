"""Python values beyond JSON's that rows may hold, written as the JSON a sender would send.

Rows are staged as JSON text (orjson's), so a Python value is taken when its text is what the
column takes from JSON:

- ``datetime`` (naive or aware), ``date`` and ``time``: ISO-8601 strings, by Python's
  ``isoformat`` (orjson 3.13 drops a leading zero of a ``time``'s microseconds: 29,724 us
  printed ``.29724``, which reads back as 297,240 us);
- ``uuid.UUID``: the UUID string;
- ``decimal.Decimal``: a JSON number with the decimal's own digits (NaN and infinities are
  refused, as for floats). DuckDB reads a JSON number as a double, so one of more than 15
  significant digits is refused rather than rounded; Arrow input (a pandas or polars frame)
  carries decimals at full precision;
- ``bytes`` (and ``bytearray``, ``memoryview``): a base64 string, the form a ``BLOB`` takes; only
  in a column whose type holds a ``BLOB``, elsewhere refused, naming the field (base64 text in a
  ``VARCHAR`` would be stored without a word);
- numpy scalars (integers, floats, booleans, ``datetime64``): as the Python value they stand
  for (a float32 by its shortest text).

Anything else orjson cannot write is refused, naming the row and field.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal

import orjson

from icefloe.errors import RowProblem

OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATETIME
# DuckDB reads a JSON number as a double: a Decimal of more digits would arrive rounded.
EXACT_DIGITS = 15
_BLOB = re.compile(r"\bBLOB\b", re.IGNORECASE)
_BYTES = (bytes, bytearray, memoryview)


class Writer:
    """Writes values as JSON (``dumps``), noting whether any was ``bytes``."""

    def __init__(self) -> None:
        self.wrote_bytes = False

    def dumps(self, value: object) -> bytes:
        return orjson.dumps(value, default=self._default, option=OPTIONS)

    def _default(self, value: object) -> object:
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise TypeError(f"{value} is refused (send null for a missing value)")
            digits = len(value.as_tuple().digits)
            if digits > EXACT_DIGITS:
                raise TypeError(
                    f"Decimal {value} has {digits} significant digits; JSON carries"
                    f" {EXACT_DIGITS} exactly (insert it as Arrow: a pyarrow table or a frame)"
                )
            return orjson.Fragment(str(value))
        if isinstance(value, _BYTES):
            self.wrote_bytes = True
            return base64.b64encode(value).decode("ascii")
        raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def dumps(value: object) -> bytes:
    """``value`` as the JSON text rows are staged as."""
    return Writer().dumps(value)


def blob_columns(columns: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The names of the (name, type) columns whose type holds a ``BLOB``."""
    return frozenset(name for name, type_name in columns if _BLOB.search(type_name))


def bytes_outside_blobs(
    rows: Sequence[Mapping[str, object]], blobs: Collection[str]
) -> RowProblem | None:
    """The first field holding ``bytes`` in a column without a ``BLOB``, or None."""
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            continue
        for field, value in row.items():
            if field not in blobs and _holds_bytes(value):
                return RowProblem(
                    row=index,
                    field=str(field),
                    message="bytes are taken by BLOB columns only (send text as str)",
                )
    return None


def _holds_bytes(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _BYTES):
            return True
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False
