"""Heavy compaction on one machine: claim whole partitions, then run the Spark job on local
Spark, or the merge worker (DuckDB) on each partition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, cast

from icefloe.compaction.manifest import CompactionManifest
from icefloe.compaction.planning import claim_partitions
from icefloe.compaction.runner import current_runner
from icefloe.compaction.spark_job import (
    CompactionResult,
    PartitionOutcome,
    PartitionStatus,
    compact_with_spark,
)
from icefloe.compaction.tracking import SUCCEEDED, settle_job
from icefloe.config import CoreSettings
from icefloe.merge.tasks import MergeTask
from icefloe.merge.worker import MergeWorker
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.store import MetaStore
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE
from icefloe.storage import ObjectStore

Engine = Literal["spark", "duckdb"]


def compact_locally(
    *,
    meta: MetaStore,
    objects: ObjectStore,
    settings: CoreSettings,
    table: str,
    partitions: Sequence[str] | None = None,
    engine: Engine = "spark",
    spark: Any = None,
    worker: MergeWorker | None = None,
    lease: timedelta = DEFAULT_COMPACTION_LEASE,
    on_claimed: Callable[[CompactionManifest], None] | None = None,
    on_partition: Callable[[PartitionOutcome], None] | None = None,
) -> CompactionResult | None:
    """Compact every partition of ``table`` with at least two files (or ``partitions``).

    Returns None when there was nothing to claim. The manifest is written to the object store
    as the EMR job's would be. Partitions are claimed for ``lease``, and the DuckDB engine's
    merge worker renews them for as long. ``on_claimed`` sees the manifest before any work,
    ``on_partition`` each partition's outcome (as it ends with DuckDB; all at the end with
    Spark, which commits them together): progress.
    """
    manifest = claim_partitions(meta, table, partitions=partitions, lease=lease)
    if manifest is None:
        return None
    if on_claimed is not None:
        on_claimed(manifest)
    objects.put(manifest.key, manifest.to_json().encode())
    jobs = JobStore(meta)
    jobs.record(
        job_id=manifest.job_id,
        table=table,
        claim_tokens=[g.claim_token for g in manifest.groups],
        manifest_key=manifest.key,
        state="RUNNING",
        runner=current_runner(),
    )
    try:
        if engine == "duckdb":
            merger = worker or MergeWorker(meta=meta, objects=objects)
            try:
                result = _with_duckdb(manifest, merger.with_lease(lease), on_partition)
            finally:
                if worker is None:
                    merger.close()  # its DuckDB; a worker given is its giver's to close
        else:
            if spark is None:
                from icefloe.compaction.session import local_spark_session

                spark = local_spark_session()
            result = compact_with_spark(
                spark,
                meta=meta,
                objects=objects,
                location=settings.warehouse,
                manifest=manifest,
                endpoint_url=settings.s3_endpoint_url,
                region=settings.aws_region,
            )
            for outcome in result.partitions:
                if on_partition is not None:
                    on_partition(outcome)
    except BaseException:
        settle_job(meta=meta, objects=objects, job=jobs.get(manifest.job_id), state="FAILED")
        raise
    settle_job(meta=meta, objects=objects, job=jobs.get(manifest.job_id), state=SUCCEEDED)
    return result


def _with_duckdb(
    manifest: CompactionManifest,
    worker: MergeWorker,
    on_partition: Callable[[PartitionOutcome], None] | None,
) -> CompactionResult:
    outcomes = []
    for group in manifest.groups:
        outcome = worker.run(
            MergeTask(
                table=manifest.table,
                partition_path=group.partition_path,
                file_ids=group.file_ids,
                claim_token=group.claim_token,
            )
        )
        outcomes.append(
            PartitionOutcome(
                partition_path=group.partition_path,
                # A merge task's outcome: one of the merge statuses, which partitions share.
                status=cast(PartitionStatus, outcome.status),
                snapshot_id=outcome.snapshot_id,
                files_in=outcome.files_in,
                files_out=outcome.files_out,
                rows_in=outcome.rows_in,
                rows_out=outcome.rows_out,
                reason=outcome.reason,
            )
        )
        if on_partition is not None:
            on_partition(outcomes[-1])
    return CompactionResult(manifest.job_id, manifest.table, tuple(outcomes))
