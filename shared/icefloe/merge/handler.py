"""The merge worker's SQS batch handling, shared by the Lambda and the in-process queue.

Each record is one :class:`MergeTask`. A record fails (and is named in ``batchItemFailures`` so
that SQS redelivers only it) when its body is not a task or when the merge raised: the meta
store or S3 was down, the commit outcome is unknown, the merge mode failed. A task whose claim
was lost, whose commit conflicted or that was committed before is done: redelivering it would
change nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from icefloe.errors import InvalidEventError
from icefloe.merge.tasks import MergeTask
from icefloe.merge.worker import MergeOutcome, MergeWorker

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MergeBatchResult:
    outcomes: tuple[MergeOutcome, ...] = field(default=())
    failed: Mapping[str, str] = field(default_factory=dict)  # message id -> reason

    def response(self) -> dict[str, Any]:
        """The Lambda partial batch response."""
        return {"batchItemFailures": [{"itemIdentifier": m} for m in self.failed]}


def process_merge_records(
    event: Mapping[str, Any],
    *,
    worker: MergeWorker,
    on_outcome: Callable[[MergeOutcome], None] | None = None,
    other_kinds: Mapping[str, Callable[[str], MergeOutcome]] | None = None,
) -> MergeBatchResult:
    """Run every record's task; collect outcomes and the ids of failed messages.

    ``other_kinds`` runs messages of other kinds on the same queue (a delete's parts), by
    their ``kind``; a message of a kind nobody runs fails as a bad merge task."""
    outcomes: list[MergeOutcome] = []
    failed: dict[str, str] = {}
    for record in event.get("Records", []):
        if record.get("eventSource") != "aws:sqs":
            raise InvalidEventError(f"unsupported event source {record.get('eventSource')!r}")
        message_id = str(record["messageId"])
        try:
            run_other = (other_kinds or {}).get(_kind(record["body"]) or "merge")
            outcome = (
                run_other(record["body"])
                if run_other is not None
                else worker.run(MergeTask.from_json(record["body"]))
            )
        except Exception as e:
            logger.warning("merge message %s failed: %s: %s", message_id, type(e).__name__, e)
            failed[message_id] = f"{type(e).__name__}: {e}"
            continue
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return MergeBatchResult(outcomes=tuple(outcomes), failed=failed)


def _kind(body: object) -> str | None:
    try:
        data = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None
