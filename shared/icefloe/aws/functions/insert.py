"""The insert function: rows from a direct invoke, or events from the insert queue.

A direct invoke (:class:`icefloe.aws.events.InsertInvoke`) is one insert, answered with the
snapshot it committed; a refused batch is an answer the caller can act on, so it is returned,
not raised (raising would look like a crash and invite blind retries). An SQS batch is one
commit per table (:func:`icefloe.ingest.queue.insert_queue_messages`), answered with the
messages to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icefloe.aws.events import InsertInvoke, error_answer
from icefloe.aws.lambda_runtime import Container
from icefloe.aws.observability import FunctionTelemetry
from icefloe.errors import IcefloeError, InvalidInputError, NotFoundError
from icefloe.ingest.insert import InsertResult
from icefloe.ingest.queue import (
    SYSTEM_FAILURES,
    QueueBatchOutcome,
    insert_queue_messages,
    messages_from_sqs_records,
)


class InsertCrashedError(IcefloeError):
    """The insert failed unexpectedly on these rows (not a failure of the system)."""


def handle(event: object, *, container: Container, telemetry: FunctionTelemetry) -> dict[str, Any]:
    if isinstance(event, Mapping) and "Records" in event:
        return _handle_sqs(event["Records"], container=container, telemetry=telemetry)
    try:
        request = InsertInvoke.parse(event)
        result = container.inserter().insert_rows(
            request.table, list(request.rows), idempotency_key=request.idempotency_key
        )
    except (InvalidInputError, NotFoundError) as e:
        telemetry.logger.warning(
            "insert refused", extra={"table": _table_of(event), "error": type(e).__name__}
        )
        return _refused(error_answer(e), telemetry=telemetry)
    except SYSTEM_FAILURES:
        raise
    except Exception as e:  # a crash caused by the rows is still an answer
        telemetry.logger.exception("insert crashed", extra={"table": _table_of(event)})
        crashed = InsertCrashedError(f"the insert failed unexpectedly: {type(e).__name__}: {e}")
        return _refused(error_answer(crashed), telemetry=telemetry)
    _log_commit(result, telemetry=telemetry)
    telemetry.count("RowsInserted", result.rows)
    telemetry.count("FilesWritten", len(result.files))
    return {
        "snapshot_id": result.snapshot_id,
        "files": len(result.files),
        "rows": result.rows,
        "committed": result.committed,
    }


def _refused(answer: dict[str, Any], *, telemetry: FunctionTelemetry) -> dict[str, Any]:
    telemetry.count("RowsInserted", 0)
    telemetry.count("FilesWritten", 0)
    return answer


def _handle_sqs(
    records: object, *, container: Container, telemetry: FunctionTelemetry
) -> dict[str, Any]:
    # Powertools' BatchProcessor handles one record at a time; every good message of the batch
    # for a table goes into ONE commit (the batch is what makes files big), so the core does
    # the per-message bookkeeping and this only translates its outcome into batchItemFailures.
    outcome = insert_queue_messages(
        container.inserter(),
        messages_from_sqs_records(records),
        default_table=container.settings.insert.default_table,
    )
    _report_batch(outcome, telemetry=telemetry)
    return {"batchItemFailures": [{"itemIdentifier": m} for m in outcome.failed_message_ids]}


def _report_batch(outcome: QueueBatchOutcome, *, telemetry: FunctionTelemetry) -> None:
    for result in outcome.commits:
        _log_commit(result, telemetry=telemetry)
    for message_id, reason in outcome.failed.items():
        telemetry.logger.warning(
            "message failed", extra={"message_id": message_id, "reason": reason}
        )
    if outcome.already_committed:
        telemetry.logger.info(
            "messages committed by an earlier delivery",
            extra={"messages": len(outcome.already_committed)},
        )
    telemetry.count("RowsInserted", sum(result.rows for result in outcome.commits))
    telemetry.count("FilesWritten", sum(len(result.files) for result in outcome.commits))
    telemetry.count("MessagesFailed", len(outcome.failed))
    telemetry.count("MessagesAlreadyCommitted", len(outcome.already_committed))


def _log_commit(result: InsertResult, *, telemetry: FunctionTelemetry) -> None:
    telemetry.logger.info(
        "rows committed" if result.committed else "idempotency key used already",
        extra={
            "table": result.table,
            "snapshot_id": result.snapshot_id,
            "rows": result.rows,
            "files": len(result.files),
            "committed": result.committed,
        },
    )


def _table_of(event: object) -> object:
    return event.get("table") if isinstance(event, Mapping) else None
