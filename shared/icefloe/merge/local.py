"""Merging on one machine: the orchestrator, the in-process queue and the real batch handler.

``icefloe merge`` and ``make demo`` run this, so they exercise the same code path as the
deployed Lambdas: tasks go through a queue as SQS-shaped events to the handler the
merge-worker function runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from icefloe.merge.handler import process_merge_records
from icefloe.merge.orchestrator import MergeOrchestrator, OrchestratorSummary
from icefloe.merge.queues import InProcessQueue
from icefloe.merge.worker import MergeOutcome, MergeWorker
from icefloe.metastore.store import MetaStore


@dataclass(frozen=True, slots=True)
class LocalMergeReport:
    """Every round's orchestration and every task's outcome."""

    rounds: tuple[OrchestratorSummary, ...] = field(default=())
    outcomes: tuple[MergeOutcome, ...] = field(default=())
    dead_letters: tuple[str, ...] = field(default=())

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)


def merge_locally(
    *,
    meta: MetaStore,
    worker: MergeWorker,
    table: str | None = None,
    until_quiet: bool = False,
    max_rounds: int = 100,
    workers: int = 1,
    on_round: Callable[[OrchestratorSummary], None] | None = None,
    on_outcome: Callable[[MergeOutcome], None] | None = None,
) -> LocalMergeReport:
    """One orchestration round (or rounds until nothing is planned), each drained at once.
    Claims are made with the worker's lease, as the worker renews them. ``on_round`` sees
    each round's plan before its merges run, ``on_outcome`` each merge's end (progress).
    ``workers`` merges run at once (threads sharing ``worker``, as that many merge-worker
    Lambdas would share the queue)."""
    queue = InProcessQueue()
    orchestrator = MergeOrchestrator(meta=meta, sender=queue, lease=worker.lease)
    outcomes: list[MergeOutcome] = []
    recording = threading.Lock()  # workers' outcomes reach on_outcome one at a time

    def record(outcome: MergeOutcome) -> None:
        with recording:
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)

    def handle(event: Mapping[str, Any]) -> Mapping[str, Any]:
        return process_merge_records(event, worker=worker, on_outcome=record).response()

    rounds: list[OrchestratorSummary] = []
    for _ in range(max_rounds if until_quiet else 1):
        summary = orchestrator.run(table=table)
        rounds.append(summary)
        if on_round is not None:
            on_round(summary)
        queue.drain(handle, workers=workers)
        if summary.groups_sent == 0:
            break
    return LocalMergeReport(
        rounds=tuple(rounds), outcomes=tuple(outcomes), dead_letters=tuple(queue.dead_letters)
    )
