"""Queue ingestion: a batch of delivered messages becomes one commit per table.

Each message is one event (its table from the ``table`` message attribute, else the default
table) or an envelope ``{"table": ..., "rows": [...]}``. All good messages of a batch for one
table go into one insert (the batch is what makes files big), with the message ids as receipts
so that a redelivered message is committed once however the queue regroups it. A malformed
message, or one whose rows do not fit the table, is reported as failed (the queue retries it
and finally moves it to its DLQ) and never holds back the good ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from icefloe.errors import (
    BatchRejectedError,
    DuplicateReceiptError,
    InvalidInputError,
    NotFoundError,
    RowProblem,
)
from icefloe.ingest.insert import Inserter, InsertResult
from icefloe.spec import validate_table_name

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """What the core needs of an SQS message."""

    message_id: str
    body: str
    table: str | None = None


@dataclass(frozen=True, slots=True)
class QueueBatchOutcome:
    """Per message: committed now, committed by an earlier delivery, or failed (with why)."""

    commits: tuple[InsertResult, ...]
    failed: Mapping[str, str]
    already_committed: tuple[str, ...]

    @property
    def failed_message_ids(self) -> tuple[str, ...]:
        return tuple(self.failed)


@dataclass
class _Parsed:
    message_id: str
    table: str
    rows: list[Mapping[str, object]]


@dataclass
class _Tally:
    commits: list[InsertResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    already: list[str] = field(default_factory=list)


def insert_queue_messages(
    inserter: Inserter, messages: Sequence[QueueMessage], *, default_table: str | None = None
) -> QueueBatchOutcome:
    """Insert a delivered batch; never raises for a bad message, only for a failure of the
    system (the meta store or object store down), on which the whole batch is retried."""
    tally = _Tally()
    groups: dict[str, list[_Parsed]] = {}
    for message in messages:
        try:
            parsed = _parse(message, default_table=default_table)
        except InvalidInputError as e:
            tally.failed[message.message_id] = str(e)
            continue
        groups.setdefault(parsed.table, []).append(parsed)
    for table, parsed_messages in groups.items():
        _insert_group(inserter, table, parsed_messages, tally)
    return QueueBatchOutcome(
        commits=tuple(tally.commits),
        failed=dict(tally.failed),
        already_committed=tuple(tally.already),
    )


def _parse(message: QueueMessage, *, default_table: str | None) -> _Parsed:
    try:
        body = orjson.loads(message.body)
    except orjson.JSONDecodeError as e:
        raise InvalidInputError(f"message body is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise InvalidInputError("message body is not a JSON object")
    if set(body) == {"table", "rows"}:
        table, rows = body["table"], body["rows"]
        if not isinstance(table, str):
            raise InvalidInputError("envelope 'table' is not a string")
        if not isinstance(rows, list) or not rows:
            raise InvalidInputError("envelope 'rows' is not a non-empty list")
        if not all(isinstance(r, dict) for r in rows):
            raise InvalidInputError("envelope 'rows' holds something that is not a JSON object")
        return _Parsed(message.message_id, table, rows)
    table = message.table or default_table
    if not table:
        raise InvalidInputError(
            'no table for this event: send an envelope {"table", "rows"}, set the message'
            " attribute 'table', or configure a default table"
        )
    return _Parsed(message.message_id, table, [body])


def _insert_group(inserter: Inserter, table: str, pending: list[_Parsed], tally: _Tally) -> None:
    try:
        validate_table_name(table)
        while pending:
            pending = _insert_round(inserter, table, pending, tally)
    except (NotFoundError, InvalidInputError) as e:  # an unknown or malformed table name
        for p in pending:
            tally.failed[p.message_id] = str(e)


def _insert_round(
    inserter: Inserter, table: str, pending: list[_Parsed], tally: _Tally
) -> list[_Parsed]:
    """One insert attempt; returns the messages still to insert (empty when done)."""
    done = inserter.committed_receipts(table, [p.message_id for p in pending])
    if done:
        tally.already.extend(p.message_id for p in pending if p.message_id in done)
        pending = [p for p in pending if p.message_id not in done]
        if not pending:
            return []
    rows: list[Mapping[str, object]] = []
    owners: list[str] = []
    for p in pending:
        rows.extend(p.rows)
        owners.extend([p.message_id] * len(p.rows))
    try:
        result = inserter.insert_rows(table, rows, receipts=[p.message_id for p in pending])
    except DuplicateReceiptError as e:
        logger.info("%d messages for %s were committed meanwhile", len(e.receipts), table)
        return pending  # the next round finds them committed
    except BatchRejectedError as e:
        blamed = {owners[pr.row]: pr for pr in e.problems if pr.row is not None}
        if not blamed:  # a batch-wide reason (size): try the messages one by one
            if len(pending) == 1:
                tally.failed[pending[0].message_id] = str(e)
            else:
                for p in pending:
                    _insert_group(inserter, table, [p], tally)
            return []
        for message_id, problem in blamed.items():
            tally.failed[message_id] = _in_message(problem, first_row=owners.index(message_id))
        return [p for p in pending if p.message_id not in blamed]
    tally.commits.append(result)
    return []


def _in_message(problem: RowProblem, *, first_row: int) -> str:
    """Problems name rows of the combined batch; say which row of the message it was."""
    assert problem.row is not None
    field = f", field {problem.field!r}" if problem.field is not None else ""
    return f"row {problem.row - first_row} of the message{field}: {problem.message}"
