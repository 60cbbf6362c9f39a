"""Other engines over a lake opened with ``icefloe.connect``: a Spark compaction of every
partition, and a DuckDB that reads Iceberg tables."""

from __future__ import annotations

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


def duckdb_with_iceberg() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the offline avro and iceberg extensions loaded, in UTC."""
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}"
        con.execute(f"LOAD '{path / f'{name}.duckdb_extension'}'")
    con.execute("SET TimeZone = 'UTC'")
    return con
