"""Insert function: rows from a direct invoke, or events from the insert queue, become Parquet.

Direct invoke: ``{"table": str, "rows": [{...}, ...], "idempotency_key"?: str}`` returns
``{"snapshot_id", "files", "rows", "committed"}``, or ``{"error": {"type", "message", "problems"}}``
when the input is refused. SQS: one commit per table per delivered batch, and
``{"batchItemFailures": [...]}`` naming the messages to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from icefloe.aws.lambda_runtime import container_settings, inserter_from_environment
from icefloe.aws.observability import route_core_logs, route_core_spans
from icefloe.errors import BatchRejectedError, IcefloeError, InvalidInputError, NotFoundError
from icefloe.ingest.insert import InsertResult
from icefloe.ingest.queue import (
    SYSTEM_FAILURES,
    QueueBatchOutcome,
    insert_queue_messages,
    messages_from_sqs_records,
)

logger = Logger(service="icefloe-insert")
route_core_logs(logger)
metrics = Metrics(namespace="icefloe")
tracer = Tracer()
route_core_spans(tracer)

DIRECT_KEYS = frozenset({"table", "rows", "idempotency_key"})


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, Mapping) and "Records" in event:
        return _handle_sqs(event["Records"])
    # A direct invoke comes from a program: a refused batch is an answer it can act on, so it
    # is returned, not raised (raising would look like a crash and invite blind retries).
    # Failures of the system (meta store or S3 down) still raise.
    try:
        return _handle_direct(event)
    except (InvalidInputError, NotFoundError) as e:
        logger.warning(
            "insert refused", extra={"table": _table_of(event), "error": type(e).__name__}
        )
        return _refused(_error_body(e))
    except SYSTEM_FAILURES:
        raise
    except Exception as e:  # a crash caused by the rows is still an answer
        logger.exception("insert crashed", extra={"table": _table_of(event)})
        return _refused(
            {
                "type": "InsertCrashedError",
                "message": f"the insert failed unexpectedly: {type(e).__name__}: {e}",
                "problems": [],
            }
        )


def _refused(error: dict[str, Any]) -> dict[str, Any]:
    metrics.add_metric(name="RowsInserted", unit=MetricUnit.Count, value=0)
    metrics.add_metric(name="FilesWritten", unit=MetricUnit.Count, value=0)
    return {"error": error}


def _handle_direct(event: object) -> dict[str, Any]:
    table, rows, key = _parse_direct(event)
    result = inserter_from_environment().insert_rows(table, rows, idempotency_key=key)
    _log_commit(result)
    metrics.add_metric(name="RowsInserted", unit=MetricUnit.Count, value=result.rows)
    metrics.add_metric(name="FilesWritten", unit=MetricUnit.Count, value=len(result.files))
    return {
        "snapshot_id": result.snapshot_id,
        "files": len(result.files),
        "rows": result.rows,
        "committed": result.committed,
    }


def _parse_direct(event: object) -> tuple[str, list[Mapping[str, object]], str | None]:
    if not isinstance(event, Mapping):
        raise InvalidInputError('event must be an object {"table", "rows", "idempotency_key"?}')
    unknown = sorted(set(event) - DIRECT_KEYS)
    if unknown:  # a misspelt "idempotency_key" must not silently disable idempotency
        raise InvalidInputError(f"unknown event keys {unknown}; expected {sorted(DIRECT_KEYS)}")
    table, rows, key = event.get("table"), event.get("rows"), event.get("idempotency_key")
    if not isinstance(table, str):
        raise InvalidInputError("event 'table' must be a string")
    if not isinstance(rows, list):
        raise InvalidInputError("event 'rows' must be a list of JSON objects")
    if key is not None and not isinstance(key, str):
        raise InvalidInputError("event 'idempotency_key' must be a string")
    return table, rows, key


def _handle_sqs(records: object) -> dict[str, Any]:
    # Powertools' BatchProcessor handles one record at a time; we insert every good message of
    # the batch for a table in ONE commit (the batch is what makes files big), so the core does
    # the per-message bookkeeping and we only translate its outcome into batchItemFailures.
    messages = messages_from_sqs_records(records)
    outcome = insert_queue_messages(
        inserter_from_environment(),
        messages,
        default_table=container_settings().insert.default_table,
    )
    _report(outcome)
    return {
        "batchItemFailures": [
            {"itemIdentifier": message_id} for message_id in outcome.failed_message_ids
        ]
    }


def _report(outcome: QueueBatchOutcome) -> None:
    for result in outcome.commits:
        _log_commit(result)
    for message_id, reason in outcome.failed.items():
        logger.warning("message failed", extra={"message_id": message_id, "reason": reason})
    if outcome.already_committed:
        logger.info(
            "messages committed by an earlier delivery",
            extra={"messages": len(outcome.already_committed)},
        )
    rows = sum(result.rows for result in outcome.commits)
    files = sum(len(result.files) for result in outcome.commits)
    metrics.add_metric(name="RowsInserted", unit=MetricUnit.Count, value=rows)
    metrics.add_metric(name="FilesWritten", unit=MetricUnit.Count, value=files)
    metrics.add_metric(name="MessagesFailed", unit=MetricUnit.Count, value=len(outcome.failed))
    metrics.add_metric(
        name="MessagesAlreadyCommitted",
        unit=MetricUnit.Count,
        value=len(outcome.already_committed),
    )


def _log_commit(result: InsertResult) -> None:
    logger.info(
        "rows committed" if result.committed else "idempotency key used already",
        extra={
            "table": result.table,
            "snapshot_id": result.snapshot_id,
            "rows": result.rows,
            "files": len(result.files),
            "committed": result.committed,
        },
    )


def _error_body(error: IcefloeError) -> dict[str, Any]:
    problems = error.problems if isinstance(error, BatchRejectedError) else ()
    return {
        "type": type(error).__name__,
        "message": str(error),
        "problems": [{"row": p.row, "field": p.field, "message": p.message} for p in problems],
    }


def _table_of(event: object) -> object:
    return event.get("table") if isinstance(event, Mapping) else None
