"""Heavy compaction: whole partitions merged by a PySpark job (EMR Serverless, or local Spark),
committed partition by partition through the same replace commit as a merge."""

from __future__ import annotations

from icefloe.compaction.emr import CompactionStartError, EmrCompactionLauncher
from icefloe.compaction.manifest import (
    CompactionManifest,
    InvalidManifestError,
    PartitionGroup,
)
from icefloe.compaction.planning import claim_partitions
from icefloe.compaction.spark_job import (
    CompactionResult,
    PartitionOutcome,
    compact_with_spark,
)
from icefloe.compaction.spark_modes import SparkMergeUnsupportedError
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE
from icefloe.settings.parts import EmrJobConfig

__all__ = [
    "DEFAULT_COMPACTION_LEASE",
    "CompactionManifest",
    "CompactionResult",
    "CompactionStartError",
    "EmrCompactionLauncher",
    "EmrJobConfig",
    "InvalidManifestError",
    "PartitionGroup",
    "PartitionOutcome",
    "SparkMergeUnsupportedError",
    "claim_partitions",
    "compact_with_spark",
]
