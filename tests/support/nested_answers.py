"""One spelling for nested answers, whichever reader gave them: DuckDB and pyiceberg (Arrow
tables) and Spark (Rows), so that round-trip tests compare answers as sorted lists of reprs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa


def canonical(table: pa.Table) -> list[str]:
    """An Arrow answer's rows, each as the repr of its plain values, sorted."""
    rows = table.to_pylist(maps_as_pydicts="strict")
    return sorted(repr(tuple(plain_value(v) for v in row.values())) for row in rows)


def plain_value(value: Any) -> Any:
    """Maps and structs as sorted (key, value) pairs, lists as lists, timestamps as naive ISO
    text."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), plain_value(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat()
    return value


def spark_value(value: Any) -> Any:
    """A value of a collected Spark Row as :func:`plain_value` spells it."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return plain_value(value.asDict(recursive=True))
    if isinstance(value, dict):
        return plain_value({k: spark_value(v) for k, v in value.items()})
    if isinstance(value, list):
        return [spark_value(v) for v in value]
    return plain_value(value)
