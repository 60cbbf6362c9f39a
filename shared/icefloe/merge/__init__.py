"""Background merges: plan groups per partition, claim them, send tasks, merge, replace-commit.

orchestrator (schedule or invoke) -> :func:`plan_table` -> claim (lease, SKIP LOCKED) -> one
:class:`MergeTask` per group on a queue -> :class:`MergeWorker` (read, merge mode, sort,
value-aligned row groups, upload) -> replace commit.
"""

from __future__ import annotations

from icefloe.merge.handler import MergeBatchResult, process_merge_records
from icefloe.merge.local import LocalMergeReport, merge_locally
from icefloe.merge.orchestrator import (
    MergeOrchestrator,
    OrchestratorSummary,
    TableMergePlan,
    TaskSender,
)
from icefloe.merge.planner import (
    MergeGroup,
    MergePolicy,
    PartitionOrder,
    plan_partition,
    plan_table,
)
from icefloe.merge.queues import InProcessQueue, SqsTaskSender
from icefloe.merge.rowgroups import RowGroupCutter, pack_runs
from icefloe.merge.tasks import InvalidMergeMessageError, MergeTask
from icefloe.merge.worker import MergeFailedError, MergeOutcome, MergeWorker
from icefloe.settings.limits import DEFAULT_LEASE, MergeLimits

__all__ = [
    "DEFAULT_LEASE",
    "InProcessQueue",
    "InvalidMergeMessageError",
    "LocalMergeReport",
    "MergeBatchResult",
    "MergeFailedError",
    "MergeGroup",
    "MergeLimits",
    "MergeOrchestrator",
    "MergeOutcome",
    "MergePolicy",
    "MergeTask",
    "MergeWorker",
    "OrchestratorSummary",
    "PartitionOrder",
    "RowGroupCutter",
    "SqsTaskSender",
    "TableMergePlan",
    "TaskSender",
    "merge_locally",
    "pack_runs",
    "plan_partition",
    "plan_table",
    "process_merge_records",
]
