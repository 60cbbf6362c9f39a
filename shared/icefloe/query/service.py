"""The query service: a request in, small results inline, large ones as a download link.

Shared by the query Lambda and any other front end. The caller's program gets a typed
:class:`QueryAnswer`; bad SQL and refusals surface as :class:`icefloe.errors.InvalidInputError`.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from icefloe.query.engine import QueryEngine, QueryResult
from icefloe.query.output import csv_safe, json_rows, json_values, parquet_safe
from icefloe.storage import ObjectStore

ResultFormat = Literal["json", "csv", "parquet"]
DEFAULT_MAX_INLINE_ROWS = 1_000
# Lambda's synchronous response limit is 6 MB; leave room for the envelope.
MAX_INLINE_BYTES = 4 * 2**20


@dataclass(frozen=True, slots=True)
class QueryRequest:
    sql: str
    snapshot_id: int | None = None
    as_of: datetime | None = None
    format: ResultFormat = "json"
    max_rows: int = DEFAULT_MAX_INLINE_ROWS
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    """Inline ``columns``/``rows`` (JSON-safe) or a ``url`` to the written result."""

    row_count: int
    snapshots: dict[str, int]
    files_scanned: int
    bytes_scanned: int
    columns: list[str] | None = None
    rows: list[list[Any]] | None = None
    text: str | None = None
    url: str | None = None
    expires_at: str | None = None
    result_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in _fields(self).items() if v is not None}


def _fields(answer: QueryAnswer) -> dict[str, Any]:
    return {name: getattr(answer, name) for name in answer.__slots__}


def answer_query(
    engine: QueryEngine,
    request: QueryRequest,
    *,
    results: ObjectStore,
    url_expires_s: int = 3600,
) -> QueryAnswer:
    """Run the request; inline when small (json/csv, at most ``max_rows`` rows and an answer
    of at most 4 MiB as the Lambda sends it, :func:`_response_bytes`), else written under the
    results store and returned as a link."""
    result = engine.query(
        request.sql, snapshot_id=request.snapshot_id, as_of=request.as_of, tenant=request.tenant
    )
    table = result.rows
    base = _summary(result)
    data: bytes | None = None
    if request.format != "parquet" and table.num_rows <= request.max_rows:
        if request.format == "json":
            inline = QueryAnswer(**base, columns=table.column_names, rows=json_values(table))
        else:
            data = _encode(table, "csv")
            inline = QueryAnswer(**base, columns=table.column_names, text=data.decode())
        if _response_bytes(inline) <= MAX_INLINE_BYTES:
            return inline
    if data is None:
        data = _encode(table, request.format)
    # A prefix of its own per query: only the query function's role may read results, and only
    # through the link it hands out (tenant sessions cannot read them at all).
    key = f"{datetime.now(UTC):%Y/%m/%d}/{uuid.uuid4().hex}/result.{request.format}"
    results.put(key, data)
    expires = datetime.now(UTC) + timedelta(seconds=url_expires_s)
    return QueryAnswer(
        **base,
        columns=table.column_names,
        url=results.download_url(key, expires_s=url_expires_s),
        expires_at=expires.isoformat(timespec="seconds"),
        result_bytes=len(data),
    )


def _response_bytes(answer: QueryAnswer) -> int:
    """The size of ``answer`` as a Lambda response: its JSON, with every character past ASCII
    escaped (``\\uXXXX``, two of them past the BMP), as Python runtimes before 3.12 send it;
    3.12's UTF-8 is never larger. A ``"`` or a newline in a CSV is two bytes there, an emoji
    twelve: the text's length in characters says nothing of it."""
    return len(json.dumps(answer.to_json()))


def _summary(result: QueryResult) -> dict[str, Any]:
    return {
        "row_count": result.rows.num_rows,
        "snapshots": {p.table: p.snapshot_id for p in result.plans},
        "files_scanned": sum(p.files_scanned for p in result.plans),
        "bytes_scanned": sum(p.bytes_scanned for p in result.plans),
    }


def _encode(table: pa.Table, fmt: str) -> bytes:
    buffer = io.BytesIO()
    if fmt == "parquet":
        pq.write_table(parquet_safe(table), buffer, compression="zstd")
    elif fmt == "csv":
        pa_csv.write_csv(csv_safe(table), buffer)
    else:
        buffer.write(json.dumps(json_rows(table)).encode())
    return buffer.getvalue()


__all__ = ["QueryAnswer", "QueryRequest", "answer_query"]
