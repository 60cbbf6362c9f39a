"""The merge worker function: SQS batches of merge tasks and delete parts from the merge queue.

Each merge task is one claimed group of files (:class:`icefloe.merge.MergeTask`), merged and
replace-committed; a ``delete_part`` message is one partition of a delete job
(:class:`icefloe.lifecycle.DeletePartRunner`). The answer names the messages to retry: bodies
that are not tasks, and tasks that raised. A task whose claim was lost, whose commit conflicted
or that was committed before is done, and acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.errors import InvalidEventError
from icefloe.lifecycle.delete_jobs import MESSAGE_KIND as DELETE_PART
from icefloe.merge import MergeBatchResult, MergeOutcome, process_merge_records


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    if not isinstance(event, Mapping) or "Records" not in event:
        # Only the SQS event source mapping invokes this function: anything else is a wiring
        # mistake that must fail loudly.
        raise InvalidEventError("expected an SQS event ({'Records': [...]}) from the merge queue")
    deletes = container.delete_part_runner()

    def log_outcome(outcome: MergeOutcome) -> None:
        committed = outcome.status == "committed"
        fields = {k: v for k, v in asdict(outcome).items() if k != "partition_path"}
        fields.update(partition=outcome.partition_path, seconds=round(outcome.seconds, 3))
        telemetry.logger.info("partition merged" if committed else "merge skipped", extra=fields)

    result = process_merge_records(
        event,
        worker=container.merge_worker(),
        on_outcome=log_outcome,
        other_kinds={DELETE_PART: deletes.run_message},
    )
    _report(result, telemetry=telemetry)
    return result.response()


def _report(result: MergeBatchResult, *, telemetry: FunctionTelemetry) -> None:
    for message_id, reason in result.failed.items():
        telemetry.logger.warning(
            "merge message failed", extra={"message_id": message_id, "reason": reason}
        )
    committed = [o for o in result.outcomes if o.status == "committed"]
    telemetry.count("MergesCommitted", len(committed))
    telemetry.count("MergesSkipped", len(result.outcomes) - len(committed))
    telemetry.count("MergeRowsIn", sum(o.rows_in for o in committed))
    telemetry.count("MergeRowsOut", sum(o.rows_out for o in committed))
    telemetry.count("MessagesFailed", len(result.failed))
    telemetry.count_bytes("MergeBytesIn", sum(o.bytes_in for o in committed))
    telemetry.count_bytes("MergeBytesOut", sum(o.bytes_out for o in committed))
