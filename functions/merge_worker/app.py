"""Merge worker function: SQS batches of merge tasks from the merge queue.

Each message is one claimed group of files (:class:`icefloe.merge.MergeTask`); the core merges
it and replace-commits. A message of kind ``delete_part`` is one partition of a delete job
(:class:`icefloe.lifecycle.DeletePartRunner`): its files are rewritten without the matching
rows, and the last part done commits the job. Returns ``{"batchItemFailures": [...]}`` naming the messages to retry:
bodies that are not merge tasks, and merges that raised (meta store or S3 down, an unknown
commit outcome, a failing merge mode). A task whose claim was lost, whose commit conflicted or
that was committed before is done, and acknowledged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import (
    delete_part_runner_from_environment,
    merge_worker_from_environment,
)
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.lifecycle.delete_jobs import MESSAGE_KIND as DELETE_PART
from icefloe.merge import MergeBatchResult, MergeOutcome, process_merge_records

logger = Logger(service="icefloe-merge-worker")
route_core_logs(logger)
metrics = Metrics(namespace="icefloe")
tracer = Tracer()
route_core_spans(tracer)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    if not isinstance(event, Mapping) or "Records" not in event:
        # Only the SQS event source mapping invokes this function: anything else is a wiring
        # mistake that must fail loudly.
        raise ValueError("expected an SQS event ({'Records': [...]}) from the merge queue")
    deletes = delete_part_runner_from_environment()
    result = process_merge_records(
        event,
        worker=merge_worker_from_environment(),
        on_outcome=_log_outcome,
        other_kinds={DELETE_PART: deletes.run_message},
    )
    _report(result)
    return result.response()


def _log_outcome(outcome: MergeOutcome) -> None:
    logger.info(
        "partition merged" if outcome.status == "committed" else "merge skipped",
        extra={
            "table": outcome.table,
            "partition": outcome.partition_path,
            "status": outcome.status,
            "snapshot_id": outcome.snapshot_id,
            "files_in": outcome.files_in,
            "files_out": outcome.files_out,
            "rows_in": outcome.rows_in,
            "rows_out": outcome.rows_out,
            "bytes_in": outcome.bytes_in,
            "bytes_out": outcome.bytes_out,
            "seconds": round(outcome.seconds, 3),
            "reason": outcome.reason,
        },
    )


def _report(result: MergeBatchResult) -> None:
    for message_id, reason in result.failed.items():
        logger.warning("merge message failed", extra={"message_id": message_id, "reason": reason})
    committed = [o for o in result.outcomes if o.status == "committed"]
    counts = {
        "MergesCommitted": len(committed),
        "MergesSkipped": len(result.outcomes) - len(committed),
        "MergeRowsIn": sum(o.rows_in for o in committed),
        "MergeRowsOut": sum(o.rows_out for o in committed),
        "MessagesFailed": len(result.failed),
    }
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for name, value in (
        ("MergeBytesIn", sum(o.bytes_in for o in committed)),
        ("MergeBytesOut", sum(o.bytes_out for o in committed)),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Bytes, value=value)
