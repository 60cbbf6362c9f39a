"""Python values beyond JSON's that rows may hold, written as the JSON a sender would send.

Rows are staged as JSON text (orjson's), so a Python value is taken when its text is what the
column takes from JSON:

- ``datetime`` (naive or aware), ``date`` and ``time``: ISO-8601 strings, by Python's
  ``isoformat`` (orjson 3.13 drops a leading zero of a ``time``'s microseconds: 29,724 us
  printed ``.29724``, which reads back as 297,240 us);
- ``uuid.UUID``: the UUID string;
- ``decimal.Decimal``: a JSON number with the decimal's own digits, all of them (NaN and
  infinities are refused, as for floats): a ``DECIMAL`` takes them exactly, or refuses the
  value (see :mod:`~icefloe.ingest.exact_numbers`); a :class:`JsonNumber` (a number a queue
  message sent) is written as the text it was sent as;
- ``bytes`` (and ``bytearray``, ``memoryview``): a base64 string, the form a ``BLOB`` takes; only
  at a ``BLOB`` of the column's type (the column, a struct's field, a list's or map's values),
  elsewhere refused, naming the path (base64 text in a ``VARCHAR`` would be stored without a
  word);
- an ``int`` past 64 bits (orjson writes no wider ones): its digits, a JSON number that a
  ``HUGEINT`` takes exactly (and a ``DOUBLE`` or ``JSON`` column as from any sender);
- numpy scalars (integers, floats, booleans, ``datetime64``): as the Python value they stand
  for (a float32 by its shortest text).

Anything else orjson cannot write is refused, naming the row and field.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal

import orjson

from icefloe.errors import RowProblem
from icefloe.spec.type_tree import Leaf, ListOf, MapOf, Struct, TypeNode
from icefloe.spec.types import type_tree

OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATETIME
_BLOB = re.compile(r"\bBLOB\b", re.IGNORECASE)
_BYTES = (bytes, bytearray, memoryview)
_BLOB_LEAF = Leaf("BLOB")
# orjson writes integers of 64 bits; a wider one (a HUGEINT's) is written as its digits.
_WIDE_INTEGER = "Integer exceeds 64-bit range"
_INTEGER_RANGE = range(-(2**63), 2**64)


class JsonNumber(Decimal):
    """A JSON number as it was sent (``text``), where a float would not hold it exactly (see
    :func:`~icefloe.ingest.exact_numbers.inexact`): written back as that text."""

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


class Writer:
    """Writes values as JSON (``dumps``), noting whether any was ``bytes``."""

    def __init__(self) -> None:
        self.wrote_bytes = False

    def dumps(self, value: object) -> bytes:
        try:
            return orjson.dumps(value, default=self._default, option=OPTIONS)
        except orjson.JSONEncodeError as e:
            if str(e) != _WIDE_INTEGER:
                raise
            return orjson.dumps(
                _wide_integers_as_text(value), default=self._default, option=OPTIONS
            )

    def _default(self, value: object) -> object:
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, JsonNumber):
            return orjson.Fragment(value.text)
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise TypeError(f"{value} is refused (send null for a missing value)")
            return orjson.Fragment(str(value))
        if isinstance(value, _BYTES):
            self.wrote_bytes = True
            return base64.b64encode(value).decode("ascii")
        raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _wide_integers_as_text(value: object) -> object:
    """``value`` with each integer orjson cannot write replaced by its digits, verbatim."""
    if type(value) is int:
        return value if value in _INTEGER_RANGE else orjson.Fragment(str(value))
    if isinstance(value, Mapping):
        return {k: _wide_integers_as_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_wide_integers_as_text(v) for v in value]
    return value


def dumps(value: object) -> bytes:
    """``value`` as the JSON text rows are staged as."""
    return Writer().dumps(value)


def blob_columns(columns: Iterable[tuple[str, str]]) -> dict[str, TypeNode]:
    """The (name, type) columns whose type holds a ``BLOB``, each with its type's tree."""
    return {name: type_tree(type_name) for name, type_name in columns if _BLOB.search(type_name)}


def bytes_outside_blobs(
    rows: Sequence[Mapping[str, object]], blobs: Mapping[str, TypeNode]
) -> RowProblem | None:
    """The first value holding ``bytes`` anywhere but at a ``BLOB`` leaf of its column's type
    (a VARCHAR field beside a BLOB one in a STRUCT, a JSON column, a column without a BLOB),
    named by its path (``col.field``, ``col[]`` for a list's or map's values), or None."""
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            continue
        for field, value in row.items():
            path = _bytes_outside(value, blobs.get(field), str(field))
            if path is not None:
                return RowProblem(
                    row=index,
                    field=path,
                    message="bytes are taken by BLOB fields only (send text as str)",
                )
    return None


def _bytes_outside(value: object, node: TypeNode | None, path: str) -> str | None:
    """The path of the first ``bytes`` in ``value`` not at a BLOB leaf of ``node`` (None: no
    type, as under a JSON column or a field the type lacks)."""
    if isinstance(value, _BYTES):
        return None if node == _BLOB_LEAF else path
    if isinstance(value, Mapping):
        for key, item in value.items():
            child: TypeNode | None = None
            if isinstance(node, Struct):
                child = _struct_field(node, str(key))
                where = f"{path}.{key}"
            elif isinstance(node, MapOf):
                child, where = node.value, f"{path}[]"
            else:
                where = f"{path}.{key}"
            found = _bytes_outside(item, child, where)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        element = node.element if isinstance(node, ListOf) else None
        for item in value:
            found = _bytes_outside(item, element, f"{path}[]")
            if found is not None:
                return found
    return None


def _struct_field(node: Struct, key: str) -> TypeNode | None:
    """The type of ``key`` in ``node``, by exact name: the conversion matches keys to fields
    with their case, so ``"Raw"`` is no ``raw`` (it is an unknown key, kept or refused)."""
    return next((child for name, child in node.fields if name == key), None)
