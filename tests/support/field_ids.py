"""What field ids a Parquet file carries, and what a spec version says they should be."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from icefloe.spec.field_ids import NestedField
from icefloe.spec.layout import FileLayout
from icefloe.spec.names import ROW_ID_COLUMN, ROW_ID_FIELD_ID


def file_field_ids(source: Path | str | bytes) -> dict[str, int | None]:
    """Each field of the file's schema (dotted path; a list's element is ``element``, a map's
    parts ``key`` and ``value``) and its Parquet field id, None when it has none."""
    where = pa.BufferReader(source) if isinstance(source, bytes) else source
    schema = pq.read_schema(where)
    found: dict[str, int | None] = {}
    for f in schema:
        _collect(f, f.name, found)
    return found


def expected_field_ids(layout: FileLayout) -> dict[str, int | None]:
    """What :func:`file_field_ids` should give for a file of ``layout`` (with the row id)."""
    expected: dict[str, int | None] = {}
    for column in layout.columns:
        expected[column.name] = column.id
        _expect(column.fields, column.name, expected)
    expected[ROW_ID_COLUMN] = ROW_ID_FIELD_ID
    return expected


def _collect(f: pa.Field, path: str, found: dict[str, int | None]) -> None:
    raw = (f.metadata or {}).get(b"PARQUET:field_id")
    found[path] = None if raw is None else int(raw)
    t = f.type
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            _collect(t.field(i), f"{path}.{t.field(i).name}", found)
    elif pa.types.is_map(t):
        _collect(t.key_field, f"{path}.key", found)
        _collect(t.item_field, f"{path}.value", found)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        _collect(t.value_field, f"{path}.element", found)


def _expect(fields: tuple[NestedField, ...], path: str, expected: dict[str, int | None]) -> None:
    for f in fields:
        expected[f"{path}.{f.name}"] = f.id
        _expect(f.fields, f"{path}.{f.name}", expected)
