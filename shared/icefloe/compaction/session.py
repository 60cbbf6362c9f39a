"""A local Spark session for local mode and tests (``local[*]``, UTC, no UI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icefloe.settings import use_this_python_for_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_spark_session(*, master: str = "local[*]", driver_memory: str = "2g") -> SparkSession:
    """Start (or reuse) a local Spark session whose Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    use_this_python_for_spark()

    session = (
        SparkSession.builder.master(master)
        .appName("icefloe-compaction")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.speculation", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
