"""Starting heavy compaction jobs on EMR Serverless.

For a table's groups too big for a Lambda: claim each partition's files under the compaction
lease (longer than the job's run time limit), write the manifest to the object store, record
the job with its claims, and ``start_job_run`` with the job id as the idempotent client token
(:class:`icefloe.emr_launch.EmrJobLauncher`). If the start fails, the claims are released and
the manifest deleted at once. A table the Spark job cannot merge as the merge worker would
(:func:`icefloe.compaction.spark_modes.check_spark_can_merge`) is refused before any claim.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from icefloe.compaction.manifest import CompactionManifest, PartitionGroup
from icefloe.compaction.spark_modes import SparkMergeUnsupportedError, check_spark_can_merge
from icefloe.emr_launch import EmrJob, EmrJobLauncher
from icefloe.errors import IcefloeError
from icefloe.merge.orchestrator import HeavyCompactionRefusedError
from icefloe.merge.planner import MergeGroup
from icefloe.metastore.jobs import JobStore
from icefloe.metastore.store import MetaStore
from icefloe.settings.limits import DEFAULT_COMPACTION_LEASE
from icefloe.settings.parts import EmrJobConfig
from icefloe.storage import ObjectStore

logger = logging.getLogger(__name__)


class CompactionStartError(IcefloeError):
    """EMR Serverless refused to start a compaction job (its claims were released)."""


@dataclass(frozen=True, slots=True)
class LaunchedJob:
    job_id: str
    job_run_id: str
    partitions: tuple[str, ...]


class EmrCompactionLauncher:
    """Claims, writes the manifest, records and starts one EMR Serverless job per call."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        objects: ObjectStore,
        client: Any,
        config: EmrJobConfig,
        lease: timedelta = DEFAULT_COMPACTION_LEASE,
    ) -> None:
        self._meta = meta
        self._jobs = JobStore(meta)
        self._launcher = EmrJobLauncher(objects=objects, client=client, config=config)
        self._lease = lease

    def launch(self, table: str, groups: Sequence[MergeGroup]) -> LaunchedJob | None:
        """Start one job for ``groups`` (their files are claimed here); None if none could be
        claimed. Raises if the start failed (after releasing the claims), and
        :class:`HeavyCompactionRefusedError` (nothing claimed) if the job could not merge
        the table."""
        self._check_spark_can_merge(table, groups)
        claimed: list[PartitionGroup] = []
        for group in groups:
            token = self._meta.claim_files(table, group.file_ids, lease=self._lease)
            if token is not None:
                claimed.append(PartitionGroup(group.partition_path, group.file_ids, token))
        if not claimed:
            return None
        manifest = CompactionManifest(
            job_id=f"compact-{uuid.uuid4().hex[:20]}", table=table, groups=tuple(claimed)
        )
        tokens = [g.claim_token for g in claimed]

        def release_claims() -> None:
            for token in tokens:
                self._meta.release_claim(token)

        run_id = self._launcher.start(
            self._job(manifest),
            books=self._jobs,
            record=lambda: self._jobs.record(
                job_id=manifest.job_id, table=table, claim_tokens=tokens, manifest_key=manifest.key
            ),
            undo=release_claims,
            error=CompactionStartError,
            failure=f"could not start a compaction job for {table!r}",
        )
        logger.info(
            "compaction job %s started as EMR job run %s for %d partitions of %s",
            manifest.job_id,
            run_id,
            len(claimed),
            table,
        )
        return LaunchedJob(manifest.job_id, run_id, tuple(g.partition_path for g in claimed))

    def _check_spark_can_merge(self, table: str, groups: Sequence[MergeGroup]) -> None:
        """The job's own check, before claiming: the table's spec and the specs its groups'
        files were written by (a column dropped since is still in them)."""
        spec = self._meta.get_table(table).spec
        ids = {i for g in groups for i in g.file_ids}
        versions = {f.spec_version for f in self._meta.live_files(table) if f.file_id in ids}
        written_by = [
            self._meta.table_spec(table, version=v) for v in sorted(versions - {spec.version})
        ]
        try:
            check_spark_can_merge(spec, written_by=written_by)
        except SparkMergeUnsupportedError as e:
            raise HeavyCompactionRefusedError(str(e)) from e

    def job_run_request(self, manifest: CompactionManifest) -> dict[str, Any]:
        """The ``start_job_run`` arguments for ``manifest``."""
        return self._job(manifest).job_run_request(self._launcher.config)

    def _job(self, manifest: CompactionManifest) -> EmrJob:
        return EmrJob(
            document=manifest,
            name=f"icefloe {manifest.table} {manifest.job_id}",
            entry_point=self._launcher.config.entry_point,
            option="--manifest",
        )
