"""Other engines over a lake opened with ``icefloe.connect``: a Spark compaction of every
partition, and a DuckDB that reads Iceberg tables."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import duckdb

from icefloe.compaction import compact_with_spark
from icefloe.compaction.planning import claim_partitions
from icefloe.config import WarehouseLocation
from icefloe.lake import Lake
from support.merge_lake import Lake as MergeLake


def spark_compact(lake: Lake | MergeLake, spark: Any, table: str, **options: Any) -> Any:
    """Claim every partition of ``table`` with files to merge and compact them in Spark
    (``options``: compact_with_spark's others)."""
    manifest = claim_partitions(lake.meta, table)
    assert manifest is not None
    return compact_with_spark(
        spark,
        meta=lake.meta,
        objects=lake.objects,
        location=WarehouseLocation(scheme="file", path=lake.objects.root),
        manifest=manifest,
        **options,
    )


def load_offline_extension(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Load DuckDB extension ``name`` from its wheel (``duckdb-extension-<name>``, for the
    installed duckdb version); ImportError when the wheel is not installed."""
    module = importlib.import_module(f"duckdb_extension_{name}")
    path = Path(str(module.__file__)).parent / "extensions" / f"v{duckdb.__version__}"
    con.execute(f"LOAD '{path / f'{name}.duckdb_extension'}'")


def duckdb_with_iceberg() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the offline avro and iceberg extensions loaded, in UTC."""
    con = duckdb.connect()
    for name in ("avro", "iceberg"):
        load_offline_extension(con, name)
    con.execute("SET TimeZone = 'UTC'")
    return con
