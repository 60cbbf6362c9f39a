"""The merge orchestrator: plan every table, claim each group, send one task per group.

Claims are all or nothing under a lease (``FOR UPDATE SKIP LOCKED``), so two orchestrators
running at once never hand the same file to two workers: the second one's claim of an
overlapping group fails and it moves on. Tasks whose send failed have their claims released
at once rather than waiting for the lease to run out. Groups bigger than the table's Lambda
cap are left for heavy compaction (EMR Serverless); a table heavy compaction cannot merge (a
custom DuckDB query, a type Spark cannot hold) gets no job: its big groups are deferred with
the reason, rather than failing one job per run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from icefloe.errors import CommitOutcomeUnknownError, IcefloeError, MetaStoreUnavailableError
from icefloe.merge.planner import (
    MergeGroup,
    MergePolicy,
    PartitionOrder,
    plan_table,
)
from icefloe.merge.tasks import MergeTask
from icefloe.metastore.models import LiveFile
from icefloe.metastore.store import MetaStore
from icefloe.settings.limits import DEFAULT_LEASE
from icefloe.spec import TableSpec
from icefloe.spec.reading import versions_lacking_generated

logger = logging.getLogger(__name__)

SEND_CHUNK = 10  # one SQS SendMessageBatch


class HeavyCompactionRefusedError(IcefloeError):
    """Heavy compaction cannot merge this table's groups as the merge worker would (the
    message says why and what to run instead): nothing was claimed or started."""


class HeavyLauncher(Protocol):
    """Starts heavy compaction for groups too big for a Lambda (EMR Serverless)."""

    def launch(self, table: str, groups: Sequence[MergeGroup]) -> Any:
        """Claim ``groups`` and start a job; returns the job (with ``job_id``) or None.
        Raises :class:`HeavyCompactionRefusedError` before claiming anything when the job
        could not merge them."""
        ...


class TaskSender(Protocol):
    """Where merge tasks go: the SQS merge queue, or the in-process queue of local mode."""

    def send(self, tasks: Sequence[MergeTask]) -> list[MergeTask]:
        """Send ``tasks``; return those that could not be sent."""
        ...


@dataclass(frozen=True, slots=True)
class TableMergePlan:
    """What one orchestrator run did for one table."""

    table: str
    live_files: int
    groups_planned: int
    groups_sent: int
    groups_contended: int  # another orchestrator claimed some of the files first
    groups_deferred: int  # above the Lambda cap, and no heavy compaction configured
    groups_to_heavy: int  # above the Lambda cap, claimed by a heavy compaction job
    groups_unsent: int  # the queue refused them; their claims were released
    files_claimed: int
    bytes_claimed: int
    heavy_jobs: tuple[str, ...] = ()
    live_partitions: int = 0  # the partitions the live files are in
    heavy_refused: str | None = None  # why heavy compaction cannot take the deferred groups

    @property
    def files_per_partition(self) -> float:
        """The live files per partition: what merges bring down."""
        return self.live_files / self.live_partitions if self.live_partitions else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "table": self.table,
            "live_files": self.live_files,
            "live_partitions": self.live_partitions,
            "groups_planned": self.groups_planned,
            "groups_sent": self.groups_sent,
            "groups_contended": self.groups_contended,
            "groups_deferred": self.groups_deferred,
            "groups_unsent": self.groups_unsent,
            "groups_to_heavy": self.groups_to_heavy,
            "heavy_jobs": list(self.heavy_jobs),
            "heavy_refused": self.heavy_refused,
            "files_claimed": self.files_claimed,
            "bytes_claimed": self.bytes_claimed,
        }


@dataclass(frozen=True, slots=True)
class OrchestratorSummary:
    tables: tuple[TableMergePlan, ...] = field(default=())
    failed_tables: Mapping[str, str] = field(default_factory=dict)  # table -> error

    @property
    def groups_sent(self) -> int:
        return sum(t.groups_sent for t in self.tables)

    @property
    def groups_planned(self) -> int:
        return sum(t.groups_planned for t in self.tables)

    def to_json(self) -> dict[str, object]:
        return {
            "groups_planned": self.groups_planned,
            "groups_sent": self.groups_sent,
            "failed_tables": dict(self.failed_tables),
            "tables": [t.to_json() for t in self.tables],
        }


class MergeOrchestrator:
    """Plans, claims and sends merge tasks."""

    def __init__(
        self,
        *,
        meta: MetaStore,
        sender: TaskSender,
        lease: timedelta = DEFAULT_LEASE,
        order: PartitionOrder = "newest_first",
        max_groups_per_table: int = 1000,
        heavy: HeavyLauncher | None = None,
    ) -> None:
        self._meta = meta
        self._sender = sender
        self._lease = lease
        self._order: PartitionOrder = order
        self._max_groups = max_groups_per_table
        self._heavy = heavy

    def run(self, *, table: str | None = None) -> OrchestratorSummary:
        """One pass over ``table``, or over every table."""
        if table is not None:
            plans: tuple[TableMergePlan, ...] = (self._run_table(table),)
            failures: dict[str, str] = {}
        else:
            plans, failures = self._run_every_table()
        summary = OrchestratorSummary(plans, failed_tables=failures)
        logger.info(
            "merge orchestration: %d groups planned, %d sent",
            summary.groups_planned,
            summary.groups_sent,
        )
        return summary

    def _run_every_table(self) -> tuple[tuple[TableMergePlan, ...], dict[str, str]]:
        """Every table; one table's failure (dropped meanwhile, a broken spec) is recorded and
        the others still run. A meta store that is down fails the run."""
        plans: list[TableMergePlan] = []
        failures: dict[str, str] = {}
        for info in self._meta.list_tables():
            try:
                plans.append(self._run_table(info.name))
            except (MetaStoreUnavailableError, CommitOutcomeUnknownError):
                raise
            except IcefloeError as e:
                logger.warning("merge orchestration of %s failed: %s", info.name, e)
                failures[info.name] = f"{type(e).__name__}: {e}"
        return tuple(plans), failures

    def plan(self, table: str) -> list[MergeGroup]:
        """The groups this orchestrator would claim for ``table`` now (nothing is claimed)."""
        return self._plan(table)[1]

    def _plan(self, table: str) -> tuple[TableSpec, list[MergeGroup], list[LiveFile]]:
        spec = self._meta.get_table(table).spec
        live = self._meta.live_files(table)
        groups = plan_table(
            live,
            policy=MergePolicy.from_sizes(spec.sizes),
            now=datetime.now(UTC),
            order=self._order,
            backfill=versions_lacking_generated(spec),
        )
        return spec, groups[: self._max_groups], live

    def _run_table(self, table: str) -> TableMergePlan:
        spec, groups, live = self._plan(table)
        cap = spec.sizes.lambda_merge_cap_bytes
        sent: list[MergeGroup] = []
        contended = unsent = 0
        pending: list[tuple[MergeTask, MergeGroup]] = []

        def flush() -> None:
            # Claim and send in small chunks: if this run dies, at most one chunk of claims is
            # left without a message (until its lease runs out).
            nonlocal unsent
            failed = self._sender.send([task for task, _ in pending])
            failed_tokens = {task.claim_token for task in failed}
            for task in failed:
                self._meta.release_claim(task.claim_token)
            unsent += len(failed)
            sent.extend(g for t, g in pending if t.claim_token not in failed_tokens)
            pending.clear()

        heavy = [g for g in groups if g.bytes > cap]
        light = [g for g in groups if g.bytes <= cap]
        for start in range(0, len(light), SEND_CHUNK):
            chunk = light[start : start + SEND_CHUNK]
            tokens = self._meta.claim_groups(table, [g.file_ids for g in chunk], lease=self._lease)
            for group, token in zip(chunk, tokens, strict=True):
                if token is None:
                    contended += 1
                    continue
                task = MergeTask(
                    table=table,
                    partition_path=group.partition_path,
                    file_ids=group.file_ids,
                    claim_token=token,
                )
                pending.append((task, group))
            if pending:
                flush()
        heavy_jobs: tuple[str, ...] = ()
        to_heavy = 0
        refused = None
        if heavy and self._heavy is not None:
            try:
                job = self._heavy.launch(table, heavy)
            except HeavyCompactionRefusedError as e:
                job, refused = None, str(e)
                logger.warning("%d groups of %s deferred: %s", len(heavy), table, refused)
            if job is not None:
                heavy_jobs = (str(job.job_id),)
                to_heavy = len(job.partitions)
        deferred = len(heavy) - to_heavy
        return TableMergePlan(
            table=table,
            live_files=len(live),
            live_partitions=len({f.partition_path for f in live}),
            groups_planned=len(groups),
            groups_sent=len(sent),
            groups_contended=contended,
            groups_deferred=deferred,
            groups_to_heavy=to_heavy,
            groups_unsent=unsent,
            files_claimed=sum(len(g.file_ids) for g in sent),
            bytes_claimed=sum(g.bytes for g in sent),
            heavy_jobs=heavy_jobs,
            heavy_refused=refused,
        )
